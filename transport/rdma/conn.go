//go:build linux && cgo

package rdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// Connection states.
const (
	stateAddr        = iota // resolving the address
	stateRoute              // resolving the route
	stateConnecting         // connect sent, waiting for the peer
	stateAccepting          // accept sent, waiting for the handshake to finish
	stateEstablished        // connected
	stateFailed             // the connect failed: connErr
)

var errRegisteredTwice = errors.New("rdma: channel already registered with a selector")

// Conn is an RDMA connection: a reliable-connected queue pair carrying
// messages with two-sided sends. It implements channel.Conn and
// selector.Selectable.
type Conn struct {
	t        *Transport
	cm       *cmEvents
	id       verbs.ID
	laddr    atomic.Pointer[Addr]
	raddr    atomic.Pointer[Addr]
	blocking atomic.Bool
	max      atomic.Int64 // largest message in either direction
	reg      atomic.Pointer[selector.Registration]
	listener *Listener // for a passive connection until it is accepted

	// Guarded by cm.mu: an active connection makes its queue pair when
	// its route is resolved, on the completion queue of the selector it is
	// registered with. Until it is registered, or told to go on without
	// a selector (homeOK), it holds there.
	held   bool // route resolved, queue pair not made yet
	homeOK bool // the transport's own completion queue will do

	// Set once the queue pair exists, before it is used.
	eng    *engine
	qp     verbs.QP
	qpn    uint32
	inline int

	mu        sync.Mutex // guards the fields below
	state     int
	connErr   error // why the connect failed
	err       error // why the connection broke
	closed    bool  // Close was called
	torn      bool  // resources released
	peerDone  bool
	peerFIN   bool
	finished  bool   // FinishConnect reported the connect done
	peerHello []byte // a passive connection's, from the connect request
	connTimer *time.Timer

	// Receiving.
	slots       []*bufpool.Buffer // posted receive buffers (no SRQ), nil: empty slot
	empty       []int             // empty slots, to post when the pool has buffers
	posted      int               // receives posted on the queue pair and not completed
	inbox       ring              // received messages
	granted     int               // data credits the peer holds (sent less received)
	toReturn    int               // messages taken by the application, credits not yet returned
	quiet       int               // paid control messages received, credits not yet returned
	ctrlOwed    int               // credit updates received, not yet restored to the peer
	peerCredits int               // most data credits the peer may ever hold
	window      int               // data receives kept posted (no SRQ); grows up to RecvDepth
	widened     int               // credits of a widened window, not yet granted
	starved     bool              // the peer said credits held it back
	retry       *time.Timer       // posts receives once the pool has buffers again

	// Sending.
	credits     int // data credits we hold
	ctrl        int // control credits we hold
	maxCredits  int // most data credits the peer said it grants
	queue       ring
	queued      int               // bytes in queue
	sq          []*bufpool.Buffer // buffers of outstanding sends, by sequence number
	head, tail  uint64            // next sequence number to post; oldest not completed
	sinceSignal int
	finWanted   bool // Close or CloseWrite: a FIN follows the queue, Send fails
	finSent     bool
	finSeq      uint64 // the FIN's sequence number, once sent
	draining    bool   // disconnected; waiting for the queue pair's work requests to flush
	linger      *time.Timer

	wrs     [verbs.Batch]verbs.Send
	rwrs    [verbs.Batch]verbs.Recv
	inlined []*bufpool.Buffer // sent inline by the post in progress

	readq, writeq, connq waitq // blocked Receive, Send and Flush, connect
}

func (t *Transport) newConn(raddr *Addr) (*Conn, error) {
	c := &Conn{
		t: t,
	}
	c.readq.cond.L = &c.mu
	c.writeq.cond.L = &c.mu
	c.max.Store(int64(t.cfg.MaxMessageSize))
	if raddr != nil {
		c.raddr.Store(raddr)
	}
	cm, err := newCMEvents(t, c)
	if err != nil {
		return nil, err
	}
	c.cm = cm
	if err := t.track(c); err != nil {
		cm.destroy()
		return nil, err
	}
	return c, nil
}

// connect starts an active connection.
func (t *Transport) connect(raddr *Addr) (*Conn, error) {
	c, err := t.newConn(raddr)
	if err != nil {
		return nil, opError("dial", raddr, err)
	}
	// The state is stateAddr from here on, until the events that follow
	// ResolveAddr, which may be handled before it returns, move it on.
	c.mu.Lock()
	c.connTimer = time.AfterFunc(t.cfg.ConnectTimeout, func() {
		c.connectFailed(syscall.ETIMEDOUT, nil)
	})
	c.mu.Unlock()
	if c.id, err = verbs.CreateID(c.cm.ch); err == nil {
		host := ""
		if raddr.IP != nil {
			host = raddr.IP.String()
		}
		err = c.id.ResolveAddr(host, raddr.Port, int(t.cfg.ConnectTimeout/time.Millisecond))
	}
	if err != nil {
		c.teardown()
		return nil, opError("dial", raddr, err)
	}
	return c, nil
}

// handleEvent handles a connection-manager event for the connection. The
// caller holds c.cm.mu.
func (c *Conn) handleEvent(ev *verbs.Event, sink *selector.Sink) {
	switch ev.Type {
	case verbs.AddrResolved:
		if err := c.id.ResolveRoute(int(c.t.cfg.ConnectTimeout / time.Millisecond)); err != nil {
			c.connectFailed(err, sink)
			return
		}
		c.mu.Lock()
		c.state = stateRoute
		c.mu.Unlock()
	case verbs.RouteResolved:
		if c.reg.Load() == nil && !c.homeOK {
			c.held = true // Bind or proceed goes on
			return
		}
		c.startConnect(sink)
	case verbs.Established:
		c.established(ev.Private, sink)
	case verbs.AddrError, verbs.RouteError, verbs.Unreachable, verbs.ConnectError, verbs.Rejected:
		c.connectFailed(eventError(ev), sink)
	case verbs.Disconnected, verbs.DeviceRemoval:
		c.disconnected(sink)
	}
}

// startConnect makes the queue pair, on the completion queue of the
// selector the connection is registered with (or the transport's own),
// and sends the connect request. The caller holds c.cm.mu.
func (c *Conn) startConnect(sink *selector.Sink) {
	c.held = false
	var sel *selector.Selector
	if r := c.reg.Load(); r != nil {
		sel = r.Selector()
	}
	if err := c.setupQP(sel); err != nil {
		c.connectFailed(err, sink)
		return
	}
	if err := c.id.Connect(c.hello().encode()); err != nil {
		c.connectFailed(err, sink)
		return
	}
	c.mu.Lock()
	c.state = stateConnecting
	c.mu.Unlock()
}

// proceed lets a connect that is not registered with a selector go on,
// on the transport's own completion queue: a blocking Dial, or
// FinishConnect on an unregistered connection.
func (c *Conn) proceed() {
	c.cm.mu.Lock()
	defer c.cm.mu.Unlock()
	c.homeOK = true
	if c.held && !c.cm.dead {
		c.startConnect(nil)
	}
}

// eventError turns a failure event into an error like the socket's.
func eventError(ev *verbs.Event) error {
	var errno syscall.Errno
	switch ev.Type {
	case verbs.Rejected:
		errno = syscall.ECONNREFUSED
	case verbs.Unreachable:
		errno = syscall.EHOSTUNREACH
	case verbs.AddrError:
		errno = syscall.EADDRNOTAVAIL
	case verbs.RouteError:
		errno = syscall.ENETUNREACH
	default:
		errno = syscall.ECONNABORTED
	}
	if ev.Status < 0 && ev.Type != verbs.Rejected {
		errno = syscall.Errno(-ev.Status)
	}
	return fmt.Errorf("%s: %w", ev.Type, errno)
}

// hello is what the connection tells its peer when it connects or accepts.
func (c *Conn) hello() hello {
	h := hello{maxMessage: c.t.cfg.MaxMessageSize, credits: c.granted, ctrlCredits: ctrlCredits, maxCredits: c.peerCredits}
	return h
}

// setupQP creates the queue pair on the completion queue of sel (or the
// home selector) and posts its receives, granting the peer its first
// credits.
func (c *Conn) setupQP(sel *selector.Selector) error {
	t := c.t
	dev, err := t.deviceOf(c.id)
	if err != nil {
		return err
	}
	cfg := t.cfg
	e, err := t.engineFor(sel, dev, cfg.cqEntries())
	if err != nil {
		return err
	}
	recvWR := cfg.RecvDepth + ctrlCredits
	undo := func() {
		t.mu.Lock()
		e.cqeUsed -= cfg.cqEntries()
		t.mu.Unlock()
		t.engineDone(e)
	}
	var srq verbs.SRQ
	if e.srq != nil {
		srq = e.srq.srq
	}
	inline, err := c.id.CreateQP(verbs.QPConfig{PD: dev.pd, CQ: e.cq, SRQ: srq, SendWR: cfg.SendDepth, RecvWR: recvWR, InlineData: cfg.Inline})
	if err != nil {
		undo()
		return err
	}
	liveQPs.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eng, c.qp, c.inline = e, c.id.QP(), min(inline, cfg.Inline)
	c.qpn = c.qp.Num()
	c.sq = make([]*bufpool.Buffer, cfg.SendDepth)
	if e.srq != nil {
		// One data credit at least, more while the queue has plenty; a
		// control credit always.
		g := e.srq.grant(ctrlCredits + 1)
		if g < ctrlCredits+1 {
			e.srq.give(g)
			c.eng = nil
			return fmt.Errorf("rdma: shared receive queue full (%d receives): raise Config.SRQSize", cfg.SRQSize)
		}
		c.granted = 1
		if e.srq.spare() {
			c.granted += e.srq.grant(cfg.PeerCredits/2 - 1)
		}
		c.peerCredits = cfg.PeerCredits
		c.window = cfg.PeerCredits
	} else {
		// The window starts small and widens when the peer says that
		// credits held it back (widenLocked): an idle connection holds
		// two receive buffers, a busy one up to RecvDepth + 1.
		c.slots = make([]*bufpool.Buffer, recvWR)
		c.window = min(initialWindow, cfg.RecvDepth)
		for i := range c.window + ctrlCredits {
			c.empty = append(c.empty, i)
		}
		c.postReceives()
		if len(c.empty) > 0 {
			return fmt.Errorf("rdma: %d receive buffers: %w", c.window+ctrlCredits, bufpool.ErrExhausted)
		}
		c.granted = c.window
		c.peerCredits = cfg.RecvDepth
	}
	e.add(c)
	return nil
}

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

// maxQueued bounds the messages a connection queues for credits, whatever
// their size, beside Config.SendQueue's bound on their bytes.
const maxQueued = 128

// initialWindow is how many data credits a connection without a shared
// receive queue grants at first.
const initialWindow = 1

// widenLocked doubles the receive window, up to RecvDepth, after the peer
// said that credits held it back, if the pool has more than half of its
// buffers to spare: what is left stays for other connections' first
// windows and for messages. The new receives' credits go out with the
// next message or credit update. The caller holds c.mu.
func (c *Conn) widenLocked() {
	c.starved = false
	cfg := &c.t.cfg
	if c.eng == nil || c.eng.srq != nil || c.window >= cfg.RecvDepth || c.torn || c.draining {
		return
	}
	add := min(c.window, cfg.RecvDepth-c.window)
	if st := c.t.pool.Stats(); st.MaxBuffers-st.InUse-add < st.MaxBuffers/2 {
		return
	}
	for i := range add {
		c.empty = append(c.empty, c.window+ctrlCredits+i)
	}
	c.window += add
	c.widened += add
	c.t.widenings.Add(1)
	c.postReceives()
}

// refillLocked posts fresh receives into the empty slots and sends the
// credits that waited for them. The caller holds c.mu.
func (c *Conn) refillLocked() {
	c.postReceives()
	c.pump()
}

// established completes the connection's handshake with the peer's hello.
func (c *Conn) established(private []byte, sink *selector.Sink) {
	c.mu.Lock()
	if c.peerHello != nil {
		private = c.peerHello
	}
	c.mu.Unlock()
	h, err := decodeHello(private)
	if err != nil {
		c.t.protoErrs.Add(1)
		c.connectFailed(err, sink)
		return
	}
	c.mu.Lock()
	if c.state != stateConnecting && c.state != stateAccepting {
		c.mu.Unlock()
		return
	}
	c.state = stateEstablished
	c.max.Store(int64(min(c.t.cfg.MaxMessageSize, h.maxMessage)))
	c.credits += h.credits
	c.ctrl += h.ctrlCredits
	c.maxCredits = h.maxCredits
	if c.credits > c.maxCredits || c.ctrl > ctrlCredits {
		c.mu.Unlock()
		c.t.protoErrs.Add(1)
		c.connectFailed(fmt.Errorf("rdma: peer granted more credits than it announced"), sink)
		return
	}
	c.pump()
	c.laddr.Store(rdmaAddr(c.id.LocalAddr()))
	if c.raddr.Load() == nil {
		c.raddr.Store(rdmaAddr(c.id.PeerAddr()))
	}
	if c.connTimer != nil {
		c.connTimer.Stop()
	}
	l := c.listener
	c.mu.Unlock()
	c.t.opened.Add(1)
	if l != nil {
		l.established(c)
		return
	}
	c.signal(selectionkey.OpConnect|selectionkey.OpWrite, sink)
}

// connectFailed ends a pending connect with err.
func (c *Conn) connectFailed(err error, sink *selector.Sink) {
	c.mu.Lock()
	if c.state == stateEstablished || c.state == stateFailed || c.closed {
		c.mu.Unlock()
		return
	}
	c.state = stateFailed
	c.connErr = opError("dial", c.raddrOrNil(), err)
	if c.connTimer != nil {
		c.connTimer.Stop()
	}
	l := c.listener
	c.mu.Unlock()
	if l != nil {
		l.abandoned(c)
		go c.Close() // not here: the caller may be handling c's events
		return
	}
	c.signal(selectionkey.OpConnect, sink)
}

func (c *Conn) raddrOrNil() net.Addr {
	if a := c.raddr.Load(); a != nil {
		return a
	}
	return nil
}

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
		if wc.Status != verbs.WCFlushErr || !c.draining {
			c.failLocked(completionError("receive", wc))
		}
		c.checkDrained()
		return
	}
	c.postReceives()
	ops, err := c.receivedLocked(wc, buf)
	if err != nil {
		c.t.protoErrs.Add(1)
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
		c.t.msgsIn.Add(1)
		c.t.bytesIn.Add(uint64(wc.ByteLen))
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
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCFlushErr || !c.draining {
			c.failLocked(completionError("send", wc))
		}
		c.checkDrained()
		return
	}
	var ops selectionkey.Ops
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
// request has completed; it unlocks c.mu.
func (c *Conn) checkDrained() {
	done := c.drainedLocked()
	c.mu.Unlock()
	if done {
		c.teardown()
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
			c.queue.push(own)
			c.queued += own.Len()
			c.pump()
			c.mu.Unlock()
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
		m.more = c.credits == 0 && c.queue.len() > 0
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

// spendControl takes the credit a control message needs: the control
// credit, or else a data credit (paid). False if there is neither, or no
// room in the send queue.
func (c *Conn) spendControl() (paid, ok bool) {
	switch {
	case !c.sqRoom():
		return false, false
	case c.ctrl > 0:
		c.ctrl--
		return false, true
	case c.credits > 0:
		c.credits--
		return true, true
	}
	return false, false
}

// updateDue reports whether the peer should get its credits back in a
// credit update, since no message is going to carry them: half the window
// is waiting, or the peer has none left.
//
// Credits that the peer's paid control messages took normally wait for
// the next message. After our FIN only credit updates follow, so they are
// owed like the others: a peer whose last paid update spent its last
// credit would otherwise wait for them forever.
func (c *Conn) updateDue() bool {
	owed := c.toReturn + c.widened
	if c.finSent {
		owed += c.quiet
	}
	g := min(owed, c.room())
	return g > 0 && (g >= max(1, c.window/2) || c.granted == 0)
}

// room is how many posted receives the peer holds no credit for: what
// may be granted now. Credits never run ahead of posted receives, so a
// receive that waits for a buffer (or for the end of a batch of
// completions) holds its credit back. A shared receive queue keeps its
// own account.
func (c *Conn) room() int {
	if c.eng.srq != nil {
		return maxGrant
	}
	return max(0, c.posted-c.granted-(ctrlCredits-c.ctrlOwed))
}

// takeGrants collects the credits to return with the next message. With
// a shared receive queue, a peer that uses its credits gets more while the
// queue has some to spare, up to PeerCredits.
func (c *Conn) takeGrants(control bool) imm {
	room := c.room()
	m := imm{control: control, ctrl: min(c.ctrlOwed, maxCtrlGrant, room)}
	c.ctrlOwed -= m.ctrl
	room -= m.ctrl
	var g int
	if c.eng.srq != nil {
		// The returned receives went back to the queue when the
		// application took the messages; take them, and maybe one more.
		want := c.toReturn + c.quiet
		c.toReturn, c.quiet = 0, 0
		if c.granted+want < c.peerCredits && c.eng.srq.spare() {
			want++
		}
		want = min(want, c.peerCredits-c.granted, maxGrant)
		g = c.eng.srq.grant(want)
		if g == 0 && c.granted == 0 {
			// Every peer keeps one credit: take it back from the
			// queue's reserve for newcomers.
			g = c.eng.srq.grant(1)
		}
	} else {
		g = min(c.toReturn+c.quiet+c.widened, room, maxGrant)
		left := g
		for _, v := range []*int{&c.toReturn, &c.quiet, &c.widened} {
			d := min(*v, left)
			*v -= d
			left -= d
		}
	}
	c.granted += g
	m.credits = g
	return m
}

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
	c.t.msgsOut.Add(1)
	c.t.bytesOut.Add(uint64(len(data)))
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

// Flush implements channel.Conn: queued messages go out as credits come
// back; Flush waits for that in blocking mode.
func (c *Conn) Flush() error {
	for {
		c.mu.Lock()
		if err := c.writeErrLocked(); err != nil {
			c.mu.Unlock()
			return err
		}
		c.pump()
		if c.queue.len() == 0 {
			c.mu.Unlock()
			return nil
		}
		if !c.blocking.Load() {
			c.mu.Unlock()
			return channel.ErrWouldBlock
		}
		c.wait(&c.writeq)
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
			c.pump()
			c.mu.Unlock()
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
	case c.peerDone && c.tail == c.head && c.posted == 0:
		return io.EOF // every receive before the disconnect has been seen
	}
	return nil
}

// readable and writable are the ready operations of ReadyOps.
func (c *Conn) readyLocked() selectionkey.Ops {
	var ops selectionkey.Ops
	if c.inbox.len() > 0 || c.readErrLocked() != nil && c.state != stateAddr && c.state != stateRoute && c.state != stateConnecting && c.state != stateAccepting {
		ops |= selectionkey.OpRead
	}
	switch {
	case c.state == stateFailed:
		ops |= selectionkey.OpConnect
	case c.state == stateEstablished:
		if c.queue.len() == 0 || c.writeErrLocked() != nil {
			ops |= selectionkey.OpWrite
		}
		if !c.connDone() {
			ops |= selectionkey.OpConnect
		}
	}
	return ops
}

// connDone is whether the application has seen the connect complete; a
// pending connect reports OpConnect until then.
func (c *Conn) connDone() bool { return c.blocking.Load() || c.finished }

// FinishConnect implements channel.Conn.
func (c *Conn) FinishConnect() (bool, error) {
	if c.blocking.Load() {
		if err := c.awaitConnect(context.Background()); err != nil {
			return false, err
		}
		return true, nil
	}
	if c.reg.Load() == nil {
		c.proceed()
	}
	c.cm.process(nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return false, c.closedErr("dial")
	case c.state == stateEstablished:
		c.finished = true
		return true, nil
	case c.state == stateFailed:
		return false, c.connErr
	}
	return false, nil
}

// awaitConnect waits for a pending connect to finish.
func (c *Conn) awaitConnect(ctx context.Context) error {
	c.proceed()
	for {
		c.cm.process(nil)
		c.mu.Lock()
		state, closed, err := c.state, c.closed, c.connErr
		if state == stateEstablished {
			c.finished = true
		}
		wait := c.connq.arm()
		c.mu.Unlock()
		switch {
		case closed:
			return c.closedErr("dial")
		case state == stateEstablished:
			return nil
		case state == stateFailed:
			return err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return opError("dial", c.raddrOrNil(), ctx.Err())
		}
	}
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

func (c *Conn) dropQueue() {
	for c.queue.len() > 0 {
		c.queue.pop().Release()
	}
	c.queued = 0
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
		c.teardown()
	}
	return nil
}

// teardown releases the connection's resources. The queue pair must have
// no work request outstanding, or never have been connected.
func (c *Conn) teardown() {
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

// LocalAddr implements channel.Channel.
func (c *Conn) LocalAddr() net.Addr {
	if a := c.laddr.Load(); a != nil {
		return a
	}
	return nil
}

// RemoteAddr implements channel.Conn.
func (c *Conn) RemoteAddr() net.Addr { return c.raddrOrNil() }

// SetBlocking implements channel.Channel.
func (c *Conn) SetBlocking(block bool) error {
	if block && c.reg.Load() != nil {
		return channel.ErrRegistered
	}
	c.blocking.Store(block)
	return nil
}

// IsBlocking implements channel.Channel.
func (c *Conn) IsBlocking() bool { return c.blocking.Load() }

// Pool implements channel.Conn: the transport's registered pool.
func (c *Conn) Pool() *bufpool.Pool { return c.t.pool }

// MaxMessageSize implements channel.Conn: the smaller of the two sides'
// largest messages once connected.
func (c *Conn) MaxMessageSize() int { return int(c.max.Load()) }

// ValidOps implements selector.Selectable.
func (c *Conn) ValidOps() selectionkey.Ops {
	return selectionkey.OpRead | selectionkey.OpWrite | selectionkey.OpConnect
}

// ReadyOps implements selector.Selectable.
func (c *Conn) ReadyOps() selectionkey.Ops {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readyLocked()
}

// Bind implements selector.Selectable: the connection's event channel
// moves into the selector's epoll.
func (c *Conn) Bind(r *selector.Registration) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return c.closedErr("register")
	}
	if !c.reg.CompareAndSwap(nil, r) {
		return errRegisteredTwice
	}
	if err := c.cm.moveTo(r.Selector()); err != nil {
		c.reg.Store(nil)
		return err
	}
	c.cm.mu.Lock()
	if c.held && !c.cm.dead {
		c.startConnect(nil)
	}
	c.cm.mu.Unlock()
	if ops := c.ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
	return nil
}

// InterestChanged implements selector.Selectable.
func (c *Conn) InterestChanged(r *selector.Registration) {
	if ops := c.ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
}

// Unbind implements selector.Selectable: the event channel goes back to
// the transport's own poller.
func (c *Conn) Unbind(r *selector.Registration) {
	if c.reg.CompareAndSwap(r, nil) {
		_ = c.cm.moveTo(nil)
	}
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// ring is a FIFO of buffers.
type ring struct {
	bufs       []*bufpool.Buffer
	head, size int
}

func (r *ring) len() int { return r.size }

func (r *ring) push(b *bufpool.Buffer) {
	if r.size == len(r.bufs) {
		grown := make([]*bufpool.Buffer, max(8, 2*len(r.bufs)))
		for i := range r.size {
			grown[i] = r.bufs[(r.head+i)%len(r.bufs)]
		}
		r.bufs, r.head = grown, 0
	}
	r.bufs[(r.head+r.size)%len(r.bufs)] = b
	r.size++
}

func (r *ring) pop() *bufpool.Buffer {
	if r.size == 0 {
		return nil
	}
	b := r.bufs[r.head]
	r.bufs[r.head] = nil
	r.head = (r.head + 1) % len(r.bufs)
	r.size--
	return b
}
