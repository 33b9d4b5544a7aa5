// Package rdma is rubin's RDMA transport: the channel contract over
// reliable-connected queue pairs of rdma-core (libibverbs and librdmacm),
// driven by the same selectors as the TCP transport.
//
// It needs Linux, cgo and rdma-core: the headers of libibverbs and
// librdmacm to build, those libraries and an RDMA device (Soft-RoCE will
// do) to run. In any other build the package still compiles, so programs
// that import it do too, and New and Dial fail with ErrNotSupported.
//
// # Security
//
// Channels use two-sided Send and Receive only. No memory is registered
// with remote access rights and no memory key ever leaves the process, so
// a peer, however Byzantine, cannot read or write our memory: it can only
// fill the receive buffers we posted for it, one message each, up to the
// credits we gave it. See docs/rdma.md for the full analysis.
//
// # Data path
//
// A message is one send with immediate data; the immediate carries credits
// (wire.go). Each side posts receives from the transport's registered
// buffer pool before the peer may send into them and grants the peer one
// data credit per receive, so a peer never sends into a missing receive;
// a receive that completes is replaced at once by a fresh buffer, and the
// credit goes back to the peer when the application takes the message, so
// a reader that stops reading stops its peer without breaking the
// connection. Receive hands the application the very buffer the device
// wrote. Small messages are sent inline; only every SignalEvery-th send
// asks for a completion.
//
// # Completion queues and selectors
//
// Each selector that RDMA channels are registered with gets one completion
// queue (and, optionally, one shared receive queue) per device, whose
// completion channel sits in the selector's epoll beside TCP sockets and
// the connection manager's event channels; the selector spins on it for
// its spin budget before arming it and sleeping. A channel's queue pair
// uses the completion queue of the selector it was registered with when
// its queue pair was made: a Connect registered before it completes, or a
// connection accepted from a registered Listener. Other channels use a
// completion queue that the transport polls on a goroutine of its own, and
// the selectors they are registered with are told of their readiness from
// there.
package rdma

import (
	"errors"
	"time"

	"github.com/rubin-go/rubin/channel"
)

// ErrNotSupported is returned by New where the binding to rdma-core is not
// built: on systems other than Linux, and without cgo.
var ErrNotSupported = errors.New("rdma: not supported by this build (needs Linux and cgo with rdma-core)")

// ErrNoDevice is returned by New when rdma-core finds no RDMA device.
var ErrNoDevice = errors.New("rdma: no RDMA device")

// Defaults for the zero Config fields.
const (
	DefaultMaxMessageSize = 128 << 10
	DefaultRecvDepth      = 64
	DefaultSendDepth      = 64
	DefaultSignalEvery    = 16
	DefaultInline         = 256
	DefaultSendQueue      = 4 << 20
	DefaultSRQSize        = 1024
	DefaultPeerCredits    = 8
	DefaultCQSize         = 16384
	DefaultConnectTimeout = 10 * time.Second
	DefaultLinger         = 2 * time.Second
)

// Config configures a Transport. The zero value is usable.
type Config struct {
	// MaxMessageSize bounds messages in both directions; it is the size
	// of every buffer of the transport's registered pool, so every receive
	// takes one whole message. Default DefaultMaxMessageSize.
	MaxMessageSize int
	// MaxBuffers bounds the pool: receive buffers posted, messages
	// received and not yet released, and send buffers. Default 4096.
	MaxBuffers int
	// RecvDepth is the most receives each connection keeps posted, and so
	// the most messages its peer may have in flight (its data credits),
	// when receive queues are not shared. A connection starts with one
	// and doubles its window whenever the peer says credits held it back
	// and the pool has more than half its buffers to spare, so an idle
	// connection holds two receive buffers (one for credit updates).
	// Default DefaultRecvDepth.
	RecvDepth int
	// SendDepth is how many sends each queue pair may have outstanding.
	// Default DefaultSendDepth.
	SendDepth int
	// SignalEvery asks for a send completion on every SignalEvery-th
	// send only. Default DefaultSignalEvery (at most SendDepth/2).
	SignalEvery int
	// Inline is the largest message sent inline, copied into the work
	// request instead of read from its buffer; the device may allow less.
	// -1 disables inline sends. Default DefaultInline.
	Inline int
	// SendQueue is how many bytes of messages a connection queues while it
	// waits for credits before a non-blocking Send returns ErrWouldBlock;
	// the queue also holds at most 128 messages, since each holds a pool
	// buffer however short it is. Default DefaultSendQueue.
	SendQueue int
	// SharedReceiveQueue makes the connections of a completion queue share
	// one receive queue of SRQSize receives instead of RecvDepth each.
	SharedReceiveQueue bool
	// SRQSize is the number of receives a shared receive queue keeps
	// posted. Default DefaultSRQSize.
	SRQSize int
	// PeerCredits is the most data credits one peer may hold on a shared
	// receive queue, so that no peer can take all of it; every peer holds
	// at least one. Default DefaultPeerCredits.
	PeerCredits int
	// CQSize is the number of entries of each completion queue; it bounds
	// the connections that can share one. Default DefaultCQSize.
	CQSize int
	// ConnectTimeout bounds address and route resolution and the connect
	// handshake. Default DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// Linger is how long Close keeps sending queued messages before it
	// disconnects anyway. Default DefaultLinger.
	Linger time.Duration
	// SpinBudget is the spin budget of the transport's own poller, which
	// serves channels not bound to a selector's completion queue; as
	// selector.Config.SpinBudget: zero adapts, selector.NoSpin never spins.
	SpinBudget time.Duration
}

func (c *Config) setDefaults() error {
	for _, v := range []int{c.MaxMessageSize, c.MaxBuffers, c.RecvDepth, c.SendDepth, c.SignalEvery, c.SendQueue, c.SRQSize, c.PeerCredits, c.CQSize} {
		if v < 0 {
			return errors.New("rdma: negative value in Config")
		}
	}
	if c.ConnectTimeout < 0 || c.Linger < 0 || c.SpinBudget < -1 /* -1: selector.NoSpin */ || c.Inline < -1 {
		return errors.New("rdma: negative value in Config")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxMessageSize, DefaultMaxMessageSize)
	def(&c.RecvDepth, DefaultRecvDepth)
	def(&c.SendDepth, DefaultSendDepth)
	def(&c.SignalEvery, DefaultSignalEvery)
	def(&c.Inline, DefaultInline)
	def(&c.SendQueue, DefaultSendQueue)
	def(&c.SRQSize, DefaultSRQSize)
	def(&c.PeerCredits, DefaultPeerCredits)
	def(&c.CQSize, DefaultCQSize)
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.Inline < 0 {
		c.Inline = 0
	}
	c.SendDepth = max(c.SendDepth, 4)
	c.SignalEvery = min(max(c.SignalEvery, 1), c.SendDepth/2)
	c.MaxMessageSize = max(c.MaxMessageSize, minMessage)
	if c.RecvDepth > maxGrant/2 || c.PeerCredits > maxGrant/2 {
		return errors.New("rdma: RecvDepth and PeerCredits must be below 32768")
	}
	return nil
}

// srqEntries is how many entries of each completion queue its shared
// receive queue takes, if there is one.
func (c *Config) srqEntries() int {
	if c.SharedReceiveQueue {
		return c.SRQSize
	}
	return 0
}

// cqEntries is how many completion-queue entries one queue pair needs: a
// shared receive queue's are counted once for the whole queue.
func (c *Config) cqEntries() int {
	if c.SharedReceiveQueue {
		return c.SendDepth
	}
	return c.SendDepth + c.RecvDepth + ctrlCredits
}

// Stats counts a transport's traffic since it was created.
type Stats = channel.Stats
