package coord_test

import (
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
)

func ids(first, last int) []bft.ClientID {
	var s []bft.ClientID
	for i := first; i <= last; i++ {
		s = append(s, bft.ClientID(i))
	}
	return s
}

func (h *harness) claim(gateway, holder int64, idents []bft.ClientID) coord.ClaimResult {
	h.t.Helper()
	r, err := coord.ParseClaimResult(h.exec(coord.ClaimOp(gateway, holder, idents)))
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

// TestClaims: a gateway's ID and identities are its own while it renews
// its claim; another holder is refused them, by ID or by any identity in
// common, until the claim lapses; a read-only claim records nothing; the
// claims survive a snapshot.
func TestClaims(t *testing.T) {
	h := newHarness(t, 2)
	if r := h.claim(0, 111, ids(0, 31)); r.Status != coord.StatusOK {
		t.Fatalf("first claim: %+v", r)
	}
	renewed := h.now.UnixMilli()
	h.advance(time.Second)
	for _, c := range []struct {
		gateway int64
		idents  []bft.ClientID
	}{{0, ids(32, 63)}, {5, ids(31, 40)}, {9, []bft.ClientID{0}}, {0, nil}} {
		r := h.claim(c.gateway, 222, c.idents)
		if r.Status != coord.StatusHeld || r.Gateway != 0 || r.Holder != 111 || r.Renewed != renewed {
			t.Fatalf("claim of gateway %d %v by another holder: %+v", c.gateway, c.idents, r)
		}
	}
	// Disjoint: a second gateway.
	if r := h.claim(32, 222, ids(32, 63)); r.Status != coord.StatusOK {
		t.Fatalf("a disjoint claim: %+v", r)
	}
	// Holder 0 only asks.
	if r := h.claim(70, 0, ids(70, 71)); r.Status != coord.StatusOK {
		t.Fatalf("a question: %+v", r)
	}
	if r := h.claim(70, 444, ids(70, 71)); r.Status != coord.StatusOK {
		t.Fatalf("a claim after a question: %+v", r)
	}
	// The holder renews; its renewals keep it past the lease.
	for range 10 {
		h.advance(time.Second)
		if r := h.claim(0, 111, ids(0, 31)); r.Status != coord.StatusOK {
			t.Fatalf("renewal: %+v", r)
		}
	}
	// Read-only, another holder is refused, a lapsed claim too (its
	// renewal time tells); a free claim records nothing.
	q := h.apps[0].Query(bft.QueryContext{Time: h.now}, coord.ClaimOp(0, 333, nil))
	if r, err := coord.ParseClaimResult(q); err != nil || r.Status != coord.StatusHeld || r.Holder != 111 {
		t.Fatalf("read-only claim of a held ID: %+v %v", r, err)
	}
	q = h.apps[0].Query(bft.QueryContext{Time: h.now}, coord.ClaimOp(77, 333, ids(100, 101)))
	if r, err := coord.ParseClaimResult(q); err != nil || r.Status != coord.StatusOK {
		t.Fatalf("read-only claim of a free ID: %+v %v", r, err)
	}

	h.addRestored()
	if r := h.claim(77, 333, ids(100, 101)); r.Status != coord.StatusOK {
		t.Fatalf("claim of an ID the read-only claim asked about: %+v", r)
	}

	// Gateway 0 stops renewing: after the lease (5s) another may take
	// its ID and identities, and gateway 0's next renewal is refused.
	h.advance(4 * time.Second)
	if r := h.claim(0, 333, ids(0, 31)); r.Status != coord.StatusHeld {
		t.Fatalf("claim within the lease: %+v", r)
	}
	h.advance(1100 * time.Millisecond)
	// Read-only, the lapsed claim still shows, with its renewal time.
	q = h.apps[0].Query(bft.QueryContext{Time: h.now}, coord.ClaimOp(0, 333, nil))
	if r, err := coord.ParseClaimResult(q); err != nil || r.Status != coord.StatusHeld || r.Holder != 111 || h.now.UnixMilli()-r.Renewed < 5000 {
		t.Fatalf("read-only claim of a lapsed claim: %+v %v", r, err)
	}
	if r := h.claim(0, 333, ids(0, 31)); r.Status != coord.StatusOK {
		t.Fatalf("claim after the lease: %+v", r)
	}
	if r := h.claim(0, 111, ids(0, 31)); r.Status != coord.StatusHeld || r.Holder != 333 {
		t.Fatalf("the old holder's renewal: %+v", r)
	}
}
