package rdma

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// A peer that breaks the protocol is cut off, and a hostile one connects
// again at once: every connection costs the server a queue pair, its
// first receives, the handshake and the teardown, which on Soft-RoCE
// took a legitimate client's rate down to a few percent beside twelve
// peers doing it (testdata/hostilepeers.c -r). So the transport's
// listeners refuse, for a while, connect requests from an address whose
// accepted connection broke the protocol: for minPenalty after its first
// violation, twice as long after each further one within penaltyMemory
// of the last, up to maxPenalty. A refusal costs an rdma_reject, nothing
// more, and is held back for up to a second (Listener.refuseLater), so a
// peer that asks again as soon as it is refused asks about once a second.
// A correct peer behind the same address (a NAT, or the same host) is
// refused with it while the penalty lasts, and must dial again.
const (
	minPenalty    = 250 * time.Millisecond
	maxPenalty    = 30 * time.Second
	penaltyMemory = 2 * maxPenalty
	// maxPenalized bounds the addresses remembered; past it, expired
	// ones are forgotten first, then any.
	maxPenalized = 4096
)

// penalties are the addresses whose connect requests are refused.
type penalties struct {
	mu sync.Mutex
	m  map[netip.Addr]*penalty
}

type penalty struct {
	until time.Time     // refused before this
	last  time.Duration // the penalty given last
}

// violated records a protocol violation by a connection from ip at now.
func (p *penalties) violated(ip netip.Addr, now time.Time) {
	if !ip.IsValid() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[netip.Addr]*penalty)
	}
	e := p.m[ip]
	if e == nil {
		if len(p.m) >= maxPenalized {
			p.forget(now)
		}
		e = &penalty{}
		p.m[ip] = e
	}
	switch {
	case e.last == 0 || now.Sub(e.until) > penaltyMemory:
		e.last = minPenalty
	case now.Before(e.until):
		// Connections from before the penalty, failing during it, do
		// not lengthen it: only a violation after a second chance does.
		return
	default:
		e.last = min(2*e.last, maxPenalty)
	}
	e.until = now.Add(e.last)
}

// refused returns how much longer ip's connect requests are refused at
// now, zero if they are not.
func (p *penalties) refused(ip netip.Addr, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.m[ip]; e != nil && now.Before(e.until) {
		return e.until.Sub(now)
	}
	return 0
}

// forget drops the entries whose memory ran out, or one entry if none
// has: the table stays within maxPenalized.
func (p *penalties) forget(now time.Time) {
	for ip, e := range p.m {
		if now.Sub(e.until) > penaltyMemory {
			delete(p.m, ip)
		}
	}
	if len(p.m) < maxPenalized {
		return
	}
	for ip := range p.m {
		delete(p.m, ip)
		return
	}
}

// peerIP is the address of a TCP-style endpoint, invalid if there is
// none.
func peerIP(a *net.TCPAddr) netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	ip, _ := netip.AddrFromSlice(a.IP)
	return ip.Unmap()
}
