// Package tcp is rubin's TCP transport: the channel contract over
// non-blocking sockets, driven by the selector's epoll, with the same
// message semantics and pool buffers as the RDMA transport.
//
// Every message travels as a 4-byte big-endian length followed by that many
// bytes. Sockets have TCP_NODELAY set; a send writes the length and the
// caller's buffer with one writev and no copy, and messages that queue up
// behind a full socket leave in one writev together. A receive reads into a
// per-connection staging buffer and copies each message into a pool buffer;
// a message longer than half the staging buffer is read straight into its
// pool buffer instead. A length above the maximum message size closes the
// connection with ErrMessageTooLarge before anything of that size exists.
//
// Like the selector, the transport runs on Linux only: elsewhere New
// returns an error wrapping selector.ErrNotSupported, and package rubin's
// "tcp" network carries package net's connections instead.
package tcp

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/addr"
)

// headerLen is the size of the length prefix of every message.
const headerLen = 4

// Defaults for the zero Config fields.
const (
	DefaultReadBuffer = 32 << 10
	DefaultSendQueue  = 4 << 20
)

// Config configures a Transport. The zero value is usable.
type Config struct {
	// Pool provides the buffers of received messages. Nil means a pool
	// of the transport's own, closed with it.
	Pool *bufpool.Pool
	// MaxMessageSize bounds messages in both directions. It defaults to,
	// and may not exceed, the pool's buffer size.
	MaxMessageSize int
	// ReadBuffer is the size of each connection's staging buffer.
	// Default DefaultReadBuffer.
	ReadBuffer int
	// SendQueue is how many bytes of messages a connection queues in user
	// space behind a full socket before a non-blocking Send returns
	// ErrWouldBlock. Default DefaultSendQueue.
	SendQueue int
}

// Stats counts a transport's traffic since it was created.
type Stats = channel.Stats

// A Transport makes TCP channels that share a configuration, a buffer pool
// and counters. Its methods are safe for concurrent use.
type Transport struct {
	cfg     Config
	ownPool bool

	msgsIn, msgsOut, bytesIn, bytesOut atomic.Uint64
	opened, closed, protoErrs          atomic.Uint64
}

// New returns a transport configured by cfg.
func New(cfg Config) (*Transport, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	if cfg.MaxMessageSize < 0 || cfg.ReadBuffer < 0 || cfg.SendQueue < 0 {
		return nil, fmt.Errorf("tcp: negative value in config %+v", cfg)
	}
	t := &Transport{}
	if cfg.Pool == nil {
		p, err := bufpool.New(bufpool.Config{BufferSize: max(cfg.MaxMessageSize, 0)})
		if err != nil {
			return nil, err
		}
		cfg.Pool, t.ownPool = p, true
	}
	if cfg.MaxMessageSize == 0 {
		cfg.MaxMessageSize = cfg.Pool.BufferSize()
	}
	if cfg.MaxMessageSize > cfg.Pool.BufferSize() {
		return nil, fmt.Errorf("tcp: MaxMessageSize %d exceeds the pool's buffer size %d", cfg.MaxMessageSize, cfg.Pool.BufferSize())
	}
	if cfg.ReadBuffer == 0 {
		cfg.ReadBuffer = DefaultReadBuffer
	}
	cfg.ReadBuffer = max(cfg.ReadBuffer, 2*headerLen)
	if cfg.SendQueue == 0 {
		cfg.SendQueue = DefaultSendQueue
	}
	t.cfg = cfg
	return t, nil
}

// Pool returns the transport's buffer pool.
func (t *Transport) Pool() *bufpool.Pool { return t.cfg.Pool }

// MaxMessageSize returns the largest message the transport's channels carry.
func (t *Transport) MaxMessageSize() int { return t.cfg.MaxMessageSize }

// Close closes the pool if the transport made it. Channels made by the
// transport should be closed first.
func (t *Transport) Close() error {
	if t.ownPool {
		return t.cfg.Pool.Close()
	}
	return nil
}

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{
		MessagesIn:     t.msgsIn.Load(),
		MessagesOut:    t.msgsOut.Load(),
		BytesIn:        t.bytesIn.Load(),
		BytesOut:       t.bytesOut.Load(),
		ConnsOpened:    t.opened.Load(),
		ConnsClosed:    t.closed.Load(),
		ProtocolErrors: t.protoErrs.Load(),
	}
}

// Dial connects to address in blocking mode, giving up when ctx is done.
func (t *Transport) Dial(ctx context.Context, address string) (*Conn, error) {
	c, err := t.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	for {
		done, err := c.finishConnect(50 * time.Millisecond)
		if err != nil {
			c.Close()
			return nil, err
		}
		if done {
			break
		}
		if err := ctx.Err(); err != nil {
			c.Close()
			return nil, &net.OpError{Op: "dial", Net: "tcp", Addr: c.raddr, Err: err}
		}
	}
	c.blocking.Store(true)
	return c, nil
}

// Connect starts connecting to address and returns a Conn in non-blocking
// mode whose connect is pending: register it for OpConnect and call
// FinishConnect. ctx bounds only the name resolution.
func (t *Transport) Connect(ctx context.Context, address string) (*Conn, error) {
	raddr, err := addr.Resolve(ctx, "tcp", "dial", address)
	if err != nil {
		return nil, err
	}
	sa, family := sockaddr(raddr)
	fd, err := socket(family)
	if err != nil {
		return nil, opError("dial", raddr, "socket", err)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
		unix.Close(fd)
		return nil, opError("dial", raddr, "setsockopt", err)
	}
	c := t.newConn(fd, raddr)
	switch err := unix.Connect(fd, sa); err {
	case nil:
		c.connected()
	case unix.EINPROGRESS, unix.EINTR:
		c.state.Store(statePending)
	default:
		c.fd.close()
		return nil, opError("dial", raddr, "connect", err)
	}
	return c, nil
}

// Listen listens on address, in blocking mode.
func (t *Transport) Listen(ctx context.Context, address string) (*Listener, error) {
	laddr, err := addr.Resolve(ctx, "tcp", "listen", address)
	if err != nil {
		return nil, err
	}
	sa, family := sockaddr(laddr)
	fd, err := socket(family)
	if err != nil {
		return nil, opError("listen", laddr, "socket", err)
	}
	setup := func() (string, error) {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return "setsockopt", err
		}
		if err := unix.Bind(fd, sa); err != nil {
			return "bind", err
		}
		if err := unix.Listen(fd, listenBacklog); err != nil {
			return "listen", err
		}
		return "", nil
	}
	if call, err := setup(); err != nil {
		unix.Close(fd)
		return nil, opError("listen", laddr, call, err)
	}
	l := &Listener{t: t, fd: sysfd{fd: fd}, laddr: localAddr(fd)}
	l.blocking.Store(true)
	return l, nil
}

// listenBacklog is the accept queue length asked for; the kernel caps it
// at net.core.somaxconn.
const listenBacklog = 4096

// opError wraps a system call error the way package net does.
func opError(op string, addr net.Addr, call string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Addr: addr, Err: wrapSyscall(call, err)}
}

func wrapSyscall(call string, err error) error {
	if _, ok := err.(unix.Errno); ok {
		return os.NewSyscallError(call, err)
	}
	return err
}
