package rubin

import (
	"context"
	"net"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma"
	"github.com/rubin-go/rubin/transport/tcp"
)

// A transport is what a stack uses of one of rubin's transports (package
// tcp or rdma). Its channels are selectable, so the stack's pollers serve
// every transport alike.
type transport interface {
	// connect starts connecting to address and returns the connection in
	// non-blocking mode with its connect pending: register it for
	// OpConnect and call FinishConnect.
	connect(ctx context.Context, address string) (chanConn, error)
	// listen listens on address; the listener is in blocking mode.
	listen(ctx context.Context, address string) (chanListener, error)
	// acceptsOnListenerSelector reports whether a connection accepted
	// from a listener that is registered with a selector is bound to that
	// selector (RDMA: to its completion queue), and so is best served by
	// the listener's poller. Otherwise connections are spread over them.
	acceptsOnListenerSelector() bool
	// Pool is the transport's buffer pool.
	Pool() *bufpool.Pool
	// Stats returns the transport's counters.
	Stats() channel.Stats
	// Close closes the transport and its channels.
	Close() error
}

// A chanConn is a transport's connection: a message channel that a
// selector can serve.
type chanConn interface {
	channel.Conn
	selector.Selectable
}

// A chanListener is a transport's listener.
type chanListener interface {
	selector.Selectable
	// accept returns the next connection, in blocking mode. A listener in
	// non-blocking mode returns channel.ErrWouldBlock when none is waiting.
	accept() (chanConn, error)
}

// newTransport makes the transport that cfg.Transport names, which must be
// one of networks.
func newTransport(cfg Config) (transport, error) {
	switch cfg.Transport {
	case "tcp":
		tr, err := tcp.New(tcp.Config{MaxMessageSize: cfg.MaxMessageSize})
		if err != nil {
			return nil, err
		}
		return tcpTransport{tr}, nil
	case "rdma":
		// The RDMA transport's own poller spins for the budget too; it
		// serves only channels that no poller's selector is bound to.
		tr, err := rdma.New(rdma.Config{MaxMessageSize: cfg.MaxMessageSize, SpinBudget: cfg.SpinBudget})
		if err != nil {
			return nil, err
		}
		return rdmaTransport{tr}, nil
	}
	return nil, net.UnknownNetworkError(cfg.Transport)
}

// tcpTransport is the transport of package tcp.
type tcpTransport struct{ *tcp.Transport }

func (t tcpTransport) connect(ctx context.Context, address string) (chanConn, error) {
	return asConn(t.Connect(ctx, address))
}

func (t tcpTransport) listen(ctx context.Context, address string) (chanListener, error) {
	ln, err := t.Listen(ctx, address)
	if err != nil {
		return nil, err
	}
	return tcpListener{ln}, nil
}

func (tcpTransport) acceptsOnListenerSelector() bool { return false }

type tcpListener struct{ *tcp.Listener }

func (l tcpListener) accept() (chanConn, error) { return asConn(l.AcceptTCP()) }

// rdmaTransport is the transport of package rdma.
type rdmaTransport struct{ *rdma.Transport }

func (t rdmaTransport) connect(ctx context.Context, address string) (chanConn, error) {
	return asConn(t.Connect(ctx, address))
}

func (t rdmaTransport) listen(ctx context.Context, address string) (chanListener, error) {
	ln, err := t.Listen(ctx, address)
	if err != nil {
		return nil, err
	}
	return rdmaListener{ln}, nil
}

func (rdmaTransport) acceptsOnListenerSelector() bool { return true }

type rdmaListener struct{ *rdma.Listener }

func (l rdmaListener) accept() (chanConn, error) { return asConn(l.AcceptRDMA()) }

// asConn returns a transport's concrete connection as a chanConn, and a
// nil chanConn, not one holding a nil pointer, with an error.
func asConn[C chanConn](c C, err error) (chanConn, error) {
	if err != nil {
		return nil, err
	}
	return c, nil
}
