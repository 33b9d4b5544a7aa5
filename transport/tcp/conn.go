package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// Connection states.
const (
	statePending int32 = iota
	stateConnected
	stateFailed
)

// maxIovecs bounds the messages one writev carries (two iovecs each).
const maxIovecs = 64

var errRegisteredTwice = errors.New("tcp: channel already registered with a selector")

// Conn is a TCP message channel. It implements channel.Conn, and
// selector.Selectable so that a selector can watch it.
//
// One goroutine may Receive while another Sends; Close may be called from
// any goroutine at any time.
type Conn struct {
	t     *Transport
	fd    sysfd
	laddr atomic.Pointer[net.TCPAddr]
	raddr *net.TCPAddr
	max   int

	smu      sync.Mutex // serializes connect completion
	state    atomic.Int32
	connErr  error // set before state becomes stateFailed
	blocking atomic.Bool
	closing  atomic.Bool
	binding

	// Read side, guarded by rmu.
	rmu      sync.Mutex
	stage    []byte // staged bytes are stage[r:w]
	r, w     int
	partial  *bufpool.Buffer // message being assembled
	need     int             // bytes partial still needs
	rerr     error           // sticky: EOF, reset, protocol error, closed
	readable atomic.Bool     // a message or an error waits in user space

	// Write side, guarded by wmu.
	wmu       sync.Mutex
	queue     []queued // unsent messages are queue[qhead:]
	qhead     int
	off       int // bytes of queue[qhead], header included, already written
	queued    int // bytes in the queue, headers included
	iov       []unix.Iovec
	werr      error       // sticky
	wclosed   bool        // CloseWrite was called: Send fails
	shut      bool        // the socket's sending side is shut down
	hasQueued atomic.Bool // queue not empty
	one       [1]queued   // the fast path's message, outside the queue
}

type queued struct {
	buf *bufpool.Buffer
	hdr [headerLen]byte
}

var (
	_ channel.Conn        = (*Conn)(nil)
	_ selector.Selectable = (*Conn)(nil)
	_ selector.Source     = (*connSource)(nil)
	_ selector.Hooks      = (*connSource)(nil)
)

func (t *Transport) newConn(fd int, raddr *net.TCPAddr) *Conn {
	return &Conn{
		t:     t,
		fd:    sysfd{fd: fd},
		raddr: raddr,
		max:   t.cfg.MaxMessageSize,
		iov:   make([]unix.Iovec, 0, 2*maxIovecs),
	}
}

// connected records a completed connect.
func (c *Conn) connected() {
	if a := localAddr(c.fd.fd); a != nil {
		c.laddr.Store(a)
	}
	c.stage = make([]byte, c.t.cfg.ReadBuffer)
	c.state.Store(stateConnected)
	c.t.opened.Add(1)
}

// FinishConnect implements channel.Conn.
func (c *Conn) FinishConnect() (bool, error) {
	if !c.blocking.Load() {
		return c.finishConnect(0)
	}
	for {
		if done, err := c.finishConnect(-1); done || err != nil {
			return done, err
		}
	}
}

// finishConnect waits up to wait (forever if negative) for a pending
// connect to complete.
func (c *Conn) finishConnect(wait time.Duration) (bool, error) {
	c.smu.Lock()
	defer c.smu.Unlock()
	if c.closing.Load() {
		return false, c.closedErr("dial")
	}
	switch c.state.Load() {
	case stateConnected:
		return true, nil
	case stateFailed:
		return false, c.connErr
	}
	if !c.fd.acquire() {
		return false, c.closedErr("dial")
	}
	defer c.fd.release()
	ms := -1
	if wait >= 0 {
		ms = int(wait / time.Millisecond)
	}
	pfd := []unix.PollFd{{Fd: int32(c.fd.fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(pfd, ms)
	if err == unix.EINTR || (err == nil && n == 0) {
		return false, nil
	}
	if c.fd.closed() {
		return false, c.closedErr("dial")
	}
	if err == nil {
		var soErr int
		soErr, err = unix.GetsockoptInt(c.fd.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err == nil && soErr != 0 {
			err = unix.Errno(soErr)
		}
	}
	if err != nil {
		c.connErr = opError("dial", c.raddr, "connect", err)
		c.state.Store(stateFailed)
		c.readable.Store(true)
		return false, c.connErr
	}
	c.connected()
	_ = c.update(c.source(), c.want)
	return true, nil
}

// Receive implements channel.Conn.
func (c *Conn) Receive() (*bufpool.Buffer, error) {
	if !c.fd.acquire() {
		return nil, c.closedErr("read")
	}
	defer c.fd.release()
	if err := c.checkConnected("read"); err != nil {
		return nil, err
	}
	c.rmu.Lock()
	b, err := c.receive()
	readable := c.rerr != nil || c.frameReady()
	wasReadable := c.readable.Swap(readable)
	fatal := err != nil && errors.Is(err, channel.ErrMessageTooLarge)
	c.rmu.Unlock()
	if fatal {
		c.t.protoErrs.Add(1)
		c.Close()
	} else if readable && !wasReadable {
		// What this call left staged, no descriptor shows: a selector that
		// did not select the key last time would not ask ReadyOps.
		if r := c.reg.Load(); r != nil {
			r.Ready(selectionkey.OpRead)
		}
	}
	return b, err
}

func (c *Conn) receive() (*bufpool.Buffer, error) {
	for {
		if c.rerr != nil {
			return nil, c.rerr
		}
		if b, err := c.parse(); b != nil || err != nil {
			return b, err
		}
		var dst []byte
		direct := c.partial != nil && c.need > len(c.stage)/2
		if direct {
			n := c.partial.Len()
			dst = c.partial.Full()[n : n+c.need]
		} else {
			if c.r == c.w {
				c.r, c.w = 0, 0
			} else if c.r > 0 {
				c.w = copy(c.stage, c.stage[c.r:c.w])
				c.r = 0
			}
			dst = c.stage[c.w:]
		}
		n, err := unix.Read(c.fd.fd, dst)
		switch {
		case err == unix.EAGAIN:
			if !c.blocking.Load() {
				return nil, channel.ErrWouldBlock
			}
			if err := c.fd.wait(unix.POLLIN); err != nil {
				c.rerr = opError("read", c.raddr, "poll", err)
			} else if c.fd.closed() {
				c.rerr = c.closedErr("read")
			}
		case err == unix.EINTR:
		case err != nil:
			if c.fd.closed() {
				c.rerr = c.closedErr("read")
			} else {
				c.rerr = opError("read", c.raddr, "read", err)
			}
		case n == 0:
			if c.fd.closed() {
				c.rerr = c.closedErr("read")
			} else if c.partial != nil || c.r < c.w {
				c.rerr = &net.OpError{Op: "read", Net: "tcp", Addr: c.raddr,
					Err: fmt.Errorf("peer closed the connection in the middle of a message: %w", io.ErrUnexpectedEOF)}
			} else {
				c.rerr = io.EOF
			}
		case direct:
			c.partial.SetLen(c.partial.Len() + n)
			if c.need -= n; c.need == 0 {
				return c.complete(), nil
			}
		default:
			c.w += n
		}
	}
}

// parse takes the next message out of the staging buffer, if it is there.
func (c *Conn) parse() (*bufpool.Buffer, error) {
	if c.partial != nil {
		take := min(c.need, c.w-c.r)
		_, _ = c.partial.Write(c.stage[c.r : c.r+take])
		c.r += take
		if c.need -= take; c.need == 0 {
			return c.complete(), nil
		}
		return nil, nil
	}
	if c.w-c.r < headerLen {
		return nil, nil
	}
	n := int(binary.BigEndian.Uint32(c.stage[c.r:]))
	if n > c.max {
		c.rerr = &net.OpError{Op: "read", Net: "tcp", Addr: c.raddr,
			Err: fmt.Errorf("peer announced a %d-byte message, above the maximum of %d: %w", n, c.max, channel.ErrMessageTooLarge)}
		return nil, c.rerr
	}
	b, err := c.t.cfg.Pool.TryGet()
	if err != nil {
		return nil, &net.OpError{Op: "read", Net: "tcp", Addr: c.raddr, Err: fmt.Errorf("no receive buffer: %w", err)}
	}
	c.r += headerLen
	avail := min(n, c.w-c.r)
	_, _ = b.Write(c.stage[c.r : c.r+avail])
	c.r += avail
	c.partial, c.need = b, n-avail
	if c.need == 0 {
		return c.complete(), nil
	}
	return nil, nil
}

// complete hands out the assembled message.
func (c *Conn) complete() *bufpool.Buffer {
	b := c.partial
	c.partial = nil
	c.t.msgsIn.Add(1)
	c.t.bytesIn.Add(uint64(b.Len()))
	return b
}

// frameReady reports whether a whole message is staged.
func (c *Conn) frameReady() bool {
	if c.partial != nil || c.w-c.r < headerLen {
		return false
	}
	return c.w-c.r-headerLen >= int(binary.BigEndian.Uint32(c.stage[c.r:]))
}

// Send implements channel.Conn. A message goes out with one writev of its
// length and its buffer when the socket has room; otherwise it joins the
// queue, which leaves in writevs of up to 64 messages.
func (c *Conn) Send(b *bufpool.Buffer) error {
	if !c.fd.acquire() {
		b.Release()
		return c.closedErr("write")
	}
	defer c.fd.release()
	if err := c.checkConnected("write"); err != nil {
		b.Release()
		return err
	}
	if b.Len() > c.max {
		n := b.Len()
		b.Release()
		return &net.OpError{Op: "write", Net: "tcp", Addr: c.raddr,
			Err: fmt.Errorf("a %d-byte message is above the maximum of %d: %w", n, c.max, channel.ErrMessageTooLarge)}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		b.Release()
		return c.werr
	}
	if c.wclosed {
		b.Release()
		return &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.raddr, Err: channel.ErrWriteClosed}
	}
	blocking := c.blocking.Load()
	if c.queued >= c.t.cfg.SendQueue {
		if blocking {
			if err := c.drain(); err != nil {
				b.Release()
				return err
			}
		} else {
			// The socket may have taken bytes since the queue filled up;
			// without a selector flushing, only this call can move them.
			if err := c.flush(); err != nil {
				b.Release()
				return err
			}
			if c.queued >= c.t.cfg.SendQueue {
				c.queueChanged()
				return channel.ErrWouldBlock
			}
		}
	}
	if c.qhead == len(c.queue) {
		// Fast path: straight to the socket, no queue.
		c.one[0] = queued{buf: b}
		binary.BigEndian.PutUint32(c.one[0].hdr[:], uint32(b.Len()))
		sent, _, _, err := c.write(c.one[:])
		if err != nil {
			c.fail(err)
			return c.werr
		}
		if sent == 0 {
			c.queue = append(c.queue, c.one[0])
			c.queued += headerLen + b.Len() - c.off
		}
		c.one[0] = queued{}
	} else {
		q := queued{buf: b}
		binary.BigEndian.PutUint32(q.hdr[:], uint32(b.Len()))
		c.queue = append(c.queue, q)
		c.queued += headerLen + b.Len()
		if err := c.flush(); err != nil {
			return err
		}
	}
	if blocking {
		return c.drain()
	}
	c.queueChanged()
	return nil
}

// Flush implements channel.Conn.
func (c *Conn) Flush() error {
	if !c.fd.acquire() {
		return c.closedErr("write")
	}
	defer c.fd.release()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if c.blocking.Load() {
		return c.drain()
	}
	err := c.flush()
	c.queueChanged()
	if err == nil && c.qhead < len(c.queue) {
		return channel.ErrWouldBlock
	}
	return err
}

// CloseWrite implements channel.Conn: the socket's sending side is shut
// down (shutdown(SHUT_WR)) once the queue has reached it, so the peer
// reads every queued message before the end of the stream.
func (c *Conn) CloseWrite() error {
	if !c.fd.acquire() {
		return c.closedErr("close")
	}
	defer c.fd.release()
	if err := c.checkConnected("close"); err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.wclosed {
		return nil
	}
	c.wclosed = true
	if c.werr != nil {
		return c.werr
	}
	err := c.flush()
	c.queueChanged()
	return err
}

// drain flushes the whole queue, waiting for the socket; wmu held.
func (c *Conn) drain() error {
	for {
		if err := c.flush(); err != nil {
			return err
		}
		if c.qhead == len(c.queue) {
			c.queueChanged()
			return nil
		}
		if err := c.fd.wait(unix.POLLOUT); err != nil {
			c.fail(err)
			return c.werr
		}
		if c.fd.closed() {
			return c.closedErr("write")
		}
	}
}

// flush writes as much of the queue as the socket takes now; wmu held.
func (c *Conn) flush() error {
	for c.qhead < len(c.queue) {
		sent, written, short, err := c.write(c.queue[c.qhead:])
		if err != nil {
			c.fail(err)
			return c.werr
		}
		c.qhead += sent
		c.queued -= written
		if short {
			break
		}
	}
	if c.qhead == len(c.queue) {
		clear(c.queue)
		c.queue, c.qhead = c.queue[:0], 0
		if c.wclosed && !c.shut {
			// The last queued byte is in the socket: the end of the
			// stream follows it.
			c.shut = true
			if err := unix.Shutdown(c.fd.fd, unix.SHUT_WR); err != nil {
				c.werr = opError("write", c.raddr, "shutdown", err)
				return c.werr
			}
		}
	} else if c.qhead > 1024 && c.qhead > len(c.queue)/2 {
		n := copy(c.queue, c.queue[c.qhead:])
		clear(c.queue[n:])
		c.queue, c.qhead = c.queue[:n], 0
	}
	return nil
}

// write writes msgs, less the c.off bytes of the first already written,
// with one writev. It releases the messages that left and reports how many
// did, how many bytes were written, and whether the socket took less than
// was offered; c.off becomes the written part of the next message. EAGAIN
// is not an error.
func (c *Conn) write(msgs []queued) (sent, written int, short bool, err error) {
	iov := c.iov[:0]
	skip, offered, count := c.off, 0, 0
	for i := range msgs {
		if len(iov)+2 > cap(iov) {
			break
		}
		m := &msgs[i]
		for _, p := range [2][]byte{m.hdr[:], m.buf.Bytes()} {
			if skip >= len(p) {
				skip -= len(p)
				continue
			}
			p = p[skip:]
			skip = 0
			v := unix.Iovec{Base: unsafe.SliceData(p)}
			v.SetLen(len(p))
			iov = append(iov, v)
			offered += len(p)
		}
		count++
	}
	var n int
	for {
		n, err = writev(c.fd.fd, iov)
		if err != unix.EINTR {
			break
		}
	}
	c.iov = iov[:0]
	if err == unix.EAGAIN {
		return 0, 0, true, nil
	}
	if err != nil {
		return 0, 0, true, err
	}
	written, short = n, n < offered
	n += c.off
	for i := range count {
		size := headerLen + msgs[i].buf.Len()
		if n < size {
			break
		}
		n -= size
		c.t.msgsOut.Add(1)
		c.t.bytesOut.Add(uint64(msgs[i].buf.Len()))
		msgs[i].buf.Release()
		msgs[i] = queued{}
		sent++
	}
	c.off = n
	return sent, written, short, nil
}

// fail records a write error and drops the queue; wmu held.
func (c *Conn) fail(err error) {
	if c.werr == nil {
		if c.fd.closed() {
			c.werr = c.closedErr("write")
		} else {
			c.werr = opError("write", c.raddr, "writev", err)
		}
	}
	c.dropQueue()
}

func (c *Conn) dropQueue() {
	for i := c.qhead; i < len(c.queue); i++ {
		c.queue[i].buf.Release()
	}
	if b := c.one[0].buf; b != nil {
		b.Release()
	}
	c.one[0] = queued{}
	clear(c.queue)
	c.queue, c.qhead, c.off, c.queued = c.queue[:0], 0, 0, 0
	c.queueChanged()
}

// queueChanged updates what the selector needs to know of the queue; wmu
// held.
func (c *Conn) queueChanged() {
	has := c.qhead < len(c.queue)
	if c.hasQueued.Swap(has) == has {
		return
	}
	_ = c.update(c.source(), c.want)
	if !has {
		// Drained, perhaps outside Handle (by Send or Flush): once the
		// queue is gone, no descriptor will say so.
		if r := c.reg.Load(); r != nil {
			r.Ready(selectionkey.OpWrite)
		}
	}
}

func (c *Conn) checkConnected(op string) error {
	switch c.state.Load() {
	case stateConnected:
		return nil
	case stateFailed:
		return c.connErr
	}
	return &net.OpError{Op: op, Net: "tcp", Addr: c.raddr, Err: channel.ErrNotConnected}
}

func (c *Conn) closedErr(op string) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.raddr, Err: net.ErrClosed}
}

// Close closes the connection. Queued messages that have not reached the
// socket are dropped; use Flush first to send them. Operations blocked on
// the connection return errors that satisfy errors.Is(err, net.ErrClosed).
// Close is idempotent.
func (c *Conn) Close() error {
	if c.closing.Swap(true) {
		return nil
	}
	if r := c.reg.Load(); r != nil {
		r.Key().Cancel()
	}
	c.fd.close()
	// Blocked operations have been woken; wait for them to let go.
	c.rmu.Lock()
	if c.partial != nil {
		c.partial.Release()
		c.partial = nil
	}
	c.rerr = c.closedErr("read")
	c.stage, c.r, c.w = nil, 0, 0
	c.readable.Store(true)
	c.rmu.Unlock()
	c.wmu.Lock()
	c.werr = c.closedErr("write")
	c.dropQueue()
	c.wmu.Unlock()
	if c.state.Load() == stateConnected {
		c.t.closed.Add(1)
	}
	return nil
}

// LocalAddr returns the local address, once connected.
func (c *Conn) LocalAddr() net.Addr {
	if a := c.laddr.Load(); a != nil {
		return a
	}
	return nil
}

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

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

// Pool implements channel.Conn.
func (c *Conn) Pool() *bufpool.Pool { return c.t.cfg.Pool }

// MaxMessageSize implements channel.Conn.
func (c *Conn) MaxMessageSize() int { return c.max }

// ValidOps implements selector.Selectable.
func (c *Conn) ValidOps() selectionkey.Ops {
	return selectionkey.OpRead | selectionkey.OpWrite | selectionkey.OpConnect
}

// ReadyOps implements selector.Selectable: a message staged in user space
// makes the connection readable, an empty send queue writable.
func (c *Conn) ReadyOps() selectionkey.Ops {
	var ops selectionkey.Ops
	if c.readable.Load() {
		ops |= selectionkey.OpRead
	}
	switch c.state.Load() {
	case stateConnected:
		if !c.hasQueued.Load() {
			ops |= selectionkey.OpWrite
		}
	case stateFailed:
		ops |= selectionkey.OpConnect
	}
	return ops
}

// SelectorHooks implements selector.Selectable.
func (c *Conn) SelectorHooks() selector.Hooks { return c.source() }

// Bind implements selector.Hooks.
func (s *connSource) Bind(r *selector.Registration) error {
	c := (*Conn)(s)
	if c.closing.Load() {
		return c.closedErr("register")
	}
	if err := c.bind(c.source(), r, c.want); err != nil {
		return err
	}
	if ops := c.ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
	return nil
}

// InterestChanged implements selector.Hooks.
func (s *connSource) InterestChanged(r *selector.Registration) {
	c := (*Conn)(s)
	_ = c.update(s, c.want)
	if ops := c.ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
}

// Unbind implements selector.Hooks.
func (s *connSource) Unbind(r *selector.Registration) { s.unbind(s, r) }

// want maps an interest set to the epoll events the connection needs: a
// queue waiting for room needs EPOLLOUT whatever the interest.
func (c *Conn) want(interest selectionkey.Ops) uint32 {
	var ev uint32
	if interest&selectionkey.OpRead != 0 {
		ev |= selector.EventIn | selector.EventRdHup
	}
	switch c.state.Load() {
	case statePending:
		if interest&selectionkey.OpConnect != 0 {
			ev |= selector.EventOut
		}
	case stateConnected:
		if c.hasQueued.Load() {
			ev |= selector.EventOut
		}
	}
	return ev
}

// connSource is a Conn as its selector sees it: a descriptor and what to do
// with its events (selector.Source), and the hooks of its registration
// (selector.Hooks). It keeps FD, Handle, Bind, InterestChanged and Unbind,
// which only the selector calls, out of Conn's methods.
type connSource Conn

func (c *Conn) source() *connSource { return (*connSource)(c) }

// FD implements selector.Source.
func (s *connSource) FD() int { return s.fd.fd }

// Handle implements selector.Source.
func (s *connSource) Handle(events uint32, sink *selector.Sink) { (*Conn)(s).handle(events, sink) }

// handle handles the socket's epoll events. A writable socket with a queue
// gets flushed here, on the selecting goroutine, unless a Send is
// flushing.
func (c *Conn) handle(events uint32, sink *selector.Sink) {
	r := c.reg.Load()
	if r == nil {
		return
	}
	const hangup = selector.EventHup | selector.EventErr
	if events&(selector.EventIn|selector.EventRdHup|hangup) != 0 {
		sink.Ready(r, selectionkey.OpRead)
	}
	if events&(selector.EventOut|hangup) == 0 {
		return
	}
	if c.state.Load() == statePending {
		sink.Ready(r, selectionkey.OpConnect)
		return
	}
	if c.hasQueued.Load() && c.wmu.TryLock() {
		if c.fd.acquire() {
			_ = c.flush()
			c.queueChanged()
			c.fd.release()
		}
		c.wmu.Unlock()
	}
	if !c.hasQueued.Load() {
		sink.Ready(r, selectionkey.OpWrite)
	}
}
