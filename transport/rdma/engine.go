//go:build linux && cgo

package rdma

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// Work request IDs carry what they are in their top bits and an index
// below.
const (
	wrKindShift = 60
	wrRecv      = 1 << wrKindShift // index: the connection's receive slot
	wrSRQ       = 2 << wrKindShift // index: the shared receive queue's slot
	wrSend      = 3 << wrKindShift // index: the connection's send sequence number
	wrIndexMask = 1<<wrKindShift - 1
)

// An engine is a completion queue with its completion channel, and
// optionally a shared receive queue, serving the queue pairs of one device
// made for one selector. It is that selector's event source: the selector
// polls it while spinning, arms it before sleeping and hands it the
// channel's events. All polling happens on the selecting goroutine.
type engine struct {
	t   *Transport
	dev *device
	ch  verbs.CompChannel
	cq  verbs.CQ
	srq *sharedRQ // nil unless Config.SharedReceiveQueue

	sel atomic.Pointer[selector.Selector] // the selector the engine is a source of; set under t.mu

	// Guarded by t.mu.
	refs    int // queue pairs using the queue
	cqeUsed int // completion entries promised to queue pairs

	conns   atomic.Pointer[map[uint32]*Conn] // by queue pair number; copied on write
	connsMu sync.Mutex                       // serializes writers of conns

	// pollMu guards polling: the selecting goroutine holds it, or a
	// goroutine blocked on a channel whose selector may not be selecting
	// (help).
	pollMu  sync.Mutex
	wcs     [verbs.Batch]verbs.WC
	stashed int // completions polled by Arm, not yet dispatched
	// Completion channel events not yet acknowledged; only Handle, on
	// the selecting goroutine, and release touch it, pollMu held or not.
	unacked int
	// armWanted: the selector found pollMu held when it armed, and went
	// to sleep; whoever holds pollMu arms the queue as it lets go
	// (unlockPoll).
	armWanted atomic.Bool

	// Connections whose credit update waits for the next poll (see
	// Conn.deferUpdateLocked). pendMu is taken under a Conn's mu, never
	// the other way round.
	pendMu  sync.Mutex
	pending []*Conn
	hasPend atomic.Bool
	flushed []*Conn // the previous pending, reused; guarded by pollMu

	// Counters, for tests and debugging.
	completions, strays, arms atomic.Uint64

	home      atomic.Bool // polled by the transport's own selector: destroyed when refs drop to 0
	dying     atomic.Bool
	gone      atomic.Bool // destroyed
	destroyed sync.Once
}

func newEngine(t *Transport, dev *device, sel *selector.Selector) (*engine, error) {
	ch, err := verbs.CreateCompChannel(dev.ctx)
	if err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	cq, err := verbs.CreateCQ(dev.ctx, t.cfg.CQSize, ch)
	if err != nil {
		ch.Destroy()
		return nil, fmt.Errorf("rdma: %w", err)
	}
	e := &engine{t: t, dev: dev, ch: ch, cq: cq}
	e.sel.Store(sel)
	e.home.Store(sel == t.home)
	e.conns.Store(&map[uint32]*Conn{})
	if t.cfg.SharedReceiveQueue {
		if e.srq, err = newSharedRQ(e); err != nil {
			cq.Destroy()
			ch.Destroy()
			return nil, err
		}
		e.cqeUsed = t.cfg.srqEntries()
	}
	if err = cq.ReqNotify(); err == nil {
		err = sel.AddSource(e, selector.EventIn)
	}
	if err != nil {
		e.release()
		return nil, fmt.Errorf("rdma: %w", err)
	}
	liveCQs.Add(1)
	return e, nil
}

// reserve promises a queue pair its completion entries; false if the
// queue is full. The caller holds t.mu.
func (e *engine) reserve(n int) bool {
	if e.cqeUsed+n > e.t.cfg.CQSize {
		return false
	}
	e.cqeUsed += n
	return true
}

func (e *engine) add(c *Conn) {
	e.connsMu.Lock()
	defer e.connsMu.Unlock()
	old := *e.conns.Load()
	m := make(map[uint32]*Conn, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[c.qpn] = c
	e.conns.Store(&m)
}

func (e *engine) remove(c *Conn) {
	e.connsMu.Lock()
	defer e.connsMu.Unlock()
	old := *e.conns.Load()
	if old[c.qpn] != c {
		return
	}
	m := make(map[uint32]*Conn, len(old))
	for k, v := range old {
		if v != c {
			m[k] = v
		}
	}
	e.conns.Store(&m)
}

// FD implements selector.Source: the completion channel's descriptor.
func (e *engine) FD() int { return e.ch.FD() }

// Handle implements selector.Source: it takes the channel's events,
// acknowledging them in batches, and polls the queue.
func (e *engine) Handle(_ uint32, sink *selector.Sink) {
	// The events are taken even while a helper polls: left, they would
	// keep the descriptor readable and the selector awake.
	if !e.gone.Load() {
		n, _ := e.ch.Events()
		e.unacked += n
	}
	if !e.pollMu.TryLock() {
		return // a helper is polling; it reports what it finds
	}
	defer e.unlockPoll()
	if e.finishIfDying() {
		return
	}
	if e.unacked >= 64 {
		e.cq.Ack(e.unacked)
		e.unacked = 0
	}
	e.poll(sink)
}

// Poll implements selector.Poller.
func (e *engine) Poll(sink *selector.Sink) bool {
	if !e.pollMu.TryLock() {
		return false
	}
	defer e.unlockPoll()
	if e.finishIfDying() {
		return false
	}
	return e.poll(sink)
}

// help polls the queue for a goroutine blocked on one of its channels,
// unless the selector is polling it right now.
func (e *engine) help() {
	if !e.pollMu.TryLock() {
		return
	}
	defer e.unlockPoll()
	if !e.dying.Load() {
		e.poll(nil)
	}
}

// Arm implements selector.Poller: it asks for an event on the next
// completion and then looks once more, since a completion that arrived
// before the request raises no event.
//
// If a helper is polling, the selector may sleep all the same: the helper
// arms the queue as it lets go of it. Reporting a race instead would keep
// the selector polling for as long as a blocked reader spins on the
// queue, and on one processor the selector would hold it from the
// reader.
func (e *engine) Arm() bool {
	if !e.pollMu.TryLock() {
		e.armWanted.Store(true)
		if !e.pollMu.TryLock() {
			// The holder lets go after the store above, and then sees it.
			return false
		}
	}
	e.armWanted.Store(false)
	defer e.unlockPoll()
	return e.armLocked()
}

// armLocked arms the queue; true if the selector must poll before it
// sleeps. The caller holds pollMu.
func (e *engine) armLocked() bool {
	if e.dying.Load() {
		return !e.gone.Load() // the next poll destroys the engine
	}
	if e.stashed > 0 {
		return true
	}
	e.flushUpdates(nil)
	e.arms.Add(1)
	if err := e.cq.ReqNotify(); err != nil {
		return true
	}
	n, err := e.cq.Poll(e.wcs[:])
	if err != nil || n == 0 {
		return false
	}
	e.stashed = n
	return true
}

// unlockPoll lets go of pollMu, and first arms the queue if the selector
// went to sleep while it was held. If arming finds that the selector must
// poll after all, Nudge makes it.
func (e *engine) unlockPoll() {
	for {
		e.pollMu.Unlock()
		if !e.armWanted.Load() || !e.pollMu.TryLock() {
			return // nothing wanted, or the new holder sees it as it lets go
		}
		if e.armWanted.Swap(false) && e.armLocked() {
			if s := e.sel.Load(); s != nil {
				s.Nudge()
			}
		}
	}
}

// poll dispatches completions until the queue is empty or a few batches
// have been handled, and reports whether there were any.
func (e *engine) poll(sink *selector.Sink) bool {
	e.flushUpdates(sink)
	found := false
	for range 16 {
		n := e.stashed
		e.stashed = 0
		if n == 0 {
			var err error
			if n, err = e.cq.Poll(e.wcs[:]); err != nil || n == 0 {
				break
			}
		}
		found = true
		e.dispatch(e.wcs[:n], sink)
		if n < len(e.wcs) {
			break
		}
	}
	if e.srq != nil {
		e.srq.refill()
	}
	e.finishIfDying()
	return found
}

// deferUpdate has c's credit update sent by the next poll or arm of the
// queue, unless a message carries the credits first. The caller holds
// c.mu.
func (e *engine) deferUpdate(c *Conn) {
	e.pendMu.Lock()
	e.pending = append(e.pending, c)
	e.hasPend.Store(true)
	e.pendMu.Unlock()
	if s := e.sel.Load(); s != nil {
		s.Nudge()
	}
}

// flushUpdates sends the credit updates that are still due of the
// connections deferUpdate named. The caller holds pollMu.
func (e *engine) flushUpdates(sink *selector.Sink) {
	if !e.hasPend.Load() {
		return
	}
	e.pendMu.Lock()
	conns := e.pending
	e.pending = e.flushed[:0]
	e.hasPend.Store(false)
	e.pendMu.Unlock()
	for i, c := range conns {
		c.mu.Lock()
		c.updateDeferred = false
		drained := c.pump()
		c.mu.Unlock()
		if drained {
			c.signal(selectionkey.OpWrite, sink)
		}
		conns[i] = nil
	}
	e.flushed = conns[:0]
}

func (e *engine) dispatch(wcs []verbs.WC, sink *selector.Sink) {
	conns := *e.conns.Load()
	e.completions.Add(uint64(len(wcs)))
	for i := range wcs {
		wc := &wcs[i]
		c := conns[wc.QPNum]
		if c == nil {
			e.strays.Add(1)
		}
		switch wc.WRID &^ wrIndexMask {
		case wrSRQ:
			buf := e.srq.take(int(wc.WRID & wrIndexMask))
			if c == nil {
				if buf != nil {
					buf.Release()
				}
				continue
			}
			c.onRecv(wc, buf, sink)
		case wrRecv:
			if c != nil {
				c.onRecv(wc, nil, sink)
			}
		case wrSend:
			if c != nil {
				c.onSend(wc, sink)
			}
		}
	}
}

// SelectorClosed implements selector.Closer: queue pairs may still use the
// queue, so the transport's own selector takes it over.
func (e *engine) SelectorClosed(s *selector.Selector) {
	t := e.t
	t.mu.Lock()
	if e.sel.Load() != s {
		t.mu.Unlock()
		return
	}
	e.sel.Store(t.home)
	e.home.Store(true)
	idle := e.refs == 0
	t.mu.Unlock()
	t.engineMoved(e, s)
	if idle || t.home.AddSource(e, selector.EventIn) != nil {
		e.dying.Store(true)
		t.mu.Lock()
		for k, v := range t.engines {
			if v == e {
				delete(t.engines, k)
			}
		}
		t.mu.Unlock()
		e.destroy()
		return
	}
	// Conns registered elsewhere may have been told of readiness that
	// now nobody polls for; a home select picks it up.
	t.home.Wakeup()
}

// kill marks the engine for destruction by its selecting goroutine.
func (e *engine) kill() {
	e.dying.Store(true)
	if sel := e.sel.Load(); sel != nil {
		sel.Wakeup()
	}
}

func (e *engine) finishIfDying() bool {
	if !e.dying.Load() || e.gone.Load() {
		return e.gone.Load()
	}
	if !e.dying.Load() {
		return false
	}
	e.destroy()
	return true
}

// destroy releases the engine. It runs on the selecting goroutine, or
// when no select can run any more.
func (e *engine) destroy() {
	e.destroyed.Do(func() {
		if sel := e.sel.Load(); sel != nil {
			_ = sel.RemoveSource(e)
		}
		e.release()
		e.gone.Store(true)
		liveCQs.Add(-1)
	})
}

func (e *engine) release() {
	if e.unacked > 0 {
		e.cq.Ack(e.unacked)
		e.unacked = 0
	}
	if n, _ := e.ch.Events(); n > 0 {
		e.cq.Ack(n)
	}
	_ = e.cq.Destroy()
	if e.srq != nil {
		e.srq.destroy()
	}
	_ = e.ch.Destroy()
}

// A sharedRQ is a shared receive queue with its posted buffers and the
// bookkeeping of the credits its connections hold.
type sharedRQ struct {
	e     *engine
	srq   verbs.SRQ
	mu    sync.Mutex
	slots []*bufpool.Buffer // posted buffers by slot; nil: to be posted
	empty []int             // slots to post once buffers are available
	avail int               // receives not promised to any peer
	retry *time.Timer
	wrs   [verbs.Batch]verbs.Recv
}

func newSharedRQ(e *engine) (*sharedRQ, error) {
	n := e.t.cfg.SRQSize
	srq, err := verbs.CreateSRQ(e.dev.pd, n)
	if err != nil {
		return nil, fmt.Errorf("rdma: %w", err)
	}
	s := &sharedRQ{e: e, srq: srq, slots: make([]*bufpool.Buffer, n), avail: n}
	for i := range n {
		s.empty = append(s.empty, i)
	}
	s.mu.Lock()
	err = s.postEmpty()
	s.mu.Unlock()
	if err != nil {
		s.destroy()
		return nil, err
	}
	return s, nil
}

// take removes the buffer of a completed receive; its slot is posted
// again by the next refill.
func (s *sharedRQ) take(i int) *bufpool.Buffer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.slots) {
		return nil
	}
	b := s.slots[i]
	s.slots[i] = nil
	if b != nil {
		s.empty = append(s.empty, i)
	}
	return b
}

// refill posts fresh buffers into the empty slots.
func (s *sharedRQ) refill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.empty) > 0 {
		_ = s.postEmpty()
	}
}

// postEmpty posts buffers into empty slots while the pool has them; if it
// runs dry, a timer tries again.
func (s *sharedRQ) postEmpty() error {
	t := s.e.t
	for len(s.empty) > 0 {
		n := 0
		for n < len(s.wrs) && len(s.empty) > 0 {
			b, err := t.pool.TryGet()
			if err != nil {
				break
			}
			i := s.empty[len(s.empty)-1]
			s.empty = s.empty[:len(s.empty)-1]
			s.slots[i] = b
			full := b.Full()
			s.wrs[n] = verbs.Recv{WRID: wrSRQ | uint64(i), Addr: addrOf(full), Length: uint32(len(full)), LKey: t.lkey(b, s.e.dev)}
			n++
		}
		if n == 0 {
			s.retryLater()
			return nil
		}
		if err := s.srq.PostRecv(s.wrs[:n]); err != nil {
			for _, wr := range s.wrs[:n] {
				i := int(wr.WRID & wrIndexMask)
				s.slots[i].Release()
				s.slots[i] = nil
				s.empty = append(s.empty, i)
			}
			return fmt.Errorf("rdma: %w", err)
		}
	}
	return nil
}

func (s *sharedRQ) retryLater() {
	if s.retry != nil {
		return
	}
	s.retry = time.AfterFunc(time.Millisecond, func() {
		s.mu.Lock()
		s.retry = nil
		_ = s.postEmpty()
		s.mu.Unlock()
	})
}

// grant hands out up to want receives to a peer; it returns how many.
func (s *sharedRQ) grant(want int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(want, s.avail)
	s.avail -= n
	return n
}

// give returns n receives that no peer holds any more.
func (s *sharedRQ) give(n int) {
	s.mu.Lock()
	s.avail += n
	s.mu.Unlock()
}

// spare reports whether the queue has receives to spare for peers that
// want more than they hold: a quarter stays for newcomers.
func (s *sharedRQ) spare() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.avail > len(s.slots)/4
}

func (s *sharedRQ) destroy() {
	_ = s.srq.Destroy()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retry != nil {
		s.retry.Stop()
		s.retry = nil
	}
	for i, b := range s.slots {
		if b != nil {
			b.Release()
			s.slots[i] = nil
		}
	}
	s.empty = nil
}
