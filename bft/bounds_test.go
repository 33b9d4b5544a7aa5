package bft_test

import (
	"errors"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

// TestForgedNewViewNotRecorded: a Byzantine replica forwards new views
// for far-future views in the names of two other primaries, with bad
// signatures. They are rejected, and the replica must not believe f+1
// peers are ahead of it: recording their claimed views before checking
// them would leave it fetching state from everyone forever, since no
// replica ever reaches those views.
func TestForgedNewViewNotRecorded(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 1, Seed: 50, Config: smallCfg})
	if !n.Load(3, 200, op) {
		t.Fatal("requests did not complete")
	}
	r := n.Replicas[1]
	before := r.Status().Fetches
	for _, v := range []uint64{1000, 1002} { // primaries 0 and 2
		nv := &bft.NewView{View: v, Replica: bft.ReplicaID(v % 4), Sig: []byte("forged")}
		if err := r.Step(bft.ToReplica(3), nv); !errors.Is(err, bft.ErrForged) && !errors.Is(err, bft.ErrInvalid) {
			t.Fatalf("forged new view %d: %v", v, err)
		}
	}
	for k := 0; k < 100; k++ {
		n.Tick()
	}
	if s := r.Status(); s.Fetches != before || s.View != 0 {
		t.Fatalf("forged new views made the replica fetch %d times: %+v", s.Fetches-before, s)
	}
	if !n.Load(6, 200, op) {
		t.Fatal("requests did not complete after the forged new views")
	}
}

// TestPendingOrderBounded: a backup holds a request that never executes
// (its authenticator is valid at that backup only, so no primary
// proposes it), while correct clients, retransmitting to every replica,
// pass thousands of requests through its pending queue. The queue's
// arrival order must stay proportional to what it holds; compacted only
// where the primary collects a batch, it grew by every request a backup
// ever held.
func TestPendingOrderBounded(t *testing.T) {
	cfg := func(c *bft.Config) {
		smallCfg(c)
		c.RequestTicks = 1 << 20 // the stuck request must not change the view
	}
	n := newNet(t, simnet.Options{Clients: 3, Seed: 51, Config: cfg,
		ClientConfig: func(c *bft.ClientConfig) { c.RetransmitTicks = 1 }})
	n.MaxDelay = 2
	stuck := &bft.Request{Client: 9, Timestamp: 1, Op: []byte("stuck")}
	n.SignRequest(stuck)
	ms := n.MACSize()
	for _, i := range []int{0, 2, 3} {
		stuck.Auth[i*ms] ^= 0xff
	}
	if err := n.Replicas[1].Step(bft.ToClient(9), stuck); err != nil {
		t.Fatal(err)
	}
	worst := 0
	for k := 0; k < 3000 && len(n.Results[0]) < 300; k++ {
		n.Load(1<<30, 1, op)
		worst = max(worst, n.Replicas[1].Status().PendingBytes)
	}
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
	s := n.Replicas[1].Status()
	if len(n.Results[0]) < 300 || s.Pending == 0 {
		t.Fatalf("%d results, backup holds %d requests\n%s", len(n.Results[0]), s.Pending, n.Report())
	}
	// A handful of requests held at once: the order has at most 65 keys.
	if worst > 8<<10 {
		t.Fatalf("backup's pending queue reached %d bytes (now %+v)", worst, s)
	}
	t.Logf("%d requests executed; backup's pending queue at most %d bytes", s.LastExecuted, worst)
}

// TestFloodingClientRefused: a Byzantine client with valid
// authenticators sends 40 requests per tick to every replica. A replica
// holds at most MaxPendingPerClient of them (each newer one replaces the
// oldest), the pending queues stay within MaxPending and
// MaxPendingBytes, and the correct clients keep completing. Without a
// per-client quota the flood fills MaxPending and the correct clients'
// requests are refused (ErrFull) nearly always.
func TestFloodingClientRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxBytes int // MaxPendingBytes; 0: the default
		size     int // the flood's op size
	}{
		{"count", 0, 16},
		{"bytes", 3 << 10, 900},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := func(c *bft.Config) {
				smallCfg(c)
				c.MaxBatch, c.MaxPending, c.MaxPendingBytes = 8, 32, tc.maxBytes
				c.MaxPendingPerClient = 4
			}
			n := newNet(t, simnet.Options{Clients: 3, Seed: 52, Config: cfg, Codec: true})
			n.MaxDelay = 2 // requests pend across ticks
			n.AddClientAttack(&simnet.ClientAttack{ID: 4, Flood: 40, FloodSize: tc.size})
			worst, worstN := 0, 0
			lat, err := n.LoadLive(20, 100, op)
			if err != nil {
				t.Fatalf("%v\n%s", err, n.Report())
			}
			for range 200 {
				n.Load(1<<30, 1, op)
				for _, r := range n.Replicas {
					s := r.Status()
					worst, worstN = max(worst, s.PendingBytes), max(worstN, s.Pending)
				}
			}
			if err := n.CheckAgreement(); err != nil {
				t.Fatal(err)
			}
			limit := 32 * (8 << 10) // the bytes the count bound allows here
			if tc.maxBytes > 0 {
				limit = tc.maxBytes
			}
			// The flood's quota, and a request or two of each correct
			// client.
			if worst > limit+65*16 || worstN > 4+3*2 {
				t.Fatalf("pending reached %d requests, %d bytes (bound %d)", worstN, worst, limit)
			}
			t.Logf("worst latency %d ticks; pending at most %d requests, %d bytes; %d refused", lat, worstN, worst, n.Errors[bft.ErrFull])
		})
	}
}

// TestFutureViewBufferBounded: Byzantine replica 3, primary of view 3,
// sends replica 1 pre-prepares for view 3 (ahead of it) with full 1 MiB
// batches, first with digests that do not match their batches, then
// valid ones for every sequence number of the window; replica 2 sends
// prepares for view 5 in replica 3's name. Nothing forged is buffered,
// what is buffered stays
// within MaxFutureBytes per sender, and the correct clients keep
// completing. Buffered before any check and bounded only by count (3L+8
// per sender), these held 56 MiB here and about 12 GiB at L = 256 with
// 16 MiB frames.
func TestFutureViewBufferBounded(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 53, Config: smallCfg})
	if !n.Load(2, 200, op) {
		t.Fatal("requests did not complete")
	}
	r := n.Replicas[1]
	big := make([]byte, 64<<10)
	batch := make([]bft.Request, 16) // 16 * 64 KiB = MaxBatchBytes
	for i := range batch {
		batch[i] = bft.Request{Client: 1, Timestamp: uint64(100 + i), Op: big}
		n.SignRequest(&batch[i])
	}
	digest := bft.BatchDigest(0, batch)
	for seq := uint64(3); seq < 200; seq++ {
		pp := &bft.PrePrepare{View: 3, Seq: seq, Time: 1, Digest: digest, Batch: batch}
		if err := r.Step(bft.ToReplica(3), pp); !errors.Is(err, bft.ErrForged) {
			t.Fatalf("forged pre-prepare for view 3 seq %d: %v", seq, err)
		}
		p := &bft.Prepare{View: 5, Seq: seq, Digest: digest, Replica: 3}
		if err := r.Step(bft.ToReplica(2), p); !errors.Is(err, bft.ErrForged) {
			t.Fatalf("forged prepare for view 5 seq %d: %v", seq, err)
		}
	}
	if s := r.Status(); s.Buffered != 0 {
		t.Fatalf("forged future-view messages buffered: %+v", s)
	}
	full := 0
	for seq := uint64(3); seq < 200; seq++ {
		pp := &bft.PrePrepare{View: 3, Seq: seq, Digest: digest, Batch: batch}
		if err := r.Step(bft.ToReplica(3), pp); errors.Is(err, bft.ErrFull) {
			full++
		} else if err != nil {
			t.Fatalf("pre-prepare for view 3 seq %d: %v", seq, err)
		}
	}
	s := r.Status()
	limit := 2 * (1 << 20) // the default MaxFutureBytes
	if s.BufferedBytes > limit || s.BufferedBytes < (1<<20) || full == 0 {
		t.Fatalf("%d future-view bytes buffered (bound %d), %d refused: %+v", s.BufferedBytes, limit, full, s)
	}
	if !n.Load(6, 300, op) {
		t.Fatalf("requests did not complete\n%s", n.Report())
	}
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d future-view bytes buffered, %d pre-prepares refused", s.BufferedBytes, full)
}
