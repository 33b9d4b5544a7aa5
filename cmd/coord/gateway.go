package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/gateway"
	"github.com/rubin-go/rubin/metrics"
)

func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf clusterFlags
	var listen, ids, words, metricsAddr string
	var perHost, sessionsPerHost, total, which int
	var claimWait time.Duration
	err := parseFlags("gateway", args, stderr, func(fs *flag.FlagSet) {
		cf.register(fs)
		fs.StringVar(&listen, "listen", "127.0.0.1:2181", "serve ZooKeeper clients on `host:port` (TCP)")
		fs.IntVar(&which, "gateway", -1, "be gateway `I` of those coord keygen -gateways shared the client identities out to")
		fs.StringVar(&ids, "ids", "", "the client identities to use, `first-last` (default: -gateway's, or every client of the cluster file if keygen made one gateway)")
		fs.IntVar(&perHost, "max-client-cnxns", gateway.DefaultMaxConnsPerHost, "the most connections open at once from one client address, as ZooKeeper's maxClientCnxns (0: no limit)")
		fs.IntVar(&sessionsPerHost, "max-client-sessions", gateway.DefaultMaxSessionsPerHost, "the most sessions one client address may hold, counting those whose connection ended until they expire (0: no limit)")
		fs.DurationVar(&claimWait, "claim-wait", claimLapse, "wait up to `duration` for the claim of these identities by a gateway that stopped to lapse (0: refuse at once)")
		fs.IntVar(&total, "max-conns", gateway.DefaultMaxConns, "the most connections open at once from all clients (0: no limit)")
		fs.StringVar(&words, "four-letter-words", gateway.DefaultFourLetterWords, "the four-letter `words` answered on the client port, comma-separated, as ZooKeeper's 4lw.commands.whitelist (* for all: conf,cons,crst,envi,isro,mntr,ruok,srst,srvr,stat,wchs; none for none)")
		fs.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics")
	})
	if err != nil {
		return err
	}
	if perHost < 0 || sessionsPerHost < 0 || total < 0 {
		return fmt.Errorf("%w: -max-client-cnxns, -max-client-sessions and -max-conns must not be negative", errUsage)
	}
	if err := gateway.CheckFourLetterWords(words); err != nil {
		return fmt.Errorf("%w: -four-letter-words: %w", errUsage, err)
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	if h := c.Holder; h != nil && !h.Client && len(h.Clients) == 0 {
		return fmt.Errorf("%w: %s is %s's file: a gateway needs the cluster file or its own gateway file (coord keygen -split)", errUsage, cf.path, h)
	}
	if ids, err = gatewayIDs(cf.path, ids, which); err != nil {
		return err
	}
	pool, err := identities(c, ids)
	if err != nil {
		return err
	}
	logger := cf.logger(stderr).With("gateway", listen)
	var reg *prometheus.Registry
	ccfg := node.ClientConfig{Cluster: c, IDs: pool, Transport: &cf.transport, Logger: logger}
	gcfg := gateway.Config{MaxConnsPerHost: noLimit(perHost), MaxSessionsPerHost: noLimit(sessionsPerHost), MaxConns: noLimit(total), FourLetterWords: orNone(words)}
	if metricsAddr != "" {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		ccfg.Registerer, gcfg.Registerer = reg, reg
	}
	client, gw, err := newGateway(ctx, ccfg, gcfg, claimWait)
	if err != nil {
		return err
	}
	if reg != nil {
		addr, err := metrics.Serve(ctx, metricsAddr, reg, slog.NewLogLogger(logger.Handler(), slog.LevelError))
		if err != nil {
			client.Close()
			gw.Close()
			return err
		}
		fmt.Fprintf(stdout, "gateway metrics on http://%v/metrics\n", addr)
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

// orNone maps an empty -four-letter-words to gateway.Config's "none" (an
// empty Config.FourLetterWords is the default).
func orNone(words string) string {
	if words == "" {
		return "none"
	}
	return words
}

// noLimit maps a flag's 0, ZooKeeper's "no limit", to gateway.Config's.
func noLimit(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// newGateway starts a bft client with cfg and a gateway configured by
// gcfg on it, notified as the client's first identity, which claims the
// client's identities (gateway.Config.Identities).
//
// Before that, it looks whether another gateway holds them, in a way
// that cannot disturb that gateway's requests (probeClaim). If one does
// and renews its claim, newGateway fails and says so; if its claim is
// not renewed, that gateway stopped (this one's previous run), and the
// gateway waits up to claimWait for the claim to lapse.
func newGateway(ctx context.Context, cfg node.ClientConfig, gcfg gateway.Config, claimWait time.Duration) (*node.Client, *gateway.Server, error) {
	if r, err := probeClaim(ctx, cfg); err == nil && r.Status == coord.StatusHeld {
		select {
		case <-time.After(renewGrace):
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		r2, err := probeClaim(ctx, cfg)
		switch {
		case err == nil && r2.Status == coord.StatusHeld && r2 != r:
			return nil, nil, heldError(&gateway.HeldError{ID: int64(cfg.IDs[0]), Claim: r2})
		case err == nil && r2 == r:
			cfg.Logger.Info("identities held by a gateway that stopped: waiting for its claim to lapse", "holder", fmt.Sprintf("%#x", uint64(r.Holder)))
			gcfg.ClaimWait = claimWait
		}
	}
	// Free, or the probe could not tell: the gateway's ordered claim
	// decides.
	client, g, err := openGateway(ctx, cfg, gcfg)
	if errors.Is(err, gateway.ErrHeld) {
		err = heldError(err)
	}
	return client, g, err
}

func heldError(err error) error {
	return fmt.Errorf("%w. Another gateway runs with the same identities: give each its own (coord keygen -gateways N, then coord gateway -gateway I)", err)
}

// probeClaim asks the replicas, read-only, whose claim holds the
// identities of cfg, through a bft client of its own, once it has a link
// to every replica. A read-only request changes nothing on the replicas.
// If the client orders it instead (the answers differ or are late), its
// timestamps, which start at a random number below the clock's, make an
// identity that another gateway uses ignore it as older than that
// gateway's requests, where the gateway's own timestamps, from the
// clock, would overtake the other's, which would then be ignored in
// turn. The probe then fails, as one the replicas do not answer within
// probeTimeout does.
func probeClaim(ctx context.Context, cfg node.ClientConfig) (coord.ClaimResult, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return coord.ClaimResult{}, err
	}
	cfg.StartTimestamp, cfg.OnNote = 1+binary.BigEndian.Uint64(b[:])>>4, nil // below 2^60 ns: 2006
	cfg.Registerer = nil                                                     // the gateway's client exports the metrics
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	client, err := node.NewClient(ctx, cfg)
	if err != nil {
		return coord.ClaimResult{}, err
	}
	defer client.Close()
	for client.LinksUp() < cfg.Cluster.N() {
		select {
		case <-time.After(5 * time.Millisecond):
		case <-ctx.Done():
			return coord.ClaimResult{}, ctx.Err()
		}
	}
	res, err := client.InvokeRead(ctx, coord.ClaimOp(int64(cfg.IDs[0]), 0, cfg.IDs))
	if err != nil {
		return coord.ClaimResult{}, err
	}
	return coord.ParseClaimResult(res)
}

// probeTimeout bounds a probe of the claims.
const probeTimeout = 5 * time.Second

// renewGrace is how long newGateway leaves another gateway to renew its
// claim (every second) between two probes, with its own links down (they
// displace the other's, which come back within node.DefaultRedialMax).
const renewGrace = 3 * time.Second

// claimLapse is the default bound of the wait for a stopped gateway's
// claim to lapse: the replicas' coord.Config.ClaimLease (5s) and time to
// spare.
const claimLapse = 10 * time.Second

// openGateway starts a bft client with cfg and a gateway on it.
func openGateway(ctx context.Context, cfg node.ClientConfig, gcfg gateway.Config) (*node.Client, *gateway.Server, error) {
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
	gcfg.Invoker, gcfg.ID, gcfg.Notified, gcfg.Identities, gcfg.Logger = client, int64(cfg.IDs[0]), true, cfg.IDs, cfg.Logger
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
