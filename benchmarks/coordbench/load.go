package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
	"github.com/rubin-go/rubin/internal/stats"
)

// A loadSpec is one closed-loop run of the client side.
type loadSpec struct {
	servers  []string // client i connects to servers[i % len(servers)]
	clients  int
	warmup   time.Duration
	duration time.Duration
	size     int
}

// args returns the command line of coordbench load that runs s.
func (s loadSpec) args() []string {
	return []string{"load",
		"-servers", strings.Join(s.servers, ","),
		"-clients", fmt.Sprint(s.clients),
		"-warmup", s.warmup.String(),
		"-duration", s.duration.String(),
		"-size", fmt.Sprint(s.size),
	}
}

// runLoad is coordbench load: the client side of one run, which the
// runner starts as its own process on the client CPU. It prints one
// summary line, as benchkit.ParseOps reads it.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("coordbench load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var s loadSpec
	var servers string
	fs.StringVar(&servers, "servers", "", "ZooKeeper client addresses, comma-separated; client i connects to the (i mod count)-th")
	fs.IntVar(&s.clients, "clients", 1, "closed-loop clients, each with its own session and znode")
	fs.DurationVar(&s.warmup, "warmup", time.Second, "unmeasured time before the measured time")
	fs.DurationVar(&s.duration, "duration", 5*time.Second, "measured time")
	fs.IntVar(&s.size, "size", 64, "bytes of the value written and read")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	s.servers = benchkit.SplitList(servers)
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case len(s.servers) == 0:
		return fmt.Errorf("%w: -servers is empty", errUsage)
	case s.clients < 1 || s.size < 0 || s.warmup < 0 || s.duration <= 0:
		return fmt.Errorf("%w: -clients and -duration must be positive, -size and -warmup not negative", errUsage)
	}
	r, err := s.run(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, r.line(s))
	return nil
}

// A loadResult is what one run measured.
type loadResult struct {
	ops     int
	elapsed time.Duration
	lat     []time.Duration // sorted
}

func (r loadResult) line(s loadSpec) string {
	return fmt.Sprintf("clients=%d size=%d seconds=%.2f ops=%d ops_per_s=%.0f p50_us=%.0f p99_us=%.0f",
		s.clients, s.size, r.elapsed.Seconds(), r.ops, float64(r.ops)/r.elapsed.Seconds(),
		us(stats.Percentile(r.lat, 50)), us(stats.Percentile(r.lat, 99)))
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// sessionTimeout is what every client session asks for.
const sessionTimeout = 10 * time.Second

// run connects the clients, waits for their sessions, gives each its
// znode, and then runs them all at once: each alternates setData and
// getData on its own znode, one operation at a time, for the warm-up and then the measured time. Only
// operations that complete within the measured time count. Any failed
// operation fails the run.
func (s loadSpec) run(ctx context.Context) (loadResult, error) {
	value := bytes.Repeat([]byte{'v'}, s.size)
	conns := make([]*zk.Conn, s.clients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	errs := make([]error, s.clients)
	var wg sync.WaitGroup
	for i := range s.clients {
		c, events, err := zk.Connect([]string{s.servers[i%len(s.servers)]}, sessionTimeout, zk.WithLogger(quiet{}))
		if err != nil {
			return loadResult{}, fmt.Errorf("client %d: connect: %w", i, err)
		}
		conns[i] = c
		wg.Go(func() {
			if err := waitSession(ctx, events, sessionWait); err != nil {
				errs[i] = fmt.Errorf("client %d: %w", i, err)
				return
			}
			_, err := c.Create(znode(i), value, 0, zk.WorldACL(zk.PermAll))
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				errs[i] = fmt.Errorf("client %d: create %s: %w", i, znode(i), err)
			}
		})
	}
	if err := waitGroup(ctx, &wg, sessionWait+time.Minute); err != nil {
		return loadResult{}, fmt.Errorf("creating the znodes: %w", err)
	}
	if err := clientsFailed(errs); err != nil {
		return loadResult{}, err
	}

	from := time.Now().Add(s.warmup)
	until := from.Add(s.duration)
	lats := make([][]time.Duration, s.clients)
	for i, c := range conns {
		wg.Go(func() {
			path := znode(i)
			for k := 0; ctx.Err() == nil; k++ {
				start := time.Now()
				if !start.Before(until) {
					return
				}
				var err error
				if k%2 == 0 {
					_, err = c.Set(path, value, -1)
				} else {
					_, _, err = c.Get(path)
				}
				end := time.Now()
				if err != nil {
					errs[i] = fmt.Errorf("client %d: operation %d: %w", i, k, err)
					return
				}
				if end.After(from) && !end.After(until) {
					lats[i] = append(lats[i], end.Sub(start))
				}
			}
		})
	}
	if err := waitGroup(ctx, &wg, s.warmup+s.duration+time.Minute); err != nil {
		return loadResult{}, fmt.Errorf("running: %w", err)
	}
	if err := clientsFailed(errs); err != nil {
		return loadResult{}, err
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	if len(all) == 0 {
		return loadResult{}, errors.New("no operation completed within the measured time")
	}
	return loadResult{ops: len(all), elapsed: s.duration, lat: all}, nil
}

// clientsFailed sums up the clients' errors on one line, the first
// client's in full: the caller reports a failed run by its last line.
func clientsFailed(errs []error) error {
	var first error
	n := 0
	for _, err := range errs {
		if err != nil {
			first = cmp.Or(first, err)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d clients failed, the first: %w", n, len(errs), first)
}

// sessionWait bounds how long a client may take to open its session:
// many clients opening theirs at once on a slow machine (the emulated
// one of scripts/coord-bench.sh) may need several attempts.
const sessionWait = 2 * time.Minute

// waitSession waits until the client whose events these are has a
// session. Requests made before would fail if the first connection
// attempt did: go-zookeeper/zk fails what it queued (ErrNoServer) each
// time it goes round its server list, even with a single server, and
// tries again a second later.
func waitSession(ctx context.Context, events <-chan zk.Event, d time.Duration) error {
	timeout := time.After(d)
	last := zk.StateDisconnected
	for {
		select {
		case ev := <-events:
			if ev.Type != zk.EventSession {
				continue
			}
			if last = ev.State; last == zk.StateHasSession {
				return nil
			}
			if last == zk.StateExpired || last == zk.StateAuthFailed {
				return fmt.Errorf("session: %v", last)
			}
		case <-timeout:
			return fmt.Errorf("no session within %v (last state %v)", d, last)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// znode is client i's znode.
func znode(i int) string { return fmt.Sprintf("/coordbench-%d", i) }

// waitGroup waits for wg, for at most d or until ctx is done. The caller
// closes the clients' connections on an error, which ends their
// goroutines.
func waitGroup(ctx context.Context, wg *sync.WaitGroup, d time.Duration) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("not done within %v", d)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// quiet drops go-zookeeper/zk's log lines.
type quiet struct{}

func (quiet) Printf(string, ...any) {}
