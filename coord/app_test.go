package coord_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/proto"
	"github.com/rubin-go/rubin/coord/tree"
)

// harness runs ops on several Apps in the same order, as replicas do, and
// checks that they answer alike.
type harness struct {
	t     *testing.T
	apps  []*coord.App
	seq   uint64
	now   time.Time
	conns map[int64]int32 // each session's connection number, from its last connect
}

func newHarness(t *testing.T, n int) *harness {
	h := &harness{t: t, now: time.UnixMilli(1_700_000_000_000), conns: make(map[int64]int32)}
	for range n {
		h.apps = append(h.apps, coord.New(coord.Config{}))
	}
	return h
}

// exec runs op on every App in a batch of its own and returns the result.
func (h *harness) exec(op []byte) []byte {
	h.t.Helper()
	h.seq++
	ctx := bft.ExecContext{Client: 1, Seq: h.seq, Time: h.now}
	var first []byte
	for i, a := range h.apps {
		res := a.Execute(ctx, op)
		if i == 0 {
			first = res
		} else if !bytes.Equal(res, first) {
			h.t.Fatalf("app %d answered %x, app 0 %x", i, res, first)
		}
	}
	return first
}

func (h *harness) advance(d time.Duration) { h.now = h.now.Add(d) }

const gw = 7

func (h *harness) connect(session int64, passwd string, timeout int32) coord.ConnectResult {
	h.t.Helper()
	r, err := coord.ParseConnectResult(h.exec(coord.ConnectOp(gw, session, []byte(passwd), timeout)))
	if err != nil {
		h.t.Fatal(err)
	}
	if r.Status == coord.StatusOK {
		h.conns[r.Session] = r.Conn
	}
	return r
}

// addRestored restores a new App from app 0's snapshot, checks that it
// takes the same snapshot, and adds it to the harness.
func (h *harness) addRestored() *coord.App {
	h.t.Helper()
	snap := h.apps[0].Snapshot()
	c := coord.New(coord.Config{})
	if err := c.Restore(snap); err != nil {
		h.t.Fatal(err)
	}
	if !bytes.Equal(c.Snapshot(), snap) {
		h.t.Fatal("a restored App's snapshot differs")
	}
	h.apps = append(h.apps, c)
	return c
}

// conn is the number of session's connection, as its last connect gave.
func (h *harness) conn(session int64) int32 { return h.conns[session] }

// reply is one decoded frame of a result.
type reply struct {
	hdr  proto.ReplyHeader
	resp proto.Record // nil for an error or an event
	ev   *proto.WatcherEvent
}

func frames(t *testing.T, b []byte, op proto.OpCode) []reply {
	t.Helper()
	var out []reply
	r := bytes.NewReader(b)
	for {
		f, err := proto.ReadFrame(r, nil)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		hdr, body, err := proto.SplitReply(f)
		if err != nil {
			t.Fatal(err)
		}
		rep := reply{hdr: hdr}
		switch {
		case hdr.Xid == proto.XidWatchEvent:
			rep.ev = &proto.WatcherEvent{}
			if err := proto.Unmarshal(body, rep.ev); err != nil {
				t.Fatal(err)
			}
		case hdr.Err == proto.CodeOK:
			if rep.resp, err = proto.DecodeResponse(op, body); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, rep)
	}
}

// do runs one request of session and returns its status, the events
// before the reply and the reply.
func (h *harness) do(session int64, xid int32, op proto.OpCode, req proto.Record) (coord.Status, []proto.WatcherEvent, reply) {
	h.t.Helper()
	frame := proto.Marshal(nil, &proto.RequestHeader{Xid: xid, Type: op})
	frame = proto.Marshal(frame, req)
	res, err := coord.ParseRequestResult(h.exec(coord.RequestOp(gw, session, h.conn(session), frame)))
	if err != nil {
		h.t.Fatal(err)
	}
	fs := frames(h.t, res.Frames, op)
	if len(fs) == 0 {
		h.t.Fatalf("%v: no reply, status %v", op, res.Status)
	}
	var evs []proto.WatcherEvent
	for _, f := range fs[:len(fs)-1] {
		if f.ev == nil {
			h.t.Fatalf("%v: a reply before the last frame", op)
		}
		evs = append(evs, *f.ev)
	}
	last := fs[len(fs)-1]
	if last.hdr.Xid != xid {
		h.t.Fatalf("%v: reply xid %d, want %d", op, last.hdr.Xid, xid)
	}
	return res.Status, evs, last
}

func (h *harness) poll(sessions ...int64) []coord.SessionResult {
	h.t.Helper()
	rs, err := coord.ParsePollResult(h.exec(coord.PollOp(gw, sessions)))
	if err != nil {
		h.t.Fatal(err)
	}
	return rs
}

func TestSessionsAndRequests(t *testing.T) {
	h := newHarness(t, 3)
	a := h.connect(0, "secret-a", 10000)
	b := h.connect(0, "secret-b", 10000)
	if a.Status != coord.StatusOK || b.Status != coord.StatusOK || a.Session == b.Session || a.Timeout != 10000 {
		t.Fatalf("connects: %+v %+v", a, b)
	}

	_, _, r := h.do(a.Session, 1, proto.OpCreate, &proto.CreateRequest{Path: "/app", Data: []byte("v0"), ACL: proto.OpenACL})
	if r.hdr.Err != proto.CodeOK || r.resp.(*proto.CreateResponse).Path != "/app" {
		t.Fatalf("create: %+v", r)
	}
	createZxid := r.hdr.Zxid
	// b watches /app's data; a changes it; b's event waits for b's poll.
	_, _, r = h.do(b.Session, 1, proto.OpGetData, &proto.GetDataRequest{Path: "/app", Watch: true})
	if got := r.resp.(*proto.GetDataResponse); string(got.Data) != "v0" || got.Stat.Czxid != createZxid {
		t.Fatalf("getData: %+v", got)
	}
	h.advance(5 * time.Millisecond)
	_, evs, r := h.do(a.Session, 2, proto.OpSetData, &proto.SetDataRequest{Path: "/app", Data: []byte("v1"), Version: 0})
	if r.hdr.Err != proto.CodeOK || len(evs) != 0 || r.hdr.Zxid <= createZxid {
		t.Fatalf("setData: %+v, events %v", r, evs)
	}
	st := r.resp.(*proto.SetDataResponse).Stat
	if st.Version != 1 || st.Mtime != h.now.UnixMilli() || st.Mzxid != r.hdr.Zxid {
		t.Fatalf("setData stat %+v at %d, zxid %d", st, h.now.UnixMilli(), r.hdr.Zxid)
	}
	_, _, r = h.do(a.Session, 3, proto.OpSetData, &proto.SetDataRequest{Path: "/app", Data: []byte("v2"), Version: 0})
	if r.hdr.Err != proto.CodeBadVersion {
		t.Fatalf("stale setData: %v", r.hdr.Err)
	}
	rs := h.poll(a.Session, b.Session)
	if len(rs) != 2 || rs[0].Status != coord.StatusOK || len(rs[0].Frames) != 0 || rs[1].Status != coord.StatusOK {
		t.Fatalf("poll: %+v", rs)
	}
	fs := frames(t, rs[1].Frames, 0)
	if len(fs) != 1 || fs[0].ev == nil || *fs[0].ev != (proto.WatcherEvent{Type: proto.EventNodeDataChanged, State: proto.StateSyncConnected, Path: "/app"}) {
		t.Fatalf("b's events: %+v", fs)
	}
	if rs := h.poll(b.Session); len(rs[0].Frames) != 0 {
		t.Fatal("an event was delivered twice")
	}

	// An ephemeral node of b, watched by a, goes when b closes; a's
	// event comes before the reply to its next request.
	_, _, r = h.do(b.Session, 2, proto.OpCreate, &proto.CreateRequest{Path: "/app/lock-", ACL: proto.OpenACL, Flags: proto.ModeEphemeralSequential})
	name := r.resp.(*proto.CreateResponse).Path
	if name != "/app/lock-0000000000" {
		t.Fatalf("sequential name %q", name)
	}
	h.do(a.Session, 4, proto.OpExists, &proto.ExistsRequest{Path: name, Watch: true})
	st2, _, r := h.do(b.Session, 3, proto.OpCloseSession, &proto.Empty{})
	if st2 != coord.StatusClose || r.hdr.Err != proto.CodeOK {
		t.Fatalf("close: %v %+v", st2, r)
	}
	_, evs, r = h.do(a.Session, 5, proto.OpGetChildren, &proto.GetChildrenRequest{Path: "/app"})
	if len(evs) != 1 || evs[0].Type != proto.EventNodeDeleted || evs[0].Path != name || len(r.resp.(*proto.GetChildrenResponse).Children) != 0 {
		t.Fatalf("after close: events %v, children %+v", evs, r.resp)
	}
	if st, _, r := h.do(b.Session, 4, proto.OpGetData, &proto.GetDataRequest{Path: "/app"}); st != coord.StatusExpired || r.hdr.Err != proto.CodeSessionExpired {
		t.Fatalf("request of a closed session: %v %v", st, r.hdr.Err)
	}
	if c := h.connect(b.Session, "secret-b", 10000); c.Status != coord.StatusExpired {
		t.Fatalf("reconnect to a closed session: %+v", c)
	}
	if c := h.connect(a.Session, "wrong", 10000); c.Status != coord.StatusExpired {
		t.Fatalf("reconnect with a wrong password: %+v", c)
	}
	if c := h.connect(a.Session, "secret-a", 10000); c.Status != coord.StatusOK || c.Session != a.Session {
		t.Fatalf("reconnect: %+v", c)
	}
}

func TestExpiryAtAgreedTime(t *testing.T) {
	h := newHarness(t, 2)
	a := h.connect(0, "a", 4000)
	b := h.connect(0, "b", 4000)
	h.do(a.Session, 1, proto.OpCreate, &proto.CreateRequest{Path: "/e", ACL: proto.OpenACL, Flags: proto.ModeEphemeral})
	h.do(b.Session, 1, proto.OpExists, &proto.ExistsRequest{Path: "/e", Watch: true})
	// b is renewed by polls, a is not; its timeout and the grace for a
	// lying primary's clock (2*Config.ClockSkew, 4s) of agreed time later
	// a is gone.
	var got []byte
	for i := range 8 {
		if _, ok := h.apps[0].Tree().Session(a.Session); !ok {
			t.Fatalf("a expired after %ds", i)
		}
		h.advance(time.Second)
		rs := h.poll(b.Session)
		if rs[0].Status != coord.StatusOK {
			t.Fatalf("b: %v", rs[0].Status)
		}
		got = append(got, rs[0].Frames...)
	}
	rs := h.poll(a.Session, b.Session)
	if rs[0].Status != coord.StatusExpired {
		t.Fatalf("a after its timeout and grace: %v", rs[0].Status)
	}
	got = append(got, rs[1].Frames...)
	if fs := frames(t, got, 0); len(fs) != 1 || *fs[0].ev != (proto.WatcherEvent{Type: proto.EventNodeDeleted, State: proto.StateSyncConnected, Path: "/e"}) {
		t.Fatalf("b's events: %+v", fs)
	}
	if _, ok := h.apps[0].Tree().Session(a.Session); ok {
		t.Fatal("a is still in the tree")
	}
	if _, err := h.apps[0].Tree().Exists(b.Session, "/e", false); err != proto.CodeNoNode {
		t.Fatalf("a's ephemeral: %v", err)
	}
}

// TestOutageIsNotCounted checks Config.Outage: a gap in agreed time
// longer than half the shortest session timeout, in which nothing was
// ordered, does not count against sessions, also in an App restored from
// a snapshot taken before it; gaps of a gateway's heartbeat do, and a
// session nobody renews still expires on time.
func TestOutageIsNotCounted(t *testing.T) {
	h := newHarness(t, 1)
	live := h.connect(0, "live", 4000).Session
	dead := h.connect(0, "dead", 4000).Session
	h.advance(time.Second)
	h.poll(live)

	c := coord.New(coord.Config{})
	if err := c.Restore(h.apps[0].Snapshot()); err != nil {
		t.Fatal(err)
	}
	h.apps = append(h.apps, c)
	h.advance(10 * time.Second)
	if rs := h.poll(live, dead); rs[0].Status != coord.StatusOK || rs[1].Status != coord.StatusOK {
		t.Fatalf("after an outage of 10s: %v, %v", rs[0].Status, rs[1].Status)
	}
	// dead was renewed by that poll; live is, every heartbeat, and dead is
	// not: it expires its timeout and the grace for a lying primary's
	// clock (2*Config.ClockSkew) later.
	for i := range 7 {
		h.advance(time.Second)
		if rs := h.poll(live); rs[0].Status != coord.StatusOK {
			t.Fatalf("live after %ds: %v", i+1, rs[0].Status)
		}
	}
	if _, ok := h.apps[1].Tree().Session(dead); !ok {
		t.Fatal("dead expired before its timeout and grace")
	}
	h.advance(time.Second)
	h.poll(live)
	if rs := h.poll(dead); rs[0].Status != coord.StatusExpired {
		t.Fatalf("dead 8s after its last renewal: %v", rs[0].Status)
	}
}

// TestLyingPrimaryCannotExpireALiveSession has a lying primary date ops
// from a clock that swings 1.9s either side of the real time (within
// 0.5s up, then back down; the agreed time stands still until the clock
// catches up with it), with an op every 50ms so that no gap looks like an
// outage. A 4s session renewed every 2s of real time, as its gateway
// renews it, stays open for a minute, whatever the phase of its renewals.
func TestLyingPrimaryCannotExpireALiveSession(t *testing.T) {
	const skew, ramp, period = 1900 * time.Millisecond, 500 * time.Millisecond, 6500 * time.Millisecond
	for phase := time.Duration(0); phase < 2*time.Second; phase += 100 * time.Millisecond {
		h := newHarness(t, 1)
		start := h.now
		clock := func(now time.Time) time.Time {
			off := -skew
			if p := now.Sub(start) % period; p < ramp {
				off += time.Duration(int64(2*skew) * int64(p) / int64(ramp))
			}
			return now.Add(off)
		}
		live := h.connect(0, "live", 4000).Session
		renewed := start.Add(phase - 2*time.Second)
		for now := start; now.Sub(start) < time.Minute; now = now.Add(50 * time.Millisecond) {
			if c := clock(now); c.After(h.now) {
				h.now = c
			}
			ids := []int64{}
			if now.Sub(renewed) >= 2*time.Second {
				ids, renewed = append(ids, live), now
			}
			h.poll(ids...)
			if _, ok := h.apps[0].Tree().Session(live); !ok {
				t.Fatalf("renewals at phase %v: the session expired after %v of real time", phase, now.Sub(start))
			}
		}
	}
}

// TestLyingPrimaryCannotKeepADeadSessionAlive has a lying primary date
// ops so that the agreed time stands still until it is 1.9s behind the
// real time, then jumps to 1.9s ahead: every jump looks like an outage
// (Config.Outage), which the sessions' deadlines must not be moved by
// in full, or a session nobody renews would never expire. An op runs
// every 100ms of real time, a live session renewed by each; the dead
// one must expire within its timeout and four times the clock skew
// (2s) of real time, with the live one open.
func TestLyingPrimaryCannotKeepADeadSessionAlive(t *testing.T) {
	h := newHarness(t, 1)
	live := h.connect(0, "live", 4000).Session
	dead := h.connect(0, "dead", 4000).Session
	const skew = 1900 * time.Millisecond
	start := h.now
	now := start // the real time
	for {
		now = now.Add(100 * time.Millisecond)
		if !h.now.After(now.Add(-skew)) {
			h.now = now.Add(skew)
		}
		if rs := h.poll(live); rs[0].Status != coord.StatusOK {
			t.Fatalf("live after %v: %v", now.Sub(start), rs[0].Status)
		}
		if _, ok := h.apps[0].Tree().Session(dead); !ok {
			break
		}
		if now.Sub(start) > time.Minute {
			t.Fatal("dead still open after a minute")
		}
	}
	if d := now.Sub(start); d > 4*time.Second+4*2*time.Second {
		t.Fatalf("dead expired after %v", d)
	}
}

func TestAuthAndMulti(t *testing.T) {
	h := newHarness(t, 2)
	a := h.connect(0, "a", 10000).Session
	b := h.connect(0, "b", 10000).Session
	auth := &proto.AuthPacket{Scheme: "digest", Auth: []byte("alice:pw")}
	coord.SealAuth(auth, "")
	if st, _, r := h.do(a, proto.XidAuth, proto.OpAuth, auth); st != coord.StatusOK || r.hdr.Err != proto.CodeOK {
		t.Fatalf("auth: %v %v", st, r.hdr.Err)
	}
	acl := []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: tree.Digest("alice:pw")}}}
	h.do(a, 1, proto.OpCreate, &proto.CreateRequest{Path: "/private", Data: []byte("x"), ACL: acl})
	if _, _, r := h.do(b, 1, proto.OpGetData, &proto.GetDataRequest{Path: "/private"}); r.hdr.Err != proto.CodeNoAuth {
		t.Fatalf("b reads /private: %v", r.hdr.Err)
	}
	if st, _, r := h.do(b, proto.XidAuth, proto.OpAuth, &proto.AuthPacket{Scheme: "nosuch", Auth: []byte("x")}); st != coord.StatusClose || r.hdr.Err != proto.CodeAuthFailed {
		t.Fatalf("bad auth: %v %v", st, r.hdr.Err)
	}
	_, _, r := h.do(a, 2, proto.OpWhoAmI, &proto.Empty{})
	if who := r.resp.(*proto.WhoAmIResponse); len(who.ClientInfo) != 1 || who.ClientInfo[0].User != tree.Digest("alice:pw") {
		t.Fatalf("whoami: %+v", who)
	}

	multi := &proto.MultiRequest{Ops: []proto.MultiOp{
		{Type: proto.OpCreate, Request: &proto.CreateRequest{Path: "/m1", ACL: proto.OpenACL}},
		{Type: proto.OpCheck, Request: &proto.CheckVersionRequest{Path: "/private", Version: 5}},
	}}
	_, _, r = h.do(a, 3, proto.OpMulti, multi)
	res := r.resp.(*proto.MultiResponse).Results
	if r.hdr.Err != proto.CodeOK || len(res) != 2 || res[1].Response.(*proto.ErrorResponse).Err != proto.CodeBadVersion {
		t.Fatalf("failed multi: %+v", res)
	}
	if _, _, r := h.do(a, 4, proto.OpExists, &proto.ExistsRequest{Path: "/m1"}); r.hdr.Err != proto.CodeNoNode {
		t.Fatal("a failed multi left a node")
	}
	multi.Ops[1].Request = &proto.CheckVersionRequest{Path: "/private", Version: 0}
	_, _, r = h.do(a, 5, proto.OpMulti, multi)
	res = r.resp.(*proto.MultiResponse).Results
	if len(res) != 2 || res[0].Response.(*proto.CreateResponse).Path != "/m1" || res[1].Type != proto.OpCheck {
		t.Fatalf("multi: %+v", res)
	}
}

func TestMalformedAndMoved(t *testing.T) {
	h := newHarness(t, 2)
	a := h.connect(0, "a", 10000).Session
	res, err := coord.ParseRequestResult(h.exec([]byte{1, 2, 3}))
	if err != nil || res.Status != coord.StatusMalformed {
		t.Fatalf("garbage op: %+v %v", res, err)
	}
	bad := proto.Marshal(nil, &proto.RequestHeader{Xid: 1, Type: proto.OpCreate})
	bad = append(bad, 0, 0, 0, 9, 'x')
	res, _ = coord.ParseRequestResult(h.exec(coord.RequestOp(gw, a, h.conn(a), bad)))
	if res.Status != coord.StatusMalformed || len(res.Frames) != 0 {
		t.Fatalf("malformed request: %+v", res)
	}
	frame := proto.Marshal(nil, &proto.RequestHeader{Xid: 2, Type: proto.OpGetData})
	frame = proto.Marshal(frame, &proto.GetDataRequest{Path: "/"})
	res, _ = coord.ParseRequestResult(h.exec(coord.RequestOp(gw+1, a, h.conn(a), frame)))
	fs := frames(t, res.Frames, proto.OpGetData)
	if res.Status != coord.StatusClose || len(fs) != 1 || fs[0].hdr.Err != proto.CodeSessionMoved {
		t.Fatalf("request from another gateway: %+v", res)
	}
	rs, _ := coord.ParsePollResult(h.exec(coord.PollOp(gw+1, []int64{a})))
	if rs[0].Status != coord.StatusClose {
		t.Fatalf("poll from another gateway: %v", rs[0].Status)
	}
}

// TestStaleConnectionRefused: a request the client sent on a connection
// that broke (its outcome unknown to it) must not be ordered after the
// requests of the session's next connection, through the same gateway,
// whatever order a lying primary proposes: it is refused as from a moved
// session, ordered or read-only.
func TestStaleConnectionRefused(t *testing.T) {
	h := newHarness(t, 2)
	a := h.connect(0, "a", 10000).Session
	held := proto.Marshal(nil, &proto.RequestHeader{Xid: 1, Type: proto.OpCreate})
	held = proto.Marshal(held, &proto.CreateRequest{Path: "/late", ACL: proto.OpenACL})
	heldOp := coord.RequestOp(gw, a, h.conn(a), held)
	read := proto.Marshal(nil, &proto.RequestHeader{Xid: 2, Type: proto.OpGetData})
	read = proto.Marshal(read, &proto.GetDataRequest{Path: "/"})
	readOp := coord.RequestOp(gw, a, h.conn(a), read)

	if r := h.connect(a, "a", 10000); r.Status != coord.StatusOK || r.Session != a || r.Conn != 2 {
		t.Fatalf("reconnect: %+v", r)
	}
	if _, _, r := h.do(a, 1, proto.OpCreate, &proto.CreateRequest{Path: "/next", ACL: proto.OpenACL}); r.hdr.Err != proto.CodeOK {
		t.Fatalf("create on the new connection: %v", r.hdr.Err)
	}
	res, err := coord.ParseRequestResult(h.exec(heldOp))
	if err != nil {
		t.Fatal(err)
	}
	fs := frames(t, res.Frames, proto.OpCreate)
	if res.Status != coord.StatusClose || len(fs) != 1 || fs[0].hdr.Err != proto.CodeSessionMoved {
		t.Fatalf("the old connection's request, ordered after the new one's: %+v", res)
	}
	if _, _, r := h.do(a, 2, proto.OpExists, &proto.ExistsRequest{Path: "/late"}); r.hdr.Err != proto.CodeNoNode {
		t.Fatalf("the old connection's create took effect: %v", r.hdr.Err)
	}
	for i, app := range h.apps {
		res, err := coord.ParseRequestResult(app.Query(bft.QueryContext{}, readOp))
		if err != nil || res.Status != coord.StatusOrder {
			t.Fatalf("app %d answered the old connection's read without ordering it: %+v %v", i, res, err)
		}
	}
}

// TestSnapshotRestore checks that an App restored from a snapshot goes on
// exactly as the one that took it, queued events included.
func TestSnapshotRestore(t *testing.T) {
	h := newHarness(t, 1)
	a := h.connect(0, "a", 10000).Session
	b := h.connect(0, "b", 10000).Session
	h.do(a, 1, proto.OpCreate, &proto.CreateRequest{Path: "/n", Data: []byte("1"), ACL: proto.OpenACL, Flags: proto.ModeEphemeral})
	h.do(b, 1, proto.OpGetData, &proto.GetDataRequest{Path: "/n", Watch: true})
	h.do(a, 2, proto.OpSetData, &proto.SetDataRequest{Path: "/n", Data: []byte("2"), Version: -1})

	c := h.addRestored()
	snap := c.Snapshot()
	rs := h.poll(b)
	if fs := frames(t, rs[0].Frames, 0); len(fs) != 1 || fs[0].ev.Type != proto.EventNodeDataChanged {
		t.Fatalf("queued event after restore: %+v", fs)
	}
	h.do(a, 3, proto.OpDelete, &proto.DeleteRequest{Path: "/n", Version: -1})

	// Version 1 lacked the agreed time of the last op, the sessions'
	// connection numbers and the claims (here none).
	v1 := snapshotV1(t, snap)
	old := coord.New(coord.Config{})
	if err := old.Restore(v1); err != nil {
		t.Fatalf("restoring a version 1 snapshot: %v", err)
	}
	if got := snapshotV1(t, old.Snapshot()); !bytes.Equal(got, v1) {
		t.Fatal("a version 1 snapshot restored differs")
	}

	for _, bad := range [][]byte{nil, snap[:len(snap)-1], append(append([]byte{}, snap...), 0)} {
		if err := c.Restore(bad); !errors.Is(err, coord.ErrSnapshot) {
			t.Fatalf("Restore of %d bytes: %v", len(bad), err)
		}
	}
}

// TestReconnectSetsWatchesAgain checks that a client that resumes its
// session gets each event once: those queued for its old connection are
// dropped, and its setWatches fires the watches whose nodes changed since
// the last zxid it saw.
func TestReconnectSetsWatchesAgain(t *testing.T) {
	h := newHarness(t, 2)
	a := h.connect(0, "a", 10000).Session
	b := h.connect(0, "b", 10000).Session
	_, _, r := h.do(a, 1, proto.OpCreate, &proto.CreateRequest{Path: "/x", ACL: proto.OpenACL})
	seen := r.hdr.Zxid
	h.do(b, 1, proto.OpGetData, &proto.GetDataRequest{Path: "/x", Watch: true})
	h.do(a, 2, proto.OpSetData, &proto.SetDataRequest{Path: "/x", Data: []byte("1"), Version: -1})

	if c := h.connect(b, "b", 10000); c.Status != coord.StatusOK {
		t.Fatalf("reconnect: %+v", c)
	}
	if rs := h.poll(b); len(rs[0].Frames) != 0 {
		t.Fatal("an event queued for the old connection survived the reconnect")
	}
	st, evs, r := h.do(b, proto.XidSetWatches, proto.OpSetWatches, &proto.SetWatches{RelativeZxid: seen, DataWatches: []string{"/x"}})
	if st != coord.StatusOK || r.hdr.Err != proto.CodeOK || len(evs) != 1 || evs[0].Type != proto.EventNodeDataChanged || evs[0].Path != "/x" {
		t.Fatalf("setWatches: %v %v, events %+v", st, r.hdr.Err, evs)
	}
}

// TestEventQueueBounds checks that events past a session's bound, or past
// the bound of all sessions together, are dropped and the session told to
// reconnect, and that collecting them makes room again.
func TestEventQueueBounds(t *testing.T) {
	h := newHarness(t, 0)
	h.apps = []*coord.App{coord.New(coord.Config{MaxQueuedBytes: 1000, MaxQueuedTotal: 150})}
	a := h.connect(0, "a", 10000).Session
	b := h.connect(0, "b", 10000).Session
	c := h.connect(0, "c", 10000).Session
	h.do(a, 1, proto.OpCreate, &proto.CreateRequest{Path: "/q", ACL: proto.OpenACL})
	for _, s := range []int64{b, c} {
		h.do(s, 1, proto.OpAddWatch, &proto.AddWatchRequest{Path: "/q", Mode: proto.AddWatchPersistent})
	}
	set := func(xid int32) {
		h.do(a, xid, proto.OpSetData, &proto.SetDataRequest{Path: "/q", Version: -1})
	}
	// An event frame for /q is 34 bytes: two fit each session, a third
	// for both does not fit 150.
	for xid := range int32(3) {
		set(2 + xid)
	}
	rs := h.poll(b)
	if n := len(frames(t, rs[0].Frames, 0)); rs[0].Status != coord.StatusClose || n != 2 {
		t.Fatalf("b past the total bound: %v with %d events", rs[0].Status, n)
	}
	set(5) // b's queue is empty again; c's still lost its third
	rs = h.poll(b, c)
	if n := len(frames(t, rs[0].Frames, 0)); rs[0].Status != coord.StatusOK || n != 1 {
		t.Fatalf("b after collecting: %v with %d events", rs[0].Status, n)
	}
	if n := len(frames(t, rs[1].Frames, 0)); rs[1].Status != coord.StatusClose || n != 2 {
		t.Fatalf("c: %v with %d events", rs[1].Status, n)
	}

	h.apps = []*coord.App{coord.New(coord.Config{MaxQueuedBytes: 50})}
	a = h.connect(0, "a", 10000).Session
	b = h.connect(0, "b", 10000).Session
	h.do(a, 1, proto.OpCreate, &proto.CreateRequest{Path: "/q", ACL: proto.OpenACL})
	h.do(b, 1, proto.OpAddWatch, &proto.AddWatchRequest{Path: "/q", Mode: proto.AddWatchPersistent})
	set(2)
	set(3)
	snap := h.apps[0].Snapshot()
	rs = h.poll(b)
	if n := len(frames(t, rs[0].Frames, 0)); rs[0].Status != coord.StatusClose || n != 1 {
		t.Fatalf("b past its own bound: %v with %d events", rs[0].Status, n)
	}
	if err := coord.New(coord.Config{MaxQueuedBytes: 50, MaxQueuedTotal: 10}).Restore(snap); !errors.Is(err, coord.ErrSnapshot) {
		t.Fatalf("a snapshot past MaxQueuedTotal restored: %v", err)
	}
}

// snapshotV1 writes snap, a snapshot without claims, as version 1 did:
// without the agreed time of the last op, the sessions' connection
// numbers and the claims.
func snapshotV1(t *testing.T, snap []byte) []byte {
	t.Helper()
	d := proto.NewDecoder(snap)
	e := proto.NewEncoder(nil)
	d.Int32()
	e.Int32(1)
	e.Int64(d.Int64()) // the next expiry look
	e.Int64(d.Int64()) // and sweep
	d.Int64()          // the last op's agreed time
	n := d.Int32()
	e.Int32(n)
	for range n {
		e.Int64(d.Int64()) // id
		e.Int64(d.Int64()) // gateway
		d.Int32()          // connection number
		e.Bool(d.Bool())
		e.Buffer(d.Buffer())
	}
	e.Buffer(d.Buffer()) // the tree
	if claims := d.Int32(); claims != 0 || d.Len() != 0 || d.Err() != nil {
		t.Fatalf("snapshot with %d claims, %d bytes more: %v", claims, d.Len(), d.Err())
	}
	return e.Bytes()
}

// TestQuery checks the read-only path: a read answers as the ordered
// request would, changes nothing, and anything else, or a session with
// events waiting, is sent back to be ordered.
func TestQuery(t *testing.T) {
	h := newHarness(t, 1)
	app := h.apps[0]
	a := h.connect(0, "a", 10000).Session
	b := h.connect(0, "b", 10000).Session
	h.do(a, 1, proto.OpCreate, &proto.CreateRequest{Path: "/r", Data: []byte("data"), ACL: proto.OpenACL})
	query := func(gateway, session int64, xid int32, op proto.OpCode, req proto.Record) coord.SessionResult {
		frame := proto.Marshal(proto.Marshal(nil, &proto.RequestHeader{Xid: xid, Type: op}), req)
		before := app.Snapshot()
		res, err := coord.ParseRequestResult(app.Query(bft.QueryContext{}, coord.RequestOp(gateway, session, h.conn(session), frame)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(app.Snapshot(), before) {
			t.Fatalf("%v: Query changed the state", op)
		}
		return res
	}

	get := &proto.GetDataRequest{Path: "/r"}
	res := query(gw, b, 1, proto.OpGetData, get)
	fs := frames(t, res.Frames, proto.OpGetData)
	if res.Status != coord.StatusOK || len(fs) != 1 || string(fs[0].resp.(*proto.GetDataResponse).Data) != "data" {
		t.Fatalf("read-only getData: %+v", res)
	}
	_, _, ordered := h.do(b, 1, proto.OpGetData, get)
	if fs[0].hdr != ordered.hdr {
		t.Fatalf("read-only header %+v, ordered %+v", fs[0].hdr, ordered.hdr)
	}
	if res := query(gw, b, 2, proto.OpGetData, &proto.GetDataRequest{Path: "/nosuch"}); len(res.Frames) == 0 || frames(t, res.Frames, 0)[0].hdr.Err != proto.CodeNoNode {
		t.Fatalf("read-only getData of nothing: %+v", res)
	}

	for name, r := range map[string]coord.SessionResult{
		"a write":                query(gw, b, 3, proto.OpSetData, &proto.SetDataRequest{Path: "/r", Version: -1}),
		"a read with a watch":    query(gw, b, 3, proto.OpGetData, &proto.GetDataRequest{Path: "/r", Watch: true}),
		"another gateway's":      query(gw+1, b, 3, proto.OpGetData, get),
		"a session that is gone": query(gw, 12345, 3, proto.OpGetData, get),
	} {
		if r.Status != coord.StatusOrder || len(r.Frames) != 0 {
			t.Errorf("%s: %+v", name, r)
		}
	}
	h.do(b, 4, proto.OpExists, &proto.ExistsRequest{Path: "/r", Watch: true})
	h.do(a, 2, proto.OpDelete, &proto.DeleteRequest{Path: "/r", Version: -1})
	if r := query(gw, b, 5, proto.OpGetData, get); r.Status != coord.StatusOrder {
		t.Fatalf("a read of a session with an event waiting: %+v", r)
	}
}

// TestResultsWithinMaxOpSize checks that no result passes MaxOpSize, which
// the bft wire format would refuse: a poll leaves the events that do not
// fit for the next one, and a reply too large with the events before it
// becomes CodeMarshallingError.
func TestResultsWithinMaxOpSize(t *testing.T) {
	h := newHarness(t, 0)
	h.apps = []*coord.App{coord.New(coord.Config{MaxQueuedBytes: coord.MaxOpSize / 4})}
	w := h.connect(0, "w", 10000).Session
	path := "/" + strings.Repeat("p", 1000)
	h.do(w, 1, proto.OpCreate, &proto.CreateRequest{Path: path, ACL: proto.OpenACL})
	var watchers []int64
	for range 5 {
		s := h.connect(0, "s", 10000).Session
		h.do(s, 1, proto.OpAddWatch, &proto.AddWatchRequest{Path: path, Mode: proto.AddWatchPersistent})
		watchers = append(watchers, s)
	}
	for i := range 220 { // about 230 KB of events for each watcher
		h.do(w, int32(2+i), proto.OpSetData, &proto.SetDataRequest{Path: path, Version: -1})
	}
	res := h.exec(coord.PollOp(gw, watchers))
	if len(res) > coord.MaxOpSize {
		t.Fatalf("a poll result of %d bytes", len(res))
	}
	rs, err := coord.ParsePollResult(res)
	if err != nil {
		t.Fatal(err)
	}
	var left []int64
	for _, r := range rs {
		if r.Status != coord.StatusOK {
			t.Fatalf("session %d: %v", r.Session, r.Status)
		}
		if len(r.Frames) == 0 {
			left = append(left, r.Session)
		}
	}
	if len(left) == 0 || len(left) == len(watchers) {
		t.Fatalf("%d of %d sessions left for the next poll", len(left), len(watchers))
	}
	for _, r := range h.poll(left...) {
		if n := len(frames(t, r.Frames, 0)); n != 220 {
			t.Fatalf("session %d: %d events on the next poll, want 220", r.Session, n)
		}
	}

	// A getData of the most a node holds, behind a full queue of events.
	big := make([]byte, coord.MaxDataSize(coord.MaxOpSize/4))
	h.do(w, 300, proto.OpSetData, &proto.SetDataRequest{Path: path, Data: big, Version: -1})
	h.do(w, 301, proto.OpCreate, &proto.CreateRequest{Path: "/big", Data: big, ACL: proto.OpenACL})
	for i := range 220 {
		h.do(w, int32(302+i), proto.OpSetData, &proto.SetDataRequest{Path: path, Version: -1})
	}
	frame := proto.Marshal(proto.Marshal(nil, &proto.RequestHeader{Xid: 9, Type: proto.OpGetData}), &proto.GetDataRequest{Path: "/big"})
	res = h.exec(coord.RequestOp(gw, watchers[0], h.conn(watchers[0]), frame))
	if len(res) > coord.MaxOpSize {
		t.Fatalf("a request result of %d bytes", len(res))
	}
	r, err := coord.ParseRequestResult(res)
	if err != nil {
		t.Fatal(err)
	}
	fs := frames(t, r.Frames, proto.OpGetData)
	if last := fs[len(fs)-1]; len(fs) != 222 || last.hdr.Xid != 9 || last.hdr.Err != proto.CodeOK {
		t.Fatalf("getData behind %d events: %+v", len(fs)-1, last.hdr)
	}
	_, _, big2 := h.do(w, 600, proto.OpMultiRead, &proto.MultiRequest{Ops: []proto.MultiOp{
		{Type: proto.OpGetData, Request: &proto.GetDataRequest{Path: "/big"}},
		{Type: proto.OpGetData, Request: &proto.GetDataRequest{Path: "/big"}},
	}})
	if big2.hdr.Err != proto.CodeMarshallingError {
		t.Fatalf("a multiRead of two large nodes: %v", big2.hdr.Err)
	}
}

// TestStatsOp: a StatsOp reads the tree's counts, read-only or ordered
// alike, and a read-only one changes nothing.
func TestStatsOp(t *testing.T) {
	a := coord.New(coord.Config{})
	ctx := bft.ExecContext{Seq: 1, Time: time.UnixMilli(1_700_000_000_000)}
	a.Execute(ctx, coord.ConnectOp(1, 0, []byte("pw"), 5000))
	frame := proto.Marshal(nil, &proto.RequestHeader{Xid: 1, Type: proto.OpCreate})
	frame = proto.Marshal(frame, &proto.CreateRequest{Path: "/e", Data: []byte("abc"), ACL: proto.OpenACL, Flags: proto.ModeEphemeral})
	ctx.Seq++
	a.Execute(ctx, coord.RequestOp(1, 1, 1, frame))
	before := a.Snapshot()
	q := a.Query(bft.QueryContext{}, coord.StatsOp(1))
	if !bytes.Equal(a.Snapshot(), before) {
		t.Fatal("a read-only StatsOp changed the state")
	}
	x := a.Execute(ctx, coord.StatsOp(1)) // the same agreed time: nothing to expire
	if !bytes.Equal(q, x) {
		t.Fatalf("Query answered %x, Execute %x", q, x)
	}
	r, err := coord.ParseStatsResult(q)
	if err != nil {
		t.Fatal(err)
	}
	want := a.Tree().Stats()
	if r.Stats != want || r.Zxid != a.Tree().LastZxid() || r.Nodes != 5 || r.Ephemerals != 1 || r.Sessions != 1 {
		t.Fatalf("stats %+v, want %+v at zxid %d", r, want, a.Tree().LastZxid())
	}
	if _, err := coord.ParseStatsResult(q[:len(q)-1]); err == nil {
		t.Fatal("a short stats result parsed")
	}
}
