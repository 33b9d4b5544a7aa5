package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"time"

	"github.com/rubin-go/rubin/transport/rdma"
)

// A demoRun is one client run of the demo.
type demoRun struct {
	size int
	n    int
}

// demoRuns are the demo's runs for each api and transport: a few sizes,
// each with a message count that keeps the whole demo within seconds.
var demoRuns = []demoRun{
	{size: 64, n: 20000},
	{size: 1 << 10, n: 20000},
	{size: 16 << 10, n: 10000},
	{size: 100 << 10, n: 5000},
}

// quickRuns returns runs with a tenth of the messages each.
func quickRuns(runs []demoRun) []demoRun {
	quick := make([]demoRun, len(runs))
	for i, r := range runs {
		quick[i] = demoRun{size: r.size, n: max(1, r.n/10)}
	}
	return quick
}

// demoConfig says what the demo runs.
type demoConfig struct {
	// ip is the address the servers listen on: 127.0.0.1, or with rdma
	// the RDMA device's, which TCP then uses too.
	ip string
	// rdma adds, after each api's TCP rows, its rows over RDMA, for the
	// apis that have it.
	rdma bool
	// runs are the client runs for each api and transport.
	runs []demoRun
}

// runDemoCommand parses the flags of "echo demo" and runs it.
func runDemoCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	rdmaIP := fs.String("rdma", "", "also run the apis that have RDMA over it, on the RDMA device with this `IP` address; TCP then uses it too")
	quick := fs.Bool("quick", false, "a tenth of the messages, for slow machines such as an emulated one")
	var prof commonFlags
	fs.StringVar(&prof.profile, "cpuprofile", "", "write a CPU profile of the whole demo to `file`")
	fs.StringVar(&prof.trace, "trace", "", "write an execution trace (runtime/trace, for go tool trace) of the whole demo to `file`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	stop, err := prof.startProfile()
	if err != nil {
		return err
	}
	defer stop()
	cfg := demoConfig{ip: "127.0.0.1", runs: demoRuns}
	if *quick {
		cfg.runs = quickRuns(demoRuns)
	}
	if *rdmaIP != "" {
		if net.ParseIP(*rdmaIP) == nil {
			return fmt.Errorf("%w: -rdma %q is not an IP address", errUsage, *rdmaIP)
		}
		cfg.ip, cfg.rdma = *rdmaIP, true
	}
	return runDemo(ctx, cfg, stdout, stderr)
}

// runDemo runs a server and a client of every registered api in this
// process, over TCP and, if cfg.rdma, then over RDMA for the apis that
// have it, and prints a row per run as it finishes. Only one server runs
// at a time. It fails if any run failed, after trying them all; with
// cfg.rdma it fails before running anything if this machine cannot run
// RDMA.
func runDemo(ctx context.Context, cfg demoConfig, stdout, stderr io.Writer) error {
	networks := []string{"tcp"}
	if cfg.rdma {
		if err := checkRDMA(); err != nil {
			return err
		}
		networks = append(networks, "rdma")
	}
	fmt.Fprintf(stdout, "echo demo: server and client in this process on %s, %s, 1 connection, 1 message in flight\n",
		cfg.ip, strings.Join(networks, " and "))
	fmt.Fprintln(stdout, "round-trip times in microseconds; MB/s counts the payload one way")
	fmt.Fprintln(stdout)
	const rowFormat = "%-8s %-9s %8s %10s %10s %10s %10s\n"
	fmt.Fprintf(stdout, rowFormat, "api", "transport", "size", "p50 us", "p99 us", "msgs/s", "MB/s")
	var failed []string
	for _, name := range apiNames() {
		a := apis[name]
		for _, network := range networks {
			if a.check != nil && a.check(network) != nil {
				continue // gonet is Go's net package: TCP only
			}
			err := demoAPI(ctx, name, a, network, cfg, stderr, func(s summary) {
				rate := s.msgsPerSecond()
				fmt.Fprintf(stdout, rowFormat, name, network, formatSize(s.size),
					fmt.Sprintf("%.1f", micros(s.p50)), fmt.Sprintf("%.1f", micros(s.p99)),
					fmt.Sprintf("%.0f", rate), fmt.Sprintf("%.2f", rate*float64(s.size)/1e6))
			})
			if err != nil {
				fmt.Fprintf(stdout, "%-8s %-9s failed: %v\n", name, network, err)
				failed = append(failed, name+" over "+network)
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("demo failed for %s", strings.Join(failed, ", "))
	}
	return nil
}

// checkRDMA opens the RDMA transport and closes it again: it fails with
// rdma.ErrNotSupported where the module was built without RDMA, and with
// rdma.ErrNoDevice where rdma-core finds no device.
func checkRDMA() error {
	tr, err := rdma.New(rdma.Config{})
	if err != nil {
		return fmt.Errorf("-rdma: %w", err)
	}
	return tr.Close()
}

// demoAPI starts a server of a over network on a free port of cfg.ip, runs
// cfg.runs against it, reporting each with row, and stops the server.
func demoAPI(ctx context.Context, name string, a api, network string, cfg demoConfig, stderr io.Writer, row func(summary)) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan net.Addr, 1)
	stopped := make(chan struct{})
	var serveErr error
	go func() {
		defer close(stopped)
		serveErr = a.serve(ctx, serverConfig{
			network: network,
			addr:    net.JoinHostPort(cfg.ip, "0"),
			ready:   func(addr net.Addr) { ready <- addr },
			log:     log.New(stderr, "echo demo: "+name+" "+network+" server: ", 0),
		})
	}()
	defer func() {
		cancel()
		<-stopped
		if serveErr != nil && err == nil {
			err = fmt.Errorf("server: %w", serveErr)
		}
	}()

	var addr net.Addr
	select {
	case addr = <-ready:
	case <-stopped:
		if serveErr == nil {
			return errors.New("server stopped before listening")
		}
		return fmt.Errorf("server: %w", serveErr)
	case <-time.After(10 * time.Second):
		return errors.New("server did not listen within 10s")
	}

	for _, r := range cfg.runs {
		ccfg := clientConfig{
			network: network,
			addr:    addr.String(),
			size:    r.size,
			conns:   1,
			depth:   1,

			replyTimeout: defaultReplyTimeout,
		}
		// No progress lines: the rows are the demo's progress. No costs:
		// the demo shows none, and counting system calls slows them.
		s, err := runClient(ctx, a, ccfg, r.n, defaultWarmup(r.n), nil, io.Discard)
		if err != nil {
			return fmt.Errorf("size %s: %w", formatSize(r.size), err)
		}
		s.api = name
		row(s)
	}
	return nil
}

// formatSize writes a byte count the short way: 64 B, 1 KiB, 100 KiB.
func formatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
