// Package rubin is the net.Conn face of rubin-go: Listen and Dial give a
// net.Listener and net.Conn over any of rubin's transports, so a program
// that speaks net.Conn switches from TCP to RDMA by changing the network
// name (or a -transport flag):
//
//	conn, err := rubin.Dial("tcp", "10.0.0.2:7100")  // was net.Dial("tcp", ...)
//
// TCP is built in. RDMA is opt-in, so that programs that do not use it
// need neither cgo nor the verbs libraries: import its transport for its
// side effect, as with a database/sql driver,
//
//	import _ "github.com/rubin-go/rubin/transport/rdma"
//
// and the network "rdma" works; without the import, Dial and Listen of
// "rdma" fail with an error that names it. Metrics are opt-in too
// (metrics.Collector.AddStack).
//
// Listen and Dial use a default Stack per network, made on first use and
// kept for the life of the process. A program that tunes a transport
// (Config), or that must release what it used, makes its own Stack with
// NewStack and closes it when done; Dialer and ListenConfig carry a Stack
// to code that takes package net's dial and listen functions, such as
// net/http's Transport.DialContext:
//
//	s, err := rubin.NewStack(rubin.Config{Transport: "rdma"})
//	...
//	defer s.Close() // closes its listeners and conns, stops its pollers
//	d := &rubin.Dialer{Stack: s}
//	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
//
// Off Linux, where rubin's selector does not run, "tcp" still works: it
// carries package net's connections.
//
// Underneath, every connection is a message channel (package channel)
// registered with a selector (package selector); a few poller goroutines
// run the selectors and hand received messages to readers. Read and Write
// are the byte stream net.Conn promises: a Write is sent as one message or,
// above the maximum message size, as several, and a Read returns bytes of
// one message at a time. Programs that want the message channels, the
// selector and zero-copy buffers directly use those packages instead.
//
// Errors follow package net: *net.OpError wrapping, io.EOF when the peer
// closed, net.ErrClosed after Close, os.ErrDeadlineExceeded after a
// deadline.
package rubin

import (
	"context"
	"fmt"
	"net"
	"sync"
)

// Listen announces on the local address with the given network's
// transport ("tcp" or "rdma"), on the network's default Stack.
func Listen(network, address string) (net.Listener, error) {
	return (&ListenConfig{}).Listen(context.Background(), network, address)
}

// Dial connects to the address with the given network's transport
// ("tcp" or "rdma"), on the network's default Stack.
func Dial(network, address string) (net.Conn, error) {
	return (&Dialer{}).DialContext(context.Background(), network, address)
}

// DialContext is Dial with a context that bounds the connect.
func DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return (&Dialer{}).DialContext(ctx, network, address)
}

// A Dialer dials with the method set of net.Dialer, so that
// http.Transport.DialContext and other hooks that take package net's dial
// functions take its DialContext. (For grpc.WithContextDialer, which takes
// no network, use Stack.Dial.) The zero value dials as Dial does.
//
// Multiple goroutines may use a Dialer simultaneously.
type Dialer struct {
	// Stack carries the connections. With a Stack, the network passed to
	// Dial must be the Stack's transport or "tcp": callers such as
	// net/http pass "tcp" to mean any stream connection, and the Stack's
	// transport (RDMA, for an "rdma" Stack) carries it. Nil means the
	// default Stack of the network named in each call.
	Stack *Stack
}

// Dial connects to the address on the named network.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext connects to the address on the named network; ctx bounds
// the connect.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	s, err := stackFor(d.Stack, "dial", network)
	if err != nil {
		return nil, err
	}
	return s.Dial(ctx, address)
}

// A ListenConfig listens with the method set of net.ListenConfig. The
// zero value listens as Listen does.
//
// Multiple goroutines may use a ListenConfig simultaneously.
type ListenConfig struct {
	// Stack carries the listeners and their connections, as a Dialer's
	// does: the network passed to Listen must be its transport or "tcp".
	// Nil means the default Stack of the network named in each call.
	Stack *Stack
}

// Listen announces on the local address on the named network; ctx bounds
// the setting up, not the listener's life.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	s, err := stackFor(lc.Stack, "listen", network)
	if err != nil {
		return nil, err
	}
	return s.Listen(ctx, address)
}

// stackFor returns s if it can carry network, or network's default Stack
// if s is nil.
func stackFor(s *Stack, op, network string) (*Stack, error) {
	if s == nil {
		return defaultStack(op, network)
	}
	if network != s.cfg.Transport && network != "tcp" {
		return nil, &net.OpError{Op: op, Net: network, Err: fmt.Errorf("%w: the Stack carries %s", net.UnknownNetworkError(network), s.cfg.Transport)}
	}
	return s, nil
}

// defaults holds the default Stacks, one per network, made on first use
// and never closed.
var defaults struct {
	mu     sync.Mutex
	stacks map[string]*Stack
}

func defaultStack(op, network string) (*Stack, error) {
	cfg := Config{Transport: network}.normalized()
	defaults.mu.Lock()
	defer defaults.mu.Unlock()
	if s, ok := defaults.stacks[cfg.Transport]; ok {
		return s, nil
	}
	s, err := openStack(cfg, openBackend)
	if err != nil {
		return nil, &net.OpError{Op: op, Net: cfg.Transport, Err: err}
	}
	if defaults.stacks == nil {
		defaults.stacks = map[string]*Stack{}
	}
	defaults.stacks[cfg.Transport] = s
	return s, nil
}
