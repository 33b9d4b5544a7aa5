// Command bftbench measures a four-replica PBFT cluster of cmd/bft: its
// throughput and latency for each transport, request size and number of
// clients asked for, in one run, so that the transports compare side by
// side.
//
// Usage:
//
//	bftbench [-bft PATH] [-transports tcp,rdma] [-host 127.0.0.1] [-sizes 0,1024]
//	         [-clients 1,64] [-n 20000] [-rounds 3] [-md FILE] [-svg FILE] [-quick]
//
// For each transport it writes a cluster file (bft keygen, on free ports
// of -host), starts the four replicas (bft replica) and keeps them for the
// whole run. Then, for each round, size and client count, it runs
// bft bench against each transport's cluster in turn, so the transports
// alternate, and quotes medians over rounds. With taskset the replicas run
// on CPU 1 and the clients on CPU 0, like a cluster and a client host;
// every replica shares that one CPU, which makes these figures a floor,
// not what four machines give.
//
// -transports rdma needs an RDMA device whose address is -host (in the
// Soft-RoCE machine of scripts/rdmavm.sh, $RDMAVM_RXE_IP);
// scripts/bft-bench.sh runs it there beside tcp.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "bftbench:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "bftbench:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// config is what a run measures.
type config struct {
	bin         string
	transports  []string
	host        string
	sizes       []int
	clients     []int
	n           int
	rounds      int
	md, svg     string
	generatedBy string
	timeout     time.Duration
	quick       bool
	pin         bool
	spin        time.Duration
	targets     bool
	durable     bool
}

// diskSuffix marks a contender whose replicas persist to a data directory.
const diskSuffix = "+disk"

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bftbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var transports, sizes, clients string
	fs.StringVar(&cfg.bin, "bft", "", "the bft command's binary (default: built from ./cmd/bft into a temporary directory)")
	fs.StringVar(&transports, "transports", "tcp", "transports to measure, comma-separated: tcp, rdma")
	fs.StringVar(&cfg.host, "host", "127.0.0.1", "address the replicas listen on (for rdma, the RDMA device's)")
	fs.StringVar(&sizes, "sizes", "0,1024", "request sizes in bytes")
	fs.StringVar(&clients, "clients", "1,64", "closed-loop client counts")
	fs.IntVar(&cfg.n, "n", 20000, "measured operations per run")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds over every transport; figures are medians over rounds")
	fs.StringVar(&cfg.md, "md", "", "write the report as Markdown to this file")
	fs.StringVar(&cfg.svg, "svg", "", "write the plot of throughput against clients to this file")
	fs.StringVar(&cfg.generatedBy, "generated-by", "", "the command to name in the report as the one that made it")
	fs.DurationVar(&cfg.timeout, "timeout", 3*time.Minute, "longest one bench run may take")
	fs.BoolVar(&cfg.targets, "targets", true, "judge the project's targets, which are set for TCP on this machine's loopback")
	fs.BoolVar(&cfg.pin, "pin", true, "pin the replicas to CPU 1 and the clients to CPU 0 with taskset")
	fs.DurationVar(&cfg.spin, "spin", 0, "busy-poll budget of every replica's and client's event loop (rubin.Config.SpinBudget; 0 adapts)")
	fs.BoolVar(&cfg.durable, "durable", false, "also measure every transport with replicas that persist (bft replica -data-dir), as contender TRANSPORT+disk, alternating with it in every round")
	fs.BoolVar(&cfg.quick, "quick", false, "a small run for CI: at most 500 operations, one round, the first size and client count only")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	var err error
	cfg.transports = benchkit.SplitList(transports)
	if cfg.durable {
		var both []string
		for _, t := range cfg.transports {
			both = append(both, t, t+diskSuffix)
		}
		cfg.transports = both
	}
	if cfg.sizes, err = benchkit.ParseInts("sizes", sizes, 0); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if cfg.clients, err = benchkit.ParseInts("clients", clients, 1); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	for _, t := range cfg.transports {
		if t, _ := strings.CutSuffix(t, diskSuffix); t != "tcp" && t != "rdma" {
			return fmt.Errorf("%w: -transports: %q is neither tcp nor rdma", errUsage, t)
		}
	}
	switch {
	case len(cfg.transports) == 0:
		return fmt.Errorf("%w: -transports is empty", errUsage)
	case cfg.n < 1 || cfg.rounds < 1:
		return fmt.Errorf("%w: -n and -rounds must be positive", errUsage)
	}
	if cfg.quick {
		cfg.n, cfg.rounds = min(cfg.n, 500), 1
		cfg.sizes, cfg.clients = cfg.sizes[:1], cfg.clients[:1]
	}
	dir, err := os.MkdirTemp("", "bftbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if cfg.bin == "" {
		cfg.bin = filepath.Join(dir, "bft")
		build := exec.CommandContext(ctx, "go", "build", "-o", cfg.bin, "./cmd/bft")
		build.Stdout, build.Stderr = stderr, stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/bft: %w", err)
		}
	}
	launcher, placement := &benchkit.Launcher{}, "unpinned (-pin=false)"
	if cfg.pin {
		launcher, placement = benchkit.Pinned(ctx)
	}
	if cfg.spin == 0 {
		placement += "; spin budget adaptive (the default)"
	} else {
		placement += fmt.Sprintf("; spin budget %v", cfg.spin)
	}
	fmt.Fprintln(stdout, "placement:", placement)
	res := newResults(cfg)
	start := time.Now()
	for _, t := range cfg.transports {
		c, err := startCluster(ctx, launcher, cfg, t, filepath.Join(dir, t))
		if err != nil {
			return fmt.Errorf("%s cluster: %w", t, err)
		}
		defer c.stop()
		res.clusters[t] = c
	}
	for round := range cfg.rounds {
		for _, size := range cfg.sizes {
			for _, clients := range cfg.clients {
				for _, t := range cfg.transports {
					s, err := res.clusters[t].bench(ctx, launcher, cfg, clients, size)
					res.add(t, size, clients, s, err)
					status := fmt.Sprintf("%.0f ops/s, p50 %.0f us, %s switches/req, replica CPU %s us/req", s.Rate, s.P50, s.Switches.Format(2), s.CPUUS.Format(1))
					if err != nil {
						status = "error: " + err.Error()
					}
					fmt.Fprintf(stdout, "round %d/%d  %-4s size %-5d clients %-3d  %s\n", round+1, cfg.rounds, t, size, clients, status)
					if ctx.Err() != nil {
						return context.Cause(ctx)
					}
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
		return fmt.Errorf("%d bench run%s failed", n, benchkit.Plural(n))
	}
	return nil
}

// A cluster is four replica processes of one transport.
type cluster struct {
	transport string
	file      string
	replicas  []*benchkit.Server
}

// startCluster writes a cluster file for free ports of host into dir and
// starts its four replicas; a contender named TRANSPORT+disk gets each
// replica a data directory in dir.
func startCluster(ctx context.Context, l *benchkit.Launcher, cfg config, contender, dir string) (*cluster, error) {
	const n = 4
	transport, durable := strings.CutSuffix(contender, diskSuffix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	addrs, err := freeAddrs(cfg.host, n)
	if err != nil {
		return nil, err
	}
	c := &cluster{transport: transport, file: filepath.Join(dir, "cluster.json")}
	keygen := exec.CommandContext(ctx, cfg.bin, "keygen", "-addrs", strings.Join(addrs, ","), "-clients", "256", "-out", c.file)
	if out, err := keygen.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bft keygen: %w: %s", err, out)
	}
	for i := range n {
		args := []string{"replica", "-id", strconv.Itoa(i), "-cluster", c.file, "-transport", transport, "-spin", cfg.spin.String()}
		if durable {
			args = append(args, "-data-dir", filepath.Join(dir, fmt.Sprintf("data%d", i)))
		}
		s, _, err := l.StartServer(ctx, "replica ", 30*time.Second, cfg.bin, args...)
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("replica %d: %w", i, err)
		}
		c.replicas = append(c.replicas, s)
	}
	return c, nil
}

// freeAddrs returns n addresses of host whose ports were free a moment
// ago. The replicas must listen on known ports, since every replica's
// address is in every cluster file.
func freeAddrs(host string, n int) ([]string, error) {
	var addrs []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

func (c *cluster) stop() {
	for _, s := range c.replicas {
		s.Stop()
	}
	c.replicas = nil
}

// A sample is what one bench run reported, and what it cost.
type sample = benchkit.OpsSample

// benchWarmup returns the unmeasured operations a bench run of n
// measured ones makes first: bft bench's default, passed to it
// explicitly, since the costs are per operation made.
func benchWarmup(n int) int { return min(1000, n/10) }

// bench runs bft bench against c on the client CPU, and reads what the
// replicas and the client spent on it.
func (c *cluster) bench(ctx context.Context, l *benchkit.Launcher, cfg config, clients, size int) (sample, error) {
	for i, r := range c.replicas {
		if !r.Running() {
			return sample{}, fmt.Errorf("replica %d exited: %s", i, r.Stderr.Last())
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	warmup := benchWarmup(cfg.n)
	cmd := l.Command(ctx, benchkit.ClientCPU, cfg.bin, "bench", "-cluster", c.file, "-transport", c.transport, "-spin", cfg.spin.String(),
		"-clients", strconv.Itoa(clients), "-n", strconv.Itoa(cfg.n), "-warmup", strconv.Itoa(warmup), "-size", strconv.Itoa(size))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	before, beforeErr := c.counters()
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("bft bench: %w: %s", err, benchkit.LastLine(stderr.String()))
	}
	after, afterErr := c.counters()
	s, err := benchkit.ParseOps(benchkit.LastLine(stdout.String()))
	if err != nil {
		return sample{}, err
	}
	if beforeErr == nil && afterErr == nil {
		clientSwitches, ok := benchkit.ExitedSwitches(cmd.ProcessState)
		s.Switches, s.CPUUS = perOp(after.Sub(before), clientSwitches, ok, warmup+cfg.n)
	}
	s.Line += fmt.Sprintf(" cs_per_req=%s cpu_us_per_req=%s", s.Switches.Format(2), s.CPUUS.Format(1))
	return s, nil
}

// perOp returns, per operation of ops, the context switches of the
// replicas (spent) and the client (client, if clientKnown) together, and
// the replicas' CPU time in microseconds. The counters span the whole run,
// warm-up and connecting included.
func perOp(spent benchkit.ProcCounters, client int64, clientKnown bool, ops int) (switches, cpuUS benchkit.Cost) {
	if clientKnown {
		switches = benchkit.Cost{Value: float64(spent.Switches+client) / float64(ops), Known: true}
	}
	cpuUS = benchkit.Cost{Value: float64(spent.CPU.Microseconds()) / float64(ops), Known: true}
	return switches, cpuUS
}

// counters returns the counters of c's replicas, summed.
func (c *cluster) counters() (benchkit.ProcCounters, error) {
	var sum benchkit.ProcCounters
	for i, r := range c.replicas {
		n, err := benchkit.ReadProcCounters(r.Pid())
		if err != nil {
			return benchkit.ProcCounters{}, fmt.Errorf("replica %d: %w", i, err)
		}
		sum.Switches += n.Switches
		sum.CPU += n.CPU
	}
	return sum, nil
}
