package bft_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/internal/quorum"
	"github.com/rubin-go/rubin/internal/simnet"
)

// The new-view rule (docs/bft.md, "View change"), tested on its own,
// without the network: view changes are drawn at random, within what the
// protocol lets correct replicas report, and every subset of them that a
// new primary could include (a quorum q to n) is decided. n = 5 and 6
// check the rule with a quorum above 2f+1.

// digestN is a small pool of digests, so that claims collide often.
func digestN(i int) bft.Digest { return bft.BatchDigest(uint64(i), nil) }

// randomVC draws a well-formed view change to view, with claims for
// sequence numbers 1..slots above StableSeq 0 (some slots left out).
func randomVC(rng *rand.Rand, id bft.ReplicaID, view uint64, slots int) bft.ViewChange {
	vc := bft.ViewChange{View: view, Replica: id}
	for s := uint64(1); s <= uint64(slots); s++ {
		if rng.IntN(3) > 0 {
			vc.Prepared = append(vc.Prepared, bft.Claim{View: rng.Uint64N(view), Seq: s, Digest: digestN(rng.IntN(3))})
		}
		for k := rng.IntN(bft.MaxPrePrepared + 1); k > 0; k-- {
			vc.PrePrepared = append(vc.PrePrepared, bft.Claim{View: rng.Uint64N(view), Seq: s, Digest: digestN(rng.IntN(4))})
		}
	}
	tidy(&vc)
	return vc
}

// tidy puts a view change's Q claims in the order and form verifiers
// check: per sequence number, distinct digests, highest view first, at
// most MaxPrePrepared.
func tidy(vc *bft.ViewChange) {
	var out []bft.Claim
	for i := 0; i < len(vc.PrePrepared); {
		j := i
		best := map[bft.Digest]uint64{}
		for ; j < len(vc.PrePrepared) && vc.PrePrepared[j].Seq == vc.PrePrepared[i].Seq; j++ {
			c := vc.PrePrepared[j]
			best[c.Digest] = max(best[c.Digest], c.View)
		}
		var run []bft.Claim
		for d, v := range best {
			run = append(run, bft.Claim{View: v, Seq: vc.PrePrepared[i].Seq, Digest: d})
		}
		sortClaims(run)
		if len(run) > bft.MaxPrePrepared {
			run = run[:bft.MaxPrePrepared]
		}
		out = append(out, run...)
		i = j
	}
	vc.PrePrepared = out
}

func sortClaims(cs []bft.Claim) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && claimBefore(cs[j], cs[j-1]); j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}

func claimBefore(a, b bft.Claim) bool {
	if a.Seq != b.Seq {
		return a.Seq < b.Seq
	}
	if a.View != b.View {
		return a.View > b.View
	}
	return string(a.Digest[:]) < string(b.Digest[:])
}

// subsets calls fn with every subset of vcs of at least q elements.
func subsets(vcs []bft.ViewChange, q int, fn func([]bft.ViewChange)) {
	for mask := 0; mask < 1<<len(vcs); mask++ {
		var sub []bft.ViewChange
		for i := range vcs {
			if mask&(1<<i) != 0 {
				sub = append(sub, vcs[i])
			}
		}
		if len(sub) >= q {
			fn(sub)
		}
	}
}

// TestNewViewRuleMatchesNaive: the core's computeNewView and simnet's
// Decide, written apart and as plainly as possible, agree on random view
// changes: on whether every slot is decided, and on the pre-prepares.
func TestNewViewRuleMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 1))
	for _, n := range []int{4, 5, 6, 7} {
		q := quorum.Quorum(n)
		for k := 0; k < 300; k++ {
			view := 1 + rng.Uint64N(6)
			vcs := make([]bft.ViewChange, n)
			for i := range vcs {
				vcs[i] = randomVC(rng, bft.ReplicaID(i), view, 4)
			}
			subsets(vcs, q, func(sub []bft.ViewChange) {
				_, got, ok := bft.ComputeNewView(view, sub, n)
				want, wantOK := simnet.Decide(view, sub, n)
				if ok != wantOK {
					t.Fatalf("n=%d: decided %v, naive rule says %v, for %+v", n, ok, wantOK, sub)
				}
				if !ok {
					return
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("n=%d: pre-prepares\n%v\nnaive rule gives\n%v\nfor %+v", n, got, want, sub)
				}
			})
		}
	}
}

// TestNewViewRuleKeepsCommitted is the safety argument of docs/bft.md as
// a property test. A batch d0 committed at seq 1 in view v0: q-f correct
// replicas (f+1 when n = 3f+1) prepared it, and report a P claim for d0 of view v0 or later
// (by induction, no later view re-proposed anything else); the other
// correct replicas report P claims of views below v0 (of any digest) or
// none, and Q claims of views below v0 for any digest, of v0 for any
// digest (the primary of v0 may have equivocated), and above v0 only for
// d0. The f Byzantine replicas claim anything: P and Q claims of the
// highest view for a digest of their own, copies of correct claims
// raised to higher views, or nothing. Whichever q or more of the view
// changes a new primary includes, a new view that decides seq 1 decides
// d0.
func TestNewViewRuleKeepsCommitted(t *testing.T) {
	rng := rand.New(rand.NewPCG(72, 1))
	d0 := digestN(0)
	decided, wrong := 0, 0
	for _, n := range []int{4, 5, 6, 7} {
		f, q := quorum.Faults(n), quorum.Quorum(n)
		for k := 0; k < 500; k++ {
			view := 3 + rng.Uint64N(6)
			v0 := rng.Uint64N(view - 1)
			vcs := make([]bft.ViewChange, n)
			// Replicas 0..q-f-1 are the correct ones that prepared d0.
			for i := range vcs {
				vc := bft.ViewChange{View: view, Replica: bft.ReplicaID(i)}
				switch {
				case i < q-f: // correct, prepared d0
					pv := v0 + rng.Uint64N(view-v0)
					vc.Prepared = []bft.Claim{{View: pv, Seq: 1, Digest: d0}}
					vc.PrePrepared = []bft.Claim{{View: pv, Seq: 1, Digest: d0}}
					if v0 > 0 && rng.IntN(2) == 0 {
						vc.PrePrepared = append(vc.PrePrepared, bft.Claim{View: rng.Uint64N(v0), Seq: 1, Digest: digestN(1 + rng.IntN(3))})
					}
				case i < n-f: // correct, did not prepare d0
					if v0 > 0 && rng.IntN(2) == 0 {
						vc.Prepared = []bft.Claim{{View: rng.Uint64N(v0), Seq: 1, Digest: digestN(rng.IntN(4))}}
						vc.PrePrepared = append(vc.PrePrepared, vc.Prepared[0])
					}
					switch rng.IntN(3) {
					case 0: // accepted d0 after v0
						vc.PrePrepared = append(vc.PrePrepared, bft.Claim{View: v0 + 1 + rng.Uint64N(view-v0-1), Seq: 1, Digest: d0})
					case 1: // accepted an equivocating primary's batch in v0
						vc.PrePrepared = append(vc.PrePrepared, bft.Claim{View: v0, Seq: 1, Digest: digestN(1 + rng.IntN(3))})
					}
				default: // Byzantine
					evil := digestN(10 + rng.IntN(2))
					switch rng.IntN(4) {
					case 0:
						vc.Prepared = []bft.Claim{{View: view - 1, Seq: 1, Digest: evil}}
						vc.PrePrepared = []bft.Claim{{View: view - 1, Seq: 1, Digest: evil}}
					case 1: // a correct replica's lower-view digest, raised
						d := digestN(1 + rng.IntN(3))
						vc.Prepared = []bft.Claim{{View: view - 1, Seq: 1, Digest: d}}
						vc.PrePrepared = []bft.Claim{{View: view - 1, Seq: 1, Digest: d}}
					case 2: // Q claims only
						for j := 0; j < bft.MaxPrePrepared; j++ {
							vc.PrePrepared = append(vc.PrePrepared, bft.Claim{View: view - 1 - uint64(j%2), Seq: 1, Digest: digestN(1 + j)})
						}
					}
				}
				tidy(&vc)
				vcs[i] = vc
			}
			rng.Shuffle(n, func(i, j int) { vcs[i], vcs[j] = vcs[j], vcs[i] })
			subsets(vcs, q, func(sub []bft.ViewChange) {
				_, pps, ok := bft.ComputeNewView(view, sub, n)
				if !ok || len(pps) == 0 {
					return
				}
				decided++
				if pps[0].Digest != d0 {
					wrong++
					if wrong < 3 {
						t.Errorf("n=%d: d0 committed in view %d, but a new view of %d from %+v re-proposes %x", n, v0, view, sub, pps[0].Digest[:4])
					}
				}
			})
		}
	}
	if decided == 0 {
		t.Fatal("no subset decided the slot")
	}
	t.Logf("%d decided subsets, %d wrong", decided, wrong)
}

// TestNewViewRuleLive is the liveness half: with the view changes of
// every correct replica, a new primary decides every slot, whatever the
// Byzantine ones add. The correct replicas' histories are drawn as the
// protocol allows them: at most one digest prepares per view (a quorum
// intersection), and a replica that prepared a batch in view v had q
// replicas, q-f of them correct, accept its pre-prepare in v. Each keeps
// every digest it accepted (at most MaxPrePrepared of them here): the
// argument needs f+1 of those that accepted the prepared batch of the highest
// view to still report it (see docs/bft.md on what the bound on Q claims
// costs).
func TestNewViewRuleLive(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 1))
	for _, n := range []int{4, 5, 7} {
		f, q := quorum.Faults(n), quorum.Quorum(n)
		correct := n - f
		for k := 0; k < 1000; k++ {
			view := 2 + rng.Uint64N(12)
			vcs := make([]bft.ViewChange, n)
			for i := range vcs {
				vcs[i] = bft.ViewChange{View: view, Replica: bft.ReplicaID(i)}
			}
			full := func(i int) bool { return len(vcs[i].PrePrepared) >= bft.MaxPrePrepared }
			for v := uint64(0); v < view; v++ {
				if rng.IntN(3) == 0 {
					continue // nothing proposed at seq 1 in v
				}
				d := digestN(int(v)*10 + 1)
				var acc []int // the correct replicas that accepted d in v
				for _, i := range rng.Perm(correct)[:1+rng.IntN(correct)] {
					if !full(i) {
						acc = append(acc, i)
						vcs[i].PrePrepared = append(vcs[i].PrePrepared, bft.Claim{View: v, Seq: 1, Digest: d})
					}
				}
				if len(acc) >= q-f && rng.IntN(2) == 0 {
					// d prepared in v at some of those that accepted it.
					for _, i := range acc[:1+rng.IntN(len(acc))] {
						vcs[i].Prepared = []bft.Claim{{View: v, Seq: 1, Digest: d}}
					}
				}
				for i := range correct {
					if !contains(acc, i) && !full(i) && rng.IntN(3) == 0 {
						// an equivocating primary's other batch
						vcs[i].PrePrepared = append(vcs[i].PrePrepared, bft.Claim{View: v, Seq: 1, Digest: digestN(int(v)*10 + 2)})
					}
				}
			}
			for i := correct; i < n; i++ {
				if rng.IntN(2) == 0 {
					c := bft.Claim{View: view - 1, Seq: 1, Digest: digestN(99)}
					vcs[i].Prepared, vcs[i].PrePrepared = []bft.Claim{c}, []bft.Claim{c}
				}
			}
			for i := range vcs {
				tidy(&vcs[i])
			}
			subsets(vcs, correct, func(sub []bft.ViewChange) {
				in := 0
				for i := range sub {
					if int(sub[i].Replica) < correct {
						in++
					}
				}
				if in < correct {
					return // only sets holding every correct view change
				}
				if _, _, ok := bft.ComputeNewView(view, sub, n); !ok {
					t.Fatalf("n=%d: the correct replicas' view changes do not decide: %+v", n, sub)
				}
			})
		}
	}
}

func contains(s []int, x int) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}
