package tree

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rubin-go/rubin/coord/proto"
)

func TestNewTree(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.session(1)
	kids, st, err := h.tr.GetChildren(s, "/", false)
	// ZooKeeper shows the root's cversion as -1: its child was never created.
	if err != nil || !slices.Equal(kids, []string{"zookeeper"}) || st.NumChildren != 1 || st.Cversion != -1 {
		t.Errorf("GetChildren(/) = %v, %+v, %v", kids, st, err)
	}
	kids, st, _ = h.tr.GetChildren(s, "/zookeeper", false)
	if !slices.Equal(kids, []string{"config", "quota"}) || st.Cversion != -2 {
		t.Errorf("GetChildren(/zookeeper) = %v, %+v", kids, st)
	}
	acl, st, err := h.tr.GetACL(s, "/zookeeper/config")
	if err != nil || st.Aversion != -1 || len(acl) != 1 || acl[0].Perms != proto.PermRead {
		t.Errorf("GetACL(/zookeeper/config) = %v, %+v, %v", acl, st, err)
	}
	_, _, err = h.tr.SetData(h.w(s), "/zookeeper/config", []byte("x"), -1)
	wantCode(t, "SetData(/zookeeper/config)", err, proto.CodeNoAuth)
	if n, err := h.tr.GetAllChildrenNumber(s, "/"); n != 3 || err != nil {
		t.Errorf("GetAllChildrenNumber(/) = %d, %v, want 3", n, err)
	}
	for _, p := range []string{"/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"} {
		_, err := h.tr.Delete(h.w(s), p, -1)
		wantCode(t, "Delete("+p+")", err, proto.CodeBadArguments)
	}
}

func TestValidPath(t *testing.T) {
	valid := []string{"/", "/a", "/a/b", "/a.b", "/..a", "/a..", "/.a/b.", "/zookeeper", "/ü", "/a b", "/\u00a0"}
	invalid := []string{"", "a", "a/b", "/a/", "//", "/a//b", "/.", "/..", "/a/.", "/a/../b", "/a\x00",
		"/a\x01", "/a\x7f", "/a\u0085", "/\ud7ff\uf000", "/\U0001F600", "/\ufff0", "/\xff"}
	for _, p := range valid {
		if !validPath(p) {
			t.Errorf("validPath(%q) = false, want true", p)
		}
	}
	for _, p := range invalid {
		if validPath(p) {
			t.Errorf("validPath(%q) = true, want false", p)
		}
	}
}

func TestCreateErrors(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.session(1)
	h.create(s, "/a", "", proto.ModePersistent)
	h.create(s, "/e", "", proto.ModeEphemeral)
	readOnly := []proto.ACL{{Perms: proto.PermRead, ID: proto.WorldAnyone}}
	if _, _, _, err := h.tr.Create(h.w(s), "/ro", nil, readOnly, proto.ModePersistent); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 0xfffff+1)
	for _, c := range []struct {
		path string
		data []byte
		acl  []proto.ACL
		mode proto.CreateMode
		ttl  int64
		code proto.Code
	}{
		{"", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeBadArguments},
		{"/a/", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeBadArguments},
		{"/a//b", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeNoNode},
		{"/a/.", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeBadArguments},
		{"/a\x00b", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeBadArguments},
		{"a/b", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeNoNode},
		{"/x/y", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeNoNode},
		{"/a", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeNodeExists},
		{"/", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeNodeExists},
		{"/e/c", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeNoChildrenForEphemerals},
		{"/ro/c", nil, proto.OpenACL, proto.ModePersistent, -1, proto.CodeNoAuth},
		{"/a/b", nil, nil, proto.ModePersistent, -1, proto.CodeInvalidACL},
		{"/a/b", nil, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "world", ID: "everyone"}}}, proto.ModePersistent, -1, proto.CodeInvalidACL},
		{"/a/b", nil, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "auth"}}}, proto.ModePersistent, -1, proto.CodeInvalidACL},
		{"/a/b", nil, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: "nocolon"}}}, proto.ModePersistent, -1, proto.CodeInvalidACL},
		{"/a/b", nil, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "ip", ID: "10.0.0.0/33"}}}, proto.ModePersistent, -1, proto.CodeInvalidACL},
		{"/a/b", nil, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "sasl", ID: "x"}}}, proto.ModePersistent, -1, proto.CodeInvalidACL},
		{"/a/b", nil, proto.OpenACL, 7, -1, proto.CodeBadArguments},
		{"/a/b", nil, proto.OpenACL, proto.ModePersistentWithTTL, 1000, proto.CodeUnimplemented},
		{"/a/b", nil, proto.OpenACL, proto.ModePersistent, 1000, proto.CodeBadArguments},
		{"/a/b", big, proto.OpenACL, proto.ModePersistent, -1, proto.CodeMarshallingError},
		{"/a/b", big[:0xfffff], proto.OpenACL, proto.ModePersistent, -1, proto.CodeOK},
		// The parent's ACL is checked before the name is: CREATE on "/a".
		{"/a/", nil, proto.OpenACL, proto.ModePersistentSequential, -1, proto.CodeOK},
		{"/ro/", nil, proto.OpenACL, proto.ModePersistentSequential, -1, proto.CodeNoAuth},
	} {
		_, _, _, err := h.tr.CreateTTL(h.w(s), c.path, c.data, c.acl, c.mode, c.ttl)
		wantCode(t, fmt.Sprintf("Create(%q, mode %d, ttl %d)", c.path, c.mode, c.ttl), err, c.code)
	}
	if _, _, _, err := h.tr.Create(h.w(99), "/z", nil, proto.OpenACL, proto.ModePersistent); err != proto.CodeSessionExpired {
		t.Errorf("Create by an unknown session: %v, want CodeSessionExpired", err)
	}
	before := h.tr.LastZxid()
	if _, _, _, err := h.tr.Create(Write{Session: s, Zxid: before}, "/z", nil, proto.OpenACL, proto.ModePersistent); err != ErrZxid {
		t.Errorf("Create with an old zxid: %v, want ErrZxid", err)
	}
}

func TestStat(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.session(1)
	h.now = 5000
	p, st, _, err := h.tr.Create(h.w(s), "/a", []byte("hello"), proto.OpenACL, proto.ModePersistent)
	z := h.zxid
	want := proto.Stat{Czxid: z, Mzxid: z, Pzxid: z, Ctime: 5000, Mtime: 5000, DataLength: 5}
	if p != "/a" || st != want || err != nil {
		t.Errorf("Create = %q, %+v, %v; want /a, %+v", p, st, err, want)
	}
	root := h.stat(s, "/")
	if root.Cversion != 0 || root.Pzxid != z || root.NumChildren != 2 || root.Mzxid != 0 {
		t.Errorf("root after create: %+v", root)
	}

	h.now = 6000
	st, _, err = h.tr.SetData(h.w(s), "/a", []byte("hi"), 0)
	want = proto.Stat{Czxid: z, Mzxid: h.zxid, Pzxid: z, Ctime: 5000, Mtime: 6000, Version: 1, DataLength: 2}
	if st != want || err != nil {
		t.Errorf("SetData = %+v, %v; want %+v", st, err, want)
	}
	_, _, err = h.tr.SetData(h.w(s), "/a", []byte("x"), 0)
	wantCode(t, "SetData with a stale version", err, proto.CodeBadVersion)
	if st, _, err = h.tr.SetData(h.w(s), "/a", []byte("x"), -1); st.Version != 2 || err != nil {
		t.Errorf("SetData version -1: %+v, %v", st, err)
	}
	data, st2, err := h.tr.GetData(s, "/a", false)
	if string(data) != "x" || st2 != st || err != nil {
		t.Errorf("GetData = %q, %+v, %v", data, st2, err)
	}

	st, err = h.tr.SetACL(h.w(s), "/a", proto.OpenACL, 0)
	if st.Aversion != 1 || st.Version != 2 || st.Mzxid != st2.Mzxid || err != nil {
		t.Errorf("SetACL = %+v, %v", st, err)
	}
	_, err = h.tr.SetACL(h.w(s), "/a", proto.OpenACL, 0)
	wantCode(t, "SetACL with a stale aversion", err, proto.CodeBadVersion)

	h.create(s, "/a/b", "", proto.ModePersistent)
	h.create(s, "/a/c", "", proto.ModePersistent)
	if _, err := h.tr.Delete(h.w(s), "/a/b", -1); err != nil {
		t.Fatal(err)
	}
	a := h.stat(s, "/a")
	if a.Cversion != 3 || a.Pzxid != h.zxid || a.NumChildren != 1 {
		t.Errorf("/a after two creates and a delete: %+v; want cversion 3, pzxid %d, 1 child", a, h.zxid)
	}
}

func TestDeleteErrors(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.session(1)
	h.create(s, "/a", "", proto.ModePersistent)
	h.create(s, "/a/b", "", proto.ModePersistent)
	noDelete := []proto.ACL{{Perms: proto.PermAll &^ proto.PermDelete, ID: proto.WorldAnyone}}
	h.tr.Create(h.w(s), "/nd", nil, noDelete, proto.ModePersistent)
	h.create(s, "/nd/c", "", proto.ModePersistent)
	for _, c := range []struct {
		path    string
		version int32
		code    proto.Code
	}{
		{"/x", -1, proto.CodeNoNode},
		{"/x/y", -1, proto.CodeNoNode},
		{"/a/", -1, proto.CodeBadArguments},
		{"/a", -1, proto.CodeNotEmpty},
		{"/a/b", 3, proto.CodeBadVersion},
		{"/nd/c", -1, proto.CodeNoAuth},
		{"/nd/zz", -1, proto.CodeNoAuth}, // the parent's ACL before the node
		{"/a/b", 0, proto.CodeOK},
		{"/a/b", -1, proto.CodeNoNode},
		{"/a", -1, proto.CodeOK},
	} {
		_, err := h.tr.Delete(h.w(s), c.path, c.version)
		wantCode(t, fmt.Sprintf("Delete(%q, %d)", c.path, c.version), err, c.code)
	}
}

func TestReadErrors(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.session(1)
	secret := []proto.ACL{{Perms: proto.PermWrite, ID: proto.WorldAnyone}}
	h.tr.Create(h.w(s), "/secret", []byte("s"), secret, proto.ModePersistent)
	_, _, err := h.tr.GetData(s, "/secret", false)
	wantCode(t, "GetData without read", err, proto.CodeNoAuth)
	_, _, err = h.tr.GetChildren(s, "/secret", false)
	wantCode(t, "GetChildren without read", err, proto.CodeNoAuth)
	_, _, err = h.tr.GetACL(s, "/secret")
	wantCode(t, "GetACL without read or admin", err, proto.CodeNoAuth)
	_, err = h.tr.GetAllChildrenNumber(s, "/secret")
	wantCode(t, "GetAllChildrenNumber without read", err, proto.CodeNoAuth)
	if _, err := h.tr.Exists(s, "/secret", false); err != nil {
		t.Errorf("Exists checks no ACL, but: %v", err)
	}
	_, _, err = h.tr.GetData(s, "/none", false)
	wantCode(t, "GetData of a missing node", err, proto.CodeNoNode)
	_, err = h.tr.Exists(s, "/none", false)
	wantCode(t, "Exists of a missing node", err, proto.CodeNoNode)
	_, err = h.tr.Exists(s, "/bad/", false)
	wantCode(t, "Exists of an invalid path", err, proto.CodeBadArguments)
	_, _, err = h.tr.GetData(77, "/secret", false)
	wantCode(t, "GetData by an unknown session", err, proto.CodeSessionExpired)
	wantCode(t, "Check without read", h.tr.Check(h.w(s), "/secret", -1), proto.CodeNoAuth)
	wantCode(t, "Check of /", h.tr.Check(h.w(s), "/", 0), proto.CodeOK)
	wantCode(t, "Check with a wrong version", h.tr.Check(h.w(s), "/", 1), proto.CodeBadVersion)
}

func TestSequential(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.session(1)
	h.create(s, "/q", "", proto.ModePersistent)
	var got []string
	got = append(got, h.create(s, "/q/n-", "", proto.ModePersistentSequential))
	got = append(got, h.create(s, "/q/n-", "", proto.ModeEphemeralSequential))
	h.create(s, "/q/plain", "", proto.ModePersistent)
	if _, err := h.tr.Delete(h.w(s), got[0], -1); err != nil {
		t.Fatal(err)
	}
	got = append(got, h.create(s, "/q/n-", "", proto.ModePersistentSequential))
	got = append(got, h.create(s, "/q/", "", proto.ModePersistentSequential))
	want := []string{"/q/n-0000000000", "/q/n-0000000001", "/q/n-0000000003", "/q/0000000004"}
	if !slices.Equal(got, want) {
		t.Errorf("sequential names %v, want %v (cversion counts creations, not deletions)", got, want)
	}
	kids, _, _ := h.tr.GetChildren(s, "/q", false)
	if want := []string{"0000000004", "n-0000000001", "n-0000000003", "plain"}; !slices.Equal(kids, want) {
		t.Errorf("children %v, want sorted %v", kids, want)
	}
}

func TestEphemerals(t *testing.T) {
	h := newHarness(t, Config{})
	a, b := h.session(0xa), h.session(0xb)
	h.create(a, "/locks", "", proto.ModePersistent)
	h.create(a, "/locks/a-", "", proto.ModeEphemeralSequential)
	h.create(a, "/e", "", proto.ModeEphemeral)
	h.create(b, "/locks/b-", "", proto.ModeEphemeralSequential)
	if st := h.stat(a, "/e"); st.EphemeralOwner != a {
		t.Errorf("ephemeralOwner %#x, want %#x", st.EphemeralOwner, a)
	}
	eph, _ := h.tr.GetEphemerals(a, "/")
	if want := []string{"/e", "/locks/a-0000000000"}; !slices.Equal(eph, want) {
		t.Errorf("GetEphemerals(a) = %v, want %v", eph, want)
	}
	eph, _ = h.tr.GetEphemerals(a, "/lo")
	if want := []string{"/locks/a-0000000000"}; !slices.Equal(eph, want) {
		t.Errorf("GetEphemerals(a, /lo) = %v, want %v", eph, want)
	}
	// b watches a's nodes, and a watches b's: a's watches go when it closes.
	h.tr.Exists(b, "/e", true)
	h.tr.GetChildren(b, "/locks", true)
	h.tr.Exists(a, "/locks/b-0000000001", true)
	evs, err := h.tr.CloseSession(h.w(a))
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "close", evs,
		ev(b, proto.EventNodeDeleted, "/e"),
		ev(b, proto.EventNodeChildrenChanged, "/locks"))
	if _, err := h.tr.Exists(b, "/e", false); err != proto.CodeNoNode {
		t.Errorf("/e after its session closed: %v", err)
	}
	kids, st, _ := h.tr.GetChildren(b, "/locks", false)
	if !slices.Equal(kids, []string{"b-0000000001"}) || st.Pzxid != h.zxid {
		t.Errorf("/locks after close: %v, %+v", kids, st)
	}
	_, err = h.tr.CloseSession(h.w(a))
	wantCode(t, "closing a closed session", err, proto.CodeSessionExpired)
}

func TestSessionTimeouts(t *testing.T) {
	h := newHarness(t, Config{})
	for _, c := range []struct{ ask, want int32 }{{0, 4000}, {1000, 4000}, {10000, 10000}, {100000, 40000}} {
		h.zxid++
		id := int64(c.ask) + 1
		got, err := h.tr.CreateSession(Write{Session: id, Zxid: h.zxid, Time: h.now}, HashPassword([]byte("pw")), c.ask)
		if got != c.want || err != nil {
			t.Errorf("CreateSession(timeout %d) = %d, %v; want %d", c.ask, got, err, c.want)
		}
	}
	h2 := newHarness(t, Config{TickTime: 500})
	if got, _ := h2.tr.CreateSession(h2.w(1), HashPassword(nil), 100000); got != 10000 {
		t.Errorf("tickTime 500: max timeout %d, want 10000", got)
	}
	for _, id := range []int64{0, containerOwner, -1, ttlOwner | 5} {
		if _, err := h.tr.CreateSession(h.w(id), HashPassword(nil), 0); err != ErrSession {
			t.Errorf("CreateSession(%#x): %v, want ErrSession", id, err)
		}
	}
	if _, err := h.tr.CreateSession(h.w(1), HashPassword(nil), 0); err != ErrSession {
		t.Errorf("CreateSession of a taken id: %v, want ErrSession", err)
	}
	for _, pw := range [][]byte{nil, []byte("password"), make([]byte, PasswordHashSize+1)} {
		if _, err := h.tr.CreateSession(h.w(7), pw, 0); err != ErrSession {
			t.Errorf("CreateSession with a password of %d bytes, not its hash: %v, want ErrSession", len(pw), err)
		}
	}
	small := newHarness(t, Config{MaxSessions: 1})
	small.session(1)
	_, err := small.tr.CreateSession(small.w(2), HashPassword(nil), 0)
	wantCode(t, "a session past MaxSessions", err, proto.CodeThrottled)
}

func TestExpiry(t *testing.T) {
	h := newHarness(t, Config{})
	h.now = 0
	a := h.session(1) // 30 s: expires at 30000 unless touched
	b := h.session(2)
	h.create(a, "/a", "", proto.ModeEphemeral)
	h.create(b, "/b", "", proto.ModeEphemeral)
	h.tr.Exists(b, "/a", true)
	h.tr.GetChildren(b, "/", true)
	if err := h.tr.Touch(b, 20000); err != nil {
		t.Fatal(err)
	}
	if got := h.tr.Expired(29999); len(got) != 0 {
		t.Errorf("Expired(29999) = %v", got)
	}
	if got := h.tr.Expired(30000); !slices.Equal(got, []int64{a}) {
		t.Errorf("Expired(30000) = %v, want [a]", got)
	}
	h.now = 30000
	gone, evs, err := h.tr.Expire(h.w(0))
	if !slices.Equal(gone, []int64{a}) || err != nil {
		t.Errorf("Expire = %v, %v", gone, err)
	}
	wantEvents(t, "expiry", evs, ev(b, proto.EventNodeDeleted, "/a"), ev(b, proto.EventNodeChildrenChanged, "/"))
	if _, ok := h.tr.Session(a); ok {
		t.Error("the expired session is still there")
	}
	if err := h.tr.Touch(a, 30000); err != proto.CodeSessionExpired {
		t.Errorf("Touch of an expired session: %v", err)
	}
	if _, err := h.tr.Reconnect(b, HashPassword([]byte("wrong")), 30000); err != proto.CodeSessionExpired {
		t.Errorf("Reconnect with a wrong password: %v", err)
	}
	if to, err := h.tr.Reconnect(b, HashPassword([]byte("password")), 45000); to != 30000 || err != nil {
		t.Errorf("Reconnect = %d, %v", to, err)
	}
	if info, _ := h.tr.Session(b); info.Deadline != 75000 {
		t.Errorf("deadline after reconnect %d, want 75000", info.Deadline)
	}
	h.now = 75000
	gone, _, _ = h.tr.Expire(h.w(0))
	if !slices.Equal(gone, []int64{b}) {
		t.Errorf("second Expire = %v", gone)
	}
	if n, _ := h.tr.GetAllChildrenNumber(h.session(3), "/"); n != 3 {
		t.Errorf("%d nodes left, want the 3 of /zookeeper", n)
	}
}

func TestContainersAndTTL(t *testing.T) {
	h := newHarness(t, Config{ExtendedTypes: true})
	s := h.session(1)
	h.now = 0
	h.create(s, "/c", "", proto.ModeContainer)
	h.create(s, "/fresh", "", proto.ModeContainer)
	h.create(s, "/c/x", "", proto.ModePersistent)
	p, st, _, err := h.tr.CreateTTL(h.w(s), "/t", nil, proto.OpenACL, proto.ModePersistentSequentialWithTTL, 1000)
	if p != "/t0000000002" || st.EphemeralOwner != 0 || h.tr.nodes[p].stat.EphemeralOwner != ttlOwner|1000 || err != nil {
		t.Fatalf("CreateTTL = %q, %+v, %v; want no owner shown, TTL kept", p, st, err)
	}
	if st := h.stat(s, "/c"); st.EphemeralOwner != 0 {
		t.Errorf("a container shows owner %#x", st.EphemeralOwner)
	}
	_, _, _, err = h.tr.CreateTTL(h.w(s), "/t2", nil, proto.OpenACL, proto.ModePersistentWithTTL, 0)
	wantCode(t, "TTL 0", err, proto.CodeBadArguments)
	_, _, _, err = h.tr.CreateTTL(h.w(s), "/t2", nil, proto.OpenACL, proto.ModePersistentWithTTL, maxTTL+1)
	wantCode(t, "TTL past 2^40-1", err, proto.CodeBadArguments)
	h.create(s, "/c/x/under-persistent", "", proto.ModePersistent) // a persistent child: fine under a container's child
	h.create(s, "/t0000000002/child", "", proto.ModePersistent)    // children of TTL nodes are allowed

	gone, _, _ := h.tr.Sweep(h.w(0))
	if len(gone) != 0 {
		t.Errorf("first sweep deleted %v", gone)
	}
	h.tr.Delete(h.w(s), "/c/x/under-persistent", -1)
	h.tr.Delete(h.w(s), "/c/x", -1)
	h.tr.Delete(h.w(s), "/t0000000002/child", -1)
	h.tr.GetChildren(s, "/", true)
	h.now = 1000
	gone, evs, _ := h.tr.Sweep(h.w(0))
	if want := []string{"/c"}; !slices.Equal(gone, want) {
		t.Errorf("sweep at 1000 deleted %v, want %v (the TTL node changed at 0, not yet past 1000 ms)", gone, want)
	}
	wantEvents(t, "sweep", evs, ev(s, proto.EventNodeChildrenChanged, "/"))
	h.now = 1001
	if gone, _, _ := h.tr.Sweep(h.w(0)); !slices.Equal(gone, []string{"/t0000000002"}) {
		t.Errorf("sweep at 1001 deleted %v", gone)
	}
	if _, err := h.tr.Exists(s, "/fresh", false); err != nil {
		t.Errorf("a container that never had a child was swept: %v", err)
	}
}

func TestGetACLRedactsDigests(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.session(1)
	acl := []proto.ACL{
		{Perms: proto.PermRead, ID: proto.WorldAnyone},
		{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: Digest("alice:secret")}},
	}
	if _, _, _, err := h.tr.Create(h.w(s), "/a", nil, acl, proto.ModePersistent); err != nil {
		t.Fatal(err)
	}
	got, _, err := h.tr.GetACL(s, "/a")
	if err != nil || got[1].ID.ID != "alice:x" || got[0] != acl[0] {
		t.Errorf("GetACL without admin = %v, %v", got, err)
	}
	if err := h.tr.AddAuth(s, "digest", []byte(Digest("alice:secret"))); err != nil {
		t.Fatal(err)
	}
	if got, _, _ = h.tr.GetACL(s, "/a"); !slices.Equal(got, acl) {
		t.Errorf("GetACL with admin = %v, want %v", got, acl)
	}
}

func TestTreeLimit(t *testing.T) {
	base := New(Config{}).size
	h := newHarness(t, Config{MaxTreeBytes: base + nodeOverhead + 100})
	s := h.session(1)
	h.create(s, "/a", strings.Repeat("x", 10), proto.ModePersistent)
	_, _, err := h.tr.SetData(h.w(s), "/a", make([]byte, 100), -1)
	wantCode(t, "SetData past the limit", err, proto.CodeQuotaExceeded)
	_, _, _, err = h.tr.Create(h.w(s), "/b", make([]byte, 100), proto.OpenACL, proto.ModePersistent)
	wantCode(t, "Create past the limit", err, proto.CodeQuotaExceeded)
	big := []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: "u:" + strings.Repeat("h", 200)}}}
	_, err = h.tr.SetACL(h.w(s), "/a", big, -1)
	wantCode(t, "SetACL past the limit", err, proto.CodeQuotaExceeded)
	if _, err := h.tr.Delete(h.w(s), "/a", -1); err != nil {
		t.Fatal(err)
	}
	if h.tr.size != base {
		t.Errorf("size %d after the only node went, want %d", h.tr.size, base)
	}
	h.create(s, "/b", strings.Repeat("x", 50), proto.ModePersistent)
	if _, err := Restore(Config{MaxTreeBytes: base}, h.tr.Snapshot()); err == nil {
		t.Error("Restore took a tree past MaxTreeBytes")
	}
}

func TestDigest(t *testing.T) {
	// zkCli's "addauth digest user:password" is checked against this form.
	got := Digest("user:password")
	if got != "user:tpUq/4Pn5A64fVZyQ0gOJ8ZWqkY=" {
		t.Errorf("Digest = %q", got)
	}
	if !strings.HasPrefix(Digest("nocolon"), "nocolon:") {
		t.Errorf("Digest without a colon = %q", Digest("nocolon"))
	}
}

func TestACLs(t *testing.T) {
	h := newHarness(t, Config{SuperDigest: Digest("super:admin")})
	alice, bob, eve, root := h.session(1), h.session(2), h.session(3), h.session(4)
	if err := h.tr.AddAuth(alice, "digest", []byte(Digest("alice:a"))); err != nil {
		t.Fatal(err)
	}
	h.tr.AddAuth(bob, "digest", []byte(Digest("bob:b")))
	h.tr.AddAuth(root, "digest", []byte(Digest("super:admin")))
	wantCode(t, "addauth with an unknown scheme", h.tr.AddAuth(eve, "kerberos", []byte("x")), proto.CodeAuthFailed)
	for _, auth := range []string{"eve:pw", "eve", ":", "eve:" + strings.Repeat("A", 28), Digest("eve:pw") + "="} {
		wantCode(t, "addauth digest of "+auth+", not a digest", h.tr.AddAuth(eve, "digest", []byte(auth)), proto.CodeAuthFailed)
	}

	// "auth" stands for alice's digest identity.
	authACL := []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "auth"}}}
	if _, _, _, err := h.tr.Create(h.w(alice), "/a", []byte("x"), authACL, proto.ModePersistent); err != nil {
		t.Fatal(err)
	}
	acl, _, _ := h.tr.GetACL(alice, "/a")
	if want := []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: Digest("alice:a")}}}; !slices.Equal(acl, want) {
		t.Errorf("auth ACL became %v, want %v", acl, want)
	}
	_, _, err := h.tr.GetData(bob, "/a", false)
	wantCode(t, "bob reads alice's node", err, proto.CodeNoAuth)
	_, _, err = h.tr.SetData(h.w(eve), "/a", nil, -1)
	wantCode(t, "eve writes alice's node", err, proto.CodeNoAuth)
	_, _, _, err = h.tr.Create(h.w(bob), "/a/b", nil, proto.OpenACL, proto.ModePersistent)
	wantCode(t, "bob creates under alice's node", err, proto.CodeNoAuth)
	_, err = h.tr.SetACL(h.w(bob), "/a", proto.OpenACL, -1)
	wantCode(t, "bob sets alice's ACL", err, proto.CodeNoAuth)
	_, err = h.tr.SetACL(h.w(alice), "/nonexistent", []proto.ACL{}, -1)
	wantCode(t, "SetACL checks the ACL before the node", err, proto.CodeInvalidACL)
	if _, _, err := h.tr.GetData(root, "/a", false); err != nil {
		t.Errorf("super reads alice's node: %v", err)
	}
	if info, _ := h.tr.Session(root); !slices.Contains(info.Auth, proto.ID{Scheme: "super"}) {
		t.Errorf("super identities %v", info.Auth)
	}

	// Give bob read and write only.
	both := []proto.ACL{
		{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: Digest("alice:a")}},
		{Perms: proto.PermRead | proto.PermWrite, ID: proto.ID{Scheme: "digest", ID: Digest("bob:b")}},
		{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: Digest("alice:a")}}, // a duplicate goes
	}
	st, err := h.tr.SetACL(h.w(alice), "/a", both, 0)
	if err != nil || st.Aversion != 1 {
		t.Fatalf("SetACL = %+v, %v", st, err)
	}
	if acl, _, _ := h.tr.GetACL(alice, "/a"); len(acl) != 2 {
		t.Errorf("duplicates kept: %v", acl)
	}
	if _, _, err := h.tr.SetData(h.w(bob), "/a", []byte("y"), -1); err != nil {
		t.Errorf("bob writes with write permission: %v", err)
	}
	_, err = h.tr.Delete(h.w(bob), "/a", -1)
	wantCode(t, "bob deletes without delete on /", err, proto.CodeOK)

	// ip identities the caller vouches for.
	ipACL := []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "ip", ID: "10.1.0.0/16"}}}
	if _, _, _, err := h.tr.Create(h.w(alice), "/ip", nil, ipACL, proto.ModePersistent); err != nil {
		t.Fatal(err)
	}
	_, _, err = h.tr.GetData(eve, "/ip", false)
	wantCode(t, "eve without an ip identity", err, proto.CodeNoAuth)
	h.tr.AddAuth(eve, "ip", []byte("10.1.2.3"))
	if _, _, err := h.tr.GetData(eve, "/ip", false); err != nil {
		t.Errorf("eve at 10.1.2.3 reads 10.1.0.0/16: %v", err)
	}
	h.tr.AddAuth(bob, "ip", []byte("10.2.0.1"))
	_, _, err = h.tr.GetData(bob, "/ip", false)
	wantCode(t, "bob at 10.2.0.1", err, proto.CodeNoAuth)
	// "auth" expands to digest identities only: eve has just an ip one.
	_, _, _, err = h.tr.Create(h.w(eve), "/e", nil, authACL, proto.ModePersistent)
	wantCode(t, "auth ACL with only an ip identity", err, proto.CodeInvalidACL)

	small := newHarness(t, Config{MaxAuthBytes: 100})
	s := small.session(1)
	wantCode(t, "an identity within the limit", small.tr.AddAuth(s, "digest", []byte(Digest("u:p"))), proto.CodeOK)
	wantCode(t, "the same identity again", small.tr.AddAuth(s, "digest", []byte(Digest("u:p"))), proto.CodeOK)
	wantCode(t, "identities past the limit", small.tr.AddAuth(s, "digest", []byte(strings.Repeat("u", 60)+":p")), proto.CodeAuthFailed)
}
