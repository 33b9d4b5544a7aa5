package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma"
	"github.com/rubin-go/rubin/transport/tcp"
)

// transports are the -transport values of rubin's transports.
var transports = []string{"tcp", "rdma"}

// A chanTransport is what the channel api uses of one of rubin's channel
// transports (package tcp or rdma).
type chanTransport interface {
	// connect starts connecting to address and returns the connection in
	// non-blocking mode with its connect pending.
	connect(ctx context.Context, address string) (chanConn, error)
	// listen listens on address; the listener is in blocking mode.
	listen(ctx context.Context, address string) (chanListener, error)
	Pool() *bufpool.Pool
	MaxMessageSize() int
	Stats() channel.Stats
	Close() error
}

// A chanConn is a connection of a channel transport, such as *tcp.Conn or
// *rdma.Conn.
type chanConn interface {
	channel.Conn
	selector.Selectable
}

// A chanListener is a listener of a channel transport.
type chanListener interface {
	selector.Selectable
	// accept returns the next connection, in blocking mode, or
	// channel.ErrWouldBlock if the listener is non-blocking and none waits.
	accept() (chanConn, error)
}

// newTransport returns the channel transport for the -transport value.
func newTransport(network string) (chanTransport, error) {
	switch network {
	case "tcp":
		tr, err := tcp.New(tcp.Config{})
		if err != nil {
			return nil, err
		}
		return tcpTransport{tr}, nil
	case "rdma":
		tr, err := rdma.New(rdma.Config{})
		if err != nil {
			return nil, err
		}
		return rdmaTransport{tr}, nil
	}
	return nil, fmt.Errorf("unknown transport %q (available: %s)", network, strings.Join(transports, ", "))
}

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

type tcpListener struct{ *tcp.Listener }

func (l tcpListener) accept() (chanConn, error) { return asConn(l.AcceptTCP()) }

// rdmaTransport is the RDMA transport. A connection registered with a
// selector before its connect completes, or accepted from a listener
// registered with one, uses that selector's completion queue.
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
