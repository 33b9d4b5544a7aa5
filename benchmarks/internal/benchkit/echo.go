package benchkit

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EchoPackage is the package of the echo command the runners measure.
const EchoPackage = "github.com/rubin-go/rubin/cmd/echo"

// An EchoSpec describes one run of the echo command: a client of one api
// over one transport, against a server of the same.
type EchoSpec struct {
	Transport string // the -transport value, such as "tcp" or "rdma"
	API       string
	Size      int
	Conns     int
	Depth     int           // messages in flight per connection; passed on when above 1
	N         int           // measured messages
	Warmup    int           // unmeasured messages; passed on when positive, else the client's default
	Spin      time.Duration // passed to server and client when positive
	Oneway    bool          // the client streams one way (echo client -oneway)
	// Syscalls has the client count its system calls. Counting makes
	// every system call slower, so a run that measures latency should
	// not; without it the client runs with -syscalls=false.
	Syscalls bool
}

// common returns the flags server and client share.
func (s EchoSpec) common() []string {
	args := []string{"-transport", s.Transport, "-api", s.API}
	if s.Spin > 0 {
		args = append(args, "-spin", s.Spin.String())
	}
	return args
}

// EchoServer starts an echo server for spec's transport, api and spin
// budget, listening on listen (HOST:PORT, port 0 for any), and returns it
// with the address it listens on.
func (l *Launcher) EchoServer(ctx context.Context, bin string, spec EchoSpec, listen string) (*Server, string, error) {
	args := append(append([]string{"server"}, spec.common()...), "-addr", listen)
	return l.StartServer(ctx, "listening on ", 10*time.Second, bin, args...)
}

// EchoClient runs an echo client for spec against addr, for at most
// timeout, and returns its summary.
func (l *Launcher) EchoClient(ctx context.Context, bin string, spec EchoSpec, addr string, timeout time.Duration) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := append(append([]string{"client"}, spec.common()...),
		"-addr", addr,
		"-size", strconv.Itoa(spec.Size),
		"-n", strconv.Itoa(spec.N),
		"-conns", strconv.Itoa(spec.Conns))
	if spec.Depth > 1 {
		args = append(args, "-depth", strconv.Itoa(spec.Depth))
	}
	if spec.Warmup > 0 {
		args = append(args, "-warmup", strconv.Itoa(spec.Warmup))
	}
	if spec.Oneway {
		args = append(args, "-oneway")
	}
	if !spec.Syscalls {
		args = append(args, "-syscalls=false")
	}
	var stdout bytes.Buffer
	stderr := NewWatcher("")
	cmd := l.Command(ctx, ClientCPU, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (after %v)", context.Cause(ctx), timeout)
		}
		return Sample{}, fmt.Errorf("client: %v: %s", err, stderr.Brief())
	}
	line := SummaryLine(stdout.String())
	if line == "" {
		return Sample{}, fmt.Errorf("client printed no summary line: %q", stdout.String())
	}
	return ParseSummary(line)
}

// RunEcho starts a server listening on listen, runs a client of spec
// against it for at most timeout, stops the server, and returns the
// client's summary. Any failure of either side fails the run.
func (l *Launcher) RunEcho(ctx context.Context, bin string, spec EchoSpec, listen string, timeout time.Duration) (Sample, error) {
	srv, addr, err := l.EchoServer(ctx, bin, spec, listen)
	if err != nil {
		return Sample{}, err
	}
	s, clientErr := l.EchoClient(ctx, bin, spec, addr, timeout)
	serverErr := srv.Stop()
	switch {
	case clientErr != nil:
		return Sample{}, clientErr
	case serverErr != nil:
		return Sample{}, fmt.Errorf("server: %v: %s", serverErr, srv.Stderr.Brief())
	}
	return s, nil
}

// A Sample is what one echo client run reported in its summary line.
type Sample struct {
	P50, P99, P999 float64 // round-trip times, in microseconds
	Rate           float64 // messages per second
	MBps           float64 // payload megabytes (10^6 bytes) per second, one way
	SpinUS         string  // the spin budget in effect, in microseconds
	Costs          Costs   // what the client process spent per message
	Line           string  // the summary line itself
}

// A Cost is a figure the summary line may not know: it says "-" where the
// client could not measure it, and an older client did not print it.
type Cost struct {
	Value float64
	Known bool
}

// Format returns c with prec decimals, or "-" if it is unknown.
func (c Cost) Format(prec int) string {
	if !c.Known {
		return "-"
	}
	return strconv.FormatFloat(c.Value, 'f', prec, 64)
}

// Costs are what the echo client process spent per measured message: CPU
// time, calls from Go to C, system calls, and context switches.
type Costs struct {
	CPUNs, Cgo, Syscalls, Switches Cost
}

// CostsHeader heads the table columns of Costs.Cells.
var CostsHeader = []string{"CPU ns/msg", "cgo/msg", "syscalls/msg", "switches/msg"}

// CostsRight aligns the columns of CostsHeader, numbers all, to the right.
var CostsRight = slices.Repeat([]bool{true}, len(CostsHeader))

// Cells returns c as table cells, under CostsHeader.
func (c Costs) Cells() []string {
	return []string{c.CPUNs.Format(0), c.Cgo.Format(2), c.Syscalls.Format(2), c.Switches.Format(2)}
}

// MedianCosts returns the median of each cost over cs; a cost is known
// only if every run knew it.
func MedianCosts(cs []Costs) Costs {
	median := func(get func(Costs) Cost) Cost {
		xs := make([]float64, len(cs))
		for i, c := range cs {
			x := get(c)
			if !x.Known {
				return Cost{}
			}
			xs[i] = x.Value
		}
		if len(xs) == 0 {
			return Cost{}
		}
		return Cost{Value: Median(xs), Known: true}
	}
	return Costs{
		CPUNs:    median(func(c Costs) Cost { return c.CPUNs }),
		Cgo:      median(func(c Costs) Cost { return c.Cgo }),
		Syscalls: median(func(c Costs) Cost { return c.Syscalls }),
		Switches: median(func(c Costs) Cost { return c.Switches }),
	}
}

// SummaryLine returns the last line of out that is a summary line.
func SummaryLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "transport=") {
			return lines[i]
		}
	}
	return ""
}

// ParseSummary parses a summary line of the echo client.
func ParseSummary(line string) (Sample, error) {
	fields := make(map[string]string)
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return Sample{}, fmt.Errorf("summary line %q: field %q is not key=value", line, f)
		}
		fields[k] = v
	}
	s := Sample{Line: line, SpinUS: fields["spin_us"]}
	for _, f := range []struct {
		key string
		dst *float64
	}{
		{"p50_us", &s.P50},
		{"p99_us", &s.P99},
		{"p999_us", &s.P999},
		{"msgs_per_s", &s.Rate},
		{"MBps", &s.MBps},
	} {
		v, ok := fields[f.key]
		if !ok {
			return Sample{}, fmt.Errorf("summary line %q has no %s", line, f.key)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return Sample{}, fmt.Errorf("summary line %q: %s: %v", line, f.key, err)
		}
		*f.dst = x
	}
	for _, f := range []struct {
		key string
		dst *Cost
	}{
		{"cpu_ns_per_msg", &s.Costs.CPUNs},
		{"cgo_per_msg", &s.Costs.Cgo},
		{"syscalls_per_msg", &s.Costs.Syscalls},
		{"switches_per_msg", &s.Costs.Switches},
	} {
		v, ok := fields[f.key]
		if !ok || v == "-" {
			continue // unknown
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || x < 0 {
			return Sample{}, fmt.Errorf("summary line %q: %s=%s is neither a count nor -", line, f.key, v)
		}
		*f.dst = Cost{Value: x, Known: true}
	}
	return s, nil
}
