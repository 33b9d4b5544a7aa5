// Package anytransport opens one of rubin's channel transports (package
// tcp or rdma) by its network name and gives both one shape, for the code
// that serves either with the same selectors: the net.Conn face of package
// rubin and the echo command.
//
// TCP is always there. The RDMA transport registers itself when its
// package (github.com/rubin-go/rubin/transport/rdma) is imported, as
// database/sql drivers do, so a program that does not import it needs
// neither cgo nor the verbs libraries.
package anytransport

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/tcp"
)

// Known names every transport of the module and the package that provides
// it; Open of one not registered says which import enables it.
var Known = map[string]string{
	"tcp":  "github.com/rubin-go/rubin/transport/tcp",
	"rdma": "github.com/rubin-go/rubin/transport/rdma",
}

// Opener makes a transport from a Config.
type Opener func(Config) (Transport, error)

var (
	mu      sync.Mutex
	openers = map[string]Opener{"tcp": openTCP}
)

// Register makes network's transport available to Open. A transport's
// package calls it from init; registering a name twice panics.
func Register(network string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := openers[network]; dup {
		panic("anytransport: transport " + network + " registered twice")
	}
	openers[network] = open
}

// Networks returns the names of the registered transports, sorted.
func Networks() []string {
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(openers))
	for n := range openers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

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

// A DevicePoller is a Conn whose completions a waiting caller can poll
// for itself (RDMA: its completion queue), without waiting for the
// selector that serves it. Sockets have no such thing: the kernel is
// their device.
type DevicePoller interface {
	PollDevice()
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

// Open makes the transport that network names. A name the module knows
// but that is not registered is an error that names the import enabling
// it; any other is a net.UnknownNetworkError.
func Open(network string, cfg Config) (Transport, error) {
	mu.Lock()
	open, ok := openers[network]
	mu.Unlock()
	if ok {
		return open(cfg)
	}
	if pkg, known := Known[network]; known {
		return nil, fmt.Errorf("%w: transport %q is not linked in: import _ %q to enable it", net.UnknownNetworkError(network), network, pkg)
	}
	return nil, net.UnknownNetworkError(network)
}

func openTCP(cfg Config) (Transport, error) {
	tr, err := tcp.New(tcp.Config{MaxMessageSize: cfg.MaxMessageSize})
	if err != nil {
		return nil, err
	}
	return tcpTransport{tr}, nil
}

type tcpTransport struct{ *tcp.Transport }

func (t tcpTransport) Connect(ctx context.Context, address string) (Conn, error) {
	return AsConn(t.Transport.Connect(ctx, address))
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

func (l tcpListener) AcceptConn() (Conn, error) { return AsConn(l.AcceptTCP()) }

// AsConn returns a transport's concrete connection as a Conn, and a nil
// Conn, not one holding a nil pointer, with an error.
func AsConn[C Conn](c C, err error) (Conn, error) {
	if err != nil {
		return nil, err
	}
	return c, nil
}
