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
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/internal/cli"
	"github.com/rubin-go/rubin/metrics"
)

// clusterFlags are the flags of the commands that join a cluster: the
// cluster file, the transport (rubin.Config's flags) and -v.
type clusterFlags struct {
	path       string
	transport  rubin.Config
	verbose    bool
	cpuProfile string
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.path, "cluster", "cluster.json", "the cluster file, as coord keygen writes it")
	fs.BoolVar(&c.verbose, "v", false, "log at debug level")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to `file` when it ends")
	c.transport.RegisterFlags(fs)
}

// load reads the cluster file and checks the transport's name.
func (c *clusterFlags) load() (*auth.Cluster, error) {
	if t := c.transport.Transport; t != "tcp" && t != "rdma" {
		return nil, fmt.Errorf("%w: -transport %q is neither tcp nor rdma", errUsage, t)
	}
	return auth.Load(c.path)
}

// profiled calls run, under the CPU profile -cpuprofile asks for, if any.
func (c *clusterFlags) profiled(run func() error) error {
	return cli.Profiled(c.cpuProfile, run)
}

func (c *clusterFlags) logger(w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// coreConfig is the replicas' protocol tuning: the defaults, with room
// for the largest request a ZooKeeper client may send.
func coreConfig() bft.Config {
	return bft.Config{MaxOpSize: coord.MaxOpSize, MaxBatchBytes: 2 * coord.MaxOpSize}
}

// newApp makes a replica's application. Tests of the replica as a process
// replace it (TestMain) to make one replica Byzantine.
var newApp = func(c coord.Config) bft.App { return coord.New(c) }

func runReplica(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clusterFlags
	var id int
	var dataDir, metricsAddr string
	err := parseFlags("replica", args, stderr, func(fs *flag.FlagSet) {
		cf.register(fs)
		fs.IntVar(&id, "id", -1, "this replica's index in the cluster file")
		fs.StringVar(&dataDir, "data-dir", "", "persist the log and snapshots in `dir` and recover from it at start; without it the replica keeps everything in memory")
		fs.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics")
	})
	if err != nil {
		return err
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	if id < 0 || id >= len(c.Replicas) {
		return fmt.Errorf("%w: -id %d is not a replica of %s (0 to %d)", errUsage, id, cf.path, len(c.Replicas)-1)
	}
	logger := cf.logger(stderr).With("replica", id)
	var reg *prometheus.Registry
	if metricsAddr != "" {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	rcfg := node.ReplicaConfig{
		Cluster:   c,
		ID:        bft.ReplicaID(id),
		Transport: &cf.transport,
		App:       newApp(coord.Config{Clients: clientIDs(c)}),
		Core:      coreConfig(),
		Logger:    logger,
		DataDir:   dataDir,
	}
	if reg != nil {
		rcfg.Registerer = reg
	}
	r, err := node.NewReplica(rcfg)
	if err != nil {
		return err
	}
	if reg != nil {
		loop := metrics.New()
		loop.AddStats(fmt.Sprintf("replica-%d", id), r.LoopStats)
		reg.MustRegister(loop)
		addr, err := metrics.Serve(ctx, metricsAddr, reg, slog.NewLogLogger(logger.Handler(), slog.LevelError))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "replica %d metrics on http://%v/metrics\n", id, addr)
	}
	go func() {
		select {
		case <-r.Ready():
			fmt.Fprintf(stdout, "replica %d listening on %s\n", id, r.Addr())
		case <-ctx.Done():
		}
	}()
	return cf.profiled(func() error { return r.Run(ctx) })
}
