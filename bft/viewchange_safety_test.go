package bft_test

import (
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

// view0Seq returns the sequence number of a normal-case message of view
// 0, and whether m is one.
func view0Seq(m bft.Message) (uint64, bool) {
	switch m := m.(type) {
	case *bft.PrePrepare:
		return m.Seq, m.View == 0
	case *bft.Prepare:
		return m.Seq, m.View == 0
	case *bft.Commit:
		return m.Seq, m.View == 0
	}
	return 0, false
}

// A replica that knows a certified stable checkpoint above its own state
// votes in the window above that checkpoint; its view change must report
// what prepared there. The schedule (n=4, K=8, L=16):
//
//   - replica 3 misses every normal-case message and state transfer while
//     the others execute 1..24, but hears their checkpoints: it knows the
//     certified checkpoint 24 and holds the state of 0;
//   - the request at 25 prepares at 0, 2 and 3 (replica 1 never hears of
//     it) and commits at 0 and 2 (3 misses the commits), which execute it
//     and answer: the client accepts the result;
//   - replica 0, Byzantine, then stops proposing, sends view changes
//     without certificates and votes for whatever it hears; replica 2's
//     view change never reaches replica 1, the primary of view 1, which
//     forms the new view from the view changes of 0, 1 and 3.
//
// Replica 3 prepared seq 25, so its view change must carry that
// certificate and the new view must keep the batch; otherwise replica 1
// puts another request at 25 and commits it with the votes of 3 and 0,
// and correct replicas 1 and 2 execute different batches at 25.
func TestViewChangeReportsCertificatesAboveKnownCheckpoint(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 1, Seed: 90, Config: smallCfg, Codec: true})
	n.MakeByzantine(0, simnet.OmitCertificates()).Injectors = []func(*simnet.Adversary){simnet.Accomplice()}
	r0, r1, r2, r3 := bft.ToReplica(0), bft.ToReplica(1), bft.ToReplica(2), bft.ToReplica(3)
	// In view 0, replica 3 takes no normal-case message below 25 and no
	// commit at 25, and replica 1 nothing for 25; replica 3 gets no state.
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		if to == r3 {
			if _, ok := m.(*bft.State); ok {
				return true
			}
			if s, ok := view0Seq(m); ok {
				if _, commit := m.(*bft.Commit); s < 25 || (s == 25 && commit) {
					return true
				}
			}
		}
		if s, ok := view0Seq(m); ok && to == r1 && s == 25 {
			return true
		}
		return false
	}
	if !n.Load(24, 2000, op) {
		t.Fatalf("the first 24 requests did not complete: %v", n.LastErrors)
	}
	if s := n.Replicas[3].Status(); s.KnownStable != 24 || s.LastExecuted != 0 {
		t.Fatalf("replica 3 should know checkpoint 24 and have executed nothing: %+v", s)
	}
	if !n.Load(25, 200, op) {
		t.Fatalf("request 25 did not complete: %v", n.LastErrors)
	}
	if s := n.Replicas[1].Status(); s.LastExecuted != 24 {
		t.Fatalf("replica 1 should not have executed 25: %+v", s)
	}
	// Replica 0 stops proposing; replica 2's view changes do not reach 1.
	drop := n.Drop
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		if pp, ok := m.(*bft.PrePrepare); ok && from == r0 && pp.Seq > 25 {
			return true
		}
		if _, ok := m.(*bft.ViewChange); ok && from == r2 && to == r1 {
			return true
		}
		return drop(from, to, m)
	}
	n.Load(26, 3000, op)
	if err := n.CheckAgreement(); err != nil {
		t.Fatalf("committed request lost across the view change: %v\n%s", err, n.Report())
	}
	if s := n.Replicas[1].Status(); s.View == 0 || s.ViewChanging || s.LastExecuted <= 25 {
		t.Fatalf("the view change did not complete: %+v\n%s", s, n.Report())
	}
	n.Heal()
	if _, err := n.LoadLive(4, liveBound, op); err != nil {
		t.Fatalf("%v\n%s", err, n.Report())
	}
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
}
