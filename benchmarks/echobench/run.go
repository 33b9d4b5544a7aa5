package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A launcher starts echo processes, pinned to a CPU each when it can.
type launcher struct {
	bin        string        // the echo binary
	pin        bool          // run under taskset
	runTimeout time.Duration // bound on one client run
}

// CPUs for the two sides when pinned: like two hosts, each with its own CPU.
const (
	serverCPU = "1"
	clientCPU = "0"
)

// checkTaskset reports whether taskset can pin processes to both CPUs, and
// why not if it cannot.
func checkTaskset(ctx context.Context) error {
	if _, err := exec.LookPath("taskset"); err != nil {
		return err
	}
	for _, cpu := range []string{serverCPU, clientCPU} {
		out, err := exec.CommandContext(ctx, "taskset", "-c", cpu, "true").CombinedOutput()
		if err != nil {
			return fmt.Errorf("taskset -c %s true: %v: %s", cpu, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// command returns the command that runs the echo binary with args, on cpu
// if l pins.
func (l *launcher) command(ctx context.Context, cpu string, args ...string) *exec.Cmd {
	if l.pin {
		return exec.CommandContext(ctx, "taskset", append([]string{"-c", cpu, l.bin}, args...)...)
	}
	return exec.CommandContext(ctx, l.bin, args...)
}

// A runSpec describes one measurement: a server and a client of one api.
type runSpec struct {
	api   string
	size  int
	conns int
	n     int
	spin  time.Duration // passed on when positive
}

// run starts a server, runs a client against it, stops the server, and
// returns the client's summary. Any failure of either side fails the run.
func (l *launcher) run(ctx context.Context, spec runSpec) (sample, error) {
	common := []string{"-transport", "tcp", "-api", spec.api}
	if spec.spin > 0 {
		common = append(common, "-spin", spec.spin.String())
	}

	srvOut := newWatcher("listening on ")
	srvErr := newWatcher("")
	srv := l.command(context.WithoutCancel(ctx), serverCPU,
		append(append([]string{"server"}, common...), "-addr", "127.0.0.1:0")...)
	srv.Stdout, srv.Stderr = srvOut, srvErr
	if err := srv.Start(); err != nil {
		return sample{}, fmt.Errorf("start server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()

	var addr string
	select {
	case addr = <-srvOut.found:
	case err := <-exited:
		return sample{}, fmt.Errorf("server exited before listening (%v): %s", err, srvErr.brief())
	case <-time.After(10 * time.Second):
		stopProcess(srv, exited)
		return sample{}, fmt.Errorf("server did not listen within 10s: %s", srvErr.brief())
	case <-ctx.Done():
		stopProcess(srv, exited)
		return sample{}, context.Cause(ctx)
	}

	s, clientErr := l.client(ctx, spec, common, addr)
	serverErr := stopProcess(srv, exited)
	switch {
	case clientErr != nil:
		return sample{}, clientErr
	case serverErr != nil:
		return sample{}, fmt.Errorf("server: %v: %s", serverErr, srvErr.brief())
	}
	return s, nil
}

// client runs the client side of spec against addr.
func (l *launcher) client(ctx context.Context, spec runSpec, common []string, addr string) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, l.runTimeout)
	defer cancel()
	args := append(append([]string{"client"}, common...),
		"-addr", addr,
		"-size", strconv.Itoa(spec.size),
		"-n", strconv.Itoa(spec.n),
		"-conns", strconv.Itoa(spec.conns))
	var stdout bytes.Buffer
	stderr := newWatcher("")
	cmd := l.command(ctx, clientCPU, args...)
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (after %v)", context.Cause(ctx), l.runTimeout)
		}
		return sample{}, fmt.Errorf("client: %v: %s", err, stderr.brief())
	}
	line := summaryLine(stdout.String())
	if line == "" {
		return sample{}, fmt.Errorf("client printed no summary line: %q", stdout.String())
	}
	return parseSummary(line)
}

// stopProcess interrupts a server and waits for it to exit, killing it if it
// takes more than five seconds. It returns the server's exit error, which is
// nil if the server stopped cleanly on the interrupt.
func stopProcess(cmd *exec.Cmd, exited <-chan error) error {
	if err := cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		cmd.Process.Kill()
	}
	select {
	case err := <-exited:
		return err
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-exited
		return errors.New("did not stop within 5s of an interrupt; killed")
	}
}

// A watcher is the standard output or error of an echo process. It keeps
// the first lines written, for error messages, and sends the rest of the
// first line that begins with its prefix on found. It is safe for the
// concurrent use os/exec makes of it.
type watcher struct {
	prefix string
	found  chan string

	mu      sync.Mutex
	partial []byte
	lines   []string
	sent    bool
}

const watcherKeep = 50 // lines kept

func newWatcher(prefix string) *watcher {
	return &watcher{prefix: prefix, found: make(chan string, 1)}
}

func (w *watcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		if w.prefix != "" && !w.sent {
			if rest, ok := strings.CutPrefix(line, w.prefix); ok {
				w.found <- strings.TrimSpace(rest)
				w.sent = true
			}
		}
		if len(w.lines) < watcherKeep {
			w.lines = append(w.lines, line)
		}
	}
	return len(p), nil
}

// brief returns the first line of output that says what went wrong:
// progress lines are skipped, and lines from the echo command or a panic
// are preferred.
func (w *watcher) brief() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := append(slices.Clone(w.lines), string(w.partial))
	var first string
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "progress:") {
			continue
		}
		if strings.HasPrefix(line, "echo") || strings.HasPrefix(line, "panic") || strings.HasPrefix(line, "fatal") {
			return line
		}
		if first == "" {
			first = line
		}
	}
	if first == "" {
		return "(no output)"
	}
	return first
}

// A sample is what one client run reported in its summary line.
type sample struct {
	p50, p99, p999 float64 // round-trip times, in microseconds
	rate           float64 // messages per second
	mbps           float64 // payload megabytes per second, one way
	spinUS         string  // the spin budget in effect, in microseconds
	line           string  // the summary line itself
}

// summaryLine returns the last line of out that is a summary line.
func summaryLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "transport=") {
			return lines[i]
		}
	}
	return ""
}

// parseSummary parses a summary line of the echo client.
func parseSummary(line string) (sample, error) {
	fields := make(map[string]string)
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return sample{}, fmt.Errorf("summary line %q: field %q is not key=value", line, f)
		}
		fields[k] = v
	}
	s := sample{line: line, spinUS: fields["spin_us"]}
	for _, f := range []struct {
		key string
		dst *float64
	}{
		{"p50_us", &s.p50},
		{"p99_us", &s.p99},
		{"p999_us", &s.p999},
		{"msgs_per_s", &s.rate},
		{"MBps", &s.mbps},
	} {
		v, ok := fields[f.key]
		if !ok {
			return sample{}, fmt.Errorf("summary line %q has no %s", line, f.key)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return sample{}, fmt.Errorf("summary line %q: %s: %v", line, f.key, err)
		}
		*f.dst = x
	}
	return s, nil
}
