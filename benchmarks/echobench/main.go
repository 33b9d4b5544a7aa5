// Command echobench measures the apis of the echo command against Go's net
// package, side by side on this machine, and writes the results as a
// Markdown table and an SVG plot.
//
// Usage, from the module root:
//
//	go run ./benchmarks/echobench [-apis gonet,channel,conn] [-sizes 64,1024,16384,102400] [-conns 1,100,1000]
//	        [-n 20000] [-rounds 3] [-spin DURATION] [-syscalls] [-md FILE] [-svg FILE] [-quick]
//
// It builds cmd/echo once. Then, for each message size and connection count,
// it runs every contender in turn, -rounds times over (A B C A B C ...), each
// run a fresh server process on CPU 1 and a client process on CPU 0 (with
// taskset; unpinned, and saying so, where taskset cannot pin), talking over
// 127.0.0.1. Every figure reported is the median of its rounds, and ratios
// are taken against the gonet baseline measured in the same run.
//
// Beside the speeds, the table gives what each client process spent per
// message: CPU time, cgo calls and system calls (the server's are not in
// them). System calls are counted only with -syscalls, where the echo
// client can count them (Linux, tracefs, root): counting slows every
// system call, and so the latencies, most for the apis that make the most.
//
// A contender that fails is reported as an error in the table, and the
// others go on; the exit status is nonzero only if the baseline fails.
//
// -quick makes a run small enough for CI: one size, one connection, few
// messages, one round, with the report written to a temporary directory
// unless -md or -svg say otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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

// baseline is the contender the others are compared with.
const baseline = "gonet"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the benchmark's command line.
type config struct {
	args     []string // the command line, for the report
	apis     []string
	sizes    []int
	conns    []int
	n        int
	rounds   int
	spin     time.Duration
	syscalls bool
	md       string
	svg      string
	timeout  time.Duration
	quick    bool
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("echobench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg   config
		apis  = fs.String("apis", "gonet,channel,conn", "contenders, comma-separated; gonet is the baseline")
		sizes = fs.String("sizes", "64,1024,16384,102400", "message sizes in bytes, comma-separated")
		conns = fs.String("conns", "1,100,1000", "connection counts, comma-separated")
	)
	fs.IntVar(&cfg.n, "n", 20000, "measured messages per run with one connection and messages up to 64 KiB;\n"+
		"runs with more connections send five times as many, runs with larger messages half as many,\n"+
		"and every run sends at least 100 per connection")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds over all contenders; figures are medians over rounds")
	fs.DurationVar(&cfg.spin, "spin", 0, "busy-poll budget passed to the server and client of every api but gonet")
	fs.BoolVar(&cfg.syscalls, "syscalls", false, "have the clients count their system calls, which slows every system call")
	fs.StringVar(&cfg.md, "md", "docs/benchmarks-echo-tcp.md", "write the table as Markdown to this file")
	fs.StringVar(&cfg.svg, "svg", "docs/latency-vs-size-tcp.svg", "write the plot of p50 latency against message size to this file")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "longest a client run may take")
	fs.BoolVar(&cfg.quick, "quick", false, "a tiny run for CI: one size, one connection, few messages, one round,\n"+
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
			*sizes = "64"
		}
		if !set["conns"] {
			*conns = "1"
		}
		if !set["n"] {
			cfg.n = 2000
		}
		if !set["rounds"] {
			cfg.rounds = 1
		}
		if !set["md"] {
			cfg.md = ""
		}
		if !set["svg"] {
			cfg.svg = ""
		}
	}

	cfg.apis = benchkit.SplitList(*apis)
	if len(cfg.apis) == 0 {
		return nil, errors.New("-apis is empty")
	}
	var err error
	if cfg.sizes, err = benchkit.ParseInts("sizes", *sizes, 1); err != nil {
		return nil, err
	}
	if cfg.conns, err = benchkit.ParseInts("conns", *conns, 1); err != nil {
		return nil, err
	}
	switch {
	case cfg.n < 1:
		return nil, fmt.Errorf("-n %d is not positive", cfg.n)
	case cfg.rounds < 1:
		return nil, fmt.Errorf("-rounds %d is not positive", cfg.rounds)
	case cfg.spin < 0:
		return nil, fmt.Errorf("-spin %v is negative", cfg.spin)
	case cfg.timeout <= 0:
		return nil, fmt.Errorf("-timeout %v is not positive", cfg.timeout)
	}
	return &cfg, nil
}

// messages returns the measured messages of a run at p.
func (cfg *config) messages(p point) int {
	n := cfg.n
	if p.conns > 1 {
		n *= 5
	}
	if p.size > 64<<10 {
		n /= 2
	}
	return max(n, 100*p.conns)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "echobench: %v\n", err)
		return 2
	}
	if err := benchmark(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "echobench: %v\n", err)
		return 1
	}
	return 0
}

// benchmark runs the benchmark cfg describes and reports it.
func benchmark(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	began := time.Now()
	tmp, err := os.MkdirTemp("", "echobench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	bin := filepath.Join(tmp, "echo")
	fmt.Fprintf(stderr, "echobench: building %s\n", benchkit.EchoPackage)
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, benchkit.EchoPackage)
	build.Stdout, build.Stderr = stderr, stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", benchkit.EchoPackage, err)
	}

	pinned, placement := benchkit.Pinned(ctx)
	l := &launcher{Launcher: pinned, bin: bin, runTimeout: cfg.timeout}
	fmt.Fprintf(stderr, "echobench: %s\n", placement)

	var points []point
	for _, size := range cfg.sizes {
		for _, conns := range cfg.conns {
			points = append(points, point{size: size, conns: conns})
		}
	}
	res := newResults(cfg.apis, points)
	total, done := len(points)*cfg.rounds*len(cfg.apis), 0
	for _, p := range points {
		for round := range cfg.rounds {
			for _, api := range cfg.apis {
				spec := runSpec{api: api, size: p.size, conns: p.conns, n: cfg.messages(p), syscalls: cfg.syscalls}
				if api != baseline {
					spec.spin = cfg.spin
				}
				s, err := l.run(ctx, spec)
				if ctx.Err() != nil {
					return context.Cause(ctx)
				}
				res.add(p, api, s, err)
				done++
				status := fmt.Sprintf("p50 %.1f us, p99 %.1f us, %.0f msgs/s", s.P50, s.P99, s.Rate)
				if err != nil {
					status = "error: " + err.Error()
				}
				fmt.Fprintf(stderr, "[%*d/%d] %7s x %4d conns, %6d msgs, round %d/%d, %-8s %s\n",
					len(strconv.Itoa(total)), done, total, benchkit.FormatSize(p.size), p.conns, spec.n,
					round+1, cfg.rounds, api+":", status)
			}
		}
	}
	elapsed := time.Since(began).Round(time.Second)

	r := &report{cfg: cfg, res: res, placement: placement, elapsed: elapsed, when: began}
	r.writeText(stdout)
	if err := benchkit.WriteReport(stdout, cfg.quick, tmp, cfg.md, cfg.svg, r.writeMarkdown, r.writeSVG); err != nil {
		return err
	}
	if slices.Contains(cfg.apis, baseline) && res.failed(baseline) {
		return fmt.Errorf("the %s baseline failed", baseline)
	}
	return nil
}
