package tree

import (
	"slices"
	"testing"

	"github.com/rubin-go/rubin/coord/proto"
)

func TestMulti(t *testing.T) {
	h := newHarness(t, Config{})
	s, w := h.session(1), h.session(2)
	h.create(s, "/m", "", proto.ModePersistent)
	h.tr.GetChildren(w, "/m", true)
	h.tr.Exists(w, "/m/x", true)
	res, evs, err := h.tr.Multi(h.w(s), []Op{
		{Type: proto.OpCreate, Path: "/m/x", Data: []byte("1"), ACL: proto.OpenACL},
		{Type: proto.OpCreate2, Path: "/m/s-", ACL: proto.OpenACL, Mode: proto.ModePersistentSequential},
		{Type: proto.OpCreate, Path: "/m/s-", ACL: proto.OpenACL, Mode: proto.ModePersistentSequential},
		{Type: proto.OpSetData, Path: "/m/x", Data: []byte("2"), Version: 0},
		{Type: proto.OpCheck, Path: "/m/x", Version: 1},
		{Type: proto.OpDelete, Path: "/m/s-0000000002", Version: -1},
	})
	z := h.zxid
	if err != nil {
		t.Fatalf("Multi: %v", err)
	}
	want := []OpResult{
		{Type: proto.OpCreate, Path: "/m/x", Stat: proto.Stat{Czxid: z, Mzxid: z, Pzxid: z, Ctime: h.now, Mtime: h.now, DataLength: 1}},
		{Type: proto.OpCreate2, Path: "/m/s-0000000001", Stat: proto.Stat{Czxid: z, Mzxid: z, Pzxid: z, Ctime: h.now, Mtime: h.now}},
		{Type: proto.OpCreate, Path: "/m/s-0000000002", Stat: proto.Stat{Czxid: z, Mzxid: z, Pzxid: z, Ctime: h.now, Mtime: h.now}},
		{Type: proto.OpSetData, Stat: proto.Stat{Czxid: z, Mzxid: z, Pzxid: z, Ctime: h.now, Mtime: h.now, Version: 1, DataLength: 1}},
		{Type: proto.OpCheck},
		{Type: proto.OpDelete},
	}
	for i := range want {
		if !equalResult(res[i], want[i]) {
			t.Errorf("result %d = %+v, want %+v", i, res[i], want[i])
		}
	}
	// The events come in the order of the ops; the one-shot child watch
	// fires once, for the first create.
	wantEvents(t, "multi", evs, ev(w, proto.EventNodeCreated, "/m/x"), ev(w, proto.EventNodeChildrenChanged, "/m"))
	kids, st, _ := h.tr.GetChildren(s, "/m", false)
	if !slices.Equal(kids, []string{"s-0000000001", "x"}) || st.Cversion != 4 || st.Pzxid != z {
		t.Errorf("/m after the multi: %v, %+v", kids, st)
	}
}

func equalResult(a, b OpResult) bool {
	return a.Type == b.Type && a.Err == b.Err && a.Path == b.Path && a.Stat == b.Stat &&
		string(a.Data) == string(b.Data) && slices.Equal(a.Children, b.Children)
}

func TestMultiAllOrNothing(t *testing.T) {
	h := newHarness(t, Config{})
	s, w := h.session(1), h.session(2)
	h.create(s, "/m", "d", proto.ModePersistent)
	h.create(s, "/m/c", "", proto.ModePersistent)
	h.tr.GetChildren(w, "/m", true)
	h.tr.GetData(w, "/m", true)
	before := dump(h.tr)

	for _, c := range []struct {
		name   string
		ops    []Op
		failed int
		code   proto.Code
	}{
		{"bad version", []Op{
			{Type: proto.OpCreate, Path: "/m/new", ACL: proto.OpenACL},
			{Type: proto.OpSetData, Path: "/m", Data: []byte("x"), Version: -1},
			{Type: proto.OpCheck, Path: "/m", Version: 0}, // /m's version is 1 after the set
			{Type: proto.OpDelete, Path: "/m/c", Version: -1},
		}, 2, proto.CodeBadVersion},
		{"no node", []Op{
			{Type: proto.OpDelete, Path: "/m/c", Version: -1},
			{Type: proto.OpDelete, Path: "/m/c", Version: -1},
		}, 1, proto.CodeNoNode},
		{"exists", []Op{
			{Type: proto.OpCreate, Path: "/m/s-", ACL: proto.OpenACL, Mode: proto.ModePersistentSequential},
			{Type: proto.OpCreate, Path: "/m/s-0000000001", ACL: proto.OpenACL},
		}, 1, proto.CodeNodeExists},
		{"not empty", []Op{
			{Type: proto.OpCreate, Path: "/m/c/d", ACL: proto.OpenACL},
			{Type: proto.OpDelete, Path: "/m/c", Version: -1},
			{Type: proto.OpSetData, Path: "/m", Version: -1},
		}, 1, proto.CodeNotEmpty},
		{"first op", []Op{
			{Type: proto.OpCreate, Path: "bad", ACL: proto.OpenACL},
			{Type: proto.OpCreate, Path: "/m/x", ACL: proto.OpenACL},
		}, 0, proto.CodeBadArguments},
		{"container op without container mode", []Op{
			{Type: proto.OpCreateContainer, Path: "/m/x", ACL: proto.OpenACL},
		}, 0, proto.CodeBadArguments},
	} {
		res, evs, err := h.tr.Multi(h.w(s), c.ops)
		wantCode(t, c.name, err, c.code)
		wantEvents(t, c.name, evs)
		for i, r := range res {
			want := OpResult{Type: proto.OpError}
			switch {
			case i == c.failed:
				want.Err = c.code
			case i > c.failed:
				want.Err = proto.CodeRuntimeInconsistency
			}
			if !equalResult(r, want) {
				t.Errorf("%s: result %d = %+v, want %+v", c.name, i, r, want)
			}
		}
		if len(res) != len(c.ops) {
			t.Errorf("%s: %d results for %d ops", c.name, len(res), len(c.ops))
		}
		if dump(h.tr) != before {
			t.Errorf("%s: the failed multi changed the tree", c.name)
		}
	}
	_, _, err := h.tr.Multi(h.w(s), []Op{{Type: proto.OpGetData, Path: "/m"}})
	wantCode(t, "a read in a multi", err, proto.CodeMarshallingError)
	if res, evs, err := h.tr.Multi(h.w(s), nil); len(res) != 0 || len(evs) != 0 || err != nil {
		t.Errorf("an empty multi: %v, %v, %v", res, evs, err)
	}
	// The watches did not fire: they fire now.
	evs, _ := h.tr.Delete(h.w(s), "/m/c", -1)
	wantEvents(t, "delete after the failed multis", evs, ev(w, proto.EventNodeChildrenChanged, "/m"))
}

func TestMultiRead(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.session(1)
	h.create(s, "/a", "data", proto.ModePersistent)
	h.create(s, "/a/b", "", proto.ModePersistent)
	h.tr.Create(h.w(s), "/wo", nil, []proto.ACL{{Perms: proto.PermWrite, ID: proto.WorldAnyone}}, proto.ModePersistent)
	res, err := h.tr.MultiRead(s, []Op{
		{Type: proto.OpGetData, Path: "/a"},
		{Type: proto.OpGetChildren, Path: "/a"},
		{Type: proto.OpGetData, Path: "/none"},
		{Type: proto.OpGetChildren, Path: "/wo"},
		{Type: proto.OpGetChildren, Path: "/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	st := h.stat(s, "/a")
	want := []OpResult{
		{Type: proto.OpGetData, Data: []byte("data"), Stat: st},
		{Type: proto.OpGetChildren, Children: []string{"b"}},
		{Type: proto.OpError, Err: proto.CodeNoNode},
		{Type: proto.OpError, Err: proto.CodeNoAuth},
		{Type: proto.OpGetChildren, Children: []string{"a", "wo", "zookeeper"}},
	}
	for i := range want {
		if !equalResult(res[i], want[i]) {
			t.Errorf("result %d = %+v, want %+v", i, res[i], want[i])
		}
	}
	_, err = h.tr.MultiRead(s, []Op{{Type: proto.OpSetData, Path: "/a"}})
	wantCode(t, "a write in a multiRead", err, proto.CodeMarshallingError)
}
