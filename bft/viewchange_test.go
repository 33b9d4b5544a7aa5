package bft_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

func TestViewChangeSilentPrimary(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 5, Config: smallCfg})
	if !n.Load(10, 2000, op) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	before := append([]bft.Committed(nil), n.Executed[1]...)
	n.Crashed[0] = true
	if !n.Load(30, 5000, op) {
		t.Fatalf("clients did not finish after the primary crashed: %v %+v", n.LastErrors, n.Replicas[1].Status())
	}
	checkSameOrder(t, n)
	for i := 1; i < n.N; i++ {
		s := n.Replicas[i].Status()
		if s.View == 0 || s.ViewChanging || s.Primary == 0 {
			t.Fatalf("replica %d: %+v", i, s)
		}
		got := n.Executed[i]
		for j := range before {
			if got[j].Seq != before[j].Seq || got[j].Digest != before[j].Digest {
				t.Fatalf("replica %d: batch %d changed across the view change", i, j)
			}
		}
		if n.Apps[i].Count != 90 {
			t.Fatalf("replica %d executed %d ops, want 90", i, n.Apps[i].Count)
		}
	}
}

// A view change under message loss, reordering and delay, with the
// primary crashing in the middle of the load.
func TestViewChangeUnderFaults(t *testing.T) {
	for seed := uint64(10); seed < 14; seed++ {
		n := newNet(t, simnet.Options{Clients: 4, Seed: seed, Config: smallCfg})
		n.DropRate, n.DupRate, n.MaxDelay, n.Reorder = 0.02, 0.05, 2, true
		if !n.Load(15, 10000, op) {
			t.Fatalf("seed %d: not finished: %v", seed, n.LastErrors)
		}
		n.Crashed[0] = true
		if !n.Load(40, 20000, op) {
			t.Fatalf("seed %d: not finished after crash: %v", seed, n.LastErrors)
		}
		checkSameOrder(t, n)
	}
}

// Two successive primaries fail: view 1's primary is crashed too, so the
// view change to 1 times out and the replicas move to view 2.
func TestViewChangeTwice(t *testing.T) {
	n := newNet(t, simnet.Options{N: 7, Clients: 2, Seed: 6, Config: smallCfg})
	if !n.Load(5, 2000, op) {
		t.Fatal("not finished")
	}
	n.Crashed[0], n.Crashed[1] = true, true
	if !n.Load(20, 20000, op) {
		t.Fatalf("not finished: %v %+v", n.LastErrors, n.Replicas[2].Status())
	}
	checkSameOrder(t, n)
	if v := n.Replicas[2].Status().View; v < 2 {
		t.Fatalf("view %d", v)
	}
}

// An equivocating primary sends one batch to some backups and another to
// the rest. No two replicas may execute different batches; the view
// change replaces the primary and the clients finish.
func TestEquivocatingPrimary(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 7, Config: smallCfg})
	n.Byzantine = func(from bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		pp, ok := e.Msg.(*bft.PrePrepare)
		if from != 0 || !ok || e.To.ID < 2 {
			return []bft.Envelope{e}
		}
		// Replicas 2 and 3 get the same batch at the same (view, seq),
		// at another time.
		alt := &bft.PrePrepare{View: pp.View, Seq: pp.Seq, Time: pp.Time + 1, Batch: pp.Batch}
		alt.Digest = bft.BatchDigest(alt.Time, alt.Batch)
		return []bft.Envelope{{To: e.To, Msg: alt}}
	}
	if !n.Load(20, 20000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	checkSameOrder(t, n)
	if v := n.Replicas[1].Status().View; v == 0 {
		t.Fatal("no view change")
	}
	for i := 1; i < n.N; i++ {
		if n.Apps[i].Count != 60 {
			t.Fatalf("replica %d executed %d ops", i, n.Apps[i].Count)
		}
	}
}

// A Byzantine replica's view changes claim that it prepared, in the
// highest view a view change may name, a batch nobody proposed, at the
// first slot above its checkpoint. The claim is well formed and signed,
// so it is not refused; but fewer than f+1 view changes support it (A2),
// so no new view re-proposes it, and the view change completes with the
// correct replicas' claims.
func TestLyingViewChangeIgnored(t *testing.T) {
	n := newNet(t, simnet.Options{N: 7, Clients: 2, Seed: 8, Config: smallCfg})
	if !n.Load(5, 2000, op) {
		t.Fatal("not finished")
	}
	evil := bft.BatchDigest(0, []bft.Request{{Client: 9, Timestamp: 1, Op: []byte("evil")}})
	lies := 0
	n.Byzantine = func(from bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		switch m := e.Msg.(type) {
		case *bft.ViewChange:
			if from != 6 {
				break
			}
			lie := *m
			c := bft.Claim{View: m.View - 1, Seq: m.StableSeq + 1, Digest: evil}
			lie.Prepared = []bft.Claim{c}
			lie.PrePrepared = []bft.Claim{c}
			lie.Sig = n.Keys.MAC(6, &lie)
			lies++
			return []bft.Envelope{{To: e.To, Msg: &lie}}
		case *bft.NewView:
			for _, pp := range m.PrePrepares {
				if pp.Digest == evil {
					t.Errorf("new view %d of replica %d re-proposes the claimed batch at seq %d", m.View, m.Replica, pp.Seq)
				}
			}
		}
		return []bft.Envelope{e}
	}
	n.Faulty[6] = true
	n.Crashed[0] = true
	if !n.Load(15, 20000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	checkSameOrder(t, n)
	if lies == 0 {
		t.Fatal("no view change lied")
	}
	if v := n.Replicas[1].Status().View; v == 0 {
		t.Fatal("no view change")
	}
}

// countingAuth counts the verifications of view-change signatures, by
// signer, view and signature.
type countingAuth struct {
	bft.Authenticator
	vcs map[string]int
}

func (a *countingAuth) Verify(id bft.ReplicaID, m bft.Message, sig []byte) bool {
	if vc, ok := m.(*bft.ViewChange); ok {
		a.vcs[fmt.Sprintf("replica %d view %d sig %x", id, vc.View, sig)]++
	}
	return a.Authenticator.Verify(id, m, sig)
}

// A view change is verified once: on arrival, not again inside the new
// view (nor is a replica's own).
func TestViewChangeVerifiedOnce(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 9, Config: smallCfg, Codec: true})
	auths := make([]*countingAuth, n.N)
	for i := range n.Replicas {
		auths[i] = &countingAuth{Authenticator: n.Configs[i].Auth, vcs: map[string]int{}}
		n.Configs[i].Auth = auths[i]
		if err := n.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	if !n.Load(10, 2000, op) {
		t.Fatal("not finished")
	}
	n.Crashed[0] = true
	if !n.Load(20, 5000, op) {
		t.Fatalf("not finished after the primary crashed: %v", n.LastErrors)
	}
	checkSameOrder(t, n)
	total := 0
	for i := 1; i < n.N; i++ {
		if s := n.Replicas[i].Status(); s.NewViews == 0 {
			t.Fatalf("replica %d entered no new view: %+v", i, s)
		}
		for k, c := range auths[i].vcs {
			total += c
			if c > 1 {
				t.Errorf("replica %d verified the view change of %s %d times", i, k, c)
			}
		}
	}
	if total == 0 {
		t.Fatal("no view change was verified")
	}
	t.Logf("%d view-change verifications", total)
}

// A view change whose claims are malformed is refused whole
// (ErrInvalid): claims of its own view or later, outside the window above
// its checkpoint, P claims repeated or out of order, Q claims out of
// order, repeating a digest or more than MaxPrePrepared for a sequence
// number. The same claims, well formed, are taken.
func TestViewChangeClaimsForm(t *testing.T) {
	d := func(i int) bft.Digest { return bft.BatchDigest(uint64(i), nil) }
	bad := map[string]bft.ViewChange{
		"P of its view":       {Prepared: []bft.Claim{{View: 2, Seq: 1, Digest: d(1)}}},
		"Q of a later view":   {PrePrepared: []bft.Claim{{View: 3, Seq: 1, Digest: d(1)}}},
		"P at the checkpoint": {Prepared: []bft.Claim{{View: 1, Seq: 0, Digest: d(1)}}},
		"Q beyond L":          {PrePrepared: []bft.Claim{{View: 1, Seq: 17, Digest: d(1)}}},
		"P repeated":          {Prepared: []bft.Claim{{View: 1, Seq: 3, Digest: d(1)}, {View: 0, Seq: 3, Digest: d(2)}}},
		"P out of order":      {Prepared: []bft.Claim{{View: 1, Seq: 3, Digest: d(1)}, {View: 1, Seq: 2, Digest: d(2)}}},
		"Q views ascending":   {PrePrepared: []bft.Claim{{View: 0, Seq: 3, Digest: d(1)}, {View: 1, Seq: 3, Digest: d(2)}}},
		"Q seqs descending":   {PrePrepared: []bft.Claim{{View: 1, Seq: 4, Digest: d(1)}, {View: 1, Seq: 3, Digest: d(2)}}},
		"Q digest repeated":   {PrePrepared: []bft.Claim{{View: 1, Seq: 3, Digest: d(1)}, {View: 0, Seq: 3, Digest: d(1)}}},
		"Q over the bound": {PrePrepared: []bft.Claim{
			{View: 1, Seq: 3, Digest: d(1)}, {View: 1, Seq: 3, Digest: d(2)}, {View: 1, Seq: 3, Digest: d(3)},
			{View: 1, Seq: 3, Digest: d(4)}, {View: 1, Seq: 3, Digest: d(5)}}[:bft.MaxPrePrepared+1]},
	}
	good := bft.ViewChange{
		Prepared:    []bft.Claim{{View: 1, Seq: 3, Digest: d(1)}, {View: 0, Seq: 16, Digest: d(2)}},
		PrePrepared: []bft.Claim{{View: 1, Seq: 3, Digest: d(1)}, {View: 0, Seq: 3, Digest: d(2)}, {View: 0, Seq: 16, Digest: d(2)}},
	}
	for name, vc := range bad {
		n := newNet(t, simnet.Options{Seed: 60, Config: smallCfg})
		vc.View, vc.Replica = 2, 3
		vc.Sig = n.Keys.MAC(3, &vc)
		if err := n.Replicas[1].Step(bft.ToReplica(3), &vc); !errors.Is(err, bft.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	n := newNet(t, simnet.Options{Seed: 60, Config: smallCfg})
	good.View, good.Replica = 2, 3
	good.Sig = n.Keys.MAC(3, &good)
	if err := n.Replicas[1].Step(bft.ToReplica(3), &good); err != nil {
		t.Fatalf("a well-formed view change: %v", err)
	}
}

// A new view whose view changes do not decide every sequence number is
// refused (ErrForged), whatever pre-prepare it proposes there; the same
// new view over view changes that decide is taken. With n = 4 (q = 3,
// f = 1), replicas 0 and 1 claim to have prepared different batches at
// seq 1 in view 0 and replica 3 claims nothing: neither batch has f+1
// claims (A2), and only one view change has no P claim, so seq 1 is
// decided neither way. If replica 1 claims nothing and replica 3 claims
// to have accepted replica 0's batch, that batch is decided.
func TestNewViewNotDecidingRefused(t *testing.T) {
	dA := bft.BatchDigest(1, []bft.Request{{Client: 1, Timestamp: 1, Op: []byte("a")}})
	dB := bft.BatchDigest(1, []bft.Request{{Client: 1, Timestamp: 1, Op: []byte("b")}})
	newView := func(n *simnet.Net, claims map[bft.ReplicaID][2][]bft.Claim, pp bft.Digest) *bft.NewView {
		nv := &bft.NewView{View: 1, Replica: 1, PrePrepares: []bft.PrePrepare{{View: 1, Seq: 1, Digest: pp}}}
		for _, id := range []bft.ReplicaID{0, 1, 3} {
			vc := bft.ViewChange{View: 1, Replica: id, Prepared: claims[id][0], PrePrepared: claims[id][1]}
			vc.Sig = n.Keys.MAC(id, &vc)
			nv.ViewChanges = append(nv.ViewChanges, vc)
		}
		nv.Sig = n.Keys.MAC(1, nv)
		return nv
	}
	a := []bft.Claim{{View: 0, Seq: 1, Digest: dA}}
	b := []bft.Claim{{View: 0, Seq: 1, Digest: dB}}
	undecided := map[bft.ReplicaID][2][]bft.Claim{0: {a, a}, 1: {b, b}}
	for _, pp := range []bft.Digest{dA, dB, bft.BatchDigest(0, nil)} {
		n := newNet(t, simnet.Options{Seed: 61, Config: smallCfg})
		if err := n.Replicas[2].Step(bft.ToReplica(1), newView(n, undecided, pp)); !errors.Is(err, bft.ErrForged) {
			t.Errorf("a new view proposing %x where its view changes decide nothing: %v, want ErrForged", pp[:4], err)
		}
	}
	decided := map[bft.ReplicaID][2][]bft.Claim{0: {a, a}, 3: {nil, a}}
	n := newNet(t, simnet.Options{Seed: 61, Config: smallCfg})
	if err := n.Replicas[2].Step(bft.ToReplica(1), newView(n, decided, dB)); !errors.Is(err, bft.ErrForged) {
		t.Errorf("a new view proposing another batch than the decided one: %v, want ErrForged", err)
	}
	if err := n.Replicas[2].Step(bft.ToReplica(1), newView(n, decided, dA)); err != nil {
		t.Fatalf("a new view of view changes that decide: %v", err)
	}
	if s := n.Replicas[2].Status(); s.View != 1 || s.ViewChanging {
		t.Fatalf("replica 2 did not enter view 1: %+v", s)
	}
}

// TestSuspect: one replica that suspects the primary moves alone and the
// others stay; f+1 that do make the view change, and the cluster goes on
// in the new view.
func TestSuspect(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 61, Config: simCfg})
	if _, err := n.LoadLive(5, liveBound, op); err != nil {
		t.Fatal(err)
	}
	n.Replicas[1].Suspect()
	n.Run(50, func() bool { return false })
	if v := n.Replicas[2].Status().View; v != 0 {
		t.Fatalf("one replica's suspicion moved replica 2 to view %d", v)
	}
	n.Replicas[2].Suspect()
	n.Run(200, func() bool {
		for _, r := range n.Replicas {
			if s := r.Status(); s.View == 0 || s.ViewChanging {
				return false
			}
		}
		return true
	})
	for i, r := range n.Replicas {
		if s := r.Status(); s.View != 1 || s.ViewChanging {
			t.Fatalf("replica %d: view %d, changing %v; want view 1 after two suspicions", i, s.View, s.ViewChanging)
		}
	}
	if _, err := n.LoadLive(5, liveBound, op); err != nil {
		t.Fatal(err)
	}
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
}
