package tree

import (
	"testing"

	"github.com/rubin-go/rubin/coord/proto"
)

func TestOneShotWatches(t *testing.T) {
	h := newHarness(t, Config{})
	w, x := h.session(1), h.session(2)

	// An exists watch on a missing node fires on its creation, once.
	if _, err := h.tr.Exists(w, "/a", true); err != proto.CodeNoNode {
		t.Fatalf("Exists = %v", err)
	}
	h.tr.GetChildren(w, "/", true)
	_, _, evs, _ := h.tr.Create(h.w(x), "/a", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create /a", evs, ev(w, proto.EventNodeCreated, "/a"), ev(w, proto.EventNodeChildrenChanged, "/"))
	_, _, evs, _ = h.tr.Create(h.w(x), "/b", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create /b, the watches spent", evs)

	// A data watch fires once on a change.
	h.tr.GetData(w, "/a", true)
	h.tr.Exists(w, "/a", true) // the same watch: still one event
	_, evs, _ = h.tr.SetData(h.w(x), "/a", []byte("1"), -1)
	wantEvents(t, "set /a", evs, ev(w, proto.EventNodeDataChanged, "/a"))
	_, evs, _ = h.tr.SetData(h.w(x), "/a", []byte("2"), -1)
	wantEvents(t, "set /a again", evs)

	// Deletion: one NodeDeleted a session, though it has a data and a
	// child watch on the node; the parent's child watch fires too.
	h.tr.GetData(w, "/a", true)
	h.tr.GetChildren(w, "/a", true)
	h.tr.GetChildren(x, "/a", true)
	h.tr.GetChildren(x, "/", true)
	evs, _ = h.tr.Delete(h.w(x), "/a", -1)
	wantEvents(t, "delete /a", evs,
		ev(w, proto.EventNodeDeleted, "/a"),
		ev(x, proto.EventNodeDeleted, "/a"),
		ev(x, proto.EventNodeChildrenChanged, "/"))
	if err := h.tr.CheckWatches(w, "/a", proto.WatcherAny); err != proto.CodeNoWatcher {
		t.Errorf("watches on /a after it fired: %v", err)
	}

	// A child watch ignores data changes and fires on a child's deletion.
	h.create(x, "/p", "", proto.ModePersistent)
	h.create(x, "/p/c", "", proto.ModePersistent)
	h.tr.GetChildren(w, "/p", true)
	_, evs, _ = h.tr.SetData(h.w(x), "/p", []byte("d"), -1)
	wantEvents(t, "set /p", evs)
	evs, _ = h.tr.Delete(h.w(x), "/p/c", -1)
	wantEvents(t, "delete /p/c", evs, ev(w, proto.EventNodeChildrenChanged, "/p"))
}

func TestPersistentWatches(t *testing.T) {
	h := newHarness(t, Config{})
	w, x := h.session(1), h.session(2)
	if err := h.tr.AddWatch(w, "/p", proto.AddWatchPersistent); err != nil {
		t.Fatal(err)
	}
	if err := h.tr.AddWatch(w, "/r", proto.AddWatchPersistentRecursive); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "AddWatch with a bad mode", h.tr.AddWatch(w, "/p", 7), proto.CodeBadArguments)
	wantCode(t, "AddWatch on a bad path", h.tr.AddWatch(w, "p", proto.AddWatchPersistent), proto.CodeBadArguments)

	for range 2 { // persistent: every time, not once
		_, _, evs, _ := h.tr.Create(h.w(x), "/p", nil, proto.OpenACL, proto.ModePersistent)
		wantEvents(t, "create /p", evs, ev(w, proto.EventNodeCreated, "/p"))
		_, _, evs, _ = h.tr.Create(h.w(x), "/p/c", nil, proto.OpenACL, proto.ModePersistent)
		wantEvents(t, "create /p/c", evs, ev(w, proto.EventNodeChildrenChanged, "/p"))
		_, evs, _ = h.tr.SetData(h.w(x), "/p/c", nil, -1)
		wantEvents(t, "set /p/c (not recursive)", evs)
		_, evs, _ = h.tr.SetData(h.w(x), "/p", nil, -1)
		wantEvents(t, "set /p", evs, ev(w, proto.EventNodeDataChanged, "/p"))
		evs, _ = h.tr.Delete(h.w(x), "/p/c", -1)
		wantEvents(t, "delete /p/c", evs, ev(w, proto.EventNodeChildrenChanged, "/p"))
		evs, _ = h.tr.Delete(h.w(x), "/p", -1)
		wantEvents(t, "delete /p", evs, ev(w, proto.EventNodeDeleted, "/p"))
	}

	// Recursive: the node and everything beneath, no NodeChildrenChanged.
	h.tr.GetChildren(w, "/r", true) // a one-shot child watch beside it
	_, _, evs, _ := h.tr.Create(h.w(x), "/r", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create /r", evs, ev(w, proto.EventNodeCreated, "/r"))
	_, _, evs, _ = h.tr.Create(h.w(x), "/r/a", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create /r/a", evs, ev(w, proto.EventNodeCreated, "/r/a"))
	_, _, evs, _ = h.tr.Create(h.w(x), "/r/a/b", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create /r/a/b", evs, ev(w, proto.EventNodeCreated, "/r/a/b"))
	_, evs, _ = h.tr.SetData(h.w(x), "/r/a/b", nil, -1)
	wantEvents(t, "set /r/a/b", evs, ev(w, proto.EventNodeDataChanged, "/r/a/b"))
	evs, _ = h.tr.Delete(h.w(x), "/r/a/b", -1)
	wantEvents(t, "delete /r/a/b", evs, ev(w, proto.EventNodeDeleted, "/r/a/b"))
	_, _, evs, _ = h.tr.Create(h.w(x), "/rr", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create /rr, beside /r", evs)

	// Removing: one kind at a time, NoWatcher when there is none.
	wantCode(t, "check the persistent watch", h.tr.CheckWatches(w, "/p", WatcherPersistent), proto.CodeOK)
	wantCode(t, "check a data watch on /p", h.tr.CheckWatches(w, "/p", proto.WatcherData), proto.CodeNoWatcher)
	wantCode(t, "remove a data watch on /p", h.tr.RemoveWatches(w, "/p", proto.WatcherData), proto.CodeNoWatcher)
	wantCode(t, "remove the persistent watch", h.tr.RemoveWatches(w, "/p", WatcherPersistent), proto.CodeOK)
	wantCode(t, "remove it again", h.tr.RemoveWatches(w, "/p", proto.WatcherAny), proto.CodeNoWatcher)
	wantCode(t, "remove with a bad type", h.tr.RemoveWatches(w, "/r", 9), proto.CodeBadArguments)
	wantCode(t, "remove everything on /r", h.tr.RemoveWatches(w, "/r", proto.WatcherAny), proto.CodeOK)
	_, _, evs, _ = h.tr.Create(h.w(x), "/r/z", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create /r/z with no watches", evs)
	if h.tr.recursive != 0 || len(h.tr.watches) != 0 {
		t.Errorf("watches left: %d recursive, index %v", h.tr.recursive, h.tr.watches)
	}
}

func TestWatchEventsFilteredByACL(t *testing.T) {
	h := newHarness(t, Config{})
	w, x := h.session(1), h.session(2)
	h.tr.AddAuth(x, "digest", []byte("x:x"))
	private := []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: Digest("x:x")}}}
	h.tr.AddWatch(w, "/", proto.AddWatchPersistentRecursive)
	h.tr.Exists(w, "/secret", true)
	_, _, evs, _ := h.tr.Create(h.w(x), "/secret", nil, private, proto.ModePersistent)
	wantEvents(t, "create a node w may not read", evs)
	if err := h.tr.CheckWatches(w, "/secret", proto.WatcherData); err != proto.CodeNoWatcher {
		t.Errorf("the exists watch did not count as fired: %v", err)
	}
	_, _, evs, _ = h.tr.Create(h.w(x), "/open", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create a node w may read", evs, ev(w, proto.EventNodeCreated, "/open"))
}

func TestSetWatches(t *testing.T) {
	h := newHarness(t, Config{})
	w, x := h.session(1), h.session(2)
	h.create(x, "/old", "", proto.ModePersistent)
	h.create(x, "/kids", "", proto.ModePersistent)
	seen := h.zxid
	h.create(x, "/new", "", proto.ModePersistent)
	h.tr.SetData(h.w(x), "/old2", nil, -1) // fails: no node; takes a zxid all the same
	h.create(x, "/kids/k", "", proto.ModePersistent)

	evs, err := h.tr.SetWatches(w, seen,
		[]string{"/old", "/gone", "/new"},
		[]string{"/new", "/later"},
		[]string{"/kids", "/old", "/gone"},
		[]string{"/p"}, []string{"/r"})
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, "SetWatches", evs,
		ev(w, proto.EventNodeDeleted, "/gone"),
		ev(w, proto.EventNodeDataChanged, "/new"),
		ev(w, proto.EventNodeCreated, "/new"),
		ev(w, proto.EventNodeChildrenChanged, "/kids"),
		ev(w, proto.EventNodeDeleted, "/gone"))
	for _, c := range []struct {
		path string
		typ  proto.WatcherType
	}{{"/old", proto.WatcherData}, {"/later", proto.WatcherData}, {"/old", proto.WatcherChildren},
		{"/p", WatcherPersistent}, {"/r", WatcherPersistentRecursive}} {
		wantCode(t, "registered "+c.path, h.tr.CheckWatches(w, c.path, c.typ), proto.CodeOK)
	}
	wantCode(t, "not registered /new", h.tr.CheckWatches(w, "/new", proto.WatcherAny), proto.CodeNoWatcher)
	_, evs, _ = h.tr.SetData(h.w(x), "/old", nil, -1)
	wantEvents(t, "set /old", evs, ev(w, proto.EventNodeDataChanged, "/old"))
}

func TestWatchLimit(t *testing.T) {
	h := newHarness(t, Config{MaxWatchBytes: 2 * (watchOverhead + 2)})
	s := h.session(1)
	h.tr.Exists(s, "/a", true)
	h.tr.Exists(s, "/b", true)
	h.tr.GetChildren(s, "/", false)
	_, err := h.tr.Exists(s, "/c", true)
	wantCode(t, "a third watch", err, proto.CodeQuotaExceeded)
	if _, err := h.tr.Exists(s, "/a", true); err != proto.CodeNoNode {
		t.Errorf("a watch the session has: %v", err)
	}
	h.tr.RemoveWatches(s, "/a", proto.WatcherData)
	if _, err := h.tr.Exists(s, "/c", true); err != proto.CodeNoNode {
		t.Errorf("a watch after one was removed: %v", err)
	}
}

// TestWatchKinds checks that a session's watch kinds on one path are
// independent (a one-shot watch beside a persistent one goes when it
// fires and leaves the persistent one), and that a session hears of one
// change once, however many of its watches it fires.
func TestWatchKinds(t *testing.T) {
	h := newHarness(t, Config{})
	w, x := h.session(1), h.session(2)
	h.create(x, "/a", "", proto.ModePersistent)
	h.tr.AddWatch(w, "/a", proto.AddWatchPersistent)
	h.tr.AddWatch(w, "/", proto.AddWatchPersistentRecursive)
	h.tr.GetData(w, "/a", true)
	_, evs, _ := h.tr.SetData(h.w(x), "/a", nil, -1)
	wantEvents(t, "set /a with three watches", evs, ev(w, proto.EventNodeDataChanged, "/a"))
	wantCode(t, "the one-shot watch went", h.tr.CheckWatches(w, "/a", proto.WatcherData), proto.CodeNoWatcher)
	wantCode(t, "the persistent one stayed", h.tr.CheckWatches(w, "/a", WatcherPersistent), proto.CodeOK)
	_, evs, _ = h.tr.SetData(h.w(x), "/a", nil, -1)
	wantEvents(t, "set /a again", evs, ev(w, proto.EventNodeDataChanged, "/a"))

	// A one-shot watch added after a persistent one does not replace it.
	h.tr.GetChildren(w, "/a", true)
	_, _, evs, _ = h.tr.Create(h.w(x), "/a/b", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create /a/b", evs, ev(w, proto.EventNodeCreated, "/a/b"), ev(w, proto.EventNodeChildrenChanged, "/a"))
	_, _, evs, _ = h.tr.Create(h.w(x), "/a/c", nil, proto.OpenACL, proto.ModePersistent)
	wantEvents(t, "create /a/c", evs, ev(w, proto.EventNodeCreated, "/a/c"), ev(w, proto.EventNodeChildrenChanged, "/a"))

	// Sessions come in order of id within each step.
	h.tr.Exists(x, "/a/b", true)
	h.tr.Exists(3, "/a/b", true) // no such session
	h.session(3)
	h.tr.Exists(3, "/a/b", true)
	evs, _ = h.tr.Delete(h.w(x), "/a/b", -1)
	wantEvents(t, "delete /a/b", evs,
		ev(w, proto.EventNodeDeleted, "/a/b"),
		ev(x, proto.EventNodeDeleted, "/a/b"),
		ev(3, proto.EventNodeDeleted, "/a/b"),
		ev(w, proto.EventNodeChildrenChanged, "/a"))
}

// TestWatchTotal checks Config.MaxWatchTotal: sessions within their own
// bound share the total, watches on absent paths count, a watch that
// does not fit fails with CodeQuotaExceeded and changes nothing, and
// the room of a session's watches is free once it ends. A snapshot
// holding more is refused by a tree with a lower total.
func TestWatchTotal(t *testing.T) {
	cfg := Config{MaxWatchBytes: 100, MaxWatchTotal: 120} // a watch on /x counts 34
	h := newHarness(t, cfg)
	a, b := h.session(1), h.session(2)
	for _, p := range []string{"/a", "/b"} {
		if _, err := h.tr.Exists(a, p, true); err != proto.CodeNoNode {
			t.Fatalf("exists %s: %v", p, err)
		}
	}
	if _, err := h.tr.Exists(b, "/d", true); err != proto.CodeNoNode {
		t.Fatalf("b's first watch: %v", err)
	}
	_, err := h.tr.Exists(b, "/e", true)
	wantCode(t, "a watch past the total", err, proto.CodeQuotaExceeded)
	wantCode(t, "a persistent watch past the total", h.tr.AddWatch(b, "/e", proto.AddWatchPersistent), proto.CodeQuotaExceeded)
	if len(h.tr.sessions[b].watches) != 1 || h.tr.watchTotal != 3*34 {
		t.Fatalf("after the refusals: b watches %v, %d bytes in all", h.tr.sessions[b].watches, h.tr.watchTotal)
	}
	if _, err := Restore(Config{MaxWatchBytes: 100, MaxWatchTotal: 100}, h.tr.Snapshot()); err == nil {
		t.Fatal("restored 102 bytes of watches under a total of 100")
	}
	if _, err := h.tr.CloseSession(h.w(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.tr.Exists(b, "/e", true); err != proto.CodeNoNode {
		t.Fatalf("b's watch once a ended: %v", err)
	}
}
