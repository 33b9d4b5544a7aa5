//go:build linux && cgo

package rdma

// A connection's setup: the connection-manager events that take an active
// connection from address resolution through route resolution to connect,
// the queue pair and its first receives, the hello each side sends, and
// FinishConnect.

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

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

// violated counts a protocol error of the peer's, which the caller cuts
// the connection for, and penalizes its address if it connected to us
// (see penalties).
func (c *Conn) violated() {
	c.t.protoErrs.Add(1)
	c.t.penalties.violated(c.from, time.Now())
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
		c.violated()
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
		c.violated()
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
	c.cm.process(nil, 0)
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
		c.cm.process(nil, 0)
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
