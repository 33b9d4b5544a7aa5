package tree

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rubin-go/rubin/coord/proto"
)

// checkInvariants fails the test if the tree's indexes disagree with its
// nodes and sessions.
func checkInvariants(t *testing.T, tr *Tree) {
	t.Helper()
	for p, n := range tr.nodes {
		if int(n.stat.NumChildren) != len(n.children) || int(n.stat.DataLength) != len(n.data) {
			t.Fatalf("%s: stat %+v with %d children and %d bytes", p, n.stat, len(n.children), len(n.data))
		}
		for name := range n.children {
			if tr.nodes[childPath(p, name)] == nil {
				t.Fatalf("%s: child %q missing", p, name)
			}
		}
		if p == "/" {
			continue
		}
		parent, name := parentOf(p)
		if _, ok := tr.nodes[parent].children[name]; !ok {
			t.Fatalf("%s: not among its parent's children", p)
		}
		owner := n.stat.EphemeralOwner
		switch {
		case sessionOwner(owner):
			if _, ok := tr.sessions[owner].ephemerals[p]; !ok {
				t.Fatalf("%s: not among its session's ephemerals", p)
			}
		case owner == containerOwner:
			if _, ok := tr.containers[p]; !ok {
				t.Fatalf("%s: not among the containers", p)
			}
		case owner != 0:
			if _, ok := tr.ttls[p]; !ok {
				t.Fatalf("%s: not among the TTL nodes", p)
			}
		}
	}
	var size int64
	for p, n := range tr.nodes {
		size += nodeSize(p, len(n.data), n.acl)
	}
	if size != tr.size {
		t.Fatalf("tree size %d counted, %d held", tr.size, size)
	}
	recursive, watchTotal := 0, int64(0)
	for id, s := range tr.sessions {
		for p := range s.ephemerals {
			if n := tr.nodes[p]; n == nil || n.stat.EphemeralOwner != id {
				t.Fatalf("session %d: ephemeral %s not its own", id, p)
			}
		}
		size := 0
		for p, bits := range s.watches {
			if _, ok := tr.watches[p][id]; !ok || bits == 0 {
				t.Fatalf("session %d: watch on %s (%b) not indexed", id, p, bits)
			}
			if bits&watchRecursive != 0 {
				recursive++
			}
			size += len(p) + watchOverhead
		}
		if size != s.watchBytes {
			t.Fatalf("session %d: %d watch bytes counted, %d held", id, s.watchBytes, size)
		}
		watchTotal += int64(size)
	}
	if watchTotal != tr.watchTotal {
		t.Fatalf("%d watch bytes counted in all, %d held", tr.watchTotal, watchTotal)
	}
	for p, ids := range tr.watches {
		for id := range ids {
			if s := tr.sessions[id]; s == nil || s.watches[p] == 0 {
				t.Fatalf("index: session %d on %s has no such watch", id, p)
			}
		}
	}
	if recursive != tr.recursive {
		t.Fatalf("%d recursive watches counted, %d held", tr.recursive, recursive)
	}
	for p := range tr.containers {
		if tr.nodes[p] == nil {
			t.Fatalf("container %s missing", p)
		}
	}
	for p := range tr.ttls {
		if tr.nodes[p] == nil {
			t.Fatalf("TTL node %s missing", p)
		}
	}
}

func TestDeterminism(t *testing.T) {
	var snaps [][]byte
	var sums []uint64
	for range 2 {
		h := newHarness(t, Config{ExtendedTypes: true})
		sums = append(sums, randomOps(h, 1, 3000))
		checkInvariants(t, h.tr)
		snaps = append(snaps, h.tr.Snapshot())
	}
	if sums[0] != sums[1] {
		t.Fatal("two trees fed the same operations give different results or events")
	}
	if !bytes.Equal(snaps[0], snaps[1]) {
		t.Fatal("two trees fed the same operations give different snapshots")
	}
	tr, err := Restore(Config{ExtendedTypes: true}, snaps[0])
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, tr)
	if !bytes.Equal(tr.Snapshot(), snaps[0]) {
		t.Fatal("a restored tree's snapshot differs")
	}
}

// TestSnapshotHoldsEverything runs operations, snapshots, and runs more
// operations on the tree and on its restored copy: any state the
// snapshot left out would make them answer differently.
func TestSnapshotHoldsEverything(t *testing.T) {
	for seed := range uint64(20) {
		snapshotRoundTrip(t, seed, 400)
	}
}

func snapshotRoundTrip(t *testing.T, seed uint64, n int) {
	t.Helper()
	cfg := Config{ExtendedTypes: true}
	a := newHarness(t, cfg)
	randomOps(a, seed, n)
	checkInvariants(t, a.tr)
	tr, err := Restore(cfg, a.tr.Snapshot())
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	checkInvariants(t, tr)
	b := &harness{t: t, tr: tr, zxid: a.zxid, now: a.now}
	if randomOps(a, seed+1000, n) != randomOps(b, seed+1000, n) {
		t.Fatalf("seed %d: the restored tree answers differently", seed)
	}
	if !bytes.Equal(a.tr.Snapshot(), b.tr.Snapshot()) {
		t.Fatalf("seed %d: the restored tree ends in another state", seed)
	}
}

func TestRestoreRejects(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.session(5)
	h.create(s, "/a", "data", proto.ModeEphemeral)
	h.tr.Exists(s, "/w", true)
	good := h.tr.Snapshot()
	if _, err := Restore(Config{}, good); err != nil {
		t.Fatalf("Restore of a good snapshot: %v", err)
	}
	h.session(6)
	twoSessions := h.tr.Snapshot()
	mutate := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, c := range []struct {
		name string
		b    []byte
		cfg  Config
	}{
		{"empty", nil, Config{}},
		{"bad magic", mutate(func(b []byte) []byte { b[0] = 'x'; return b }), Config{}},
		{"truncated", good[:len(good)-1], Config{}},
		{"trailing byte", append(bytes.Clone(good), 0), Config{}},
		{"huge node count", mutate(func(b []byte) []byte { copy(b[16:], []byte{0xff, 0xff, 0xff, 0xff}); return b }), Config{}},
		{"data past the limit", good, Config{MaxDataSize: 3}},
		{"watches past the limit", good, Config{MaxWatchBytes: 1}},
		{"too many sessions", twoSessions, Config{MaxSessions: 1}},
		{"ephemeral of no session", mutate(func(b []byte) []byte {
			i := bytes.Index(b, []byte{0, 0, 0, 0, 0, 0, 0, 5}) // the owner of /a
			b[i+7] = 6
			return b
		}), Config{}},
		{"invalid path", mutate(func(b []byte) []byte { i := bytes.Index(b, []byte("/a")); b[i+1] = 0; return b }), Config{}},
	} {
		_, err := Restore(c.cfg, c.b)
		if !errors.Is(err, ErrSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrSnapshot", c.name, err)
		}
	}
}

// FuzzRestore feeds Restore arbitrary bytes, seeded with real snapshots:
// it must fail cleanly or give a sound tree whose snapshot is its input,
// or, for an input of version 1, a snapshot of the current version that
// restores to the same snapshot.
func FuzzRestore(f *testing.F) {
	f.Add(New(Config{}).Snapshot())
	for seed := range uint64(4) {
		h := newHarness(&testing.T{}, Config{ExtendedTypes: true})
		randomOps(h, seed, 200)
		f.Add(h.tr.Snapshot())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := Restore(Config{ExtendedTypes: true, MaxSessions: 64}, b)
		if err != nil {
			if !errors.Is(err, ErrSnapshot) {
				t.Fatalf("error %v does not wrap ErrSnapshot", err)
			}
			return
		}
		checkInvariants(t, tr)
		snap := tr.Snapshot()
		if b[len(snapshotMagic)] == snapshotVersion {
			if !bytes.Equal(snap, b) {
				t.Fatal("the restored tree's snapshot is not its input")
			}
		} else {
			again, err := Restore(Config{ExtendedTypes: true, MaxSessions: 64}, snap)
			if err != nil {
				t.Fatalf("the snapshot of a tree restored from version %d does not restore: %v", b[len(snapshotMagic)], err)
			}
			if !bytes.Equal(again.Snapshot(), snap) {
				t.Fatal("the snapshot of a tree restored from an older version changes when restored again")
			}
		}
		h := &harness{t: t, tr: tr, zxid: tr.LastZxid(), now: 1 << 40}
		randomOps(h, 7, 50)
		checkInvariants(t, tr)
	})
}

// FuzzOps runs seeded operations and checks the tree's invariants and
// that a snapshot taken midway restores to a tree that goes on the same.
func FuzzOps(f *testing.F) {
	for seed := range uint64(4) {
		f.Add(seed, uint16(100))
	}
	f.Fuzz(func(t *testing.T, seed uint64, n uint16) {
		snapshotRoundTrip(t, seed, int(n%1000))
	})
}

func Example() {
	tr := New(Config{})
	zxid := int64(0)
	write := func(session int64) Write {
		zxid++
		return Write{Session: session, Zxid: zxid, Time: 1_700_000_000_000 + zxid}
	}
	// Two clients; the second watches for the first's lock to go.
	timeout, _ := tr.CreateSession(write(1), HashPassword([]byte("secret-1")), 10000)
	tr.CreateSession(write(2), HashPassword([]byte("secret-2")), 10000)
	tr.Create(write(1), "/lock", nil, proto.OpenACL, proto.ModePersistent)
	mine, _, _, _ := tr.Create(write(1), "/lock/n-", nil, proto.OpenACL, proto.ModeEphemeralSequential)
	tr.Exists(2, mine, true)
	kids, _, _ := tr.GetChildren(2, "/lock", false)
	fmt.Println("timeout", timeout, "holder", mine, "children", kids)

	// The first client's session ends; its node goes and the watch fires.
	events, _ := tr.CloseSession(write(1))
	for _, e := range events {
		fmt.Printf("to session %d: event %d at %s\n", e.Session, e.Type, e.Path)
	}
	// Output:
	// timeout 10000 holder /lock/n-0000000000 children [n-0000000000]
	// to session 2: event 2 at /lock/n-0000000000
}

// TestSnapshotVersion1 restores a snapshot of version 1, which held
// sessions' passwords: the tree keeps their hashes, a reconnect with the
// password works, and the tree's snapshot is of version 2 without them.
// A version Restore does not know is refused, naming it.
func TestSnapshotVersion1(t *testing.T) {
	h := newHarness(t, Config{})
	a := h.session(1)
	h.create(a, "/e", "x", proto.ModeEphemeral)
	h.tr.sessions[a].passwdHash = []byte("plain-password")
	old := h.tr.encode(1)
	tr, err := Restore(Config{}, old)
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := tr.Session(a); !bytes.Equal(info.PasswordHash, HashPassword([]byte("plain-password"))) {
		t.Fatalf("password hash after restoring version 1: %x", info.PasswordHash)
	}
	if _, err := tr.Reconnect(a, HashPassword([]byte("plain-password")), 1000); err != nil {
		t.Fatalf("reconnect with the password: %v", err)
	}
	snap := tr.Snapshot()
	if snap[len(snapshotMagic)] != snapshotVersion || bytes.Contains(snap, []byte("plain-password")) {
		t.Fatalf("snapshot after restoring version 1: version %d, password held: %v", snap[len(snapshotMagic)], bytes.Contains(snap, []byte("plain-password")))
	}
	if _, err := Restore(Config{}, snap); err != nil {
		t.Fatal(err)
	}
	future := slices.Clone(snap)
	future[len(snapshotMagic)] = snapshotVersion + 1
	if _, err := Restore(Config{}, future); err == nil || !strings.Contains(err.Error(), "version 3") {
		t.Fatalf("restoring version 3: %v", err)
	}
	// A version 2 snapshot holds hashes, nothing else.
	h.tr.sessions[a].passwdHash = []byte("plain-password")
	if _, err := Restore(Config{}, h.tr.Snapshot()); err == nil {
		t.Fatal("restored a version 2 snapshot holding a password, not its hash")
	}
}
