package bft_test

import (
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

func TestBatching(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 40, Seed: 2, Config: func(c *bft.Config) { c.MaxBatch = 8 }})
	if !n.Load(10, 3000, op) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	checkSameOrder(t, n)
	reqs, multi := 0, 0
	for _, c := range n.Executed[0] {
		if len(c.Batch) > 8 {
			t.Fatalf("batch of %d requests exceeds MaxBatch", len(c.Batch))
		}
		if len(c.Batch) > 1 {
			multi++
		}
		reqs += len(c.Batch)
	}
	if reqs != 400 {
		t.Fatalf("executed %d requests, want 400", reqs)
	}
	if len(n.Executed[0]) >= reqs/2 || multi == 0 {
		t.Fatalf("%d batches for %d requests: not batching", len(n.Executed[0]), reqs)
	}
}

func TestBatchBytes(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 20, Seed: 3, Config: func(c *bft.Config) {
		c.MaxBatchBytes = 100
		c.MaxOpSize = 40
	}})
	big := func(c, k int) []byte { return make([]byte, 30) }
	if !n.Load(5, 3000, big) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	for _, c := range n.Executed[0] {
		if len(c.Batch) > 3 {
			t.Fatalf("batch of %d 30-byte ops exceeds 100 bytes", len(c.Batch))
		}
	}
}

func TestCheckpointsBoundMemory(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 4, Seed: 4, Config: smallCfg})
	maxLog, maxCk, maxSeqs := 0, 0, 0
	var lastStable uint64
	ok := n.Load(1250, 20000, func(c, k int) []byte {
		for _, r := range n.Replicas {
			s := r.Status()
			maxLog = max(maxLog, s.LogEntries)
			maxCk = max(maxCk, s.Checkpoints)
			maxSeqs = max(maxSeqs, s.CheckpointSeqs)
			if s.Stable < lastStable-min(lastStable, 16) {
				t.Fatalf("stable went back")
			}
		}
		lastStable = n.Replicas[0].Status().Stable
		return op(c, k)
	})
	if !ok {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	checkSameOrder(t, n)
	for i, r := range n.Replicas {
		s := r.Status()
		if s.Stable == 0 || s.Stable%8 != 0 || s.LastExecuted-s.Stable > 16 {
			t.Fatalf("replica %d: stable %d, executed %d", i, s.Stable, s.LastExecuted)
		}
		if n.Apps[i].Count != 5000 {
			t.Fatalf("replica %d executed %d ops", i, n.Apps[i].Count)
		}
	}
	if maxLog > 2*16 || maxCk > 16/8+2 || maxSeqs > 16/8+3 {
		t.Fatalf("memory not bounded: log %d, checkpoints %d, checkpoint seqs %d", maxLog, maxCk, maxSeqs)
	}
}
