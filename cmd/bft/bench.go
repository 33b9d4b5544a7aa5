package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/internal/stats"
)

// maxBenchSize bounds -size: one operation must fit a batch.
const maxBenchSize = 1 << 20

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", stderr)
	var cf clusterFlags
	cf.register(fs)
	var bc benchConfig
	fs.IntVar(&bc.clients, "clients", 16, "closed-loop clients, each with one operation outstanding and a client identity of its own (multiplexed by one client process over one link per replica)")
	fs.IntVar(&bc.ops, "n", 100000, "measured operations, over all clients")
	fs.IntVar(&bc.size, "size", 0, "bytes per operation: 0 is the store's no-op, more puts a value of that size")
	fs.IntVar(&bc.warmup, "warmup", -1, "unmeasured operations first (default min(1000, n/10))")
	fs.DurationVar(&bc.timeout, "timeout", 10*time.Minute, "give up after this long")
	if err := parseFlags(fs, args, 0); err != nil {
		return err
	}
	switch {
	case bc.clients < 1:
		return fmt.Errorf("%w: -clients %d is not positive", errUsage, bc.clients)
	case bc.ops < 1:
		return fmt.Errorf("%w: -n %d is not positive", errUsage, bc.ops)
	case bc.size < 0 || bc.size > maxBenchSize:
		return fmt.Errorf("%w: -size %d is not between 0 and %d", errUsage, bc.size, maxBenchSize)
	}
	if bc.warmup < 0 {
		bc.warmup = min(1000, bc.ops/10)
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	if len(c.Clients) < bc.clients {
		return fmt.Errorf("%w: -clients %d, but %s has only %d client identities (bft keygen -clients)", errUsage, bc.clients, cf.path, len(c.Clients))
	}
	bc.cluster, bc.transport = c, &cf.transport
	ctx, cancel := context.WithTimeout(ctx, bc.timeout)
	defer cancel()
	s, err := bench(ctx, bc)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, s)
	return nil
}

// benchConfig is what bench runs.
type benchConfig struct {
	cluster   *auth.Cluster
	transport *rubin.Config
	clients   int
	ops       int
	size      int
	warmup    int
	timeout   time.Duration
}

// summary is bench's result, printed as its one line.
type summary struct {
	replicas, f   int
	transport     string
	clients, size int
	ops           int
	opsPerSecond  float64
	p50, p99      time.Duration
	wall          time.Duration
}

func (s summary) String() string {
	return fmt.Sprintf("replicas=%d f=%d transport=%s clients=%d size=%d ops=%d ops_per_s=%.0f p50_us=%.1f p99_us=%.1f wall_s=%.3f",
		s.replicas, s.f, s.transport, s.clients, s.size, s.ops, s.opsPerSecond,
		float64(s.p50.Nanoseconds())/1e3, float64(s.p99.Nanoseconds())/1e3, s.wall.Seconds())
}

// bench runs bc's clients until bc.warmup+bc.ops operations completed and
// summarizes the measured ones.
func bench(ctx context.Context, bc benchConfig) (summary, error) {
	// One Client multiplexes all bc.clients identities over one link per
	// replica (so the replicas write one flush of replies per burst, not
	// one per client); each worker below keeps one operation outstanding
	// and its Invoke takes an identity of its own.
	ids := make([]bft.ClientID, bc.clients)
	for i := range ids {
		ids[i] = bc.cluster.Clients[i].ID
	}
	cl, err := node.NewClient(ctx, node.ClientConfig{Cluster: bc.cluster, IDs: ids, Transport: bc.transport})
	if err != nil {
		return summary{}, err
	}
	defer cl.Close()
	total := int64(bc.warmup + bc.ops)
	var next atomic.Int64 // operations handed out; the first warmup are not measured
	times := make([]time.Duration, bc.ops)
	var measuredStart atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for i := range bc.clients {
		op := benchOp(bc.size, i)
		wg.Go(func() {
			for {
				seq := next.Add(1) - 1
				if seq >= total {
					return
				}
				if seq == int64(bc.warmup) {
					measuredStart.Store(time.Now().UnixNano())
				}
				start := time.Now()
				if _, err := cl.Invoke(ctx, op); err != nil {
					cancel(fmt.Errorf("client %d: %w", i, err))
					return
				}
				if seq >= int64(bc.warmup) {
					times[seq-int64(bc.warmup)] = time.Since(start)
				}
			}
		})
	}
	wg.Wait()
	end := time.Now()
	if err := context.Cause(ctx); err != nil {
		return summary{}, err
	}
	wall := end.Sub(time.Unix(0, measuredStart.Load()))
	slices.Sort(times)
	return summary{
		replicas:     len(bc.cluster.Replicas),
		f:            bc.cluster.F,
		transport:    bc.transport.Transport,
		clients:      bc.clients,
		size:         bc.size,
		ops:          bc.ops,
		opsPerSecond: float64(bc.ops) / wall.Seconds(),
		p50:          stats.Percentile(times, 50),
		p99:          stats.Percentile(times, 99),
		wall:         wall,
	}, nil
}

// benchOp returns client i's operation of size bytes: the store's no-op
// for 0, else a put of a value of that size under the client's own key.
func benchOp(size, i int) []byte {
	if size == 0 {
		return nil
	}
	return kv.EncodePut(fmt.Appendf(nil, "bench/%d", i), []byte(strings.Repeat("x", size)))
}
