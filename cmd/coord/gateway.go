package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/coord/gateway"
)

func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clusterFlags
	var listen, ids string
	var perHost, total int
	err := parseFlags("gateway", args, stderr, func(fs *flag.FlagSet) {
		cf.register(fs)
		fs.StringVar(&listen, "listen", "127.0.0.1:2181", "serve ZooKeeper clients on `host:port` (TCP)")
		fs.StringVar(&ids, "ids", "", "the client identities to use, `first-last` (default: every client of the cluster file)")
		fs.IntVar(&perHost, "max-client-cnxns", gateway.DefaultMaxConnsPerHost, "the most connections open at once from one client address, as ZooKeeper's maxClientCnxns (0: no limit)")
		fs.IntVar(&total, "max-conns", gateway.DefaultMaxConns, "the most connections open at once from all clients (0: no limit)")
	})
	if err != nil {
		return err
	}
	if perHost < 0 || total < 0 {
		return fmt.Errorf("%w: -max-client-cnxns and -max-conns must not be negative", errUsage)
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	pool, err := identities(c, ids)
	if err != nil {
		return err
	}
	logger := cf.logger(stderr).With("gateway", listen)
	gcfg := gateway.Config{MaxConnsPerHost: noLimit(perHost), MaxConns: noLimit(total)}
	client, gw, err := newGateway(ctx, node.ClientConfig{Cluster: c, IDs: pool, Transport: &cf.transport, Logger: logger}, gcfg)
	if err != nil {
		return err
	}
	defer client.Close()
	defer gw.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	return cf.profiled(func() error {
		fmt.Fprintf(stdout, "gateway listening on %s\n", ln.Addr())
		errc := make(chan error, 1)
		go func() { errc <- gw.Serve(ln) }()
		select {
		case <-ctx.Done():
			gw.Close()
			<-errc
			return nil
		case err := <-errc:
			gw.Close()
			return err
		}
	})
}

// noLimit maps a flag's 0, ZooKeeper's "no limit", to gateway.Config's.
func noLimit(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// newGateway starts a bft client with cfg and a gateway configured by
// gcfg on it, notified as the client's first identity.
func newGateway(ctx context.Context, cfg node.ClientConfig, gcfg gateway.Config) (*node.Client, *gateway.Server, error) {
	var gw atomic.Pointer[gateway.Server]
	cfg.OnNote = func(_ bft.ClientID, n bft.Note) {
		if g := gw.Load(); g != nil {
			g.Note(n)
		}
	}
	client, err := node.NewClient(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	gcfg.Invoker, gcfg.ID, gcfg.Notified, gcfg.Logger = client, int64(cfg.IDs[0]), true, cfg.Logger
	g, err := gateway.New(gcfg)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	gw.Store(g)
	return client, g, nil
}

// clientIDs lists the client identities of c, in order.
func clientIDs(c *auth.Cluster) []bft.ClientID {
	var ids []bft.ClientID
	for _, cl := range c.Clients {
		ids = append(ids, cl.ID)
	}
	slices.Sort(ids)
	return ids
}

// identities parses -ids, "first-last", into the client identities of c
// it names; "" names them all.
func identities(c *auth.Cluster, spec string) ([]bft.ClientID, error) {
	all := clientIDs(c)
	if spec == "" {
		if len(all) == 0 {
			return nil, fmt.Errorf("%w: the cluster file has no clients", errUsage)
		}
		return all, nil
	}
	lo, hi, ok := strings.Cut(spec, "-")
	first, err1 := strconv.ParseUint(lo, 10, 32)
	last, err2 := strconv.ParseUint(hi, 10, 32)
	if !ok || err1 != nil || err2 != nil || first > last {
		return nil, fmt.Errorf("%w: -ids %q is not first-last", errUsage, spec)
	}
	var pool []bft.ClientID
	for _, id := range all {
		if uint64(id) >= first && uint64(id) <= last {
			pool = append(pool, id)
		}
	}
	if len(pool) != int(last-first+1) {
		return nil, fmt.Errorf("%w: -ids %s: the cluster file has %d of those clients", errUsage, spec, len(pool))
	}
	return pool, nil
}
