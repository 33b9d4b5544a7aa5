package bft_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/internal/simnet"
)

func newNet(t *testing.T, o simnet.Options) *simnet.Net {
	t.Helper()
	n, err := simnet.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func op(c, k int) []byte { return []byte(fmt.Sprintf("c%d-op%d", c, k)) }

func smallCfg(c *bft.Config) {
	c.CheckpointInterval = 8
	c.WatermarkWindow = 16
}

// checkSameOrder checks every live replica executed the same batches at
// the same sequence numbers, for the sequence numbers they both report.
func checkSameOrder(t *testing.T, n *simnet.Net) {
	t.Helper()
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
}

func TestNormalCase(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 1})
	if !n.Load(20, 2000, op) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	checkSameOrder(t, n)
	// Every replica executed every batch, in the same order.
	ref := n.Executed[0]
	for i := 1; i < n.N; i++ {
		got := n.Executed[i]
		if len(got) != len(ref) {
			t.Fatalf("replica %d executed %d batches, replica 0 %d", i, len(got), len(ref))
		}
		for j := range got {
			if got[j].Seq != ref[j].Seq || got[j].Digest != ref[j].Digest {
				t.Fatalf("replica %d batch %d differs", i, j)
			}
		}
	}
	for i := range ref {
		if ref[i].Seq != uint64(i+1) {
			t.Fatalf("batch %d has seq %d", i, ref[i].Seq)
		}
	}
	for _, a := range n.Apps {
		if a.Count != 60 {
			t.Fatalf("app executed %d ops, want 60", a.Count)
		}
	}
	// The client's results are the counter values its ops produced: all
	// distinct, increasing.
	for c, res := range n.Results {
		var last uint64
		for _, r := range res {
			v := binary.BigEndian.Uint64(r.Result)
			if v <= last {
				t.Fatalf("client %d results not increasing: %d after %d", c, v, last)
			}
			last = v
		}
	}
	if n.Errors[bft.ErrForged] != 0 || n.Errors[bft.ErrInvalid] != 0 {
		t.Fatalf("errors in a fault-free run: %v %v", n.Errors, n.LastErrors)
	}
}
