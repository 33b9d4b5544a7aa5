package benchkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// CPUs for the two sides when pinned: like two hosts, each with its own CPU.
const (
	ServerCPU = "1"
	ClientCPU = "0"
)

// CheckTaskset reports whether taskset can pin processes to both CPUs, and
// why not if it cannot.
func CheckTaskset(ctx context.Context) error {
	if _, err := exec.LookPath("taskset"); err != nil {
		return err
	}
	for _, cpu := range []string{ServerCPU, ClientCPU} {
		out, err := exec.CommandContext(ctx, "taskset", "-c", cpu, "true").CombinedOutput()
		if err != nil {
			return fmt.Errorf("taskset -c %s true: %v: %s", cpu, err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// A Launcher starts processes, pinned to a CPU each when Pin is set.
type Launcher struct {
	Pin bool // run under taskset
}

// Pinned returns a Launcher that pins if taskset can, and a sentence that
// says where processes will run, for reports: "UNPINNED: ..." if they
// cannot be pinned.
func Pinned(ctx context.Context) (*Launcher, string) {
	if err := CheckTaskset(ctx); err != nil {
		return &Launcher{}, fmt.Sprintf("UNPINNED: taskset cannot pin here (%v); figures may swing between runs", err)
	}
	return &Launcher{Pin: true}, fmt.Sprintf("server pinned to CPU %s, client to CPU %s (taskset)", ServerCPU, ClientCPU)
}

// Command returns the command that runs bin with args, on cpu if l pins.
func (l *Launcher) Command(ctx context.Context, cpu, bin string, args ...string) *exec.Cmd {
	if l.Pin {
		return exec.CommandContext(ctx, "taskset", append([]string{"-c", cpu, bin}, args...)...)
	}
	return exec.CommandContext(ctx, bin, args...)
}

// A Server is a process started in the background: an echo server, or the
// server side of a perftest pair.
type Server struct {
	Stdout, Stderr *Watcher
	cmd            *exec.Cmd
	exited         chan error
}

// StartServer starts bin with args on ServerCPU. If ready is not empty, it
// waits, for at most wait, until the server prints a line that begins with
// ready on its standard output, and returns the rest of that line; a server
// that exits or does not print it in time is stopped and is an error. The
// server is not bound to ctx: Stop it.
func (l *Launcher) StartServer(ctx context.Context, ready string, wait time.Duration, bin string, args ...string) (*Server, string, error) {
	s := &Server{Stdout: NewWatcher(ready), Stderr: NewWatcher(""), exited: make(chan error, 1)}
	s.cmd = l.Command(context.WithoutCancel(ctx), ServerCPU, bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.Stdout, s.Stderr
	if err := s.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start server: %w", err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	if ready == "" {
		return s, "", nil
	}
	select {
	case rest := <-s.Stdout.Found():
		return s, rest, nil
	case err := <-s.exited:
		s.exited <- err
		return nil, "", fmt.Errorf("server exited before listening (%v): %s", err, s.Stderr.Brief())
	case <-time.After(wait):
		s.Stop()
		return nil, "", fmt.Errorf("server did not listen within %v: %s", wait, s.Stderr.Brief())
	case <-ctx.Done():
		s.Stop()
		return nil, "", context.Cause(ctx)
	}
}

// Stop interrupts the server and waits for it to exit, killing it if it
// takes more than five seconds. It returns the server's exit error, which
// is nil if the server stopped cleanly on the interrupt or had exited
// cleanly before. Stop may be called more than once.
func (s *Server) Stop() error {
	return StopProcess(s.cmd, s.exited)
}

// Pid returns the server's process id. Under taskset it is the server's
// own, since taskset executes the server in its place.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Running reports whether the server has not exited yet.
func (s *Server) Running() bool {
	select {
	case err := <-s.exited:
		s.exited <- err
		return false
	default:
		return true
	}
}

// Wait waits at most d for the server to exit on its own, and then stops
// it. It returns the exit error, or an error saying it had to be stopped.
func (s *Server) Wait(d time.Duration) error {
	select {
	case err := <-s.exited:
		s.exited <- err
		return err
	case <-time.After(d):
		s.Stop()
		return fmt.Errorf("did not exit within %v; stopped", d)
	}
}

// StopProcess interrupts a process and waits for it to exit, killing it if
// it takes more than five seconds. exited delivers the result of cmd.Wait;
// StopProcess puts it back, so that it may be called again. It returns the
// process's exit error, which is nil if it stopped cleanly on the interrupt.
func StopProcess(cmd *exec.Cmd, exited chan error) error {
	select {
	case err := <-exited:
		exited <- err
		return err
	default:
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil && !errors.Is(err, os.ErrProcessDone) {
		cmd.Process.Kill()
	}
	select {
	case err := <-exited:
		exited <- err
		return err
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		exited <- <-exited
		return errors.New("did not stop within 5s of an interrupt; killed")
	}
}

// A Watcher is the standard output or error of a process. It keeps the
// first lines written, for error messages and parsing, and sends the rest
// of the first line that begins with its prefix on Found. It is safe for
// the concurrent use os/exec makes of it.
type Watcher struct {
	prefix string
	found  chan string

	mu      sync.Mutex
	partial []byte
	lines   []string
	last    string // the last non-empty line, kept or not
	sent    bool
}

// watcherKeep is how many lines a Watcher keeps: all of a perftest report.
const watcherKeep = 200

// NewWatcher returns a Watcher that looks for lines beginning with prefix,
// or for none if prefix is empty.
func NewWatcher(prefix string) *Watcher {
	return &Watcher{prefix: prefix, found: make(chan string, 1)}
}

// Found delivers the rest of the first line that begins with the prefix,
// trimmed.
func (w *Watcher) Found() <-chan string { return w.found }

func (w *Watcher) Write(p []byte) (int, error) {
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
		if strings.TrimSpace(line) != "" {
			w.last = line
		}
		if len(w.lines) < watcherKeep {
			w.lines = append(w.lines, line)
		}
	}
	return len(p), nil
}

// String returns the lines kept, and any unfinished last line.
func (w *Watcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	for _, line := range w.lines {
		b.WriteString(line + "\n")
	}
	b.Write(w.partial)
	return b.String()
}

// Last returns the last non-empty line written (an unfinished one too),
// trimmed: what a process that exited said last, usually why.
func (w *Watcher) Last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := strings.TrimSpace(string(w.partial)); p != "" {
		return p
	}
	return strings.TrimSpace(w.last)
}

// Brief returns the first line of output that says what went wrong:
// progress lines are skipped, and lines from the echo command or a panic
// are preferred.
func (w *Watcher) Brief() string {
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
