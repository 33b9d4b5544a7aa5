package tree

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/rubin-go/rubin/coord/proto"
)

// A harness drives a tree the way a replicated application does: every
// write takes the next zxid and the current agreed time.
type harness struct {
	t    *testing.T
	tr   *Tree
	zxid int64
	now  int64
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	return &harness{t: t, tr: New(cfg), now: 1_000_000}
}

// w returns the next write of session.
func (h *harness) w(session int64) Write {
	h.zxid++
	return Write{Session: session, Zxid: h.zxid, Time: h.now}
}

// session opens session id with the default timeout request of 30 s.
func (h *harness) session(id int64) int64 {
	h.t.Helper()
	if _, err := h.tr.CreateSession(h.w(id), HashPassword([]byte("password")), 30000); err != nil {
		h.t.Fatalf("CreateSession(%#x): %v", id, err)
	}
	return id
}

// create makes a node with the open ACL and fails the test on error.
func (h *harness) create(s int64, path string, data string, mode proto.CreateMode) string {
	h.t.Helper()
	p, _, _, err := h.tr.Create(h.w(s), path, []byte(data), proto.OpenACL, mode)
	if err != nil {
		h.t.Fatalf("Create(%q, %v): %v", path, mode, err)
	}
	return p
}

// stat returns the Stat of path and fails the test if it has none.
func (h *harness) stat(s int64, path string) proto.Stat {
	h.t.Helper()
	st, err := h.tr.Exists(s, path, false)
	if err != nil {
		h.t.Fatalf("Exists(%q): %v", path, err)
	}
	return st
}

// wantCode fails the test unless err is code (nil for CodeOK).
func wantCode(t *testing.T, what string, err error, code proto.Code) {
	t.Helper()
	if code == proto.CodeOK {
		if err != nil {
			t.Errorf("%s: %v, want success", what, err)
		}
		return
	}
	var got proto.Code
	if !errors.As(err, &got) || got != code {
		t.Errorf("%s: error %v, want %v (%d)", what, err, code, int32(code))
	}
}

// wantEvents fails the test unless got is want, in order.
func wantEvents(t *testing.T, what string, got []Event, want ...Event) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: events\n  %v\nwant\n  %v", what, got, want)
	}
}

func ev(s int64, typ proto.EventType, path string) Event {
	return Event{Session: s, Type: typ, Path: path}
}

// dump describes everything the tree holds but the last zxid, so that
// tests can tell whether a call changed it.
func dump(tr *Tree) string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(tr.nodes)) {
		n := tr.nodes[p]
		fmt.Fprintf(&b, "%s %q %v %+v %v\n", p, n.data, n.acl, n.stat, sortedChildren(n))
	}
	for _, id := range tr.Sessions() {
		s := tr.sessions[id]
		fmt.Fprintf(&b, "session %d %d %v %v %v\n", id, s.deadline, s.auth, s.ephemerals, s.watches)
	}
	fmt.Fprintf(&b, "%v %v %v %d\n", tr.watches, tr.containers, tr.ttls, tr.recursive)
	return b.String()
}
