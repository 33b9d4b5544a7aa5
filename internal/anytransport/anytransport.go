// Package anytransport opens one of rubin's channel transports (package
// tcp or rdma) by its network name and gives both one shape, for the code
// that serves either with the same selectors: the net.Conn face of package
// rubin and the echo command.
package anytransport

import (
	"context"
	"net"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma"
	"github.com/rubin-go/rubin/transport/tcp"
)

// Networks names the transports Open knows.
var Networks = []string{"tcp", "rdma"}

// A Transport is one of rubin's transports.
type Transport interface {
	// Connect starts connecting to address and returns the connection in
	// non-blocking mode with its connect pending: register it for
	// OpConnect and call FinishConnect.
	Connect(ctx context.Context, address string) (Conn, error)
	// Listen listens on address; the listener is in blocking mode.
	Listen(ctx context.Context, address string) (Listener, error)
	// AcceptsOnListenerSelector reports whether a connection accepted
	// from a listener registered with a selector is bound to that
	// selector (RDMA: to its completion queue), and so is best served by
	// the listener's selector.
	AcceptsOnListenerSelector() bool
	Pool() *bufpool.Pool
	MaxMessageSize() int
	Stats() channel.Stats
	Close() error
}

// A Conn is a transport's connection: a message channel a selector serves.
type Conn interface {
	channel.Conn
	selector.Selectable
}

// A Listener is a transport's listener.
type Listener interface {
	selector.Selectable
	// AcceptConn returns the next connection, in blocking mode, or
	// channel.ErrWouldBlock if the listener is non-blocking and none waits.
	AcceptConn() (Conn, error)
}

// Config is what Open passes on to the transport it makes; zero values
// mean the transport's defaults.
type Config struct {
	MaxMessageSize int
	// SpinBudget is the spin budget of the RDMA transport's own poller,
	// which serves channels that no selector's completion queue is bound
	// to.
	SpinBudget time.Duration
}

// Open makes the transport that network names, one of Networks; any other
// name is a net.UnknownNetworkError.
func Open(network string, cfg Config) (Transport, error) {
	switch network {
	case "tcp":
		tr, err := tcp.New(tcp.Config{MaxMessageSize: cfg.MaxMessageSize})
		if err != nil {
			return nil, err
		}
		return tcpTransport{tr}, nil
	case "rdma":
		tr, err := rdma.New(rdma.Config{MaxMessageSize: cfg.MaxMessageSize, SpinBudget: cfg.SpinBudget})
		if err != nil {
			return nil, err
		}
		return rdmaTransport{tr}, nil
	}
	return nil, net.UnknownNetworkError(network)
}

type tcpTransport struct{ *tcp.Transport }

func (t tcpTransport) Connect(ctx context.Context, address string) (Conn, error) {
	return asConn(t.Transport.Connect(ctx, address))
}

func (t tcpTransport) Listen(ctx context.Context, address string) (Listener, error) {
	ln, err := t.Transport.Listen(ctx, address)
	if err != nil {
		return nil, err
	}
	return tcpListener{ln}, nil
}

func (tcpTransport) AcceptsOnListenerSelector() bool { return false }

type tcpListener struct{ *tcp.Listener }

func (l tcpListener) AcceptConn() (Conn, error) { return asConn(l.AcceptTCP()) }

type rdmaTransport struct{ *rdma.Transport }

func (t rdmaTransport) Connect(ctx context.Context, address string) (Conn, error) {
	return asConn(t.Transport.Connect(ctx, address))
}

func (t rdmaTransport) Listen(ctx context.Context, address string) (Listener, error) {
	ln, err := t.Transport.Listen(ctx, address)
	if err != nil {
		return nil, err
	}
	return rdmaListener{ln}, nil
}

func (rdmaTransport) AcceptsOnListenerSelector() bool { return true }

type rdmaListener struct{ *rdma.Listener }

func (l rdmaListener) AcceptConn() (Conn, error) { return asConn(l.AcceptRDMA()) }

// asConn returns a transport's concrete connection as a Conn, and a nil
// Conn, not one holding a nil pointer, with an error.
func asConn[C Conn](c C, err error) (Conn, error) {
	if err != nil {
		return nil, err
	}
	return c, nil
}
