package bft_test

import (
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

// TestTimeoutsBackOffOnSlowLinks: messages take up to four request
// timeouts to arrive, so the first views time out before they execute
// anything. The timeouts must double with every view change that brings
// no execution, and keep doubling after a view is entered, until they
// outlast the delays; requests then complete. Resetting them on entering
// a view (rather than on executing) changes views forever.
func TestTimeoutsBackOffOnSlowLinks(t *testing.T) {
	cfg := func(c *bft.Config) {
		smallCfg(c)
		c.RequestTicks, c.ViewChangeTicks = 10, 10
	}
	for seed := uint64(70); seed < 73; seed++ {
		n := newNet(t, simnet.Options{Clients: 2, Seed: seed, Config: cfg})
		n.MaxDelay = 40
		if !n.Load(6, 200000, op) {
			t.Fatalf("seed %d: requests did not complete: %v; replica 1: %+v", seed, n.LastErrors, n.Replicas[1].Status())
		}
		checkSameOrder(t, n)
		// With the delays above, 20-odd doublings at most; without the
		// back-off held until execution, thousands of view changes.
		if vcs := n.Replicas[1].Status().ViewChanges; vcs > 100 {
			t.Errorf("seed %d: %d view changes before requests completed", seed, vcs)
		}
	}
}
