package bft_test

import (
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/internal/simnet"
)

// On a network that is now and then slower than the request timeout (as
// an emulated CPU is than the defaults), the timeouts a view change
// doubled stay doubled for a while after requests execute again, so the
// cluster settles on a view instead of changing views at every slow
// request. With the timeouts back to their base at the first execution,
// this run changed views 214 times, and took 60% longer.
func TestSlowNetworkSettles(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 1, Seed: 37, Codec: true, Config: func(c *bft.Config) {
		c.RequestTicks = 6
		c.ViewChangeTicks = 6
	}})
	n.MaxDelay = 4 // a request takes about 10 ticks, often more than 6
	if !n.Load(400, 100000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	view := n.Replicas[0].Status().View
	t.Logf("400 requests in %d ticks, in view %d", n.Now, view)
	if view > 20 {
		t.Fatalf("the cluster changed views %d times in 400 requests", view)
	}
	checkSameOrder(t, n)
}
