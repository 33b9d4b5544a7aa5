package tree

import (
	"testing"

	"github.com/rubin-go/rubin/coord/proto"
)

func TestStats(t *testing.T) {
	h := newHarness(t, Config{})
	fresh := h.tr.Stats()
	// The root, /zookeeper, its quota and config.
	if fresh.Nodes != 4 || fresh.Sessions != 0 || fresh.Watches != 0 || fresh.Ephemerals != 0 {
		t.Fatalf("fresh tree: %+v", fresh)
	}
	a, b := h.session(1), h.session(2)
	h.create(a, "/x", "hello", proto.ModePersistent)
	h.create(a, "/x/e", "", proto.ModeEphemeral)
	h.create(b, "/x/f", "ab", proto.ModeEphemeral)
	if _, _, err := h.tr.GetData(a, "/x", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.tr.GetChildren(a, "/x", true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.tr.Exists(b, "/absent", true); err != nil && err != proto.CodeNoNode {
		t.Fatal(err)
	}
	if err := h.tr.AddWatch(b, "/x", proto.AddWatchPersistentRecursive); err != nil {
		t.Fatal(err)
	}
	got := h.tr.Stats()
	want := Stats{
		Nodes: 7, Sessions: 2,
		// a: data and child on /x; b: data on /absent, recursive on /x.
		Watches: 4, WatchedPaths: 2, WatchingSessions: 2,
		Ephemerals: 2,
		DataSize:   fresh.DataSize + int64(len("/x")+len("hello")+len("/x/e")+len("/x/f")+len("ab")),
	}
	if got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
	if _, err := h.tr.CloseSession(h.w(b)); err != nil {
		t.Fatal(err)
	}
	// b's ephemeral node went, and a's child watch on /x fired with it.
	got = h.tr.Stats()
	if got.Nodes != 6 || got.Sessions != 1 || got.Ephemerals != 1 || got.Watches != 1 || got.WatchedPaths != 1 || got.WatchingSessions != 1 {
		t.Fatalf("after closing a session: %+v", got)
	}
}
