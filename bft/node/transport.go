package node

import (
	"context"
	"net"

	"github.com/rubin-go/rubin"
)

// A transport is what a node's links run on: package rubin's default
// Stack of a network, or, for a Transport config, a Stack of the node's
// own that it closes when it stops.
type transport struct {
	network string
	stack   *rubin.Stack // nil: the network's default Stack
}

// openTransport makes the transport of a node configured with network and
// cfg (cfg, if not nil, overrides network).
func openTransport(network string, cfg *rubin.Config) (transport, error) {
	if cfg == nil {
		return transport{network: network}, nil
	}
	s, err := rubin.NewStack(*cfg)
	if err != nil {
		return transport{}, err
	}
	return transport{network: cfg.Transport, stack: s}, nil
}

func (t transport) dial(ctx context.Context, address string) (net.Conn, error) {
	return (&rubin.Dialer{Stack: t.stack}).DialContext(ctx, t.name(), address)
}

func (t transport) listen(ctx context.Context, address string) (net.Listener, error) {
	return (&rubin.ListenConfig{Stack: t.stack}).Listen(ctx, t.name(), address)
}

// name is the network, "tcp" if none was given.
func (t transport) name() string {
	if t.network == "" {
		return "tcp"
	}
	return t.network
}

// close closes the node's own Stack, with any link still on it.
func (t transport) close() {
	if t.stack != nil {
		t.stack.Close()
	}
}
