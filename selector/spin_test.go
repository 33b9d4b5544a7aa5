//go:build linux

package selector

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestSpinnerFixed(t *testing.T) {
	for _, c := range []struct {
		fixed, want time.Duration
	}{{NoSpin, 0}, {50 * time.Microsecond, 50 * time.Microsecond}} {
		sp := newSpinner(c.fixed, DefaultMaxSpin)
		for range 2 * spinHistory {
			sp.record(10 * time.Second)
			if got := sp.budget(true); got != c.want {
				t.Fatalf("SpinBudget %v: budget %v after long waits; want %v", c.fixed, got, c.want)
			}
		}
		if got := sp.budget(false); got != c.want {
			t.Errorf("SpinBudget %v: budget %v without pollers; want %v", c.fixed, got, c.want)
		}
	}
}

func TestSpinnerLearns(t *testing.T) {
	const limit = 200 * time.Microsecond
	sp := newSpinner(0, limit)
	if got := sp.budget(true); got != limit {
		t.Errorf("budget %v before any wait; want the cap %v", got, limit)
	}
	if got := sp.budget(false); got != 0 {
		t.Errorf("budget %v without pollers; want 0", got)
	}
	for range spinHistory {
		sp.record(40 * time.Microsecond)
	}
	if got := sp.budget(true); got < 40*time.Microsecond || got > limit {
		t.Errorf("budget %v after waits of 40us; want at least 40us, at most %v", got, limit)
	}
	for range spinHistory {
		sp.record(time.Second)
	}
	if got := sp.budget(true); got != 0 {
		t.Errorf("budget %v after waits of 1s with a cap of %v; want 0", got, limit)
	}
	// One short wait among long ones is not worth spinning for; a
	// majority of short waits is, up to the longest of them.
	sp.record(30 * time.Microsecond)
	if got := sp.budget(true); got != 0 {
		t.Errorf("budget %v after one short wait among long ones; want 0", got)
	}
	for range spinHistory/2 + 1 {
		sp.record(100 * time.Microsecond)
	}
	if got := sp.budget(true); got < 100*time.Microsecond {
		t.Errorf("budget %v after a majority of 100us waits; want at least 100us", got)
	}
}

// TestSpinnerBounded is a property: whatever the waits, the adaptive
// budget stays within [0, cap], and when every recent wait was under the
// cap it is at least the longest of them.
func TestSpinnerBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		limit := time.Duration(1+rng.IntN(2000)) * time.Microsecond
		sp := newSpinner(0, limit)
		var recent []time.Duration
		for range 3 * spinHistory {
			w := time.Duration(rng.Int64N(int64(3 * limit)))
			sp.record(w)
			recent = append(recent, w)
			if len(recent) > spinHistory {
				recent = recent[1:]
			}
			got := sp.budget(true)
			if got < 0 || got > limit {
				t.Fatalf("trial %d: budget %v outside [0, %v]", trial, got, limit)
			}
			longest, under := time.Duration(0), true
			for _, r := range recent {
				longest = max(longest, r)
				under = under && r <= limit
			}
			if len(recent) >= spinHistory/4 && under && got < longest {
				t.Fatalf("trial %d: budget %v below the longest recent wait %v, all under the cap %v", trial, got, longest, limit)
			}
		}
	}
}

// TestSpinnerProbes: a budget that fell to zero does not stay there for
// good. A wait that sleeps includes the wake-up, which can itself exceed
// the cap (a millisecond on an emulated machine), so waits measured while
// sleeping are no evidence that spinning would not pay. Every so often the
// spinner spins to the cap; if that catches the event, it learns afresh.
func TestSpinnerProbes(t *testing.T) {
	const limit = 200 * time.Microsecond
	sp := newSpinner(0, limit)
	for range spinHistory {
		sp.record(time.Millisecond) // slept: the wake-up alone took this
	}
	if got := sp.budget(true); got != 0 {
		t.Fatalf("budget %v after waits longer than the cap; want 0", got)
	}
	probed := 0
	for i := range 4 * spinHistory {
		if sp.budget(true) == limit {
			probed = i + 1
			break
		}
		sp.record(time.Millisecond)
	}
	if probed == 0 {
		t.Fatalf("no wait out of %d spun to the cap after the budget fell to zero", 4*spinHistory)
	}
	sp.record(time.Millisecond) // the probe caught nothing
	if got := sp.budget(true); got != 0 {
		t.Fatalf("budget %v after a probe that caught nothing; want 0", got)
	}
	for sp.budget(true) != limit {
		sp.record(time.Millisecond)
	}
	sp.record(40 * time.Microsecond) // the probe caught the event
	for i := range 2 * spinHistory {
		if got := sp.budget(true); got < 40*time.Microsecond {
			t.Fatalf("wait %d after a probe that caught a 40us wait: budget %v; want at least 40us", i, got)
		}
		sp.record(40 * time.Microsecond)
	}
	t.Logf("probed after %d waits", probed)
}
