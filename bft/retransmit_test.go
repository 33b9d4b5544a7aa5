package bft_test

import (
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

// A client cut off from every replica for 1000 ticks sends a copy of its
// request to every replica at each retransmission, waiting twice as long
// each time up to 8 times RetransmitTicks (160 ticks): 8 retransmissions,
// not 50. Once the links work again its next copy goes within 160 ticks,
// and a few results later a lost request is resent after RetransmitTicks
// again.
func TestClientRetransmissionBacksOff(t *testing.T) {
	const retransmit, cut = 20, 1000
	n := newNet(t, simnet.Options{Clients: 1, Seed: 1})
	client := bft.ToClient(1)
	cutOff, dropNext := false, false
	copies := 0
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		if from != client && to != client {
			return false
		}
		if _, ok := m.(*bft.Request); ok && cutOff {
			copies++
		}
		if dropNext && from == client {
			dropNext = false
			return true
		}
		return cutOff
	}
	if !n.Load(5, 1000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	cutOff = true
	if n.Load(6, cut, op) {
		t.Fatal("a client cut off from every replica got a result")
	}
	sends := (copies - 1) / n.N
	t.Logf("%d retransmissions in %d ticks cut off", sends, cut)
	if sends > 8 {
		t.Errorf("a client cut off for %d ticks retransmitted its request %d times", cut, sends)
	}
	cutOff = false
	healed := n.Now
	if !n.Load(6, 8*retransmit+50, op) {
		t.Fatalf("no result %d ticks after the links came back", n.Now-healed)
	}
	t.Logf("a result %d ticks after the links came back", n.Now-healed)
	if !n.Load(10, 1000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	dropNext = true
	start := n.Now
	if !n.Load(11, retransmit+30, op) {
		t.Fatalf("a lost request took more than %d ticks after results came again", n.Now-start)
	}
	if dropNext {
		t.Fatal("the request was not dropped")
	}
	checkSameOrder(t, n)
}
