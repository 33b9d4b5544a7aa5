package bft_test

import (
	"encoding/binary"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/wire"
	"github.com/rubin-go/rubin/internal/simnet"
)

// A view change over full batches: 18 clients send 1 MiB operations (one
// full batch each, MaxBatchBytes), nothing commits in view 0 (no commit
// is delivered) and replica 3 gets none of view 0's pre-prepares, so
// replicas 0, 1 and 2 each have 18 prepared batches, 18 MiB in all,
// when the view changes. A view change that carried its batches
// would exceed the 16 MiB frame limit and never arrive; with digests it
// stays small, and replica 3, which holds none of the batches, fetches
// them from the replicas that vouched for them before it executes.
func TestViewChangeWithLargeBatches(t *testing.T) {
	const clients, opSize = 18, 1 << 20
	n := newNet(t, simnet.Options{Clients: clients, Seed: 91, Codec: true,
		Config: func(c *bft.Config) { c.MaxOpSize, c.MaxPendingBytes = opSize, 2*clients*opSize }})
	big := func(c, k int) []byte {
		b := make([]byte, opSize)
		binary.BigEndian.PutUint64(b, uint64(c)<<32|uint64(k))
		return b
	}
	r3 := bft.ToReplica(3)
	var maxVC, maxNV int
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		switch m := m.(type) {
		case *bft.Commit:
			return m.View == 0
		case *bft.PrePrepare:
			return m.View == 0 && to == r3
		case *bft.ViewChange:
			maxVC = max(maxVC, len(wire.Append(nil, m)))
		case *bft.NewView:
			maxNV = max(maxNV, len(wire.Append(nil, m)))
		}
		return false
	}
	if !n.Load(1, 3000, big) {
		t.Fatalf("the requests did not complete: %v\n%s", n.LastErrors, n.Report())
	}
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
	if n.CodecErrors != 0 {
		t.Fatalf("%d messages failed the codec", n.CodecErrors)
	}
	// Replica 3 was not needed for the replies; it catches up.
	n.Run(1000, func() bool { return n.Replicas[3].Status().LastExecuted >= clients })
	s := n.Replicas[3].Status()
	t.Logf("largest view change %d bytes, largest new view %d bytes; replica 3 sent %d batch fetches: %+v", maxVC, maxNV, s.BatchFetches, s)
	if s.View == 0 || s.BatchFetches < clients || s.LastExecuted < clients {
		t.Fatalf("replica 3 did not enter a new view and fetch and execute the batches: %+v", s)
	}
	if maxVC == 0 || maxVC > 16<<10 || maxNV > 64<<10 {
		t.Fatalf("view change of %d bytes, new view of %d: they should carry digests only", maxVC, maxNV)
	}
}

// A replica that lacks the batches of a new view fetches them from the
// replicas that vouched for them, and one of those lies: it answers with
// requests that do not match the digest. The answers are rejected and the
// fetch moves on to another replica, so the replica still executes every
// batch, and no forged request executes.
func TestBatchFetchFromLiar(t *testing.T) {
	const clients = 6
	n := newNet(t, simnet.Options{Clients: clients, Seed: 92, Codec: true, Config: func(c *bft.Config) {
		smallCfg(c)
		c.MaxBatch, c.MaxPending = 1, 2*clients // a slot per request, so every voucher is asked first for some
	}})
	n.MakeByzantine(0, simnet.ForgeBatches())
	r3 := bft.ToReplica(3)
	// In view 0 nothing commits and replica 3 gets no pre-prepare.
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		switch m := m.(type) {
		case *bft.Commit:
			return m.View == 0
		case *bft.PrePrepare:
			return m.View == 0 && to == r3
		}
		return false
	}
	if !n.Load(1, 3000, op) {
		t.Fatalf("the requests did not complete: %v\n%s", n.LastErrors, n.Report())
	}
	n.Run(1000, func() bool { return n.Replicas[3].Status().LastExecuted >= clients })
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
	s := n.Replicas[3].Status()
	if s.View == 0 || s.LastExecuted < clients || s.BatchFetches == 0 {
		t.Fatalf("replica 3 did not fetch around the liar and execute: %+v\n%s", s, n.Report())
	}
	if n.Errors[bft.ErrForged] == 0 {
		t.Fatal("no forged batch was rejected")
	}
	for _, c := range n.Executed[3] {
		for _, r := range c.Batch {
			if string(r.Op) == "evil" {
				t.Fatal("a forged request executed")
			}
		}
	}
}
