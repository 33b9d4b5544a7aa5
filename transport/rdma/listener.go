//go:build linux && cgo

package rdma

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// backlog bounds the connections a listener holds before Accept takes
// them; requests beyond it are rejected.
const backlog = 512

// Listener accepts RDMA connections. It implements channel.Listener and
// selector.Selectable. Connections accepted while it is registered with a
// selector use that selector's completion queue.
type Listener struct {
	t        *Transport
	cm       *cmEvents
	id       verbs.ID
	laddr    *Addr
	blocking atomic.Bool
	reg      atomic.Pointer[selector.Registration]

	// accepting counts the connect requests handed to goroutines of
	// their own (handleEvent); Close waits for them before it destroys
	// the listener's event channel, which their IDs came from.
	accepting sync.WaitGroup

	// done is closed by Close: held refusals (refuseLater) are sent then.
	done chan struct{}

	mu       sync.Mutex // guards the fields below
	closed   bool
	held     int                // refusals refuseLater holds back
	inflight int                // connect requests being set up
	pending  map[*Conn]struct{} // accepted, handshake not finished
	ready    []*Conn            // connected, waiting for Accept
	acceptq  waitq              // blocked Accepts
}

func (t *Transport) listen(laddr *Addr) (*Listener, error) {
	l := &Listener{t: t, pending: make(map[*Conn]struct{}), done: make(chan struct{})}
	cm, err := newCMEvents(t, l)
	if err != nil {
		return nil, opError("listen", laddr, err)
	}
	l.cm = cm
	host := ""
	if laddr.IP != nil && !laddr.IP.IsUnspecified() {
		host = laddr.IP.String()
	}
	if l.id, err = verbs.CreateID(cm.ch); err == nil {
		err = l.id.Listen(host, laddr.Port, backlog)
	}
	if err == nil {
		err = t.track(l)
	}
	if err != nil {
		cm.mu.Lock()
		cm.destroyLocked(l.id)
		cm.mu.Unlock()
		return nil, opError("listen", laddr, err)
	}
	l.laddr = rdmaAddr(l.id.LocalAddr())
	if l.laddr == nil {
		l.laddr = laddr
	}
	l.blocking.Store(true)
	return l, nil
}

// handleEvent handles the listener's events: connect requests. Each new
// connection gets its own event channel, a queue pair with its receives
// posted, and an accept carrying our hello; that setup is a string of
// system calls (up to 80 ms for one connection in the Soft-RoCE VM), so
// it runs on a goroutine of its own, and the selector the listener is
// registered with goes on serving its connections meanwhile
// (TestAcceptLeavesTheSelector).
func (l *Listener) handleEvent(ev *verbs.Event, sink *selector.Sink) {
	if ev.Type != verbs.ConnectRequest {
		return
	}
	id := ev.ID
	from := peerIP(id.PeerAddr())
	if left := l.t.penalties.refused(from, time.Now()); left > 0 {
		l.refuseLater(id, min(left, maxHold), fmt.Errorf("%v broke the protocol: its connect requests are refused for %v more", from, left.Round(time.Millisecond)))
		return
	}
	l.mu.Lock()
	full := l.closed || l.inflight+len(l.pending)+len(l.ready) >= backlog
	if !full {
		l.inflight++
		l.accepting.Add(1)
	}
	l.mu.Unlock()
	_, err := decodeHello(ev.Private)
	if err != nil {
		l.t.protoErrs.Add(1)
		l.t.penalties.violated(from, time.Now())
	} else if full {
		err = fmt.Errorf("backlog of %d full, or listener closed", backlog)
	}
	if err != nil {
		if !full {
			l.acceptDone()
		}
		l.rejected(id, err)
		return
	}
	go l.accept(id, from, append([]byte(nil), ev.Private...))
}

// maxHold and maxHeld bound the refusals refuseLater holds back: how
// long each, and how many at once.
const (
	maxHold = time.Second
	maxHeld = 64
)

// refuseLater rejects the connect request on id after hold, or at once
// if maxHeld refusals are held already or the listener closes. A peer
// whose request waits for its answer asks nothing else meanwhile: a
// penalized peer that connects again as soon as it is refused (see
// penalties) so asks at most once per hold, instead of as fast as the
// server can refuse.
func (l *Listener) refuseLater(id verbs.ID, hold time.Duration, why error) {
	l.mu.Lock()
	later := !l.closed && l.held < maxHeld
	if later {
		l.held++
		l.accepting.Add(1)
	}
	l.mu.Unlock()
	if !later {
		l.rejected(id, why)
		return
	}
	go func() {
		defer l.accepting.Done()
		timer := time.NewTimer(hold)
		select {
		case <-timer.C:
		case <-l.done:
			timer.Stop()
		}
		l.rejected(id, why)
		l.mu.Lock()
		l.held--
		l.mu.Unlock()
	}()
}

// testHookAccept, if set, runs at the start of every accept's setup.
var testHookAccept atomic.Pointer[func(*Listener)]

// acceptDone ends the count of a connect request handed off.
func (l *Listener) acceptDone() {
	l.mu.Lock()
	l.inflight--
	l.mu.Unlock()
	l.accepting.Done()
}

// accept sets up the connection a peer asked for on id with its hello.
func (l *Listener) accept(id verbs.ID, from netip.Addr, hello []byte) {
	defer l.acceptDone()
	if hook := testHookAccept.Load(); hook != nil {
		(*hook)(l)
	}
	t := l.t
	c, err := t.newConn(nil)
	if err != nil {
		l.rejected(id, err)
		return
	}
	if err := id.Migrate(c.cm.ch); err != nil {
		l.rejected(id, err)
		c.teardown()
		return
	}
	c.id = id
	c.listener = l
	c.from = from
	var sel *selector.Selector
	if r := l.reg.Load(); r != nil {
		sel = r.Selector()
	}
	if err := c.setupQP(sel); err != nil {
		// id is the connection's now: its teardown destroys it, after
		// the queue pair setupQP may have made on it.
		l.refused(id, err)
		c.teardown()
		return
	}
	c.mu.Lock()
	c.state = stateAccepting
	c.peerHello = hello
	// A peer that never completes the handshake holds the queue pair
	// and its receives no longer than an active connect may take.
	c.connTimer = time.AfterFunc(t.cfg.ConnectTimeout, func() {
		c.connectFailed(syscall.ETIMEDOUT, nil)
	})
	c.mu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.refused(id, fmt.Errorf("listener closed"))
		c.mu.Lock()
		c.listener = nil
		c.connTimer.Stop()
		c.mu.Unlock()
		c.teardown()
		return
	}
	l.pending[c] = struct{}{}
	l.mu.Unlock()
	if err := id.Accept(c.hello().encode()); err != nil {
		l.abandoned(c)
		c.mu.Lock()
		c.listener = nil
		c.mu.Unlock()
		c.teardown()
	}
}

// rejected turns a connect request down and records why, for
// Transport.LastReject.
func (l *Listener) rejected(id verbs.ID, why error) {
	l.refused(id, why)
	_ = id.Destroy()
}

// refused rejects the connect request on id, which the caller destroys,
// and records why.
func (l *Listener) refused(id verbs.ID, why error) {
	_ = id.Reject()
	l.t.rejects.Add(1)
	l.t.lastReject.Store(&why)
}

// established moves a connection whose handshake finished to the accept
// queue.
func (l *Listener) established(c *Conn) {
	l.mu.Lock()
	if _, ok := l.pending[c]; !ok || l.closed {
		l.mu.Unlock()
		go c.Close()
		return
	}
	delete(l.pending, c)
	l.ready = append(l.ready, c)
	l.acceptq.wake()
	l.mu.Unlock()
	if r := l.reg.Load(); r != nil {
		r.Ready(selectionkey.OpAccept)
	}
}

// abandoned forgets a connection that failed or closed before Accept.
func (l *Listener) abandoned(c *Conn) {
	l.mu.Lock()
	delete(l.pending, c)
	for i, r := range l.ready {
		if r == c {
			l.ready = append(l.ready[:i], l.ready[i+1:]...)
			break
		}
	}
	l.mu.Unlock()
}

// Accept implements channel.Listener. The connection is in blocking mode.
func (l *Listener) Accept() (channel.Conn, error) {
	c, err := l.AcceptRDMA()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// AcceptRDMA is Accept returning the concrete type.
func (l *Listener) AcceptRDMA() (*Conn, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, &net.OpError{Op: "accept", Net: "rdma", Addr: l.laddr, Err: net.ErrClosed}
		}
		if len(l.ready) > 0 {
			c := l.ready[0]
			l.ready = l.ready[1:]
			l.mu.Unlock()
			c.mu.Lock()
			c.listener = nil
			c.finished = true
			c.mu.Unlock()
			c.blocking.Store(true)
			return c, nil
		}
		if !l.blocking.Load() {
			l.mu.Unlock()
			return nil, channel.ErrWouldBlock
		}
		wait := l.acceptq.arm()
		l.mu.Unlock()
		<-wait
	}
}

// Close implements channel.Channel; connections not yet accepted are
// closed too.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	conns := l.ready
	l.ready = nil
	for c := range l.pending {
		conns = append(conns, c)
	}
	clear(l.pending)
	l.acceptq.wake()
	l.mu.Unlock()
	close(l.done)
	if r := l.reg.Load(); r != nil {
		r.Key().Cancel()
	}
	for _, c := range conns {
		c.Close()
	}
	l.accepting.Wait()
	l.cm.mu.Lock()
	l.cm.destroyLocked(l.id)
	l.cm.mu.Unlock()
	l.t.untrack(l)
	return nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.laddr }

// LocalAddr implements channel.Channel.
func (l *Listener) LocalAddr() net.Addr { return l.laddr }

// SetBlocking implements channel.Channel.
func (l *Listener) SetBlocking(block bool) error {
	if block && l.reg.Load() != nil {
		return channel.ErrRegistered
	}
	l.blocking.Store(block)
	return nil
}

// IsBlocking implements channel.Channel.
func (l *Listener) IsBlocking() bool { return l.blocking.Load() }

// ValidOps implements selector.Selectable.
func (l *Listener) ValidOps() selectionkey.Ops { return selectionkey.OpAccept }

// ReadyOps implements selector.Selectable.
func (l *Listener) ReadyOps() selectionkey.Ops {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ready) > 0 || l.closed {
		return selectionkey.OpAccept
	}
	return 0
}

// SelectorHooks implements selector.Selectable.
func (l *Listener) SelectorHooks() selector.Hooks { return (*listenerHooks)(l) }

// listenerHooks is a Listener as its selector sees it, as connHooks is a
// Conn.
type listenerHooks Listener

var _ selector.Hooks = (*listenerHooks)(nil)

// Bind implements selector.Hooks.
func (h *listenerHooks) Bind(r *selector.Registration) error {
	l := (*Listener)(h)
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return &net.OpError{Op: "register", Net: "rdma", Addr: l.laddr, Err: net.ErrClosed}
	}
	if !l.reg.CompareAndSwap(nil, r) {
		return errRegisteredTwice
	}
	if err := l.cm.moveTo(r.Selector()); err != nil {
		l.reg.Store(nil)
		return err
	}
	if ops := l.ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
	return nil
}

// InterestChanged implements selector.Hooks.
func (h *listenerHooks) InterestChanged(r *selector.Registration) {
	l := (*Listener)(h)
	if ops := l.ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
}

// Unbind implements selector.Hooks.
func (h *listenerHooks) Unbind(r *selector.Registration) {
	l := (*Listener)(h)
	if l.reg.CompareAndSwap(r, nil) {
		_ = l.cm.moveTo(nil)
	}
}
