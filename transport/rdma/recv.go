//go:build linux && cgo

package rdma

// The receive path: posting receive buffers, receive completions (messages,
// credit updates and the FIN), and Receive.

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// postReceives fills the empty receive slots with fresh pool buffers. If
// the pool is dry, a timer tries again shortly. The caller holds c.mu.
func (c *Conn) postReceives() {
	if c.torn || c.draining || len(c.empty) == 0 {
		return
	}
	t := c.t
	for len(c.empty) > 0 {
		n := 0
		for n < len(c.rwrs) && len(c.empty) > 0 {
			b, err := t.pool.TryGet()
			if err != nil {
				break
			}
			i := c.empty[len(c.empty)-1]
			c.empty = c.empty[:len(c.empty)-1]
			c.slots[i] = b
			full := b.Full()
			c.rwrs[n] = verbs.Recv{WRID: wrRecv | uint64(i), Addr: addrOf(full), Length: uint32(len(full)), LKey: t.lkey(b, c.eng.dev)}
			n++
		}
		if n == 0 {
			if c.retry == nil {
				c.retry = time.AfterFunc(time.Millisecond, func() {
					c.mu.Lock()
					c.retry = nil
					c.refillLocked()
					c.mu.Unlock()
				})
			}
			return
		}
		if err := c.qp.PostRecv(c.rwrs[:n]); err != nil {
			for _, wr := range c.rwrs[:n] {
				i := int(wr.WRID & wrIndexMask)
				c.slots[i].Release()
				c.slots[i] = nil
				c.empty = append(c.empty, i)
			}
			c.failLocked(fmt.Errorf("rdma: %w", err))
			return
		}
		c.posted += n
	}
}

// onRecv handles a receive completion; buf is the buffer with a shared
// receive queue, nil otherwise. It runs on the selecting goroutine.
func (c *Conn) onRecv(wc *verbs.WC, buf *bufpool.Buffer, sink *selector.Sink) {
	c.mu.Lock()
	if buf == nil {
		i := int(wc.WRID & wrIndexMask)
		if i >= len(c.slots) || c.slots[i] == nil {
			c.mu.Unlock()
			return
		}
		buf = c.slots[i]
		c.slots[i] = nil
		c.empty = append(c.empty, i)
		c.posted--
	}
	if wc.Status != verbs.WCSuccess {
		buf.Release()
		if wc.Status == verbs.WCLocLenErr {
			c.violated() // a message larger than the hello allowed
		}
		if wc.Status != verbs.WCFlushErr || !c.draining {
			c.failLocked(completionError("receive", wc))
		}
		eof := c.peerDrainedLocked()
		c.checkDrained()
		if eof {
			c.signal(selectionkey.OpRead, sink)
		}
		return
	}
	c.postReceives()
	ops, err := c.receivedLocked(wc, buf)
	if err != nil {
		c.violated()
		c.failLocked(err)
		c.mu.Unlock()
		c.signal(selectionkey.OpRead|selectionkey.OpWrite, sink)
		return
	}
	c.mu.Unlock()
	if ops != 0 {
		c.signal(ops, sink)
	}
}

// receivedLocked takes in a message or a credit update and returns the
// operations that became ready.
func (c *Conn) receivedLocked(wc *verbs.WC, buf *bufpool.Buffer) (selectionkey.Ops, error) {
	if wc.Opcode != verbs.WCRecv {
		// An RDMA write with immediate data (no memory key needed when
		// it is empty) also consumes a receive: only sends are messages.
		buf.Release()
		return 0, fmt.Errorf("rdma: peer's message completed with opcode %d, not a send", wc.Opcode)
	}
	if wc.HasImm == 0 {
		buf.Release()
		return 0, fmt.Errorf("rdma: peer sent a message without immediate data")
	}
	m, err := decodeImm(wc.Imm, int(wc.ByteLen))
	if err != nil {
		buf.Release()
		return 0, fmt.Errorf("rdma: peer: %w", err)
	}
	if c.peerFIN && (!m.control || m.fin) {
		// After its FIN a peer still returns credits, for what this side
		// sends until it closes, but sends nothing else.
		buf.Release()
		return 0, fmt.Errorf("rdma: peer sent after its FIN")
	}
	// The message's own accounting first, so that whatever the credits
	// it brings let us send carries what we now owe the peer.
	var ops selectionkey.Ops
	if m.control {
		buf.Release()
		buf = nil
		if m.paid {
			if c.granted == 0 {
				return 0, fmt.Errorf("rdma: peer sent a control message without a credit")
			}
			c.granted--
			c.quiet++
			if c.eng.srq != nil {
				c.eng.srq.give(1)
			}
		} else if c.ctrlOwed++; c.ctrlOwed > ctrlCredits {
			return 0, fmt.Errorf("rdma: peer sent more credit updates than it had credits for")
		}
		if m.fin {
			c.peerFIN, c.peerDone = true, true
			ops |= selectionkey.OpRead
		}
	} else {
		if c.granted == 0 {
			buf.Release()
			return 0, fmt.Errorf("rdma: peer sent a message without a credit")
		}
		c.granted--
		c.starved = c.starved || m.more
		buf.SetLen(int(wc.ByteLen))
		c.inbox.push(buf)
		c.msgsIn.add(1)
		c.bytesIn.add(uint64(wc.ByteLen))
		if c.inbox.len() == 1 {
			ops |= selectionkey.OpRead
		}
	}
	// A message may come before the connection manager's event that
	// completes the handshake here: the peer's credits are then added to
	// those of its hello.
	if m.credits > 0 || m.ctrl > 0 {
		c.credits += m.credits
		c.ctrl += m.ctrl
		if c.state == stateEstablished && (c.credits > c.maxCredits || c.ctrl > ctrlCredits) {
			return 0, fmt.Errorf("rdma: peer granted %d credits and %d control credits, more than it announced", c.credits, c.ctrl)
		}
	}
	if c.pump() {
		ops |= selectionkey.OpWrite
	}
	return ops, nil
}

// pollDevice polls the completion queue of c's queue pair on the calling
// goroutine, unless another goroutine is polling it.
func (c *Conn) pollDevice() {
	c.mu.Lock()
	e := c.eng
	c.mu.Unlock()
	if e != nil {
		e.help()
	}
}

// Receive implements channel.Conn. The buffer is the one the device wrote
// the message into.
func (c *Conn) Receive() (*bufpool.Buffer, error) {
	for {
		c.mu.Lock()
		if b := c.inbox.pop(); b != nil {
			c.toReturn++
			if c.eng.srq != nil {
				c.eng.srq.give(1)
			}
			if c.starved {
				c.widenLocked()
			}
			c.deferring = true
			drained := c.pump()
			c.deferring = false
			c.mu.Unlock()
			if drained {
				c.signal(selectionkey.OpWrite, nil)
			}
			return b, nil
		}
		err := c.readErrLocked()
		if err == nil && !c.blocking.Load() {
			err = channel.ErrWouldBlock
		}
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		c.wait(&c.readq)
	}
}

func (c *Conn) readErrLocked() error {
	switch {
	case c.closed:
		return c.closedErr("read")
	case c.err != nil:
		return c.err
	case c.state == stateFailed:
		return c.connErr
	case c.state != stateEstablished:
		return &net.OpError{Op: "read", Net: "rdma", Addr: c.raddrOrNil(), Err: channel.ErrNotConnected}
	case c.peerFIN:
		return io.EOF
	case c.peerDrainedLocked():
		return io.EOF
	}
	return nil
}

// peerDrainedLocked reports whether the peer disconnected and every work
// request posted before has completed, so every message it sent has been
// seen: Receive then returns io.EOF. The completions that make it true
// wake the readers; a flushed one may come before the disconnect event
// or after it.
func (c *Conn) peerDrainedLocked() bool {
	return c.peerDone && c.tail == c.head && c.posted == 0
}
