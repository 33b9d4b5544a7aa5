//go:build linux && cgo

package rdma

// The connection: its type and state, and what it reports to channel and
// selector users. connect.go, recv.go, credits.go, send.go and close.go
// hold the rest, by concern.

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
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
	listener *Listener  // for a passive connection until it is accepted
	from     netip.Addr // a passive connection's peer address, penalized for its violations

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

	traffic // written under mu, read by Transport.Stats without it

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
	slots          []*bufpool.Buffer // posted receive buffers (no SRQ), nil: empty slot
	empty          []int             // empty slots, to post when the pool has buffers
	posted         int               // receives posted on the queue pair and not completed
	inbox          ring              // received messages
	granted        int               // data credits the peer holds (sent less received)
	toReturn       int               // messages taken by the application, credits not yet returned
	quiet          int               // paid control messages received, credits not yet returned
	ctrlOwed       int               // credit updates received, not yet restored to the peer
	peerCredits    int               // most data credits the peer may ever hold
	window         int               // data receives kept posted (no SRQ); grows up to RecvDepth
	widened        int               // credits of a widened window, not yet granted
	starved        bool              // the peer said credits held it back
	waited         bool              // a Send queued for lack of credits since we last said more
	deferring      bool              // pump leaves a due credit update to the engine's next poll
	updateDeferred bool              // the engine holds this connection for a credit update
	retry          *time.Timer       // posts receives once the pool has buffers again

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

func (c *Conn) raddrOrNil() net.Addr {
	if a := c.raddr.Load(); a != nil {
		return a
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

// SelectorHooks implements selector.Selectable.
func (c *Conn) SelectorHooks() selector.Hooks { return (*connHooks)(c) }

// connHooks is a Conn as its selector sees it: it keeps Bind,
// InterestChanged and Unbind, which only the selector calls, out of Conn's
// methods.
type connHooks Conn

var _ selector.Hooks = (*connHooks)(nil)

// Bind implements selector.Hooks: the connection's event channel moves
// into the selector's epoll.
func (h *connHooks) Bind(r *selector.Registration) error {
	c := (*Conn)(h)
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

// InterestChanged implements selector.Hooks.
func (h *connHooks) InterestChanged(r *selector.Registration) {
	c := (*Conn)(h)
	if ops := c.ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
}

// Unbind implements selector.Hooks: the event channel goes back to the
// transport's own poller.
func (h *connHooks) Unbind(r *selector.Registration) {
	c := (*Conn)(h)
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
