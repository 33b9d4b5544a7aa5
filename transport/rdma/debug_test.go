//go:build linux && cgo

package rdma

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// dumpState describes every channel of the transport, for debugging a
// hang: set RUBIN_RDMA_DEBUG to print it every few seconds.
func (t *Transport) dumpState() string {
	var sb strings.Builder
	sb.WriteString(t.engineState())
	t.mu.Lock()
	defer t.mu.Unlock()
	for ch := range t.chans {
		c, ok := ch.(*Conn)
		if !ok {
			continue
		}
		c.mu.Lock()
		fmt.Fprintf(&sb, "conn qpn=%d state=%d closed=%v err=%v peerDone=%v credits=%d ctrl=%d granted=%d toReturn=%d ctrlOwed=%d inbox=%d queue=%d queued=%d head=%d tail=%d posted=%d empty=%d draining=%v finWanted=%v finSent=%v\n",
			c.qpn, c.state, c.closed, c.err, c.peerDone, c.credits, c.ctrl, c.granted, c.toReturn, c.ctrlOwed, c.inbox.len(), c.queue.len(), c.queued, c.head, c.tail, c.posted, len(c.empty), c.draining, c.finWanted, c.finSent)
		c.mu.Unlock()
	}
	return sb.String()
}

// engineState describes the transport's completion queues and rejected
// connect requests, and counts its channels by state: what a failed
// connect needs, without a line per connection.
func (t *Transport) engineState() string {
	var sb strings.Builder
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.engines {
		fmt.Fprintf(&sb, "engine home=%v refs=%d completions=%d strays=%d arms=%d stashed=%d selector=%+v\n",
			k.sel == t.home, e.refs, e.completions.Load(), e.strays.Load(), e.arms.Load(), e.stashed, k.sel.Stats())
	}
	if n, why := t.Rejects(); n > 0 {
		fmt.Fprintf(&sb, "rejected %d connect requests, the last because: %v\n", n, why)
	}
	states := map[string]int{}
	for ch := range t.chans {
		c, ok := ch.(*Conn)
		if !ok {
			continue
		}
		c.mu.Lock()
		states[fmt.Sprintf("state=%d closed=%v err=%v", c.state, c.closed, c.err)]++
		c.mu.Unlock()
	}
	for s, n := range states {
		fmt.Fprintf(&sb, "%d conns %s\n", n, s)
	}
	return sb.String()
}

func debugLoop(t *Transport) func() {
	if os.Getenv("RUBIN_RDMA_DEBUG") == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fmt.Fprintf(os.Stderr, "---- rdma state\n%s", t.dumpState())
			}
		}
	}()
	return func() { close(done) }
}
