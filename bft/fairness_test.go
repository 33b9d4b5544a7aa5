package bft_test

import (
	"testing"

	"github.com/rubin-go/rubin/internal/simnet"
)

// TestStarvedClient: the primary of view 0 never proposes one client's
// requests but keeps executing the other clients', who stay busy, so
// batches execute at nearly every tick. Each request a backup holds is
// timed on its own: once the starved client's request has waited
// RequestTicks the backups replace the primary, and the client
// completes. A timer that restarts whenever any batch executes never
// fires here, and the client waits forever.
func TestStarvedClient(t *testing.T) {
	const starved = 2 // client 3's index
	for seed := uint64(90); seed < 93; seed++ {
		n := newNet(t, simnet.Options{Clients: 3, Seed: seed, Config: smallCfg, Codec: true})
		n.Starve(0, starved+1)
		for k := 0; k < 2000 && len(n.Results[starved]) < 3; k++ {
			n.Load(1<<30, 1, op)
		}
		if err := n.CheckAgreement(); err != nil {
			t.Fatal(err)
		}
		if len(n.Results[starved]) < 3 {
			t.Fatalf("seed %d: starved client completed %d requests in %d ticks, the others %d and %d\n%s",
				seed, len(n.Results[starved]), n.Now, len(n.Results[0]), len(n.Results[1]), n.Report())
		}
		for i := 1; i < n.N; i++ {
			if s := n.Replicas[i].Status(); s.View == 0 {
				t.Fatalf("seed %d: replica %d still in view 0: %+v", seed, i, s)
			}
		}
		t.Logf("seed %d: the starved client done at tick %d (the others: %d and %d results), view %d",
			seed, n.Now, len(n.Results[0]), len(n.Results[1]), n.Replicas[1].Status().View)
	}
}
