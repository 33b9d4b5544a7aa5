package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

// The perftest programs, from the Debian package perftest.
const (
	latencyTool   = "ib_send_lat"
	bandwidthTool = "ib_send_bw"
)

// firstPort is the TCP or rdma_cm port of the first perftest pair; each
// pair gets the next one, so that none waits for a port its predecessor
// left behind.
const firstPort = 18515

// perftestMB is perftest's MB: its "MB/sec" are MiB per second.
const perftestMB = 1 << 20

// A perftestRunner runs perftest pairs: a server on the server CPU and a
// client on the client CPU that connects to it.
type perftestRunner struct {
	l        *benchkit.Launcher
	device   string
	addr     string
	cm       bool          // connect through rdma_cm (-R)
	attempts int           // per run
	timeout  time.Duration // bound on one client run
	port     int           // the last port used
	retried  []string      // why runs were retried
}

// latency runs ib_send_lat, retrying a run whose figures cannot be
// trusted, and returns its typical (median) and 99th percentile one-way
// latency.
func (p *perftestRunner) latency(ctx context.Context, size, iters int) (latency, error) {
	var lat latency
	err := p.retry(ctx, latencyTool, size, iters, func(server, client side) error {
		r, err := pickSide(client, server, func(s side) (latReport, error) {
			r, err := parseLatency(s.out)
			if err == nil {
				err = r.check(iters, s.wall)
			}
			return r, err
		})
		if err != nil {
			return err
		}
		lat = latency{oneWay: r.typical, p99: r.p99,
			line: fmt.Sprintf("%s size=%d iters=%d side=%s %s", latencyTool, size, iters, r.side, r.line)}
		return nil
	})
	return lat, err
}

// bandwidth runs ib_send_bw, retrying a run whose figures cannot be
// trusted, and returns its average bandwidth, as the receiver measured it
// if it could, else as the sender did.
func (p *perftestRunner) bandwidth(ctx context.Context, size, iters int) (throughput, error) {
	var bw throughput
	err := p.retry(ctx, bandwidthTool, size, iters, func(server, client side) error {
		r, err := pickSide(server, client, func(s side) (bwReport, error) {
			r, err := parseBandwidth(s.out)
			if err == nil {
				err = r.check(size, iters, s.wall)
			}
			return r, err
		})
		if err != nil {
			return err
		}
		mbps := r.avg * perftestMB / 1e6
		bw = throughput{mbps: mbps, rate: mbps * 1e6 / float64(size),
			line: fmt.Sprintf("%s size=%d iters=%d side=%s %s", bandwidthTool, size, iters, r.side, r.line)}
		return nil
	})
	return bw, err
}

// retry runs a pair of tool up to p.attempts times, until accept takes
// what the two sides printed.
func (p *perftestRunner) retry(ctx context.Context, tool string, size, iters int, accept func(server, client side) error) error {
	var err error
	for attempt := 1; attempt <= p.attempts; attempt++ {
		var server, client side
		server, client, err = p.pair(ctx, tool, size, iters)
		if err == nil {
			err = accept(server, client)
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		if attempt < p.attempts {
			p.retried = append(p.retried, fmt.Sprintf("%s size=%d attempt %d: %v", tool, size, attempt, err))
		}
	}
	return fmt.Errorf("%d attempts failed; the last: %w", p.attempts, err)
}

// A side is what one side of a perftest pair printed, and how long it ran.
type side struct {
	name string // "server" or "client"
	out  string
	wall time.Duration
}

// pair runs the server and the client of tool once.
func (p *perftestRunner) pair(ctx context.Context, tool string, size, iters int) (server, client side, err error) {
	if p.port == 0 {
		p.port = firstPort
	}
	p.port++
	args := []string{"-d", p.device, "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters), "-F", "-p", strconv.Itoa(p.port)}
	if p.cm {
		args = append(args, "-R")
	}
	began := time.Now()
	srv, _, err := p.l.StartServer(ctx, "", 0, tool, args...)
	if err != nil {
		return side{}, side{}, err
	}
	defer srv.Stop()

	// The server says nothing when it is ready (and its output is a pipe,
	// so stdio would hold it back anyway): a client that fails at once,
	// while the server runs, came too early and tries again.
	const (
		early   = 2 * time.Second        // a client failure before this is "too early"
		connect = 10 * time.Second       // how long the server may take to listen
		pause   = 150 * time.Millisecond // between tries
	)
	deadline := time.Now().Add(connect)
	for {
		time.Sleep(pause)
		if !srv.Running() {
			return side{}, side{}, fmt.Errorf("%s server exited before a client connected: %s",
				tool, perftestBrief(srv.Stdout.String()+srv.Stderr.String()))
		}
		cctx, cancel := context.WithTimeout(ctx, p.timeout)
		var out bytes.Buffer
		cmd := p.l.Command(cctx, benchkit.ClientCPU, tool, append(args, p.addr)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.WaitDelay = 5 * time.Second
		start := time.Now()
		err := cmd.Run()
		client = side{name: "client", out: out.String(), wall: time.Since(start)}
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return side{}, side{}, context.Cause(ctx)
		}
		if client.wall < early && srv.Running() && time.Now().Before(deadline) {
			continue
		}
		return side{}, side{}, fmt.Errorf("%s client: %v: %s", tool, err, perftestBrief(client.out))
	}
	if err := srv.Wait(10 * time.Second); err != nil {
		return side{}, side{}, fmt.Errorf("%s server: %v: %s", tool, err, perftestBrief(srv.Stdout.String()+srv.Stderr.String()))
	}
	server = side{name: "server", out: srv.Stdout.String() + srv.Stderr.String(), wall: time.Since(began)}
	return server, client, nil
}

// perftestBrief returns the line of perftest's output that says what went
// wrong, or its last line.
func perftestBrief(out string) string {
	var last string
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" || strings.Trim(line, "-*") == "" {
			continue
		}
		for _, word := range []string{"rror", "ouldn't", "nable", "ailed", "annot"} {
			if strings.Contains(line, word) {
				return line
			}
		}
		last = line
	}
	if last == "" {
		return "(no output)"
	}
	return last
}

// pickSide returns what parse makes of the first side's output if it
// succeeds, else of the second's, else the first side's error.
func pickSide[R interface{ setSide(string) R }](first, second side, parse func(side) (R, error)) (R, error) {
	r, err := parse(first)
	if err == nil {
		return r.setSide(first.name), nil
	}
	if r2, err2 := parse(second); err2 == nil {
		return r2.setSide(second.name), nil
	}
	return r, fmt.Errorf("%s: %w", first.name, err)
}

// A latReport is the result line of ib_send_lat, in microseconds.
type latReport struct {
	iters                       int
	min, max, typical, avg, p99 float64
	line                        string // the figures, key=value
	side                        string
}

//lint:ignore U1000 called through pickSide's type constraint
func (r latReport) setSide(s string) latReport { r.side = s; return r }

// parseLatency parses ib_send_lat's output.
func parseLatency(out string) (latReport, error) {
	f, err := resultFields(out, "t_typical", 9)
	if err != nil {
		return latReport{}, err
	}
	r := latReport{}
	if r.iters, err = strconv.Atoi(f[1]); err != nil {
		return latReport{}, fmt.Errorf("iterations %q: %v", f[1], err)
	}
	for i, dst := range []*float64{&r.min, &r.max, &r.typical, &r.avg, nil, &r.p99} {
		if dst == nil {
			continue
		}
		if *dst, err = parseFigure(f[2+i]); err != nil {
			return latReport{}, err
		}
	}
	r.line = fmt.Sprintf("t_typical=%s t_avg=%s t_min=%s t_max=%s p99=%s p999=%s", f[4], f[5], f[2], f[3], f[7], f[8])
	return r, nil
}

// check reports whether the figures make sense: all finite and positive,
// in order, and the ping-pong they describe (iters round trips of twice
// the average) no longer than the program ran.
func (r latReport) check(iters int, wall time.Duration) error {
	switch {
	case r.iters != iters:
		return fmt.Errorf("%d iterations reported, %d asked for", r.iters, iters)
	case !(r.min <= r.typical && r.typical <= r.max):
		return fmt.Errorf("t_typical %v is not between t_min %v and t_max %v", r.typical, r.min, r.max)
	}
	if loop := time.Duration(2 * r.avg * float64(iters) * float64(time.Microsecond)); loop > wall+wall/10 {
		return fmt.Errorf("t_avg %v us over %d iterations is %v of ping-pong, but the program ran %v: its clock is off",
			r.avg, iters, loop.Round(time.Millisecond), wall.Round(time.Millisecond))
	}
	return nil
}

// A bwReport is the result line of ib_send_bw, in perftest's MB/sec.
type bwReport struct {
	iters int
	avg   float64
	line  string // the figures, key=value
	side  string
}

//lint:ignore U1000 called through pickSide's type constraint
func (r bwReport) setSide(s string) bwReport { r.side = s; return r }

// parseBandwidth parses ib_send_bw's output.
func parseBandwidth(out string) (bwReport, error) {
	f, err := resultFields(out, "BW average", 5)
	if err != nil {
		return bwReport{}, err
	}
	r := bwReport{}
	if r.iters, err = strconv.Atoi(f[1]); err != nil {
		return bwReport{}, fmt.Errorf("iterations %q: %v", f[1], err)
	}
	if r.avg, err = parseFigure(f[3]); err != nil {
		return bwReport{}, err
	}
	r.line = fmt.Sprintf("bw_avg_MiBps=%s bw_peak_MiBps=%s msg_rate_Mpps=%s", f[3], f[2], f[4])
	return r, nil
}

// check reports whether the figure makes sense: finite and positive, and
// the transfer it describes no longer than the program ran.
func (r bwReport) check(size, iters int, wall time.Duration) error {
	if r.iters != iters {
		return fmt.Errorf("%d iterations reported, %d asked for", r.iters, iters)
	}
	if took := time.Duration(float64(size) * float64(iters) / (r.avg * perftestMB) * float64(time.Second)); took > wall+wall/10 {
		return fmt.Errorf("%v MB/sec for %d x %d bytes is %v of transfer, but the program ran %v: its clock is off",
			r.avg, iters, size, took.Round(time.Millisecond), wall.Round(time.Millisecond))
	}
	return nil
}

// resultFields returns the fields of the line after perftest's header
// line, the one that contains marker; it must have at least n.
func resultFields(out, marker string, n int) ([]string, error) {
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		if !strings.Contains(line, marker) {
			continue
		}
		if i+1 == len(lines) {
			break
		}
		f := strings.Fields(lines[i+1])
		if len(f) < n {
			return nil, fmt.Errorf("result line %q has %d fields, want %d", strings.TrimSpace(lines[i+1]), len(f), n)
		}
		return f, nil
	}
	return nil, fmt.Errorf("no result line (after a header with %q): %s", marker, perftestBrief(out))
}

// errNotFinite marks a figure of inf or nan.
var errNotFinite = errors.New("not a finite positive number")

// parseFigure parses one figure of perftest's, which must be finite and
// positive.
func parseFigure(s string) (float64, error) {
	x, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(x, 0) || math.IsNaN(x) || x <= 0 {
		return 0, fmt.Errorf("figure %q: %w", s, errNotFinite)
	}
	return x, nil
}
