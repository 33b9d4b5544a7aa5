// Command rdmabench measures rubin's RDMA transport against perftest, the
// standard verbs benchmark, and against rubin's TCP transport, side by side
// on one RDMA device, and writes the results as a Markdown table and an
// SVG plot.
//
// It runs where the RDMA device is: on machines without one, inside the
// Soft-RoCE virtual machine of scripts/rdmavm.sh, which is what
// scripts/rdma-bench.sh does (build on the host, run in the guest):
//
//	scripts/rdma-bench.sh [-quick] [-write]
//
// or by hand, in the guest:
//
//	rdmabench -echo PATH [-addr IP] [-device rxe0] [-sizes 64,1024,16384,102400]
//	        [-contenders perftest,rdma-channel,rdma-oneway,rdma-conn,tcp-channel] [-rounds 3]
//	        [-n 2000] [-depth 16] [-spin 0] [-md FILE] [-svg FILE] [-quick]
//
// For each message size, it runs every contender in turn, -rounds times
// over (A B C D A B C D ...), each run fresh processes, the server pinned to
// CPU 1 and the client to CPU 0 (taskset), over the device's address:
//
//   - perftest: ib_send_lat (one-way latency: half the round trip of a
//     ping-pong of sends; its t_typical is the median) and ib_send_bw
//     (one-way stream of sends, 128 in flight);
//   - rdma-channel: echo -transport rdma -api channel, rubin's channels on
//     one selector;
//   - rdma-oneway: echo client -oneway over the same: a one-way stream of
//     messages, as fast as the connection takes them, the figure to set
//     against ib_send_bw's (a throughput run only);
//   - rdma-conn: echo -transport rdma -api conn, rubin's net.Conn face;
//   - tcp-channel: echo -transport tcp -api channel over the same address
//     (which the kernel loops back).
//
// Each echo contender makes a latency run, one connection with one message
// in flight, whose p50 round trip halved is set against ib_send_lat's
// typical one-way time, and a throughput run, one connection with -depth
// messages in flight, whose MB/s (payload, one way) is set against
// ib_send_bw's. The throughput run's client also reports what it spent
// per message (its CPU time, cgo calls and system calls; the server's are
// not counted), the table's last columns; the latency runs leave system
// calls uncounted, since counting them slows every system call. Server
// and client of every echo contender get the same busy-poll setting,
// -spin; perftest always busy-polls. The default, 0, is
// the default configuration: the selector's adaptive spin budget, which
// follows the recent waits up to its cap (selector.DefaultMaxSpin) on
// selectors with an RDMA completion queue, and sleeps at once on
// selectors of sockets only. A positive -spin fixes the budget instead.
// Every figure is the median of its rounds, and ratios are taken between
// figures of the same run, then held against the transport's targets: a
// one-way p50 at most 1.2x ib_send_lat's from 64 B to 16 KiB, with a p99
// at most 3x its p50, and that tail (p99 over p50) at most twice
// ib_send_lat's own at 64 B, 1 KiB and 16 KiB, since the emulator gives
// perftest a tail too; a p50 at most 0.60x TCP's at 64 B and 1 KiB; both
// for rdma-channel and, held to the same, rdma-conn, whose p50 must also
// stay within 1.3x rdma-channel's; and a one-way stream (rdma-oneway) of
// at least 0.85x ib_send_bw's MB/s at 4 KiB and 64 KiB. The echo's MB/s
// over ib_send_bw's is shown, but judged against nothing: an echo with
// messages in flight is no stream.
//
// perftest under software CPU emulation sometimes prints inf, or figures
// its own run time contradicts (its clock calibration fails): such a run
// is retried, up to -retries times.
//
// -quick makes a run small enough for CI: two sizes, one round, few
// messages, with the report written to a temporary directory unless -md or
// -svg say otherwise.
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
	"strconv"
	"syscall"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// A contender is one side of the comparison.
type contender struct {
	name      string // as on the command line and in reports
	transport string // the echo command's -transport; empty for perftest
	api       string // the echo command's -api
	oneway    bool   // a one-way stream: a throughput run only
}

// The contenders, in the order they run in each round.
const (
	perftest    = "perftest"
	rdmaChannel = "rdma-channel"
	rdmaOneway  = "rdma-oneway"
	rdmaConn    = "rdma-conn"
	tcpChannel  = "tcp-channel"
)

var allContenders = []contender{
	{name: perftest},
	{name: rdmaChannel, transport: "rdma", api: "channel"},
	{name: rdmaOneway, transport: "rdma", api: "channel", oneway: true},
	{name: rdmaConn, transport: "rdma", api: "conn"},
	{name: tcpChannel, transport: "tcp", api: "channel"},
}

// config is the benchmark's command line.
type config struct {
	args        []string // the command line, for the report
	echo        string
	addr        string
	device      string
	contenders  []contender
	sizes       []int
	rounds      int
	n           int
	depth       int
	spin        time.Duration
	cm          bool
	retries     int
	timeout     time.Duration
	md          string
	svg         string
	generatedBy string
	quick       bool
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("rdmabench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg        config
		sizes      = fs.String("sizes", "64,1024,4096,16384,65536,102400", "message sizes in bytes, comma-separated")
		contenders = fs.String("contenders", "perftest,rdma-channel,rdma-oneway,rdma-conn,tcp-channel", "contenders, comma-separated, from\n"+
			"perftest (ib_send_lat, ib_send_bw), rdma-channel, rdma-oneway, rdma-conn, tcp-channel (the echo command)")
	)
	fs.StringVar(&cfg.echo, "echo", "", "the echo command's binary (default: echo beside this program)")
	fs.StringVar(&cfg.addr, "addr", os.Getenv("RDMAVM_RXE_IP"), "IP address of the RDMA device, for every contender (default $RDMAVM_RXE_IP)")
	fs.StringVar(&cfg.device, "device", "rxe0", "RDMA device for perftest")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds over all contenders; figures are medians over rounds")
	fs.IntVar(&cfg.n, "n", 2000, "measured messages of a latency run up to 4 KiB; larger messages get proportionally fewer,\n"+
		"at least 200 (or n if smaller); a throughput run sends twice as many")
	fs.IntVar(&cfg.depth, "depth", 16, "messages in flight on the one connection of an echo throughput run")
	fs.DurationVar(&cfg.spin, "spin", 0, "fixed busy-poll budget of every echo server and client; 0: the default configuration,\n"+
		"the selector's adaptive budget")
	fs.BoolVar(&cfg.cm, "cm", true, "connect perftest's queue pairs through rdma_cm (-R), as rubin's transport does")
	fs.IntVar(&cfg.retries, "retries", 4, "attempts at a perftest run that prints inf or inconsistent figures")
	fs.DurationVar(&cfg.timeout, "timeout", time.Minute, "longest a client run may take")
	fs.StringVar(&cfg.md, "md", "", "write the report as Markdown to this file")
	fs.StringVar(&cfg.svg, "svg", "", "write the plot of latency against message size to this file")
	fs.StringVar(&cfg.generatedBy, "generated-by", "", "the command to name in the Markdown report as the one that made it\n"+
		"(default: this program's command line)")
	fs.BoolVar(&cfg.quick, "quick", false, "a small run for CI: sizes 64 and 16384, one round, -n 400,\n"+
		"report written to a temporary directory unless -md or -svg are given")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.args = args
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.quick {
		if !set["sizes"] {
			*sizes = "64,16384"
		}
		if !set["n"] {
			cfg.n = 400
		}
		if !set["rounds"] {
			cfg.rounds = 1
		}
	}

	for _, name := range benchkit.SplitList(*contenders) {
		i := slices.IndexFunc(allContenders, func(c contender) bool { return c.name == name })
		if i < 0 {
			return nil, fmt.Errorf("-contenders: unknown contender %q", name)
		}
		cfg.contenders = append(cfg.contenders, allContenders[i])
	}
	if len(cfg.contenders) == 0 {
		return nil, errors.New("-contenders is empty")
	}
	// Run in the canonical order, whatever the order given.
	slices.SortFunc(cfg.contenders, func(a, b contender) int {
		return slices.IndexFunc(allContenders, func(c contender) bool { return c.name == a.name }) -
			slices.IndexFunc(allContenders, func(c contender) bool { return c.name == b.name })
	})
	var err error
	if cfg.sizes, err = benchkit.ParseInts("sizes", *sizes, 1); err != nil {
		return nil, err
	}
	switch {
	case cfg.addr == "":
		return nil, errors.New("-addr is required: the IP address of the RDMA device (RDMAVM_RXE_IP is not set)")
	case net.ParseIP(cfg.addr) == nil:
		return nil, fmt.Errorf("-addr %q is not an IP address", cfg.addr)
	case cfg.n < 1:
		return nil, fmt.Errorf("-n %d is not positive", cfg.n)
	case cfg.rounds < 1:
		return nil, fmt.Errorf("-rounds %d is not positive", cfg.rounds)
	case cfg.depth < 1:
		return nil, fmt.Errorf("-depth %d is not positive", cfg.depth)
	case cfg.spin < 0:
		return nil, fmt.Errorf("-spin %v is negative", cfg.spin)
	case cfg.retries < 1:
		return nil, fmt.Errorf("-retries %d is not positive", cfg.retries)
	case cfg.timeout <= 0:
		return nil, fmt.Errorf("-timeout %v is not positive", cfg.timeout)
	}
	return &cfg, nil
}

// latencyMessages returns the measured messages of a latency run at size:
// n up to 4 KiB, proportionally fewer above, so that a run takes about as
// long at every size, but at least 200 (or n, if that is smaller).
func (cfg *config) latencyMessages(size int) int {
	n := cfg.n
	if size > 4<<10 {
		n = int(int64(cfg.n) * (4 << 10) / int64(size))
	}
	return max(n, min(200, cfg.n))
}

// throughputMessages returns the measured messages of a throughput run at
// size.
func (cfg *config) throughputMessages(size int) int {
	return 2 * cfg.latencyMessages(size)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rdmabench: %v\n", err)
		return 2
	}
	if err := benchmark(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "rdmabench: %v\n", err)
		return 1
	}
	return 0
}

// findEcho returns the echo binary: -echo, or echo beside this program.
func findEcho(cfg *config) (string, error) {
	if cfg.echo != "" {
		return cfg.echo, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("-echo is not set and this program's path is unknown: %v", err)
	}
	bin := filepath.Join(filepath.Dir(self), "echo")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("-echo is not set and there is no echo beside this program (go build -o %s ./cmd/echo)", bin)
	}
	return bin, nil
}

// benchmark runs the benchmark cfg describes and reports it.
func benchmark(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	began := time.Now()
	bin, err := findEcho(cfg)
	if err != nil {
		return err
	}
	needPerftest := slices.ContainsFunc(cfg.contenders, func(c contender) bool { return c.name == perftest })
	if needPerftest {
		for _, tool := range []string{latencyTool, bandwidthTool} {
			if _, err := exec.LookPath(tool); err != nil {
				return fmt.Errorf("%v (install the Debian package perftest)", err)
			}
		}
	}
	tmp, err := os.MkdirTemp("", "rdmabench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	l, placement := benchkit.Pinned(ctx)
	fmt.Fprintf(stderr, "rdmabench: %s\n", placement)
	pt := &perftestRunner{l: l, device: cfg.device, addr: cfg.addr, cm: cfg.cm, attempts: cfg.retries, timeout: cfg.timeout}

	res := newResults(cfg.contenders, cfg.sizes)
	total, done := len(cfg.sizes)*cfg.rounds*len(cfg.contenders), 0
	for _, size := range cfg.sizes {
		for round := range cfg.rounds {
			for _, c := range cfg.contenders {
				done++
				prefix := fmt.Sprintf("[%*d/%d] %7s, round %d/%d, %-13s", len(strconv.Itoa(total)), done, total,
					benchkit.FormatSize(size), round+1, cfg.rounds, c.name+":")
				var lat latency
				var bw throughput
				var latErr, bwErr error
				if c.name == perftest {
					lat, latErr = pt.latency(ctx, size, cfg.latencyMessages(size))
					bw, bwErr = pt.bandwidth(ctx, size, cfg.throughputMessages(size))
				} else {
					lat, bw, latErr, bwErr = runEcho(ctx, l, bin, cfg, c, size)
				}
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				res.add(size, c.name, lat, latErr, bw, bwErr)
				fmt.Fprintf(stderr, "%s %s; %s\n", prefix, lat.status(latErr), bw.status(bwErr))
			}
		}
	}
	elapsed := time.Since(began).Round(time.Second)

	r := &report{cfg: cfg, res: res, placement: placement, elapsed: elapsed, when: began, perftestRetries: pt.retried}
	r.writeText(stdout)
	if err := benchkit.WriteReport(stdout, cfg.quick, tmp, cfg.md, cfg.svg, r.writeMarkdown, r.writeSVG); err != nil {
		return err
	}
	if needPerftest && res.failedAll(perftest) {
		return errors.New("every perftest run failed: no baseline")
	}
	return nil
}

// runEcho measures one echo contender at size: a server, then a latency
// client and a throughput client against it.
func runEcho(ctx context.Context, l *benchkit.Launcher, bin string, cfg *config, c contender, size int) (lat latency, bw throughput, latErr, bwErr error) {
	spec := benchkit.EchoSpec{Transport: c.transport, API: c.api, Size: size, Conns: 1, Depth: 1,
		N: cfg.latencyMessages(size), Spin: cfg.spin}
	if c.oneway {
		return runOneway(ctx, l, bin, cfg, spec)
	}
	srv, addr, err := l.EchoServer(ctx, bin, spec, net.JoinHostPort(cfg.addr, "0"))
	if err != nil {
		return latency{}, throughput{}, err, err
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		srv.Stop()
		err := fmt.Errorf("server listens on %q: no port to connect to", addr)
		return latency{}, throughput{}, err, err
	}
	s, latErr := l.EchoClient(ctx, bin, spec, addr, cfg.timeout)
	if latErr == nil {
		lat = latency{oneWay: s.P50 / 2, p99: s.P99 / 2, line: s.Line, spinUS: s.SpinUS}
	}
	spec.Depth, spec.N, spec.Syscalls = cfg.depth, cfg.throughputMessages(size), true
	if latErr == nil || srv.Running() {
		s, bwErr = l.EchoClient(ctx, bin, spec, addr, cfg.timeout)
		if bwErr == nil {
			bw = throughput{mbps: s.MBps, rate: s.Rate, costs: s.Costs, line: s.Line}
		}
	} else {
		bwErr = errors.New("not run: the server had exited")
	}
	if err := srv.Stop(); err != nil {
		err = fmt.Errorf("server: %v: %s", err, srv.Stderr.Brief())
		latErr = firstError(latErr, err)
		bwErr = firstError(bwErr, err)
	}
	return lat, bw, latErr, bwErr
}

// errNoLatency is a one-way contender's latency: it has none.
var errNoLatency = errors.New("no latency run: one-way stream")

// runOneway measures a one-way contender: a server, then one one-way
// stream of twice the latency run's messages.
func runOneway(ctx context.Context, l *benchkit.Launcher, bin string, cfg *config, spec benchkit.EchoSpec) (lat latency, bw throughput, latErr, bwErr error) {
	srv, addr, err := l.EchoServer(ctx, bin, spec, net.JoinHostPort(cfg.addr, "0"))
	if err != nil {
		return latency{}, throughput{}, errNoLatency, err
	}
	spec.Oneway, spec.N, spec.Syscalls = true, cfg.throughputMessages(spec.Size), true
	s, bwErr := l.EchoClient(ctx, bin, spec, addr, cfg.timeout)
	if bwErr == nil {
		bw = throughput{mbps: s.MBps, rate: s.Rate, costs: s.Costs, line: s.Line}
	}
	if err := srv.Stop(); err != nil {
		bwErr = firstError(bwErr, fmt.Errorf("server: %v: %s", err, srv.Stderr.Brief()))
	}
	return latency{}, bw, errNoLatency, bwErr
}

// firstError returns the first non-nil error.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
