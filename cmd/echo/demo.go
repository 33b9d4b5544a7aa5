package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"time"
)

// A demoRun is one client run of the demo.
type demoRun struct {
	size int
	n    int
}

// demoRuns are the demo's runs for each api: a few sizes, each with a
// message count that keeps the whole demo within seconds.
var demoRuns = []demoRun{
	{size: 64, n: 20000},
	{size: 1 << 10, n: 20000},
	{size: 16 << 10, n: 10000},
	{size: 100 << 10, n: 5000},
}

// runDemo runs a server and a client of every registered api in this
// process over 127.0.0.1 and prints a row per run as it finishes. It fails
// if any run failed, after trying them all.
func runDemo(ctx context.Context, stdout, stderr io.Writer) error {
	fmt.Fprintln(stdout, "echo demo: server and client in this process on 127.0.0.1, tcp, 1 connection, 1 message in flight")
	fmt.Fprintln(stdout, "round-trip times in microseconds; MB/s counts the payload one way")
	fmt.Fprintln(stdout)
	const rowFormat = "%-8s %8s %10s %10s %10s %10s\n"
	fmt.Fprintf(stdout, rowFormat, "api", "size", "p50 us", "p99 us", "msgs/s", "MB/s")
	var failed []string
	for _, name := range apiNames() {
		err := demoAPI(ctx, name, apis[name], stderr, func(s summary) {
			rate := s.msgsPerSecond()
			fmt.Fprintf(stdout, rowFormat, name, formatSize(s.size),
				fmt.Sprintf("%.1f", micros(s.p50)), fmt.Sprintf("%.1f", micros(s.p99)),
				fmt.Sprintf("%.0f", rate), fmt.Sprintf("%.2f", rate*float64(s.size)/1e6))
		})
		if err != nil {
			fmt.Fprintf(stdout, "%-8s failed: %v\n", name, err)
			failed = append(failed, name)
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("demo failed for api %v", failed)
	}
	return nil
}

// demoAPI starts a server of a on a free port of 127.0.0.1, runs the demo's
// client runs against it, reporting each with row, and stops the server.
func demoAPI(ctx context.Context, name string, a api, stderr io.Writer, row func(summary)) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan net.Addr, 1)
	stopped := make(chan struct{})
	var serveErr error
	go func() {
		defer close(stopped)
		serveErr = a.serve(ctx, serverConfig{
			network: "tcp",
			addr:    "127.0.0.1:0",
			ready:   func(addr net.Addr) { ready <- addr },
			log:     log.New(stderr, "echo demo: "+name+" server: ", 0),
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

	for _, r := range demoRuns {
		cfg := clientConfig{
			network: "tcp",
			addr:    addr.String(),
			size:    r.size,
			conns:   1,
			depth:   1,
		}
		s, err := runClient(ctx, a, cfg, r.n, defaultWarmup(r.n), stderr)
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
