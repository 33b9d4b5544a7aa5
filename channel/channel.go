// Package channel states the transport-neutral contract of rubin's channels,
// in the spirit of java.nio's SocketChannel and ServerSocketChannel.
//
// A Conn carries messages: every Send arrives as exactly one Receive, with
// its boundaries preserved, whatever the transport. A Listener accepts Conns.
// Both start in blocking mode; in non-blocking mode an operation that cannot
// proceed at once returns ErrWouldBlock, and a selector (package selector)
// tells when to try again.
//
// Buffers: Receive hands the caller a pool buffer (zero copy: on RDMA it is
// the very memory the NIC wrote) that the caller owns and must Release. Send
// takes ownership of the buffer it is given, except when it returns
// ErrWouldBlock, and releases it once the message has left.
//
// Errors: operations on a closed channel return errors that satisfy
// errors.Is(err, net.ErrClosed); Receive returns io.EOF, unwrapped, when the
// peer closed the connection in an orderly way; a message larger than the
// configured maximum, in either direction, fails with an error that
// satisfies errors.Is(err, ErrMessageTooLarge), and a peer that announces
// one has its connection closed before anything of that size is allocated.
//
// Half-close: CloseWrite ends one direction only, as shutdown(SHUT_WR)
// does for a socket, so that a proxy can pass an end of stream on. Every
// Conn supports it, so it is a method of Conn rather than an optional
// interface to assert. The peer receives the messages sent before it and
// then io.EOF, and may go on sending until it closes; this side may go on
// receiving. A Send after CloseWrite fails with an error that satisfies
// errors.Is(err, ErrWriteClosed).
//
// Platforms: the contract is the same everywhere, but its transports are
// not. transport/tcp runs on Linux only (it is driven by the selector's
// epoll), and transport/rdma needs Linux, cgo and rdma-core; elsewhere
// their New fails with an error wrapping ErrNotSupported of package
// selector or transport/rdma.
package channel

import (
	"errors"
	"net"

	"github.com/rubin-go/rubin/bufpool"
)

var (
	// ErrWouldBlock is returned in non-blocking mode by an operation that
	// cannot proceed without waiting.
	ErrWouldBlock = errors.New("operation would block")
	// ErrMessageTooLarge reports a message above the configured maximum.
	ErrMessageTooLarge = errors.New("message too large")
	// ErrNotConnected is returned by I/O on a Conn whose connect has not
	// finished.
	ErrNotConnected = errors.New("channel not connected")
	// ErrRegistered is returned by SetBlocking(true) on a channel that is
	// registered with a selector.
	ErrRegistered = errors.New("channel registered with a selector")
	// ErrWriteClosed is returned by Send on a Conn whose sending side
	// CloseWrite closed.
	ErrWriteClosed = errors.New("channel closed for writing")
)

// Channel is what every channel has.
//
// Close, IsBlocking and the address methods may be called from any
// goroutine at any time. Close makes operations blocked on the channel
// return errors that satisfy errors.Is(err, net.ErrClosed); it is
// idempotent.
type Channel interface {
	Close() error
	LocalAddr() net.Addr
	// SetBlocking sets the mode of subsequent operations. A channel that is
	// registered with a selector must stay non-blocking.
	SetBlocking(block bool) error
	IsBlocking() bool
}

// Conn is a connected (or connecting) message channel.
//
// One goroutine may Receive while another Sends. Concurrent Receives, or
// concurrent Sends, are safe but their order is unspecified.
type Conn interface {
	Channel
	RemoteAddr() net.Addr
	// FinishConnect completes a connect started in non-blocking mode. It
	// reports true once connected, false while the connect is pending (in
	// blocking mode it waits instead), and the connect's error if it failed.
	// On a connected Conn it reports true at once.
	FinishConnect() (bool, error)
	// Receive returns the next message. The caller owns the buffer and
	// must Release it.
	Receive() (*bufpool.Buffer, error)
	// Send sends buf.Bytes() as one message. It takes ownership of buf
	// unless it returns ErrWouldBlock. What the transport cannot take at
	// once waits in a bounded send queue, and Send returns; a non-blocking
	// Send returns ErrWouldBlock once the queue is at its bound, and
	// OpWrite says when the queue is empty again. A buffer from any pool is
	// accepted; a transport that needs registered memory copies a foreign
	// buffer into its own.
	Send(buf *bufpool.Buffer) error
	// Flush pushes out queued messages. In non-blocking mode it returns
	// ErrWouldBlock if some are still queued; OpWrite says when none is.
	Flush() error
	// CloseWrite closes the sending side. Messages already sent or queued
	// still go out, in order, followed by the end of the stream: the
	// peer's Receive returns them and then io.EOF. It does not wait for
	// them: queued ones leave as after any Send (in non-blocking mode,
	// through Flush or a selector), and Close treats those that have not
	// left as it treats any queued message. Receive keeps working on this
	// side. Later Sends fail with
	// ErrWriteClosed; CloseWrite again returns nil. Close is still needed
	// to release the Conn.
	CloseWrite() error
	// Pool is where buffers for Send are best taken from.
	Pool() *bufpool.Pool
	// MaxMessageSize is the largest message this Conn sends or receives.
	MaxMessageSize() int
}

// Listener is a channel that accepts Conns.
type Listener interface {
	Channel
	// Accept returns the next connection, in blocking mode.
	Accept() (Conn, error)
}

// Stats counts a transport's traffic. Every transport reports the same
// counters, so that metrics and benchmarks compare them side by side.
type Stats struct {
	MessagesIn, MessagesOut uint64
	BytesIn, BytesOut       uint64 // payload bytes, without framing
	ConnsOpened             uint64 // connected by dial or accept
	ConnsClosed             uint64
	ProtocolErrors          uint64 // connections closed for bad input from the peer
	// ControlOut counts messages the transport sent on its own, without
	// payload: RDMA's credit updates, FINs and drain markers. TCP sends
	// none.
	ControlOut uint64
}
