package bft_test

import (
	"flag"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

var seeds = flag.Int("bft.seeds", 6, "seeds for TestRandomFaults")

// Loss, duplication, delay and reordering throughout, with a crash of the
// primary, a partitioned backup that heals, and a restart.
func TestRandomFaults(t *testing.T) {
	for seed := uint64(100); seed < 100+uint64(*seeds); seed++ {
		n := newNet(t, simnet.Options{Clients: 5, Seed: seed, Config: smallCfg})
		n.DropRate, n.DupRate, n.MaxDelay, n.Reorder = 0.03, 0.05, 3, true
		step := func(total int, what string) {
			t.Helper()
			if !n.Load(total, 40000, op) {
				for i, r := range n.Replicas {
					t.Logf("replica %d: %+v", i, r.Status())
				}
				t.Fatalf("seed %d: %s: not finished: %v", seed, what, n.LastErrors)
			}
			if err := n.CheckAgreement(); err != nil {
				t.Fatalf("seed %d: %s: %v", seed, what, err)
			}
		}
		step(20, "start")
		cut := bft.ToReplica(2)
		n.Block = func(from, to bft.Target) bool { return from == cut || to == cut }
		step(40, "replica 2 cut off")
		n.Block = nil
		step(60, "healed")
		n.Crashed[0] = true
		step(80, "primary 0 crashed")
		if err := n.Restart(0); err != nil {
			t.Fatal(err)
		}
		step(110, "replica 0 restarted")
		n.Crashed[1] = true
		step(130, "replica 1 crashed")
	}
}
