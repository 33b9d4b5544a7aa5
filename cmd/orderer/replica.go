package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/internal/cli"
	"github.com/rubin-go/rubin/metrics"
	"github.com/rubin-go/rubin/order/server"
)

func runReplica(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var id int
	var path, dataDir, listen, metricsAddr string
	var verbose bool
	var transport rubin.Config
	err := parseFlags("replica", args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&id, "id", -1, "this orderer's index in the cluster file")
		fs.StringVar(&path, "cluster", "cluster.json", "this orderer's file, as orderer keygen -split writes it (or the cluster file with every orderer's secrets), with its .channel.json beside it")
		fs.StringVar(&dataDir, "data-dir", "", "persist the replica's log and snapshots in `dir`, and the blocks in dir/blocks, and recover from them at start")
		fs.StringVar(&listen, "listen", "", "serve AtomicBroadcast on `host:port` (default: the channel file's address for this orderer)")
		fs.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics")
		fs.BoolVar(&verbose, "v", false, "log at debug level")
		transport.RegisterFlags(fs)
	})
	if err != nil {
		return err
	}
	if t := transport.Transport; t != "tcp" && t != "rdma" {
		return fmt.Errorf("%w: -transport %q is neither tcp nor rdma", cli.ErrUsage, t)
	}
	c, err := auth.Load(path)
	if err != nil {
		return err
	}
	ch, err := loadChannel(channelPath(path))
	if err != nil {
		return err
	}
	if id < 0 || id >= c.N() || id >= len(ch.file.Broadcast) {
		return fmt.Errorf("%w: -id %d is not an orderer of %s (0 to %d)", cli.ErrUsage, id, path, c.N()-1)
	}
	if err := ownFile(c, path, bft.ReplicaID(id)); err != nil {
		return err
	}
	if listen == "" {
		listen = ch.file.Broadcast[id]
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("orderer", id)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	o, err := server.NewOrderer(server.OrdererConfig{
		Cluster:    c,
		ID:         bft.ReplicaID(id),
		Transport:  &transport,
		Channel:    ch.file.Channel,
		Writers:    ch.writers,
		Readers:    ch.readers,
		Block:      ch.block,
		DataDir:    dataDir,
		Peers:      ch.file.Broadcast,
		Listener:   ln,
		Logger:     logger,
		Registerer: reg,
	})
	if err != nil {
		ln.Close()
		return err
	}
	if metricsAddr != "" {
		loop := metrics.New()
		loop.AddStats(fmt.Sprintf("replica-%d", id), o.Replica().LoopStats)
		reg.MustRegister(loop)
		addr, err := metrics.Serve(ctx, metricsAddr, reg, slog.NewLogLogger(logger.Handler(), slog.LevelError))
		if err != nil {
			return err
		}
		logger.Info("metrics", "url", fmt.Sprintf("http://%v/metrics", addr))
	}
	go func() {
		select {
		case <-o.Replica().Ready():
			fmt.Fprintf(stdout, "orderer %d listening on %s, broadcast on %s\n", id, o.Replica().Addr(), o.Addr())
		case <-ctx.Done():
		}
	}()
	return o.Run(ctx)
}

// ownFile checks that c, loaded from path, holds orderer id's secrets:
// its replica's and those of its client identities (ownClients).
func ownFile(c *auth.Cluster, path string, id bft.ReplicaID) error {
	if !c.HoldsReplica(id) {
		return fmt.Errorf("%w: %s is %s's file, not orderer %d's: each orderer runs from its own (orderer keygen -split)", cli.ErrUsage, path, c.Holder, id)
	}
	for _, cid := range ownClients(c.N(), id) {
		if !c.HoldsClient(cid) {
			return fmt.Errorf("%w: %s lacks the keys of client %d, through which orderer %d orders (orderer keygen -split writes them into its file)", cli.ErrUsage, path, cid, id)
		}
	}
	return nil
}
