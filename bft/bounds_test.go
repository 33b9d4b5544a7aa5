package bft_test

import (
	"errors"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/internal/simnet"
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
