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
}
