package rdma

import (
	"net/netip"
	"testing"
	"time"
)

// TestPenalties: an address is refused for minPenalty after its first
// violation, twice as long after each one that follows its second chance,
// up to maxPenalty, and starts over after penaltyMemory without one; a
// violation during a penalty does not lengthen it; the table is bounded.
func TestPenalties(t *testing.T) {
	var p penalties
	ip := netip.MustParseAddr("198.51.100.7")
	other := netip.MustParseAddr("198.51.100.8")
	now := time.Unix(1000, 0)
	if d := p.refused(ip, now); d != 0 {
		t.Fatalf("refused %v before any violation", d)
	}
	p.violated(ip, now)
	if d := p.refused(ip, now); d != minPenalty {
		t.Fatalf("after one violation: refused for %v, want %v", d, minPenalty)
	}
	if d := p.refused(other, now); d != 0 {
		t.Fatalf("another address refused for %v", d)
	}
	p.violated(ip, now.Add(minPenalty/2)) // a connection from before it
	if d := p.refused(ip, now.Add(minPenalty/2)); d != minPenalty/2 {
		t.Fatalf("a violation during the penalty changed it: %v left, want %v", d, minPenalty/2)
	}
	want := minPenalty
	for range 20 {
		now = now.Add(want) // the penalty ran out: a second chance
		if d := p.refused(ip, now); d != 0 {
			t.Fatalf("refused %v after the penalty ran out", d)
		}
		p.violated(ip, now)
		want = min(2*want, maxPenalty)
		if d := p.refused(ip, now); d != want {
			t.Fatalf("refused for %v, want %v", d, want)
		}
	}
	now = now.Add(want + penaltyMemory + time.Second)
	p.violated(ip, now)
	if d := p.refused(ip, now); d != minPenalty {
		t.Fatalf("after a clean period: refused for %v, want %v", d, minPenalty)
	}
	p.violated(netip.Addr{}, now) // no address: nothing to remember
	for i := range maxPenalized + 100 {
		p.violated(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), now)
	}
	if n := len(p.m); n > maxPenalized {
		t.Fatalf("%d addresses remembered, at most %d", n, maxPenalized)
	}
}
