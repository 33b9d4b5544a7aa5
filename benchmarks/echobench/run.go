package main

import (
	"context"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

// A launcher runs echo servers and clients, pinned to a CPU each when it
// can.
type launcher struct {
	*benchkit.Launcher
	bin        string        // the echo binary
	runTimeout time.Duration // bound on one client run
}

// A runSpec describes one measurement: a server and a client of one api.
type runSpec struct {
	api   string
	size  int
	conns int
	n     int
	spin  time.Duration // passed on when positive
	// syscalls has the client count its system calls.
	syscalls bool
}

// run starts a server on 127.0.0.1, runs a client against it, stops the
// server, and returns the client's summary. Any failure of either side
// fails the run.
func (l *launcher) run(ctx context.Context, spec runSpec) (benchkit.Sample, error) {
	return l.RunEcho(ctx, l.bin, benchkit.EchoSpec{
		Transport: "tcp",
		API:       spec.api,
		Size:      spec.size,
		Conns:     spec.conns,
		N:         spec.n,
		Spin:      spec.spin,
		Syscalls:  spec.syscalls,
	}, "127.0.0.1:0", l.runTimeout)
}
