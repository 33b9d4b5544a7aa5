package bft_test

import (
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

func TestPartitionedReplicaCatchesUp(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 20, Config: smallCfg})
	if !n.Load(5, 2000, op) {
		t.Fatal("not finished")
	}
	cut := bft.ToReplica(3)
	n.Block = func(from, to bft.Target) bool { return from == cut || to == cut }
	if !n.Load(60, 5000, op) {
		t.Fatalf("not finished with replica 3 cut off: %v", n.LastErrors)
	}
	behind := n.Replicas[3].Status().LastExecuted
	n.Block = nil
	if !n.Load(100, 10000, op) {
		t.Fatalf("not finished after healing: %v", n.LastErrors)
	}
	s := n.Replicas[3].Status()
	ref := n.Replicas[1].Status()
	if s.StateTransfers == 0 || s.LastExecuted <= behind || ref.Stable > s.LastExecuted {
		t.Fatalf("replica 3 did not catch up: %+v (others %+v, was at %d)", s, ref, behind)
	}
	checkSameOrder(t, n)
	// Let it run quiet, then it must be at the same state as the others.
	n.Run(200, func() bool { return false })
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
	if n.Apps[3].Hash != n.Apps[1].Hash && n.Replicas[3].Status().LastExecuted == n.Replicas[1].Status().LastExecuted {
		t.Fatal("same seq, different state")
	}
}

func TestRestartedReplicaCatchesUp(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 21, Config: smallCfg})
	if !n.Load(30, 5000, op) {
		t.Fatal("not finished")
	}
	n.Crashed[3] = true
	if !n.Load(40, 5000, op) {
		t.Fatal("not finished with replica 3 down")
	}
	if err := n.Restart(3); err != nil {
		t.Fatal(err)
	}
	if !n.Load(80, 10000, op) {
		t.Fatalf("not finished after restart: %v", n.LastErrors)
	}
	s := n.Replicas[3].Status()
	if s.StateTransfers == 0 || s.LastExecuted < n.Replicas[1].Status().Stable {
		t.Fatalf("restarted replica did not catch up: %+v", s)
	}
	checkSameOrder(t, n)
	// It takes part again: with another replica down, the cluster needs it.
	n.Crashed[2] = true
	if !n.Load(100, 10000, op) {
		t.Fatalf("not finished with the restarted replica needed: %v %+v", n.LastErrors, n.Replicas[3].Status())
	}
	checkSameOrder(t, n)
}

// A replica restarted empty after the cluster changed view must learn the
// view (from a new view fetched with proof) and take part in it.
func TestRestartedReplicaLearnsView(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 22, Config: smallCfg})
	if !n.Load(10, 2000, op) {
		t.Fatal("not finished")
	}
	n.Crashed[0] = true
	if !n.Load(30, 10000, op) {
		t.Fatal("no view change")
	}
	view := n.Replicas[1].Status().View
	if err := n.Restart(0); err != nil {
		t.Fatal(err)
	}
	if !n.Load(60, 10000, op) {
		t.Fatal("not finished after restart")
	}
	s := n.Replicas[0].Status()
	if s.View < view || s.ViewChanging || s.LastExecuted == 0 {
		t.Fatalf("restarted replica: %+v, cluster view %d", s, view)
	}
	n.Crashed[3] = true
	if !n.Load(80, 20000, op) {
		t.Fatalf("not finished with the restarted replica needed: %v %+v", n.LastErrors, n.Replicas[0].Status())
	}
	checkSameOrder(t, n)
}
