package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/metrics"
)

// clusterFlags are the flags every command that joins a cluster shares:
// the cluster file and the transport (-transport, -spin and the other
// flags of rubin.Config).
type clusterFlags struct {
	path      string
	transport rubin.Config
	fs        *flag.FlagSet
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.path, "cluster", "cluster.json", "the cluster file, as bft keygen writes it")
	c.transport.RegisterFlags(fs)
	c.fs = fs
}

// load reads the cluster file and checks the transport's flags.
func (c *clusterFlags) load() (*auth.Cluster, error) {
	if t := c.transport.Transport; t != "tcp" && t != "rdma" {
		return nil, fmt.Errorf("%w: -transport %q is neither tcp nor rdma", errUsage, t)
	}
	pollers := false
	c.fs.Visit(func(f *flag.Flag) { pollers = pollers || f.Name == "pollers" })
	if pollers {
		// rubin.Config's pollers serve the net.Conn face; a replica and
		// a client serve their links from one event loop each.
		return nil, fmt.Errorf("%w: -pollers has no effect on bft %s: it serves its links from one event loop", errUsage, c.fs.Name())
	}
	return auth.Load(c.path)
}

func runReplica(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replica", stderr)
	var cf clusterFlags
	cf.register(fs)
	id := fs.Int("id", -1, "this replica's index in the cluster file")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics")
	dataDir := fs.String("data-dir", "", "persist votes, log and state in DIR (a write-ahead log and snapshots) and recover from it at start; without it the replica keeps everything in memory")
	verbose := fs.Bool("v", false, "log every view change, link and state transfer at debug level too")
	if err := parseFlags(fs, args, 0); err != nil {
		return err
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	if *id < 0 || *id >= len(c.Replicas) {
		return fmt.Errorf("%w: -id %d is not a replica of %s (0 to %d)", errUsage, *id, cf.path, len(c.Replicas)-1)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	r, err := node.NewReplica(node.ReplicaConfig{
		Cluster:    c,
		ID:         bft.ReplicaID(*id),
		Transport:  &cf.transport,
		App:        kv.New(kv.Config{}),
		Logger:     logger.With("replica", *id),
		Registerer: reg,
		DataDir:    *dataDir,
	})
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		loop := metrics.New()
		loop.AddStats(fmt.Sprintf("replica-%d", *id), r.LoopStats)
		reg.MustRegister(loop)
		addr, err := metrics.Serve(ctx, *metricsAddr, reg, slog.NewLogLogger(logger.Handler(), slog.LevelError))
		if err != nil {
			return err
		}
		logger.Info("metrics", "url", fmt.Sprintf("http://%v/metrics", addr))
	}
	go func() {
		select {
		case <-r.Ready():
			fmt.Fprintf(stdout, "replica %d listening on %s\n", *id, c.Replicas[*id].Addr)
		case <-ctx.Done():
		}
	}()
	return r.Run(ctx)
}
