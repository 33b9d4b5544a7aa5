package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/node"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	var d demoConfig
	fs.StringVar(&d.network, "transport", "tcp", "transport: tcp or rdma")
	fs.StringVar(&d.host, "host", "127.0.0.1", "address to listen on (with rdma: an address of the RDMA device)")
	fs.IntVar(&d.ops, "n", 20000, "operations in the workload")
	fs.IntVar(&d.clients, "clients", 8, "closed-loop clients")
	fs.DurationVar(&d.progress, "progress", 250*time.Millisecond, "interval of the progress line")
	if err := parseFlags(fs, args, 0); err != nil {
		return err
	}
	switch {
	case d.network != "tcp" && d.network != "rdma":
		return fmt.Errorf("%w: -transport %q is neither tcp nor rdma", errUsage, d.network)
	case d.ops < 10:
		return fmt.Errorf("%w: -n %d is below 10", errUsage, d.ops)
	case d.clients < 1:
		return fmt.Errorf("%w: -clients %d is not positive", errUsage, d.clients)
	case d.progress <= 0:
		return fmt.Errorf("%w: -progress %v is not positive", errUsage, d.progress)
	}
	return demo(ctx, d, stdout, stderr)
}

// demoConfig is what the demo runs.
type demoConfig struct {
	network  string
	host     string
	ops      int
	clients  int
	progress time.Duration
}

// demoReplica is one of the demo's replicas: its driver, its store and
// how to stop it.
type demoReplica struct {
	r     *node.Replica
	store *kv.Store
	stop  context.CancelFunc
	done  chan error
}

// demo runs four replicas in this process, a workload through them, and
// crashes the primary halfway.
func demo(ctx context.Context, d demoConfig, stdout, stderr io.Writer) error {
	const n = 4
	c, err := auth.Generate(n, d.clients, d.host, 1, nil)
	if err != nil {
		return err
	}
	listeners := make([]net.Listener, n)
	defer func() {
		for _, ln := range listeners {
			if ln != nil {
				ln.Close()
			}
		}
	}()
	for i := range listeners {
		ln, err := rubin.Listen(d.network, net.JoinHostPort(d.host, "0"))
		if err != nil {
			return err
		}
		listeners[i] = ln
		c.Replicas[i].Addr = ln.Addr().String()
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	replicas := make([]*demoReplica, n)
	defer func() {
		for _, dr := range replicas {
			if dr != nil {
				dr.stop()
				<-dr.done
			}
		}
	}()
	for i := range replicas {
		store := kv.New(kv.Config{})
		r, err := node.NewReplica(node.ReplicaConfig{
			Cluster:  c,
			ID:       bft.ReplicaID(i),
			Network:  d.network,
			App:      store,
			Listener: listeners[i],
			Logger:   logger.With("replica", i),
		})
		if err != nil {
			return err
		}
		listeners[i] = nil // the replica owns it now
		rctx, stop := context.WithCancel(ctx)
		dr := &demoReplica{r: r, store: store, stop: stop, done: make(chan error, 1)}
		go func() { dr.done <- r.Run(rctx) }()
		replicas[i] = dr
	}
	for _, dr := range replicas {
		select {
		case <-dr.r.Ready():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	fmt.Fprintf(stdout, "4 replicas (f=1) on %s over %s; %d clients run %d puts\n", d.host, d.network, d.clients, d.ops)

	var done atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	// One Client multiplexes the clients' identities over one link per
	// replica; each worker's Invoke takes an identity of its own.
	ids := make([]bft.ClientID, d.clients)
	for i := range ids {
		ids[i] = c.Clients[i].ID
	}
	cl, err := node.NewClient(ctx, node.ClientConfig{Cluster: c, IDs: ids, Network: d.network, Logger: logger})
	if err != nil {
		return err
	}
	defer cl.Close()
	for i := range d.clients {
		wg.Go(func() {
			for {
				k := next.Add(1) - 1
				if k >= int64(d.ops) {
					return
				}
				op := kv.EncodePut(demoKey(k), demoValue(k))
				if _, err := cl.Invoke(ctx, op); err != nil {
					cancel(fmt.Errorf("client %d: %w", i, err))
					return
				}
				done.Add(1)
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	start := time.Now()
	tick := time.NewTicker(d.progress)
	defer tick.Stop()
	crashed := -1
	var crashedAt time.Time
	view := uint64(0)
	last, lastAt := int64(0), start
	for running := true; running; {
		select {
		case <-finished:
			running = false
		case <-tick.C:
		}
		now, ops := time.Now(), done.Load()
		var st bft.Status
		for i, dr := range replicas {
			if i != crashed {
				st = dr.r.Status()
				break
			}
		}
		rate := float64(ops-last) / now.Sub(lastAt).Seconds()
		last, lastAt = ops, now
		fmt.Fprintf(stdout, "[%6.2fs] %6d/%d ops  %7.0f ops/s  view %d  primary %d  executed seq %d  stable checkpoint %d\n",
			now.Sub(start).Seconds(), ops, d.ops, rate, st.View, st.Primary, st.LastExecuted, st.Stable)
		if st.View != view {
			fmt.Fprintf(stdout, "==> view change: view %d, replica %d is the primary (%.0f ms after the crash)\n",
				st.View, st.Primary, float64(now.Sub(crashedAt).Milliseconds()))
			view = st.View
		}
		if crashed < 0 && ops >= int64(d.ops/2) {
			crashed = int(st.Primary)
			crashedAt = time.Now()
			fmt.Fprintf(stdout, "==> crashing the primary, replica %d\n", crashed)
			replicas[crashed].stop()
			<-replicas[crashed].done
			replicas[crashed] = nil
		}
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	wall := time.Since(start)
	fmt.Fprintf(stdout, "done: %d puts in %.2fs (%.0f ops/s), %d view change(s)\n", d.ops, wall.Seconds(), float64(d.ops)/wall.Seconds(), view)

	// A client needs only f+1 replies, so a correct replica may still be
	// executing the last batches: wait until the survivors agree on how far
	// they got, then stop them and compare their stores.
	if err := awaitConverged(ctx, replicas, 10*time.Second); err != nil {
		return err
	}
	var snaps [][]byte
	for i, dr := range replicas {
		if dr == nil {
			continue
		}
		dr.stop()
		if err := <-dr.done; err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("replica %d: %w", i, err)
		}
		replicas[i] = nil
		snaps = append(snaps, dr.store.Snapshot())
		if got, ok := dr.store.Lookup(demoKey(int64(d.ops - 1))); !ok || !bytes.Equal(got, demoValue(int64(d.ops-1))) {
			return fmt.Errorf("replica %d lacks the last put", i)
		}
	}
	for i := 1; i < len(snaps); i++ {
		if !bytes.Equal(snaps[0], snaps[i]) {
			return errors.New("the surviving replicas' stores differ")
		}
	}
	fmt.Fprintf(stdout, "the %d surviving replicas hold identical stores (%d keys)\n", len(snaps), d.ops)
	return nil
}

func demoKey(k int64) []byte   { return fmt.Appendf(nil, "key-%06d", k) }
func demoValue(k int64) []byte { return fmt.Appendf(nil, "value-%d", k) }

// awaitConverged waits until the running replicas have executed the same
// sequence numbers.
func awaitConverged(ctx context.Context, replicas []*demoReplica, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var seqs []uint64
		for _, dr := range replicas {
			if dr != nil {
				seqs = append(seqs, dr.r.Status().LastExecuted)
			}
		}
		if slices.Min(seqs) == slices.Max(seqs) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the surviving replicas did not converge within %v: executed %v", timeout, seqs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
