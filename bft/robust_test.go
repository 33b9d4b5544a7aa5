package bft_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

func TestForgedSenderRejected(t *testing.T) {
	n := newNet(t, simnet.Options{Seed: 30})
	r := n.Replicas[1]
	p := &bft.Prepare{View: 0, Seq: 1, Replica: 2}
	if err := r.Step(bft.ToReplica(3), p); !errors.Is(err, bft.ErrForged) {
		t.Fatalf("prepare claiming 2 from 3: %v", err)
	}
	// A pre-prepare from a replica that is not the primary.
	pp := &bft.PrePrepare{View: 0, Seq: 1, Time: uint64(n.Clock(0).UnixNano()), Batch: []bft.Request{{Client: 1, Timestamp: 9}}}
	n.Keys.SignRequest(&pp.Batch[0])
	pp.Digest = bft.BatchDigest(pp.Time, pp.Batch)
	if err := r.Step(bft.ToReplica(2), pp); !errors.Is(err, bft.ErrForged) {
		t.Fatalf("pre-prepare from a backup: %v", err)
	}
	// A request of client 1, relayed by client 2's link, with an
	// authenticator client 1 did not make. (A client link may carry other
	// clients' requests: only the authenticator proves the client.)
	req := &bft.Request{Client: 1, Timestamp: 1, Op: []byte("x")}
	n.Keys.SignRequest(req)
	bad := *req
	bad.Auth = append([]byte(nil), req.Auth...)
	bad.Auth[32*1] ^= 1
	if err := r.Step(bft.ToClient(2), &bad); !errors.Is(err, bft.ErrForged) {
		t.Fatalf("request of client 1 with a bad authenticator from client 2: %v", err)
	}
	// A pre-prepare holding a request whose authenticator is bad for
	// this replica.
	req.Auth[32*1] ^= 1
	pp = &bft.PrePrepare{View: 0, Seq: 1, Time: uint64(n.Clock(0).UnixNano()), Batch: []bft.Request{*req}}
	pp.Digest = bft.BatchDigest(pp.Time, pp.Batch)
	if err := r.Step(bft.ToReplica(0), pp); !errors.Is(err, bft.ErrForged) {
		t.Fatalf("pre-prepare with a forged request: %v", err)
	}
	// Digest mismatch.
	pp.Batch[0].Op = []byte("y")
	if err := r.Step(bft.ToReplica(0), pp); !errors.Is(err, bft.ErrForged) {
		t.Fatalf("pre-prepare with a wrong digest: %v", err)
	}
	if s := r.Status(); s.LogEntries != 0 && s.LastExecuted != 0 || s.Pending != 0 {
		t.Fatalf("forged messages changed state: %+v", s)
	}
	// The same request with client 1's own authenticator, relayed by
	// client 2's link, is accepted.
	req.Auth[32*1] ^= 1
	req.Op = []byte("x")
	if err := r.Step(bft.ToClient(2), req); err != nil {
		t.Fatalf("request of client 1 relayed by client 2: %v", err)
	}
	if s := r.Status(); s.Pending != 1 {
		t.Fatalf("relayed request not held: %+v", s)
	}
}

func TestOutOfWatermarkRejected(t *testing.T) {
	n := newNet(t, simnet.Options{Seed: 31, Config: smallCfg})
	r := n.Replicas[1]
	for _, seq := range []uint64{0, 17, 1000, ^uint64(0)} {
		pp := &bft.PrePrepare{View: 0, Seq: seq, Digest: bft.BatchDigest(0, nil)}
		err := r.Step(bft.ToReplica(0), pp)
		if !errors.Is(err, bft.ErrWatermark) && !errors.Is(err, bft.ErrStale) {
			t.Fatalf("pre-prepare at seq %d: %v", seq, err)
		}
		p := &bft.Prepare{View: 0, Seq: seq, Replica: 2}
		if err := r.Step(bft.ToReplica(2), p); !errors.Is(err, bft.ErrWatermark) {
			t.Fatalf("prepare at seq %d: %v", seq, err)
		}
	}
	now := uint64(n.Clock(0).UnixNano())
	pp := &bft.PrePrepare{View: 0, Seq: 16, Time: now, Batch: []bft.Request{{Client: 1, Timestamp: 2}}}
	n.Keys.SignRequest(&pp.Batch[0])
	pp.Digest = bft.BatchDigest(pp.Time, pp.Batch)
	if err := r.Step(bft.ToReplica(0), pp); err != nil {
		t.Fatalf("pre-prepare at the high watermark: %v", err)
	}
	// Equivocation: another digest at the same (view, seq).
	pp2 := &bft.PrePrepare{View: 0, Seq: 16, Time: now, Batch: []bft.Request{{Client: 1, Timestamp: 1}}}
	n.Keys.SignRequest(&pp2.Batch[0])
	pp2.Digest = bft.BatchDigest(pp2.Time, pp2.Batch)
	if err := r.Step(bft.ToReplica(0), pp2); !errors.Is(err, bft.ErrEquivocation) {
		t.Fatalf("second pre-prepare: %v", err)
	}
	// A vote counts once.
	p := &bft.Prepare{View: 0, Seq: 16, Digest: pp.Digest, Replica: 2}
	if err := r.Step(bft.ToReplica(2), p); err != nil {
		t.Fatal(err)
	}
	if err := r.Step(bft.ToReplica(2), p); !errors.Is(err, bft.ErrDuplicate) {
		t.Fatalf("repeated prepare: %v", err)
	}
	// Stale view.
	r2 := n.Replicas[2]
	_ = r2
}

func TestDuplicateRequestNotReexecuted(t *testing.T) {
	n := newNet(t, simnet.Options{Seed: 32})
	c := n.Clients[0]
	if _, err := c.Propose([]byte("once")); err != nil {
		t.Fatal(err)
	}
	var sent *bft.Request
	for _, e := range c.Ready().Messages {
		sent = e.Msg.(*bft.Request)
		n.Send(bft.ToClient(1), e)
	}
	if _, err := c.Propose([]byte("twice")); !errors.Is(err, bft.ErrBusy) {
		t.Fatalf("second Propose: %v", err)
	}
	if !n.Run(100, func() bool { return len(n.Results[0]) == 1 }) {
		t.Fatal("no result")
	}
	// The client (or an attacker replaying it) sends the request again,
	// to everyone, several times.
	for k := 0; k < 3; k++ {
		for i := 0; i < n.N; i++ {
			n.Send(bft.ToClient(1), bft.Envelope{To: bft.ToReplica(bft.ReplicaID(i)), Msg: sent})
		}
		n.Tick()
	}
	// A primary that proposes it again (in a new batch) must not get it
	// executed twice either.
	pp := &bft.PrePrepare{View: 0, Seq: 2, Time: uint64(n.Clock(0).UnixNano()), Batch: []bft.Request{*sent}}
	pp.Digest = bft.BatchDigest(pp.Time, pp.Batch)
	n.Send(bft.ToReplica(0), bft.Envelope{To: bft.ToReplica(1), Msg: pp})
	n.Send(bft.ToReplica(0), bft.Envelope{To: bft.ToReplica(2), Msg: pp})
	n.Send(bft.ToReplica(0), bft.Envelope{To: bft.ToReplica(3), Msg: pp})
	n.Run(50, func() bool { return false })
	for i, a := range n.Apps {
		if a.Count != 1 {
			t.Fatalf("replica %d executed %d ops", i, a.Count)
		}
	}
	if got := n.Replicas[1].Status().LastExecuted; got != 2 {
		t.Fatalf("the replayed batch did not commit (executed up to %d)", got)
	}
	checkSameOrder(t, n)
}

// Clients accept a result only with f+1 matching replies.
func TestClientNeedsFPlusOne(t *testing.T) {
	c, err := bft.NewClient(bft.ClientConfig{ID: 7, N: 4, Sign: func(*bft.Request) {}})
	if err != nil {
		t.Fatal(err)
	}
	ts, _ := c.Propose([]byte("x"))
	rd := c.Ready()
	if len(rd.Messages) != 1 || rd.Messages[0].To != bft.ToReplica(0) {
		t.Fatalf("first send: %+v", rd.Messages)
	}
	rep := func(from bft.ReplicaID, res string, view uint64) *bft.Reply {
		return &bft.Reply{View: view, Timestamp: ts, Client: 7, Replica: from, Result: []byte(res)}
	}
	if err := c.Step(2, rep(1, "a", 0)); !errors.Is(err, bft.ErrForged) {
		t.Fatalf("reply claiming another replica: %v", err)
	}
	_ = c.Step(1, rep(1, "a", 5))
	_ = c.Step(1, rep(1, "a", 5)) // the same replica twice counts once
	_ = c.Step(2, rep(2, "b", 5))
	if len(c.Ready().Done) != 0 {
		t.Fatal("accepted without f+1 matching replies")
	}
	_ = c.Step(3, rep(3, "a", 1))
	done := c.Ready().Done
	if len(done) != 1 || string(done[0].Result) != "a" || done[0].Timestamp != ts {
		t.Fatalf("done: %+v", done)
	}
	// The next request goes to the primary of the (f+1)-th highest view
	// among the matching replies: view 1, replica 1.
	_, _ = c.Propose([]byte("y"))
	if m := c.Ready().Messages; len(m) != 1 || m[0].To != bft.ToReplica(1) {
		t.Fatalf("second send: %+v", m)
	}
	for k := 0; k < 20; k++ {
		c.Tick()
	}
	if m := c.Ready().Messages; len(m) != 4 {
		t.Fatalf("retransmission went to %d replicas, want all 4", len(m))
	}
}

// Random and malformed messages must never panic and never break
// agreement of a running cluster.
func TestStepNeverPanics(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 33, Config: smallCfg})
	rng := rand.New(rand.NewPCG(33, 1))
	pick := func() uint64 {
		switch rng.IntN(5) {
		case 0:
			return 0
		case 1:
			return ^uint64(0) - uint64(rng.IntN(3))
		default:
			return uint64(rng.IntN(40))
		}
	}
	randMsg := func() bft.Message {
		d := bft.Digest{byte(rng.IntN(3))}
		id := bft.ReplicaID(rng.IntN(6))
		switch rng.IntN(12) {
		case 0:
			return &bft.PrePrepare{View: pick(), Seq: pick(), Digest: d, Batch: []bft.Request{{Client: 1, Op: make([]byte, rng.IntN(100))}}}
		case 1:
			return &bft.Prepare{View: pick(), Seq: pick(), Digest: d, Replica: id}
		case 2:
			return &bft.Commit{View: pick(), Seq: pick(), Digest: d, Replica: id}
		case 3:
			return &bft.Checkpoint{Seq: pick(), State: d, Replica: id}
		case 4:
			return &bft.ViewChange{View: pick(), StableSeq: pick(), Replica: id, Stable: make([]bft.Checkpoint, rng.IntN(4)), Prepared: []bft.Claim{{}}, PrePrepared: make([]bft.Claim, rng.IntN(3))}
		case 5:
			return &bft.NewView{View: pick(), Replica: id, ViewChanges: make([]bft.ViewChange, rng.IntN(4)), PrePrepares: make([]bft.PrePrepare, rng.IntN(3))}
		case 6:
			return &bft.FetchState{Seq: pick(), Replica: id}
		case 7:
			return &bft.State{Seq: pick(), Replica: id, Stable: make([]bft.Checkpoint, rng.IntN(4))}
		case 8:
			return &bft.Request{Client: bft.ClientID(rng.IntN(3)), Timestamp: pick(), Op: make([]byte, rng.IntN(1<<17))}
		case 9:
			return &bft.Reply{}
		case 10:
			return (*bft.Prepare)(nil)
		default:
			return nil
		}
	}
	ok := n.Load(40, 20000, func(c, k int) []byte {
		for j := 0; j < 5; j++ {
			to := rng.IntN(n.N)
			from := bft.Target{ID: uint64(rng.IntN(6))}
			if rng.IntN(4) == 0 {
				from = bft.ToClient(bft.ClientID(rng.IntN(3)))
			}
			_ = n.Replicas[to].Step(from, randMsg())
		}
		return op(c, k)
	})
	if !ok {
		t.Fatalf("not finished under garbage: %v", n.LastErrors)
	}
	checkSameOrder(t, n)
}
