//go:build linux && cgo

package rdma

// The end of a connection and the waits on it: the peer's disconnect,
// failures, CloseWrite's and Close's FIN, draining the queue pair before
// teardown, and how blocked operations wait and are woken.

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// disconnected handles the peer's disconnect (or the device's removal):
// what was received is still delivered, then Receive reports io.EOF.
func (c *Conn) disconnected(sink *selector.Sink) {
	c.mu.Lock()
	switch c.state {
	case stateEstablished:
	case stateFailed:
		c.mu.Unlock()
		return
	default:
		c.mu.Unlock()
		c.connectFailed(syscall.ECONNRESET, sink)
		return
	}
	c.peerDone = true
	c.disconnectLocked()
	c.mu.Unlock()
	c.signal(selectionkey.OpRead|selectionkey.OpWrite, sink)
}

func completionError(op string, wc *verbs.WC) error {
	return fmt.Errorf("rdma: %s completion: %s (status %d, vendor error %#x)", op, verbs.StatusString(wc.Status), wc.Status, wc.VendorErr)
}

// failLocked breaks the connection with err: the queue pair is in the
// error state, or the peer broke the protocol.
func (c *Conn) failLocked(err error) {
	if c.err == nil && !c.closed {
		c.err = &net.OpError{Op: "read", Net: "rdma", Source: c.LocalAddr(), Addr: c.raddrOrNil(), Err: err}
	}
	c.dropQueue()
	c.disconnectLocked()
	c.wake()
	if r := c.reg.Load(); r != nil {
		r.Ready(selectionkey.OpRead | selectionkey.OpWrite)
	}
}

// disconnectLocked disconnects the queue pair, which flushes its work
// requests; once all have completed, the connection can be torn down.
func (c *Conn) disconnectLocked() {
	if c.draining || !c.qp.Valid() {
		return
	}
	c.draining = true
	if c.id.Disconnect() != nil {
		_ = c.qp.ToError()
	}
	if c.retry != nil {
		c.retry.Stop()
		c.retry = nil
	}
	// A marker send after the flush: its completion comes after every
	// earlier one of the queue pair.
	c.postControl(imm{control: true}, true)
}

// checkDrained tears the connection down if it is closed and every work
// request has completed; it unlocks c.mu. The teardown runs on a
// goroutine of its own: checkDrained runs on the goroutine that polls the
// completion queue, usually a selector's, and destroying a queue pair and
// a connection-manager ID are system calls that took up to 130 ms in the
// Soft-RoCE VM. A selector serving other connections must not stop for
// them (TestTeardownLeavesTheSelector).
func (c *Conn) checkDrained() {
	done := c.drainedLocked()
	c.mu.Unlock()
	if done {
		go c.teardown()
	}
}

// checkDrainedKeep arranges a teardown for a drained connection without
// giving up c.mu.
func (c *Conn) checkDrainedKeep() {
	if c.drainedLocked() {
		go c.teardown()
	}
}

func (c *Conn) drainedLocked() bool {
	return c.closed && c.draining && !c.torn && c.tail == c.head && c.posted == 0
}

// CloseWrite implements channel.Conn: a FIN follows the queued messages,
// and the connection stays up, receiving, until Close. The peer's Receive
// returns io.EOF after the messages before the FIN.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return c.closedErr("close")
	case c.finWanted:
		return nil
	case c.err != nil:
		return c.err
	case c.state == stateFailed:
		return c.connErr
	case c.state != stateEstablished:
		return &net.OpError{Op: "close", Net: "rdma", Addr: c.raddrOrNil(), Err: channel.ErrNotConnected}
	}
	c.finWanted = true
	c.pump()
	return nil
}

// signal reports ops ready to the connection's selector (through sink on
// the selecting goroutine of that selector) and wakes blocked operations.
func (c *Conn) signal(ops selectionkey.Ops, sink *selector.Sink) {
	c.mu.Lock()
	if ops&selectionkey.OpRead != 0 {
		c.readq.wake()
	}
	if ops&selectionkey.OpWrite != 0 {
		c.writeq.wake()
	}
	if ops&selectionkey.OpConnect != 0 {
		c.connq.wake()
	}
	c.mu.Unlock()
	if r := c.reg.Load(); r != nil {
		if sink != nil && sink.Selector() == r.Selector() {
			sink.Ready(r, ops)
		} else {
			r.Ready(ops)
		}
	}
}

// wait blocks on q until it is woken. The caller holds c.mu; wait returns
// with it released.
//
// A goroutine blocked on a queue pair whose completions the transport's
// own poller handles just sleeps on q's condition variable, which costs no
// allocation. One whose queue pair uses the completion queue of an
// application's selector cannot count on that selector to be selecting:
// it polls the queue itself while it waits, backing off up to a
// millisecond, and wakes early on q's channel.
func (c *Conn) wait(q *waitq) {
	e := c.eng
	if e == nil || e.home.Load() {
		q.cond.Wait()
		c.mu.Unlock()
		return
	}
	ch := q.arm()
	c.mu.Unlock()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for d := 20 * time.Microsecond; ; d = min(2*d, time.Millisecond) {
		e.help()
		timer.Reset(d)
		select {
		case <-ch:
			return
		case <-timer.C:
		}
	}
}

// wake wakes every blocked operation. The caller holds c.mu.
func (c *Conn) wake() {
	c.readq.wake()
	c.writeq.wake()
	c.connq.wake()
}

// A waitq wakes all the goroutines waiting for one condition, so that
// concurrent Receives (or Sends) never miss a wake-up. A change of the
// condition wakes it under the lock that guards the condition. A waiter
// either waits on cond (whose L is that lock) or arms the channel under
// the lock and waits on it after unlocking: the channel serves waits that
// must also watch a timer or a context, at the cost of an allocation per
// wake-up.
type waitq struct {
	cond sync.Cond
	ch   chan struct{}
}

func (q *waitq) arm() <-chan struct{} {
	if q.ch == nil {
		q.ch = make(chan struct{})
	}
	return q.ch
}

func (q *waitq) wake() {
	if q.cond.L != nil {
		q.cond.Broadcast()
	}
	if q.ch != nil {
		close(q.ch)
		q.ch = nil
	}
}

func (c *Conn) closedErr(op string) error {
	return &net.OpError{Op: op, Net: "rdma", Source: c.LocalAddr(), Addr: c.raddrOrNil(), Err: net.ErrClosed}
}

// Close implements channel.Conn. Messages already queued still go out,
// followed by a FIN, for up to Config.Linger; then the connection is
// disconnected and its queue pair, buffers and event channel released.
// Operations blocked on the connection return errors that satisfy
// errors.Is(err, net.ErrClosed).
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for c.inbox.len() > 0 {
		c.inbox.pop().Release()
		c.toReturn++
		if c.eng != nil && c.eng.srq != nil {
			c.eng.srq.give(1)
		}
	}
	if c.connTimer != nil {
		c.connTimer.Stop()
	}
	c.wake()
	l := c.listener
	c.listener = nil
	var teardown bool
	switch {
	case !c.qp.Valid():
		teardown = true
	case c.state == stateEstablished && c.err == nil && !c.draining:
		// Also after the peer's FIN: it closed for writing only, and
		// reads until ours.
		c.finWanted = true
		c.pump()
		if c.finSent && c.tail > c.finSeq {
			// CloseWrite's FIN has arrived already.
			c.disconnectLocked()
			teardown = c.drainedLocked()
			break
		}
		c.linger = time.AfterFunc(c.t.cfg.Linger, func() {
			c.mu.Lock()
			c.dropQueue()
			c.disconnectLocked()
			c.checkDrained()
		})
	default:
		c.dropQueue()
		c.disconnectLocked()
		teardown = c.drainedLocked()
	}
	c.mu.Unlock()
	if r := c.reg.Load(); r != nil {
		r.Key().Cancel()
	}
	if l != nil {
		l.abandoned(c)
	}
	if teardown {
		go c.teardown() // as in checkDrained: Close may run on a selecting goroutine
	}
	return nil
}

// testHookTeardown, if set, runs at the start of every teardown.
var testHookTeardown atomic.Pointer[func(*Conn)]

// teardown releases the connection's resources. The queue pair must have
// no work request outstanding, or never have been connected.
func (c *Conn) teardown() {
	if hook := testHookTeardown.Load(); hook != nil {
		(*hook)(c)
	}
	c.cm.mu.Lock()
	defer c.cm.mu.Unlock()
	c.mu.Lock()
	if c.torn {
		c.mu.Unlock()
		return
	}
	c.torn = true
	c.closed = true
	if c.linger != nil {
		c.linger.Stop()
	}
	if c.retry != nil {
		c.retry.Stop()
	}
	e := c.eng
	if e != nil {
		e.remove(c)
		if e.srq != nil {
			e.srq.give(c.granted + ctrlCredits)
		}
	}
	for i, b := range c.slots {
		if b != nil {
			b.Release()
			c.slots[i] = nil
		}
	}
	for i, b := range c.sq {
		if b != nil {
			b.Release()
			c.sq[i] = nil
		}
	}
	c.dropQueue()
	for c.inbox.len() > 0 {
		c.inbox.pop().Release()
	}
	opened := c.state == stateEstablished
	c.mu.Unlock()
	if c.qp.Valid() {
		c.id.DestroyQP()
		liveQPs.Add(-1)
	}
	if e != nil {
		c.t.mu.Lock()
		e.cqeUsed -= c.t.cfg.cqEntries()
		c.t.mu.Unlock()
		c.t.engineDone(e)
	}
	c.cm.destroyLocked(c.id)
	if opened {
		c.t.closedConns.Add(1)
	}
	c.t.untrack(c)
}
