package node

import (
	"context"
	"net"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selector"
)

// A transport is what a Client's links run on: package rubin's default
// Stack of a network, or, for a Transport config, a Stack of the node's
// own that it closes when it stops. A Replica serves its links on the
// channels of a transport of its own (openChannels).
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

// openChannels opens the channel transport a replica's event loop serves,
// and the configuration of its selector, for a node configured with
// network and cfg (cfg, if not nil, overrides network).
func openChannels(network string, cfg *rubin.Config) (anytransport.Transport, selector.Config, error) {
	var (
		tcfg anytransport.Config
		scfg selector.Config
	)
	if cfg != nil {
		network = cfg.Transport
		tcfg = anytransport.Config{MaxMessageSize: cfg.MaxMessageSize, SpinBudget: cfg.SpinBudget}
		scfg.SpinBudget = cfg.SpinBudget
	}
	if network == "" {
		network = "tcp"
	}
	tr, err := anytransport.Open(network, tcfg)
	return tr, scfg, err
}
