// Command coordbench measures the coordination service (cmd/coord)
// against Apache ZooKeeper with the same workload and the same client, in
// one run, so that the figures compare side by side.
//
// Usage, from the module root:
//
//	coordbench [-coord PATH] [-systems ensemble,standalone,coord] [-host 127.0.0.1]
//	           [-clients 1,16,64] [-warmup 3s] [-duration 10s] [-rounds 3] [-size 64]
//	           [-md FILE] [-svg FILE] [-quick]
//
// The systems, each started once for the whole run as real processes on
// this machine:
//
//   - ensemble: three Apache ZooKeeper 3.8 servers (Debian package
//     zookeeper), each with its own data directory and ports; the
//     baseline.
//   - standalone: one Apache ZooKeeper server.
//   - coord: four coord replicas over TCP, each persisting to its own data
//     directory, and one coord gateway that the clients connect to.
//   - coord-rdma: the same over RDMA: the replicas talk to each other and
//     the gateway to them over the rdma transport; the clients still reach
//     the gateway over TCP, as ZooKeeper's clients do.
//
// ZooKeeper listens on loopback; the coord replicas and gateway listen on
// -host, which for coord-rdma must be an address of an RDMA device (in the
// Soft-RoCE VM of scripts/rdmavm.sh, $RDMAVM_RXE_IP).
//
// The workload is a closed loop of N clients of go-zookeeper/zk, each with
// its own session and znode, alternating setData and getData of a small
// value, one operation at a time: a warm-up, then the measured time.
// Client i connects to server i mod 3 of the ensemble. The client side is
// this program itself (coordbench load, an internal subcommand), run as a
// process of its own.
//
// For each round and client count it measures every system in turn, so
// the systems alternate, and quotes medians over rounds, with ratios to
// the ensemble, or, where no ensemble is measured, to coord over TCP.
// A failed run of ZooKeeper (a stall of its own, such as a leader waiting
// on fsync on a loaded machine, completing nothing in a short measured
// time) is tried once more, and the report lists it; a failed run of
// coord is never tried again.
// With taskset every server process (ZooKeeper's JVMs, or
// the replicas and the gateway) runs on CPU 1 and the clients on CPU 0,
// like a server host and a client host; the servers of one system share
// that one CPU, which makes every figure a floor.
//
// -quick is a small run for CI: one round with a short warm-up and
// measured time, the report written to a temporary directory unless -md
// or -svg say otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "load" {
		err = runLoad(ctx, os.Args[2:], os.Stdout, os.Stderr)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "coordbench:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "coordbench:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// config is what a run measures.
type config struct {
	coordBin         string
	systems          []string
	clients          []int
	warmup, duration time.Duration
	rounds           int
	size             int
	md, svg          string
	generatedBy      string
	host             string
	timeout          time.Duration
	quick            bool
	pin              bool
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("coordbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var systems, clients string
	fs.StringVar(&cfg.coordBin, "coord", "", "the coord command's binary (default: built from ./cmd/coord into a temporary directory)")
	fs.StringVar(&systems, "systems", "ensemble,standalone,coord", "systems to measure, comma-separated: ensemble (the baseline), standalone, coord, coord-rdma")
	fs.StringVar(&cfg.host, "host", "127.0.0.1", "address the coord replicas and gateway listen on (for coord-rdma, an RDMA device's)")
	fs.StringVar(&clients, "clients", "1,16,64", "closed-loop client counts")
	fs.DurationVar(&cfg.warmup, "warmup", 3*time.Second, "unmeasured time at the start of every run")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured time of every run")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds over every system; figures are medians over rounds")
	fs.IntVar(&cfg.size, "size", 64, "bytes of the value set and got")
	fs.StringVar(&cfg.md, "md", "", "write the report as Markdown to this file")
	fs.StringVar(&cfg.svg, "svg", "", "write the plot of throughput against clients to this file")
	fs.StringVar(&cfg.generatedBy, "generated-by", "", "the command to name in the report as the one that made it")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "longest one run may take beyond its warm-up and measured time")
	fs.BoolVar(&cfg.pin, "pin", true, "pin the servers to CPU 1 and the clients to CPU 0 with taskset")
	fs.BoolVar(&cfg.quick, "quick", false, "a small run for CI: one round, 1s of warm-up and 2s measured per point")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg.systems = benchkit.SplitList(systems)
	for _, s := range cfg.systems {
		if !slices.Contains(allSystems, s) {
			return cfg, fmt.Errorf("%w: -systems: %q is none of %s", errUsage, s, strings.Join(allSystems, ", "))
		}
	}
	var err error
	if cfg.clients, err = benchkit.ParseInts("clients", clients, 1); err != nil {
		return cfg, fmt.Errorf("%w: %w", errUsage, err)
	}
	switch {
	case len(cfg.systems) == 0:
		return cfg, fmt.Errorf("%w: -systems is empty", errUsage)
	case net.ParseIP(cfg.host) == nil:
		return cfg, fmt.Errorf("%w: -host %q is not an IP address", errUsage, cfg.host)
	case cfg.rounds < 1 || cfg.duration <= 0 || cfg.warmup < 0 || cfg.size < 0 || cfg.timeout <= 0:
		return cfg, fmt.Errorf("%w: -rounds, -duration and -timeout must be positive, -warmup and -size not negative", errUsage)
	}
	if cfg.quick {
		cfg.rounds = 1
		cfg.warmup, cfg.duration = min(cfg.warmup, time.Second), min(cfg.duration, 2*time.Second)
	}
	return cfg, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "coordbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if cfg.coordBin == "" {
		cfg.coordBin = filepath.Join(dir, "coord")
		build := exec.CommandContext(ctx, "go", "build", "-o", cfg.coordBin, "./cmd/coord")
		build.Stdout, build.Stderr = stderr, stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/coord: %w", err)
		}
	}
	launcher, placement := &benchkit.Launcher{}, "unpinned (-pin=false)"
	if cfg.pin {
		launcher, placement = benchkit.Pinned(ctx)
	}
	fmt.Fprintln(stdout, "placement:", placement)
	res := newResults(cfg)
	start := time.Now()
	for _, name := range cfg.systems {
		t0 := time.Now()
		s, err := startSystem(ctx, launcher, cfg, name, filepath.Join(dir, "system-"+name))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer s.stop()
		res.systems[name] = s
		fmt.Fprintf(stdout, "%-10s serving at %s (started in %v)\n", name, strings.Join(s.addrs, ","), time.Since(t0).Round(100*time.Millisecond))
	}
	for round := range cfg.rounds {
		for _, clients := range cfg.clients {
			for _, name := range cfg.systems {
				s, err := measure(ctx, launcher, cfg, self, res.systems[name], clients)
				if err != nil && zooKeeper(name) && res.systems[name].check() == nil && ctx.Err() == nil {
					// A baseline's own stall (ZooKeeper's leader
					// waiting on fsync on a loaded machine, say) is
					// not what a run measures: its run is tried once
					// more, and the report says so. Ours never are.
					fmt.Fprintf(stdout, "round %d/%d  %-10s clients %-3d  error: %v; trying once more\n", round+1, cfg.rounds, name, clients, err)
					res.retried(name, clients, err)
					s, err = measure(ctx, launcher, cfg, self, res.systems[name], clients)
				}
				res.add(name, clients, s, err)
				status := fmt.Sprintf("%.0f ops/s, p50 %.0f us, p99 %.0f us", s.Rate, s.P50, s.P99)
				if err != nil {
					status = "error: " + err.Error()
				}
				fmt.Fprintf(stdout, "round %d/%d  %-10s clients %-3d  %s\n", round+1, cfg.rounds, name, clients, status)
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
			}
		}
	}
	res.duration = time.Since(start)
	res.placement = placement
	res.writeText(stdout)
	if err := benchkit.WriteReport(stdout, cfg.quick, dir, cfg.md, cfg.svg, res.writeMarkdown, res.plot().WriteSVG); err != nil {
		return err
	}
	if n := res.Failures(); n > 0 {
		return fmt.Errorf("%d run%s failed", n, benchkit.Plural(n))
	}
	return nil
}

// A sample is what one run of coordbench load reported.
type sample = benchkit.OpsSample

// measure runs coordbench load with clients clients against s, on the
// client CPU.
func measure(ctx context.Context, l *benchkit.Launcher, cfg config, self string, s *system, clients int) (sample, error) {
	if err := s.check(); err != nil {
		return sample{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.warmup+cfg.duration+cfg.timeout)
	defer cancel()
	spec := loadSpec{servers: s.addrs, clients: clients, warmup: cfg.warmup, duration: cfg.duration, size: cfg.size}
	cmd := l.Command(ctx, benchkit.ClientCPU, self, spec.args()...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("coordbench load: %w: %s", err, benchkit.LastLine(stderr.String()))
	}
	return benchkit.ParseOps(fmt.Sprintf("system=%s %s", s.name, benchkit.LastLine(stdout.String())))
}
