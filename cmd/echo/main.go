// Command echo measures round trips of an echo protocol over rubin's APIs
// and over Go's net package, the baseline.
//
// Usage:
//
//	echo server -transport tcp|rdma -api conn|gonet|channel -addr HOST:PORT [-spin DURATION] [-metrics-addr ADDR] [-cpuprofile FILE] [-trace FILE]
//	echo client -transport tcp|rdma -api conn|gonet|channel -addr HOST:PORT -size BYTES -n COUNT -conns N [-depth D] [-warmup W] [-spin DURATION] [-oneway] [-reply-timeout DURATION] [-syscalls=false] [-times FILE] [-cpuprofile FILE] [-trace FILE]
//	echo demo [-rdma IP] [-quick] [-cpuprofile FILE] [-trace FILE]
//	echo
//
// The server echoes back every byte it receives. Once it listens it prints
// "listening on ADDR" on standard output, and it runs until interrupted.
//
// The client opens -conns connections and on each keeps -depth messages of
// -size bytes in flight, until -n measured messages, after -warmup unmeasured
// ones, have made the round trip. Each echo is checked against the message
// sent. It ends by printing one summary line on standard output:
//
//	transport=tcp size=64 conns=1 msgs=10000 p50_us=12.3 p99_us=45.6 p999_us=78.9 msgs_per_s=12345 MBps=1.58 api=conn spin_us=0 depth=1 warmup=1000 wall_s=0.810 cpu_ns_per_msg=20345 cgo_per_msg=0.00 syscalls_per_msg=4.02 switches_per_msg=0.51
//
// The latencies are round-trip times, from the start of the write to the end
// of the read of the whole echo; msgs_per_s is the measured messages over the
// wall time of the measured phase; MBps counts the payload one way. Further
// fields may be added at the end of the line, never before.
//
// The last four fields are what the client process spent in the measured
// phase, per measured message: its CPU time, user and system, by
// getrusage; its calls from Go to C (cgo), by the runtime's count; its
// system calls, counted by the kernel: on Linux, where tracefs is mounted
// and the process may open a perf event on the raw_syscalls:sys_enter
// tracepoint (as root); and its threads' context switches, voluntary and
// involuntary, by getrusage. A figure that cannot be measured is "-", and
// stderr says why system calls are not counted. The figures cover every
// thread of the client process and nothing else: the server, a process
// of its own, is not in them (where a server runs in the same process, as
// in this command's tests, they cover both). While the client counts
// system calls, every system call on the machine takes the kernel's
// traced path, which costs a little more: -syscalls=false, for a run that
// measures latency, leaves them uncounted.
//
// A client gives up when no reply has come for -reply-timeout (5s by
// default; 0 waits without limit): it fails with "no reply from ADDR in
// 5s", asking whether the server runs with the same -api and -oneway. A
// server of another mode or api, or one that stopped answering, thus ends
// the run with an error, never a hang.
//
// To find where slow round trips come from, -times FILE writes every
// measured message's send time and round-trip time, and -trace FILE (on
// server and client) an execution trace of the whole run for go tool
// trace, in which the client logs each round trip that took at least four
// times the fastest one so far ("echo slow round trip", at its end).
//
// With -oneway (api channel) the client streams its messages one way, as
// fast as each connection takes them, and the server only counts them;
// at the end the server sends back its count, which the client checks.
// The client asks for the stream first and sends nothing more until the
// server has accepted it: a server started with -api conn or gonet, which
// only echo, sends the request back, and the client fails at once with an
// error saying that -oneway needs a server started with -api channel. The
// measured phase ends when the last total arrives; msgs_per_s and MBps are
// then comparable with ib_send_bw's, and the line has oneway=1. The
// latency fields mean nothing then: every message is recorded as taking
// no time but each connection's last, recorded as the time from its send
// to the total.
//
// With no arguments, echo runs a demo: a server and a client in one process
// on 127.0.0.1, over a few message sizes, for each api, printing a table.
// "echo demo" does the same; with -rdma IP, the servers listen on IP, the
// address of an RDMA device, and after each api's TCP rows come its rows
// over RDMA, for the apis that have it, so that the two can be compared
// within one run. Without an RDMA device it fails before running anything.
// -quick sends a tenth of the messages, for slow (emulated) machines.
//
// -api gonet uses Go's net package, -api conn uses rubin.Listen and
// rubin.DialContext, and -api channel uses rubin's channels and selector.
// -transport rdma runs the conn and channel apis over RDMA (on Linux, with
// cgo, rdma-core and an RDMA device; -addr is then an address of the
// device); gonet is TCP only.
//
// Exit status: 2 for bad arguments, 1 for a failure at run time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/internal/cli"
	"github.com/rubin-go/rubin/internal/cost"
	"github.com/rubin-go/rubin/metrics"

	_ "github.com/rubin-go/rubin/transport/rdma" // the rdma network
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// maxSize bounds -size, so that a typing slip does not allocate the machine
// away: every connection holds one or two buffers of this size.
const maxSize = 64 << 20

const usageText = `usage:
  echo server -transport tcp|rdma -api conn|gonet|channel -addr HOST:PORT [-spin DURATION] [-metrics-addr ADDR] [-cpuprofile FILE] [-trace FILE]
  echo client -transport tcp|rdma -api conn|gonet|channel -addr HOST:PORT -size BYTES -n COUNT -conns N [-depth D] [-warmup W] [-spin DURATION] [-oneway] [-reply-timeout DURATION] [-syscalls=false] [-times FILE] [-cpuprofile FILE] [-trace FILE]
  echo demo [-rdma IP] [-quick] [-cpuprofile FILE] [-trace FILE]
  echo          (no arguments: the demo over 127.0.0.1)
`

// errUsage marks an error in the command line.
var errUsage = errors.New("usage")

// run runs the command with the given arguments (without the program name)
// and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var err error
	switch {
	case len(args) == 0:
		err = runDemo(ctx, demoConfig{ip: "127.0.0.1", runs: demoRuns}, stdout, stderr)
	case args[0] == "demo":
		err = runDemoCommand(ctx, args[1:], stdout, stderr)
	case args[0] == "server":
		err = runServerCommand(ctx, args[1:], stdout, stderr)
	case args[0] == "client":
		err = runClientCommand(ctx, args[1:], stdout, stderr)
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	default:
		err = fmt.Errorf("%w: unknown command %q", errUsage, args[0])
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errReported):
		return exitUsage
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "echo: %v\n%s", err, usageText)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "echo: %v\n", err)
		return exitFailure
	}
}

// newFlagSet returns a flag set that reports errors instead of exiting,
// and prints its defaults after the usage text.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText, "\nflags of echo "+name+":\n")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs and rejects positional arguments. A parse
// error has already been printed by fs, so it comes back wrapping
// errReported, which run does not print again.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errReported, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

// errReported marks a usage error that the flag package has already printed
// together with the usage text.
var errReported = fmt.Errorf("%w (reported)", errUsage)

// commonFlags are the flags of both server and client.
type commonFlags struct {
	transport string
	api       string
	addr      string
	spin      time.Duration
	profile   string
	trace     string
}

func (c *commonFlags) register(fs *flag.FlagSet, defaultAddr string) {
	fs.StringVar(&c.transport, "transport", "tcp", "transport: "+strings.Join(anytransport.Networks(), " or "))
	fs.StringVar(&c.api, "api", "conn", "api: "+strings.Join(apiNames(), ", "))
	fs.StringVar(&c.addr, "addr", defaultAddr, "address, HOST:PORT")
	fs.DurationVar(&c.spin, "spin", 0, "fixed busy-poll budget before sleeping, for apis that have one (0: the selector's adaptive default)")
	fs.StringVar(&c.profile, "cpuprofile", "", "write a CPU profile of the whole run to `file`")
	fs.StringVar(&c.trace, "trace", "", "write an execution trace (runtime/trace, for go tool trace) of the whole run to `file`")
}

// startProfile starts the CPU profile and the execution trace asked for,
// if any; the returned function stops them and closes their files.
func (c *commonFlags) startProfile() (stop func() error, err error) {
	return cli.StartProfile(c.profile, c.trace)
}

// check validates the common flags and returns the selected api.
func (c *commonFlags) check() (api, error) {
	if c.transport == "" {
		return api{}, fmt.Errorf("%w: -transport is empty", errUsage)
	}
	if c.addr == "" {
		return api{}, fmt.Errorf("%w: -addr is required", errUsage)
	}
	if c.spin < 0 {
		return api{}, fmt.Errorf("%w: -spin %v is negative", errUsage, c.spin)
	}
	a, err := lookupAPI(c.api)
	if err != nil {
		return api{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	if a.check != nil {
		if err := a.check(c.transport); err != nil {
			return api{}, fmt.Errorf("%w: -transport %s: %w", errUsage, c.transport, err)
		}
	}
	return a, nil
}

// effectiveSpin returns the spin budget a in fact applies, warning on
// stderr when it ignores the one asked for.
func (c *commonFlags) effectiveSpin(a api, stderr io.Writer) time.Duration {
	if c.spin > 0 && !a.spin {
		fmt.Fprintf(stderr, "echo: api %s has no busy-poll setting; ignoring -spin %v\n", c.api, c.spin)
		return 0
	}
	return c.spin
}

func runServerCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("server", stderr)
	var common commonFlags
	common.register(fs, "127.0.0.1:0")
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, err := common.check()
	if err != nil {
		return err
	}
	stop, err := common.startProfile()
	if err != nil {
		return err
	}
	defer stop()
	if *metricsAddr != "" {
		addr, err := metrics.Serve(ctx, *metricsAddr, metricsRegistry, log.New(stderr, "echo server: metrics: ", 0))
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "echo server: metrics on http://%v/metrics\n", addr)
	}
	return a.serve(ctx, serverConfig{
		network: common.transport,
		addr:    common.addr,
		spin:    common.effectiveSpin(a, stderr),
		ready: func(addr net.Addr) {
			fmt.Fprintf(stdout, "listening on %v\n", addr)
		},
		log: log.New(stderr, "echo server: ", 0),
	})
}

// clientFlags are the flags of the client beyond the common ones.
type clientFlags struct {
	size         int
	n            int
	conns        int
	depth        int
	warmup       int // -1 until set
	oneway       bool
	replyTimeout time.Duration
	syscalls     bool
	times        string
}

// defaultReplyTimeout is how long a client waits for a reply, by
// default, before it gives up on the server.
const defaultReplyTimeout = 5 * time.Second

func runClientCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("client", stderr)
	var common commonFlags
	common.register(fs, "")
	var cf clientFlags
	fs.IntVar(&cf.size, "size", 64, "payload bytes per message")
	fs.IntVar(&cf.n, "n", 10000, "measured messages, over all connections")
	fs.IntVar(&cf.conns, "conns", 1, "connections")
	fs.IntVar(&cf.depth, "depth", 1, "messages in flight per connection")
	fs.BoolVar(&cf.oneway, "oneway", false, "stream messages one way, as fast as the connection takes them; the server counts them and confirms the total (api channel)")
	fs.DurationVar(&cf.replyTimeout, "reply-timeout", defaultReplyTimeout, "give up when no reply has come for this long (0: wait without limit)")
	fs.StringVar(&cf.times, "times", "", "write each measured message's send time and round-trip time to `file`, one line each, in microseconds")
	fs.BoolVar(&cf.syscalls, "syscalls", true, "count the client's system calls (on Linux, with tracefs, as root); while counted, every system call takes longer")
	cf.warmup = -1 // unset: derived from -n by check
	fs.Func("warmup", "`count` of unmeasured messages sent first (default min(1000, n/10))", func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return errors.New("not a count")
		}
		cf.warmup = v
		return nil
	})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	a, err := common.check()
	if err != nil {
		return err
	}
	if err := cf.check(); err != nil {
		return err
	}
	if cf.oneway && !a.oneway {
		return fmt.Errorf("%w: -oneway: api %s has no one-way mode", errUsage, common.api)
	}
	stop, err := common.startProfile()
	if err != nil {
		return err
	}
	defer stop()
	cfg := clientConfig{
		network: common.transport,
		addr:    common.addr,
		size:    cf.size,
		conns:   cf.conns,
		depth:   cf.depth,
		spin:    common.effectiveSpin(a, stderr),
		oneway:  cf.oneway,

		replyTimeout: cf.replyTimeout,
	}
	if cf.times != "" {
		f, err := os.Create(cf.times)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.times = f
	}
	meter := cost.Open(cost.Config{Syscalls: cf.syscalls})
	defer meter.Close()
	if err := meter.SyscallsErr(); err != nil && cf.syscalls {
		fmt.Fprintf(stderr, "echo client: system calls are not counted: %v\n", err)
	}
	s, err := runClient(ctx, a, cfg, cf.n, cf.warmup, meter, stderr)
	if err != nil {
		return err
	}
	s.api = common.api
	fmt.Fprintln(stdout, s)
	return nil
}

// check validates the client's flags and fills in the default warmup.
func (cf *clientFlags) check() error {
	switch {
	case cf.size < 1 || cf.size > maxSize:
		return fmt.Errorf("%w: -size %d is not between 1 and %d", errUsage, cf.size, maxSize)
	case cf.n < 1:
		return fmt.Errorf("%w: -n %d is not positive", errUsage, cf.n)
	case cf.conns < 1:
		return fmt.Errorf("%w: -conns %d is not positive", errUsage, cf.conns)
	case cf.depth < 1:
		return fmt.Errorf("%w: -depth %d is not positive", errUsage, cf.depth)
	case cf.replyTimeout < 0:
		return fmt.Errorf("%w: -reply-timeout %v is negative", errUsage, cf.replyTimeout)
	}
	if cf.warmup == -1 {
		cf.warmup = defaultWarmup(cf.n)
	}
	return nil
}

// defaultWarmup returns the warmup used when -warmup is not given.
func defaultWarmup(n int) int {
	return min(1000, n/10)
}

// Progress lines: one a second, from the third second of a run on.
const (
	progressInterval = time.Second
	progressQuiet    = 2 * time.Second
)

// runClient runs a's client with n measured messages after warmup ones,
// printing progress on stderr, and summarizes the run, with what the
// measured phase cost by meter if it is not nil. It cancels the client
// with an error naming the server once cfg.replyTimeout passes without a
// message recorded.
func runClient(ctx context.Context, a api, cfg clientConfig, n, warmup int, meter *cost.Meter, stderr io.Writer) (summary, error) {
	rec := newRecorder(n, warmup, meter)
	if cfg.times != nil {
		rec.keepSent()
	}
	ctx, giveUp := context.WithCancelCause(ctx)
	defer giveUp(nil)
	watchCtx, stopWatching := context.WithCancel(ctx)
	var watchers sync.WaitGroup
	watchers.Go(func() {
		rec.reportProgress(watchCtx, stderr, progressInterval, progressQuiet)
	})
	if cfg.replyTimeout > 0 {
		watchers.Go(func() {
			if rec.awaitStall(watchCtx, cfg.replyTimeout) {
				giveUp(fmt.Errorf("no reply from %s in %v: is the server running with the same -api/-oneway?", cfg.addr, cfg.replyTimeout))
			}
		})
	}
	err := a.client(ctx, cfg, rec)
	stopWatching()
	watchers.Wait()
	if err != nil {
		return summary{}, err
	}
	if cfg.times != nil {
		if err := rec.writeTimes(cfg.times); err != nil {
			return summary{}, fmt.Errorf("-times: %w", err)
		}
	}
	res, err := rec.result()
	if err != nil {
		return summary{}, err
	}
	return summary{
		transport: cfg.network,
		size:      cfg.size,
		conns:     cfg.conns,
		depth:     cfg.depth,
		warmup:    warmup,
		oneway:    cfg.oneway,
		spin:      cfg.spin,
		result:    res,
	}, nil
}

// A summary is the outcome of a client run, printed as its summary line.
type summary struct {
	transport string
	api       string
	size      int
	conns     int
	depth     int
	warmup    int
	spin      time.Duration
	oneway    bool
	result
}

// String formats s as the summary line.
func (s summary) String() string {
	rate := s.msgsPerSecond()
	line := fmt.Sprintf("transport=%s size=%d conns=%d msgs=%d p50_us=%.1f p99_us=%.1f p999_us=%.1f msgs_per_s=%.0f MBps=%.2f api=%s spin_us=%s depth=%d warmup=%d wall_s=%.3f",
		s.transport, s.size, s.conns, s.msgs,
		micros(s.p50), micros(s.p99), micros(s.p999),
		rate, rate*float64(s.size)/1e6,
		s.api, strconv.FormatFloat(micros(s.spin), 'f', -1, 64),
		s.depth, s.warmup, s.wall.Seconds())
	if s.oneway {
		line += " oneway=1"
	}
	cpu, cgo, syscalls, switches := "-", "-", "-", "-"
	if s.metered {
		per := func(x float64) float64 { return x / float64(s.msgs) }
		if s.cost.HasCPU {
			cpu = fmt.Sprintf("%.0f", per(float64(s.cost.CPU.Nanoseconds())))
			switches = fmt.Sprintf("%.2f", per(float64(s.cost.Switches)))
		}
		cgo = fmt.Sprintf("%.2f", per(float64(s.cost.Cgo)))
		if s.cost.HasSyscalls {
			syscalls = fmt.Sprintf("%.2f", per(float64(s.cost.Syscalls)))
		}
	}
	return line + " cpu_ns_per_msg=" + cpu + " cgo_per_msg=" + cgo + " syscalls_per_msg=" + syscalls + " switches_per_msg=" + switches
}

// micros returns d in microseconds.
func micros(d time.Duration) float64 {
	return float64(d) / float64(time.Microsecond)
}
