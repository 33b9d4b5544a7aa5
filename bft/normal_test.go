package bft_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
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

// TestRequestsSteppedTogetherShareABatch: the primary proposes when its
// Ready is taken, not at each request: requests of several clients
// stepped in one pass of the driver go out in one pre-prepare, and a
// lone request is proposed at the next Ready, waiting for no timer.
func TestRequestsSteppedTogetherShareABatch(t *testing.T) {
	keys := simnet.NewKeys(4, 4)
	p := newSolo(t, keys, 0, false)
	batches := func() (sizes []int) {
		p.ready()
		for _, e := range p.out {
			if pp, ok := e.Msg.(*bft.PrePrepare); ok && e.To == bft.ToReplica(1) {
				sizes = append(sizes, len(pp.Batch))
			}
		}
		p.out = nil
		return sizes
	}
	for c := bft.ClientID(1); c <= 3; c++ {
		req := bft.Request{Client: c, Timestamp: 1, Op: []byte("x")}
		keys.SignRequest(&req)
		if err := p.r.Step(bft.ToClient(c), &req); err != nil {
			t.Fatal(err)
		}
	}
	if got := batches(); fmt.Sprint(got) != "[3]" {
		t.Fatalf("three requests stepped together went out in batches %v, want one of 3", got)
	}

	q := newSolo(t, keys, 0, false)
	req := bft.Request{Client: 1, Timestamp: 1, Op: []byte("x")}
	keys.SignRequest(&req)
	if err := q.r.Step(bft.ToClient(1), &req); err != nil {
		t.Fatal(err)
	}
	if !q.r.HasReady() {
		t.Fatal("a lone request left the primary with nothing to do until a tick")
	}
	p = q
	if got := batches(); fmt.Sprint(got) != "[1]" {
		t.Fatalf("a lone request went out in batches %v, want [1]", got)
	}
}
