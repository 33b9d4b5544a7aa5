package rubin

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// inboxSize is how many received messages wait for a reader before the
// poller stops reading the connection (back-pressure to the peer).
const inboxSize = 64

var errWouldBlock = channel.ErrWouldBlock

// conn is the net.Conn face of a message channel. Write sends from the
// calling goroutine and waits for the poller only when the channel is
// full. Read copies out of the inbox, which the poller fills whenever the
// channel has messages, so that the peer's sends never wait for a Read
// (net.Conn users expect a socket's buffering: an echo that writes more
// than the peer's credits before reading must not deadlock). When the
// inbox is empty, Read takes the next message from the channel itself;
// over RDMA it first polls the completion queue itself, as rsocket does,
// for as long as recent waits suggest (a selector.Spinner), so that a
// message arriving within that time costs no goroutine switch.
type conn struct {
	s      *stack
	ch     anytransport.Conn
	poll   func()      // polls the channel's device; nil for sockets
	polled func() bool // polls, then reports whether Read can go on
	key    *selectionkey.Key

	done        chan struct{} // closed by Close
	closed      atomic.Bool
	connectable chan struct{} // OpConnect seen, while dialing

	// Filled by the poller, drained by Read; guarded by mu.
	mu     sync.Mutex
	inbox  [inboxSize]*bufpool.Buffer
	head   int
	count  int
	paused bool  // OpRead removed because inbox is full
	rerr   error // what Receive returned last: io.EOF or a failure

	// Read side, guarded by rmu.
	rmu      sync.Mutex
	cur      *bufpool.Buffer // the message being read
	off      int
	spin     selector.Spinner
	readable chan struct{}
	rdl      deadline

	// Write side, guarded by wmu.
	wmu      sync.Mutex
	writable chan struct{}
	wdl      deadline
}

func newConn(s *stack, ch anytransport.Conn) *conn {
	c := &conn{
		s:           s,
		ch:          ch,
		done:        make(chan struct{}),
		connectable: make(chan struct{}, 1),
		readable:    make(chan struct{}, 1),
		writable:    make(chan struct{}, 1),
	}
	if p, ok := ch.(anytransport.DevicePoller); ok {
		c.poll = p.PollDevice
		c.spin = selector.NewSpinner(s.cfg.SpinBudget, 0)
		c.polled = func() bool {
			c.poll()
			// The poller may have polled the message first and moved
			// it to the inbox: then readable is signaled. A deadline
			// or Close ends the spin as well.
			return c.ch.ReadyOps()&selectionkey.OpRead != 0 || len(c.readable) > 0 ||
				c.rdl.passed() || c.closed.Load()
		}
	}
	return c
}

// ready is called by the poller goroutine, with the conn's key (which
// Register may not have returned yet).
func (c *conn) ready(k *selectionkey.Key) {
	ops := k.Ready()
	if ops&selectionkey.OpConnect != 0 {
		_ = k.RemoveInterest(selectionkey.OpConnect)
		notify(c.connectable)
	}
	if ops&selectionkey.OpRead != 0 {
		c.pump(k)
	}
	if ops&selectionkey.OpWrite != 0 {
		_ = k.RemoveInterest(selectionkey.OpWrite)
		notify(c.writable)
	}
}

// awaitConnect waits for a pending connect to complete, or ctx to be
// done, and then has the poller read the connection.
func (c *conn) awaitConnect(ctx context.Context) error {
	for {
		done, err := c.ch.FinishConnect()
		if err != nil {
			return err
		}
		if done {
			if err := c.key.SetInterest(selectionkey.OpRead); err != nil {
				return c.opError("dial", net.ErrClosed)
			}
			return nil
		}
		if err := c.key.AddInterest(selectionkey.OpConnect); err != nil {
			return c.opError("dial", net.ErrClosed)
		}
		select {
		case <-c.connectable:
		case <-ctx.Done():
			return &net.OpError{Op: "dial", Net: c.s.cfg.Transport, Addr: c.ch.RemoteAddr(), Err: ctx.Err()}
		}
	}
}

// pump moves received messages into the inbox until the channel has no
// more or the inbox is full.
func (c *conn) pump(k *selectionkey.Key) {
	got := false
	for {
		// Receive under mu: Read receives too when the inbox is empty,
		// and messages must reach it in order.
		c.mu.Lock()
		if c.rerr != nil {
			// Read met the error first, taking the message from the
			// channel itself: stop watching, or the error, which stays
			// readable, would have the key selected on every pass.
			_ = k.RemoveInterest(selectionkey.OpRead)
			c.mu.Unlock()
			break
		}
		if c.count == inboxSize {
			if !c.paused {
				c.paused = true
				_ = k.RemoveInterest(selectionkey.OpRead)
			}
			c.mu.Unlock()
			break
		}
		b, err := c.ch.Receive()
		if errors.Is(err, errWouldBlock) {
			c.mu.Unlock()
			break
		}
		if err != nil {
			c.rerr = err
			_ = k.RemoveInterest(selectionkey.OpRead)
		} else if c.closed.Load() {
			b.Release()
		} else {
			c.inbox[(c.head+c.count)%inboxSize] = b
			c.count++
		}
		c.mu.Unlock()
		got = true
		if err != nil || c.ch.ReadyOps()&selectionkey.OpRead == 0 {
			// Nothing staged: the descriptor tells when there is more,
			// without a read that would only say EAGAIN.
			break
		}
	}
	if got {
		notify(c.readable)
	}
}

// Read reads bytes of the next message, or of the rest of the current one.
func (c *conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	var waited time.Time // when this Read began to wait, if it did
	for {
		if c.closed.Load() {
			c.dropCurrent()
			return 0, c.opError("read", net.ErrClosed)
		}
		if c.cur != nil {
			n := copy(p, c.cur.Bytes()[c.off:])
			if c.off += n; c.off == c.cur.Len() {
				c.dropCurrent()
			}
			if n > 0 {
				return n, nil
			}
			continue // an empty message carries no bytes
		}
		c.mu.Lock()
		if c.count > 0 {
			c.cur, c.off = c.inbox[c.head], 0
			c.inbox[c.head] = nil
			c.head = (c.head + 1) % inboxSize
			c.count--
			resume := c.paused && c.count <= inboxSize/2
			if resume {
				c.paused = false
			}
			if c.count == 0 {
				// What signaled the filling is taken: a stale signal
				// would end the next Read's spin before its message.
				drain(c.readable)
			}
			c.mu.Unlock()
			if resume {
				_ = c.key.AddInterest(selectionkey.OpRead)
			}
			continue
		}
		err := c.rerr
		if err == nil && c.poll != nil {
			// The inbox is empty: take the next message straight from
			// the channel, spinning on the device for a while.
			if waited.IsZero() {
				waited = time.Now()
			}
			var b *bufpool.Buffer
			if b, err = c.receive(waited); err == nil {
				c.cur, c.off = b, 0
				c.mu.Unlock()
				c.spin.Record(time.Since(waited))
				continue
			}
			if errors.Is(err, errWouldBlock) {
				err = nil
			} else {
				c.rerr = err
			}
		}
		c.mu.Unlock()
		if err == io.EOF {
			return 0, io.EOF
		}
		if err != nil {
			return 0, err
		}
		if waited.IsZero() {
			waited = time.Now()
		}
		if err := c.wait(c.readable, &c.rdl, "read"); err != nil {
			return 0, err
		}
		if c.poll != nil {
			c.spin.Record(time.Since(waited))
			waited = time.Time{}
		}
	}
}

// receive takes the next message from the channel, polling the device for
// the spinner's budget from start if there is none yet. The caller holds
// mu, which it lets go while it polls. It returns errWouldBlock if the
// budget ran out, or the inbox got a message meanwhile.
func (c *conn) receive(start time.Time) (*bufpool.Buffer, error) {
	b, err := c.ch.Receive()
	if !errors.Is(err, errWouldBlock) || c.spin.Budget() <= 0 {
		return b, err
	}
	c.mu.Unlock()
	c.spin.Spin(start, c.polled)
	c.mu.Lock()
	if c.count > 0 || c.rerr != nil {
		return nil, errWouldBlock // the poller got there first
	}
	return c.ch.Receive()
}

func (c *conn) dropCurrent() {
	if c.cur != nil {
		c.cur.Release()
		c.cur = nil
	}
}

// Write sends p as one message, or as several if it is longer than the
// maximum message size, and returns once all of it is with the kernel.
func (c *conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	pool, max := c.ch.Pool(), c.ch.MaxMessageSize()
	written := 0
	for written < len(p) {
		if c.closed.Load() {
			return written, c.opError("write", net.ErrClosed)
		}
		if c.wdl.passed() {
			return written, c.opError("write", os.ErrDeadlineExceeded)
		}
		b, err := pool.TryGet()
		if errors.Is(err, bufpool.ErrExhausted) {
			b, err = c.waitBuffer(pool)
		}
		if err != nil {
			return written, err
		}
		n := min(len(p)-written, max)
		_, _ = b.Write(p[written : written+n])
		for {
			err = c.ch.Send(b)
			if !errors.Is(err, errWouldBlock) {
				break
			}
			if err := c.waitWritable(); err != nil {
				b.Release()
				return written, err
			}
		}
		if err != nil {
			return written, err
		}
		written += n
	}
	// net.Conn promises the bytes are written: wait for the queue to
	// drain. A writable channel has nothing queued, the common case, and
	// needs no Flush.
	for c.ch.ReadyOps()&selectionkey.OpWrite == 0 {
		err := c.ch.Flush()
		if err == nil {
			break
		}
		if !errors.Is(err, errWouldBlock) {
			return written, err
		}
		if err := c.waitWritable(); err != nil {
			return written, err
		}
	}
	return written, nil
}

// waitWritable asks the poller for OpWrite and waits for it.
func (c *conn) waitWritable() error {
	if err := c.key.AddInterest(selectionkey.OpWrite); err != nil {
		return c.opError("write", net.ErrClosed)
	}
	return c.wait(c.writable, &c.wdl, "write")
}

// waitBuffer waits for a pool buffer until the write deadline or Close.
func (c *conn) waitBuffer(pool *bufpool.Pool) (*bufpool.Buffer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.done:
		case <-c.wdl.wait():
		case <-ctx.Done():
		}
		cancel()
	}()
	b, err := pool.Get(ctx)
	if err != nil {
		switch {
		case c.closed.Load():
			return nil, c.opError("write", net.ErrClosed)
		case c.wdl.passed():
			return nil, c.opError("write", os.ErrDeadlineExceeded)
		}
		return nil, c.opError("write", err)
	}
	return b, nil
}

// wait blocks until signal, the deadline or Close.
func (c *conn) wait(signal chan struct{}, d *deadline, op string) error {
	select {
	case <-signal:
		return nil
	case <-d.wait():
		return c.opError(op, os.ErrDeadlineExceeded)
	case <-c.done:
		return c.opError(op, net.ErrClosed)
	}
}

func (c *conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.s.cfg.Transport, Source: c.ch.LocalAddr(), Addr: c.ch.RemoteAddr(), Err: err}
}

// CloseWrite shuts down the writing side, as *net.TCPConn's does: the
// peer reads io.EOF after what was written, and this side can still read.
// Proxies need it to pass an end of stream on.
func (c *conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed.Load() {
		return c.opError("close", net.ErrClosed)
	}
	if err := c.ch.CloseWrite(); err != nil {
		return c.opError("close", err)
	}
	return nil
}

// Close closes the connection; blocked Reads and Writes return.
func (c *conn) Close() error {
	if c.closed.Swap(true) {
		return c.opError("close", net.ErrClosed)
	}
	close(c.done)
	err := c.ch.Close()
	c.mu.Lock()
	for ; c.count > 0; c.count-- {
		c.inbox[c.head].Release()
		c.inbox[c.head] = nil
		c.head = (c.head + 1) % inboxSize
	}
	c.mu.Unlock()
	c.rmu.Lock() // a Read in progress has seen done and let go
	c.dropCurrent()
	c.rmu.Unlock()
	return err
}

func (c *conn) LocalAddr() net.Addr  { return c.ch.LocalAddr() }
func (c *conn) RemoteAddr() net.Addr { return c.ch.RemoteAddr() }

func (c *conn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

func (c *conn) SetReadDeadline(t time.Time) error {
	c.rdl.set(t)
	return nil
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.wdl.set(t)
	return nil
}
