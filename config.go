package rubin

import (
	"context"
	"flag"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selector"
)

// Config selects and tunes a transport. The zero value means TCP with
// defaults. Configs are values: two equal Configs share one stack of
// poller goroutines, buffer pool and counters, created on first use.
//
// The "rdma" transport (package rdma) must be imported (see the package
// documentation) and needs Linux, cgo with rdma-core and an RDMA device;
// where it has none, Listen, Dial and Stats fail with a *net.OpError wrapping rdma.ErrNotSupported or
// rdma.ErrNoDevice. Its connections use the completion queue of the
// poller that serves them.
type Config struct {
	// Transport is the network: "tcp" or "rdma". Default "tcp".
	Transport string
	// MaxMessageSize bounds one message; longer writes are split. Default
	// bufpool.DefaultBufferSize for TCP, rdma.DefaultMaxMessageSize for
	// RDMA.
	MaxMessageSize int
	// SpinBudget is how long a poller polls before it sleeps; see
	// selector.Config. Default 0.
	SpinBudget time.Duration
	// Pollers is the number of poller goroutines. Default GOMAXPROCS.
	Pollers int
}

// RegisterFlags defines command-line flags for the Config's fields on fs:
// -transport, -max-message-size, -spin and -pollers.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Transport, "transport", "tcp", fmt.Sprintf("transport: one of %v (rdma once github.com/rubin-go/rubin/transport/rdma is imported)", anytransport.Networks()))
	fs.IntVar(&c.MaxMessageSize, "max-message-size", 0, "largest message in bytes (0: default)")
	fs.DurationVar(&c.SpinBudget, "spin", 0, "how long a poller spins before it sleeps")
	fs.IntVar(&c.Pollers, "pollers", 0, "poller goroutines (0: GOMAXPROCS)")
}

// Listen announces on the local address.
func (c *Config) Listen(ctx context.Context, address string) (net.Listener, error) {
	s, err := c.stack("listen", address)
	if err != nil {
		return nil, err
	}
	return s.listen(ctx, address)
}

// Dial connects to the address.
func (c *Config) Dial(ctx context.Context, address string) (net.Conn, error) {
	s, err := c.stack("dial", address)
	if err != nil {
		return nil, err
	}
	return s.dial(ctx, address)
}

// Stats returns the counters of the Config's stack, creating it if needed.
func (c *Config) Stats() (Stats, error) {
	s, err := c.stack("stats", "")
	if err != nil {
		return Stats{}, err
	}
	return s.stats(), nil
}

// Stats gathers the counters of a stack's parts.
type Stats struct {
	Transport channel.Stats
	Pool      bufpool.Stats
	Selectors []selector.Stats
}

var (
	stacksMu sync.Mutex
	stacks   = map[Config]*stack{}
)

// stack returns the shared stack for the normalized Config.
func (c *Config) stack(op, address string) (*stack, error) {
	cfg := *c
	if cfg.Transport == "" {
		cfg.Transport = "tcp"
	}
	if cfg.Pollers <= 0 {
		cfg.Pollers = runtime.GOMAXPROCS(0)
	}
	stacksMu.Lock()
	defer stacksMu.Unlock()
	if s, ok := stacks[cfg]; ok {
		return s, nil
	}
	s, err := newStack(cfg)
	if err != nil {
		return nil, &net.OpError{Op: op, Net: cfg.Transport, Err: err}
	}
	stacks[cfg] = s
	return s, nil
}
