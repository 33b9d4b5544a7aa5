package rubin

import (
	"flag"
	"fmt"
	"runtime"
	"time"

	"github.com/rubin-go/rubin/internal/anytransport"
)

// Config selects and tunes a transport; NewStack makes a Stack from it.
// The zero value means TCP with defaults.
//
// The "rdma" transport (package rdma) must be imported (see the package
// documentation) and needs Linux, cgo with rdma-core and an RDMA device;
// where it has none, NewStack fails with an error wrapping
// rdma.ErrNotSupported or rdma.ErrNoDevice. Its connections use the
// completion queue of the poller that serves them.
type Config struct {
	// Transport is the network: "tcp" or "rdma". Default "tcp".
	Transport string
	// MaxMessageSize bounds one message; longer writes are split. Default
	// bufpool.DefaultBufferSize for TCP, rdma.DefaultMaxMessageSize for
	// RDMA.
	MaxMessageSize int
	// SpinBudget is how long a poller polls before it sleeps, and over
	// RDMA how long a Read polls the device before it waits for its
	// poller; see selector.Config. Default 0: a Read's budget adapts to
	// its recent waits and the pollers sleep at once, since a poller
	// spinning beside a Read only competes with it for the CPU (over
	// TCP nobody spins). A positive value fixes both.
	SpinBudget time.Duration
	// Pollers is the number of poller goroutines. Default GOMAXPROCS at
	// NewStack.
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

// normalized returns the Config with its defaults filled in.
func (c Config) normalized() Config {
	if c.Transport == "" {
		c.Transport = "tcp"
	}
	if c.Pollers <= 0 {
		c.Pollers = runtime.GOMAXPROCS(0)
	}
	return c
}
