//go:build linux && cgo

package rdma

// The send path: the send queue, Send and Flush, pump, which posts queued
// messages while credits last, and send completions.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// maxQueued bounds the messages a connection queues for credits, whatever
// their size, beside Config.SendQueue's bound on their bytes.
const maxQueued = 128

// onSend handles a send completion, which also completes every earlier
// send of the queue pair.
func (c *Conn) onSend(wc *verbs.WC, sink *selector.Sink) {
	c.mu.Lock()
	seq := wc.WRID & wrIndexMask
	for c.tail <= seq && c.tail < c.head {
		i := c.tail % uint64(len(c.sq))
		if b := c.sq[i]; b != nil {
			b.Release()
			c.sq[i] = nil
		}
		c.tail++
	}
	var ops selectionkey.Ops
	if c.peerDrainedLocked() {
		ops |= selectionkey.OpRead // Receive's io.EOF
	}
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCFlushErr || !c.draining {
			c.failLocked(completionError("send", wc))
		}
		c.checkDrained()
		if ops != 0 {
			c.signal(ops, sink)
		}
		return
	}
	if c.pump() {
		ops |= selectionkey.OpWrite
	}
	if c.closed && c.finSent && c.tail > c.finSeq && !c.draining {
		// Everything up to the FIN has arrived: the peer has it all.
		c.disconnectLocked()
	}
	c.checkDrainedKeep()
	c.mu.Unlock()
	if ops != 0 {
		c.signal(ops, sink)
	}
}

// Send implements channel.Conn.
func (c *Conn) Send(b *bufpool.Buffer) error {
	err := c.send(b)
	if err != nil && err != channel.ErrWouldBlock {
		b.Release() // Send owns the buffer unless it would block
	}
	return err
}

func (c *Conn) send(b *bufpool.Buffer) error {
	if b.Len() > c.MaxMessageSize() {
		return &net.OpError{Op: "write", Net: "rdma", Source: c.LocalAddr(), Addr: c.raddrOrNil(),
			Err: fmt.Errorf("%w: %d bytes, at most %d", channel.ErrMessageTooLarge, b.Len(), c.MaxMessageSize())}
	}
	own := b
	if b.Pool() != c.t.pool {
		var err error
		if own, err = c.copyIn(b); err != nil {
			return err
		}
	}
	for {
		c.mu.Lock()
		err := c.writeErrLocked()
		if err == nil && c.finWanted {
			err = &net.OpError{Op: "write", Net: "rdma", Source: c.LocalAddr(), Addr: c.raddrOrNil(), Err: channel.ErrWriteClosed}
		}
		// A queued message holds a whole buffer of the pool, however
		// short it is: the queue is bounded in buffers too, so that a
		// peer that never reads cannot make it hold the pool.
		if err == nil && (c.queue.len() == 0 || c.queued+own.Len() <= c.t.cfg.SendQueue && c.queue.len() < maxQueued) {
			waiting := c.queue.len() > 0
			c.queue.push(own)
			c.queued += own.Len()
			c.waited = c.waited || c.credits == 0
			drained := c.pump() && waiting
			c.mu.Unlock()
			if drained {
				// The selector learns of readiness from signals: the
				// queue that was waiting went out on this goroutine.
				c.signal(selectionkey.OpWrite, nil)
			}
			if own != b {
				b.Release()
			}
			return nil
		}
		if err == nil && !c.blocking.Load() {
			err = channel.ErrWouldBlock
		}
		if err != nil {
			c.mu.Unlock()
			if own != b {
				own.Release()
			}
			return err
		}
		c.wait(&c.writeq)
	}
}

// copyIn copies a buffer of another pool into a registered one.
func (c *Conn) copyIn(b *bufpool.Buffer) (*bufpool.Buffer, error) {
	var own *bufpool.Buffer
	var err error
	if c.blocking.Load() {
		own, err = c.t.pool.Get(context.Background())
	} else if own, err = c.t.pool.TryGet(); errors.Is(err, bufpool.ErrExhausted) {
		return nil, channel.ErrWouldBlock
	}
	if err != nil {
		return nil, &net.OpError{Op: "write", Net: "rdma", Addr: c.raddrOrNil(), Err: err}
	}
	own.Write(b.Bytes())
	return own, nil
}

func (c *Conn) writeErrLocked() error {
	switch {
	case c.closed:
		return c.closedErr("write")
	case c.err != nil:
		return c.err
	case c.state == stateFailed:
		return c.connErr
	case c.state != stateEstablished:
		return &net.OpError{Op: "write", Net: "rdma", Addr: c.raddrOrNil(), Err: channel.ErrNotConnected}
	case c.peerDone && (!c.peerFIN || c.draining):
		// The peer disconnected: after its FIN, when it closed rather
		// than closed for writing.
		return &net.OpError{Op: "write", Net: "rdma", Addr: c.raddrOrNil(), Err: syscall.EPIPE}
	}
	return nil
}

// pump posts queued messages while credits and send slots last, then a
// FIN or a credit update if one is due. It reports whether the queue went
// from non-empty to empty. The caller holds c.mu.
func (c *Conn) pump() bool {
	if c.state != stateEstablished || c.draining || c.err != nil {
		return false
	}
	had := c.queue.len() > 0
	n := 0
	for c.queue.len() > 0 && c.credits > 0 && c.head-c.tail+uint64(n) < uint64(len(c.sq)) && n < len(c.wrs) {
		b := c.queue.pop()
		c.queued -= b.Len()
		c.credits--
		m := c.takeGrants(false)
		if c.credits == 0 && (c.queue.len() > 0 || c.waited) {
			// More waits behind this message, or the last time the
			// credits ran out a message had to wait: a sender that
			// writes one message at a time (the net.Conn face) never
			// has one queued behind the message that spends the last.
			m.more, c.waited = true, false
		}
		c.wrs[n] = c.sendWR(b, m, c.queue.len() == 0)
		n++
	}
	if n > 0 {
		c.post(n)
	}
	switch {
	case c.finWanted && !c.finSent && c.queue.len() == 0:
		if paid, ok := c.spendControl(); ok {
			c.finSent, c.finSeq = true, c.head
			m := c.takeGrants(true)
			m.fin, m.paid = true, paid
			c.postControl(m, true)
		}
	case c.updateDue():
		if c.deferring {
			c.deferUpdateLocked()
			break
		}
		if paid, ok := c.spendControl(); ok {
			m := c.takeGrants(true)
			m.paid = paid
			c.postControl(m, false)
		}
	}
	if had && c.queue.len() == 0 {
		c.writeq.wake()
		return true
	}
	return false
}

func (c *Conn) sqRoom() bool { return c.head-c.tail < uint64(len(c.sq)) }

// sendWR builds the work request of a message.
func (c *Conn) sendWR(b *bufpool.Buffer, m imm, last bool) verbs.Send {
	data := b.Bytes()
	wr := verbs.Send{WRID: wrSend | c.head, Imm: m.encode(), Length: uint32(len(data))}
	if len(data) > 0 {
		wr.Addr, wr.LKey = addrOf(data), c.t.lkey(b, c.eng.dev)
	}
	inline := len(data) <= c.inline
	c.sinceSignal++
	if c.sinceSignal >= c.t.cfg.SignalEvery || c.head-c.tail+1 >= uint64(len(c.sq)) || (last && !inline) {
		wr.Flags |= verbs.Signaled
		c.sinceSignal = 0
	}
	if inline {
		// The device copies the payload during the post; the buffer goes
		// back to the pool right after it.
		wr.Flags |= verbs.Inline
		c.inlined = append(c.inlined, b)
		b = nil
	}
	c.sq[c.head%uint64(len(c.sq))] = b
	c.head++
	c.msgsOut.add(1)
	c.bytesOut.add(uint64(len(data)))
	return wr
}

// postControl posts one payload-less send: a credit update, a FIN or the
// drain marker.
func (c *Conn) postControl(m imm, signaled bool) {
	wr := verbs.Send{WRID: wrSend | c.head, Imm: m.encode(), Flags: verbs.Inline}
	c.sinceSignal++
	if signaled || c.sinceSignal >= c.t.cfg.SignalEvery || c.head-c.tail+1 >= uint64(len(c.sq)) {
		wr.Flags |= verbs.Signaled
		c.sinceSignal = 0
	}
	c.sq[c.head%uint64(len(c.sq))] = nil
	c.head++
	c.controlOut.add(1)
	c.wrs[0] = wr
	c.post(1)
}

// post posts c.wrs[:n]. If the queue pair refuses them, the connection
// breaks and they complete as flushed.
func (c *Conn) post(n int) {
	err := c.qp.PostSend(c.wrs[:n])
	for i, b := range c.inlined {
		b.Release()
		c.inlined[i] = nil
	}
	c.inlined = c.inlined[:0]
	if err != nil {
		// Nothing of this batch was posted: forget it.
		for range n {
			c.head--
			i := c.head % uint64(len(c.sq))
			if b := c.sq[i]; b != nil {
				b.Release()
				c.sq[i] = nil
			}
		}
		if !c.draining {
			c.failLocked(fmt.Errorf("rdma: %w", err))
		}
	}
}

// Flush implements channel.Conn: queued messages go out as credits come
// back; Flush waits for that in blocking mode.
func (c *Conn) Flush() error {
	for {
		c.mu.Lock()
		if err := c.writeErrLocked(); err != nil {
			c.mu.Unlock()
			return err
		}
		drained := c.pump()
		if c.queue.len() == 0 {
			c.mu.Unlock()
			if drained {
				// The selector learns of readiness from signals: one
				// that came about on this goroutine must be told too.
				c.signal(selectionkey.OpWrite, nil)
			}
			return nil
		}
		if !c.blocking.Load() {
			c.mu.Unlock()
			return channel.ErrWouldBlock
		}
		c.wait(&c.writeq)
	}
}

func (c *Conn) dropQueue() {
	for c.queue.len() > 0 {
		c.queue.pop().Release()
	}
	c.queued = 0
}
