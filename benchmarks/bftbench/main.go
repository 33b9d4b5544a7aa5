// Command bftbench measures a four-replica PBFT cluster of cmd/bft: its
// throughput and latency for each transport, request size and number of
// clients asked for, in one run, so that the transports compare side by
// side.
//
// Usage:
//
//	bftbench [-bft PATH] [-transports tcp,rdma] [-durable] [-host 127.0.0.1] [-sizes 0,1024]
//	         [-clients 1,64] [-n 20000] [-rounds 3] [-md FILE] [-svg FILE] [-quick]
//	         [-baseline REV | -baseline-bft PATH [-baseline-name NAME]]
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
//
// With -baseline REV it also builds cmd/bft as it was at revision REV of
// this repository (git archive, then go build in that tree, by the same
// go toolchain), and measures every contender of this tree, such as tcp,
// beside its twin of the baseline, tcp@REV, in the same rounds, so that
// the report can quote this tree's figures as ratios to the older code's.
// -baseline-bft takes a bft binary built before instead.
//
// Around every bench run it also reads what the run cost: the context
// switches of the replicas and the client, and the replicas' CPU time,
// per request (on Linux, from /proc and the client's resource usage).
package main

import (
	"cmp"
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
	"unicode"

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
	contenders  []contender
	baseline    baseline
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

// A contender is one cluster a run measures: replicas of one build of the
// bft command, over one transport, persisting or not.
type contender struct {
	transport string // tcp or rdma
	durable   bool   // the replicas persist to a data directory (-data-dir)
	build     string // the baseline's name, for the baseline's build; empty for this tree's
}

// diskSuffix marks a contender whose replicas persist to a data directory.
const diskSuffix = "+disk"

// name returns what reports call c: its transport, +disk if it persists,
// and @ and the baseline's name if it is the baseline's.
func (c contender) name() string {
	n := c.transport
	if c.durable {
		n += diskSuffix
	}
	if c.build != "" {
		n += "@" + c.build
	}
	return n
}

// tcp returns the contender c's ratios to tcp are to: tcp in memory, of
// the same build.
func (c contender) tcp() contender { return contender{transport: "tcp", build: c.build} }

// twin returns c's twin of the baseline, named name.
func (c contender) twin(name string) contender {
	c.build = name
	return c
}

// A baseline is the older build of the bft command the run measures this
// tree's against, if any.
type baseline struct {
	rev  string // -baseline: a revision of this repository to build
	repo string // the top level of the repository, for rev
	bin  string // the binary, built from rev or given by -baseline-bft
	name string // what contenders' names append after @
	desc string // what it is, for the reports
}

// contenders returns the contenders for transports: each, then its
// +disk contender if durable, each followed by its baseline twin if the
// run has a baseline, so that the twins alternate in every round.
func contenders(transports []string, durable bool, base string) []contender {
	var out []contender
	add := func(c contender) {
		out = append(out, c)
		if base != "" {
			out = append(out, c.twin(base))
		}
	}
	for _, t := range transports {
		add(contender{transport: t})
		if durable {
			add(contender{transport: t, durable: true})
		}
	}
	return out
}

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
	fs.StringVar(&cfg.baseline.rev, "baseline", "", "also build cmd/bft at revision `REV` of this repository and measure every contender beside its twin of that build, named like tcp@REV")
	fs.StringVar(&cfg.baseline.bin, "baseline-bft", "", "also measure every contender beside its twin run with the bft binary `PATH`, named like tcp@base (see -baseline-name)")
	fs.StringVar(&cfg.baseline.name, "baseline-name", "", "`NAME` of the baseline in contender names (default: the short revision with -baseline, base with -baseline-bft)")
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
	if cfg.sizes, err = benchkit.ParseInts("sizes", sizes, 0); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if cfg.clients, err = benchkit.ParseInts("clients", clients, 1); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	ts := benchkit.SplitList(transports)
	for _, t := range ts {
		if t != "tcp" && t != "rdma" {
			return fmt.Errorf("%w: -transports: %q is neither tcp nor rdma", errUsage, t)
		}
	}
	base := &cfg.baseline
	switch {
	case len(ts) == 0:
		return fmt.Errorf("%w: -transports is empty", errUsage)
	case cfg.n < 1 || cfg.rounds < 1:
		return fmt.Errorf("%w: -n and -rounds must be positive", errUsage)
	case base.rev != "" && base.bin != "":
		return fmt.Errorf("%w: -baseline and -baseline-bft exclude each other", errUsage)
	case base.name != "" && base.rev == "" && base.bin == "":
		return fmt.Errorf("%w: -baseline-name names a baseline, but neither -baseline nor -baseline-bft gives one", errUsage)
	case strings.ContainsFunc(base.name, func(r rune) bool { return unicode.IsSpace(r) || r == '/' }):
		return fmt.Errorf("%w: -baseline-name %q has a space or a slash", errUsage, base.name)
	}
	if cfg.quick {
		cfg.n, cfg.rounds = min(cfg.n, 500), 1
		cfg.sizes, cfg.clients = cfg.sizes[:1], cfg.clients[:1]
	}
	if base.rev != "" {
		if err := base.resolve(ctx); err != nil {
			return err
		}
	} else if base.bin != "" {
		base.name = cmp.Or(base.name, "base")
		base.desc = fmt.Sprintf("`%s`", base.bin)
	}
	cfg.contenders = contenders(ts, cfg.durable, base.name)
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
	if base.rev != "" {
		if err := base.build(ctx, filepath.Join(dir, "baseline"), stderr); err != nil {
			return err
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
	if base.name != "" {
		fmt.Fprintf(stdout, "baseline: @%s is %s\n", base.name, strings.ReplaceAll(base.desc, "`", ""))
	}
	res := newResults(cfg)
	start := time.Now()
	width := 0
	for i, ct := range cfg.contenders {
		c, err := startCluster(ctx, launcher, cfg, ct, filepath.Join(dir, fmt.Sprintf("cluster%d", i)))
		if err != nil {
			return fmt.Errorf("%s cluster: %w", ct.name(), err)
		}
		defer c.stop()
		res.clusters[ct] = c
		width = max(width, len(ct.name()))
	}
	for round := range cfg.rounds {
		for _, size := range cfg.sizes {
			for _, clients := range cfg.clients {
				for _, t := range cfg.contenders {
					s, err := res.clusters[t].bench(ctx, launcher, cfg, clients, size)
					res.add(t, size, clients, s, err)
					status := fmt.Sprintf("%.0f ops/s, p50 %.0f us, %s cs/req, %s cpu us/req", s.Rate, s.P50, s.Switches.Format(2), s.CPUUS.Format(1))
					if err != nil {
						status = "error: " + err.Error()
					}
					fmt.Fprintf(stdout, "round %d/%d  %-*s  size %-5d clients %-3d  %s\n", round+1, cfg.rounds, width, t.name(), size, clients, status)
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

// A cluster is four replica processes of one contender, and the bft
// command its clients run.
type cluster struct {
	transport string
	bin       string
	file      string
	replicas  []*benchkit.Server
}

// startCluster writes a cluster file for free ports of host into dir and
// starts the four replicas of contender ct; a contender that persists
// gets each replica a data directory in dir.
func startCluster(ctx context.Context, l *benchkit.Launcher, cfg config, ct contender, dir string) (*cluster, error) {
	const n = 4
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	addrs, err := freeAddrs(cfg.host, n)
	if err != nil {
		return nil, err
	}
	c := &cluster{transport: ct.transport, bin: cfg.bin, file: filepath.Join(dir, "cluster.json")}
	if ct.build != "" {
		c.bin = cfg.baseline.bin
	}
	keygen := exec.CommandContext(ctx, c.bin, "keygen", "-addrs", strings.Join(addrs, ","), "-clients", "256", "-out", c.file)
	if out, err := keygen.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bft keygen: %w: %s", err, out)
	}
	for i := range n {
		args := []string{"replica", "-id", strconv.Itoa(i), "-cluster", c.file, "-transport", c.transport, "-spin", cfg.spin.String()}
		if ct.durable {
			args = append(args, "-data-dir", filepath.Join(dir, fmt.Sprintf("data%d", i)))
		}
		s, _, err := l.StartServer(ctx, "replica ", 30*time.Second, c.bin, args...)
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
	cmd := l.Command(ctx, benchkit.ClientCPU, c.bin, "bench", "-cluster", c.file, "-transport", c.transport, "-spin", cfg.spin.String(),
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
	cpuUS = benchkit.Cost{Value: float64(spent.CPU) / float64(time.Microsecond) / float64(ops), Known: true}
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
