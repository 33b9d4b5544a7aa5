package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/internal/cost"
	"github.com/rubin-go/rubin/internal/rdmatest"
)

// lineWriter is an io.Writer, safe for concurrent use, that keeps what is
// written and passes each complete line to a channel.
type lineWriter struct {
	mu      sync.Mutex
	text    strings.Builder
	partial string
	lines   chan string
}

func newLineWriter() *lineWriter {
	return &lineWriter{lines: make(chan string, 1000)}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text.Write(p)
	w.partial += string(p)
	for {
		i := strings.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		select {
		case w.lines <- w.partial[:i]:
		default:
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.text.String()
}

// waitLine returns the text after prefix on the first line written to w
// that starts with prefix.
func (w *lineWriter) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line := <-w.lines:
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				return rest
			}
		case <-timeout:
			t.Fatalf("no line starting with %q within 10s; output so far:\n%s", prefix, w)
		}
	}
}

// startServer runs "echo server" with args in the background until the test
// ends, and returns the address it listens on and its standard error.
func startServer(t *testing.T, args ...string) (string, *lineWriter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := newLineWriter(), newLineWriter()
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, append([]string{"server"}, args...), stdout, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != exitOK {
			t.Errorf("server exited with status %d; stderr:\n%s", code, stderr)
		}
	})
	return stdout.waitLine(t, "listening on "), stderr
}

// summaryKeys are the leading keys of the summary line, in their order.
var summaryKeys = []string{"transport", "size", "conns", "msgs", "p50_us", "p99_us", "p999_us", "msgs_per_s", "MBps", "api", "spin_us"}

// parseSummary checks that line is a summary line and returns its fields.
func parseSummary(t *testing.T, line string) map[string]string {
	t.Helper()
	fields := strings.Fields(line)
	if len(fields) < len(summaryKeys) {
		t.Fatalf("summary line %q has %d fields, want at least %d", line, len(fields), len(summaryKeys))
	}
	m := make(map[string]string)
	for i, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("summary field %q is not key=value", f)
		}
		if i < len(summaryKeys) && k != summaryKeys[i] {
			t.Fatalf("summary field %d is %q, want %q, in %q", i, k, summaryKeys[i], line)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("summary key %q appears twice in %q", k, line)
		}
		m[k] = v
	}
	for _, k := range summaryKeys[4:9] {
		if _, err := strconv.ParseFloat(m[k], 64); err != nil {
			t.Fatalf("summary field %s=%q is not a number", k, m[k])
		}
	}
	for _, k := range costKeys {
		v, ok := m[k]
		if !ok {
			t.Fatalf("summary line %q has no %s", line, k)
		}
		if x, err := strconv.ParseFloat(v, 64); v != "-" && (err != nil || x < 0) {
			t.Fatalf("summary field %s=%q is neither a count nor -", k, v)
		}
	}
	return m
}

// costKeys are the keys of the client's costs per message.
var costKeys = []string{"cpu_ns_per_msg", "cgo_per_msg", "syscalls_per_msg"}

// checkCosts checks the costs of a summary line m that the client printed
// with stderr, counting system calls unless told not to: CPU time spent,
// and system calls counted, or stderr saying why not. It returns the cgo
// calls per message.
func checkCosts(t *testing.T, m map[string]string, stderr string, syscalls bool) float64 {
	t.Helper()
	if cpu, err := strconv.ParseFloat(m["cpu_ns_per_msg"], 64); err != nil || cpu <= 0 {
		t.Errorf("cpu_ns_per_msg=%s, want CPU time spent", m["cpu_ns_per_msg"])
	}
	cgo, err := strconv.ParseFloat(m["cgo_per_msg"], 64)
	if err != nil {
		t.Errorf("cgo_per_msg=%s, want a count", m["cgo_per_msg"])
	}
	notCounted := strings.Contains(stderr, "system calls are not counted")
	sys := m["syscalls_per_msg"]
	switch {
	case !syscalls && (sys != "-" || notCounted):
		t.Errorf("-syscalls=false, and syscalls_per_msg=%s; stderr:\n%s", sys, stderr)
	case syscalls && notCounted && sys != "-":
		t.Errorf("syscalls_per_msg=%s, and stderr says they are not counted:\n%s", sys, stderr)
	case syscalls && !notCounted:
		// Every echo takes a system call or more, on one side or the other
		// of this process.
		if x, err := strconv.ParseFloat(sys, 64); err != nil || x <= 0 {
			t.Errorf("syscalls_per_msg=%s, and stderr does not say why they were not counted:\n%s", sys, stderr)
		}
	}
	return cgo
}

func TestGoNetEcho(t *testing.T) {
	addr, _ := startServer(t, "-api", "gonet", "-addr", "127.0.0.1:0")
	for _, c := range []struct {
		name                  string
		size, n, conns, depth int
	}{
		{name: "one conn", size: 64, n: 2000, conns: 1, depth: 1},
		{name: "odd size, several conns", size: 1001, n: 3000, conns: 7, depth: 1},
		{name: "pipelined", size: 4096, n: 2000, conns: 3, depth: 4},
		{name: "large", size: 200 << 10, n: 50, conns: 2, depth: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := []string{"client", "-transport", "tcp", "-api", "gonet", "-addr", addr,
				"-size", strconv.Itoa(c.size), "-n", strconv.Itoa(c.n),
				"-conns", strconv.Itoa(c.conns), "-depth", strconv.Itoa(c.depth)}
			if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
				t.Fatalf("client exited with status %d; stderr:\n%s", code, &stderr)
			}
			out := strings.TrimSuffix(stdout.String(), "\n")
			if strings.Contains(out, "\n") {
				t.Fatalf("client printed more than one line:\n%s", out)
			}
			m := parseSummary(t, out)
			want := map[string]string{
				"transport": "tcp", "api": "gonet", "spin_us": "0",
				"size": strconv.Itoa(c.size), "conns": strconv.Itoa(c.conns),
				"msgs": strconv.Itoa(c.n), "depth": strconv.Itoa(c.depth),
			}
			for k, v := range want {
				if m[k] != v {
					t.Errorf("%s=%q, want %q", k, m[k], v)
				}
			}
			p50, _ := strconv.ParseFloat(m["p50_us"], 64)
			p99, _ := strconv.ParseFloat(m["p99_us"], 64)
			p999, _ := strconv.ParseFloat(m["p999_us"], 64)
			rate, _ := strconv.ParseFloat(m["msgs_per_s"], 64)
			if !(0 < p50 && p50 <= p99 && p99 <= p999) || rate <= 0 {
				t.Errorf("implausible figures in %q", out)
			}
		})
	}
}

// brokenEcho serves the echo protocol wrongly on ln, in the way corrupt
// does: it gets each message of size bytes, and the message before it (nil
// for the first), and returns what to send back.
func brokenEcho(t *testing.T, ln net.Listener, size int, corrupt func(msg, prev []byte) []byte) {
	t.Helper()
	serveConns(t, ln, func(c net.Conn) {
		var prev []byte
		for {
			msg := make([]byte, size)
			if _, err := io.ReadFull(c, msg); err != nil {
				return
			}
			if _, err := c.Write(corrupt(msg, prev)); err != nil {
				return
			}
			prev = msg
		}
	})
}

// serveConns runs handle on every connection ln accepts, each on a
// goroutine of its own, and closes the connection after it; the test's
// cleanup closes ln and waits for them all.
func serveConns(t *testing.T, ln net.Listener, handle func(c net.Conn)) {
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
}

func TestClientRejectsWrongEcho(t *testing.T) {
	const size = 256
	for _, c := range []struct {
		name    string
		corrupt func(msg, prev []byte) []byte
	}{
		{"flipped bit", func(msg, prev []byte) []byte {
			if prev != nil {
				msg[size/2] ^= 4
			}
			return msg
		}},
		{"stale echo", func(msg, prev []byte) []byte {
			if prev != nil {
				return prev
			}
			return msg
		}},
		{"zeroed tail", func(msg, prev []byte) []byte {
			if prev != nil {
				clear(msg[size-3:])
			}
			return msg
		}},
	} {
		for _, depth := range []int{1, 3} {
			t.Run(c.name+"/depth "+strconv.Itoa(depth), func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				brokenEcho(t, ln, size, c.corrupt)
				cfg := clientConfig{network: "tcp", addr: ln.Addr().String(), size: size, conns: 2, depth: depth}
				_, err = runClient(context.Background(), apis[baselineAPI], cfg, 100, 0, nil, io.Discard)
				var perr *payloadError
				if !errors.As(err, &perr) {
					t.Fatalf("client error = %v, want a payload error", err)
				}
				if !strings.Contains(err.Error(), "connection ") || !strings.Contains(err.Error(), "is wrong at byte") {
					t.Errorf("error %q does not say which connection and byte", err)
				}
			})
		}
	}
}

func TestClientStopsOnCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	brokenEcho(t, ln, 64, func(msg, prev []byte) []byte {
		if prev != nil {
			return msg[:10] // the client waits for the rest until canceled
		}
		return msg
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cfg := clientConfig{network: "tcp", addr: ln.Addr().String(), size: 64, conns: 1, depth: 1}
	_, err = runClient(ctx, apis[baselineAPI], cfg, 100, 0, nil, io.Discard)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("client error = %v, want the context's deadline", err)
	}
}

func TestServerStopsWithOpenConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- apis[baselineAPI].serve(ctx, serverConfig{
			network: "tcp",
			addr:    "127.0.0.1:0",
			ready:   func(a net.Addr) { ready <- a },
			log:     log.New(io.Discard, "", 0),
		})
	}()
	addr := <-ready
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo = %q, %v", buf, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v after cancellation, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return after cancellation with a connection open")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("connection still open after the server stopped: read %d bytes", n)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, "unknown command"},
		{[]string{"client", "-api", "gonet"}, "-addr is required"},
		{[]string{"client", "-api", "gonet", "-addr", "127.0.0.1:1", "-size", "0"}, "-size 0"},
		{[]string{"client", "-api", "gonet", "-addr", "127.0.0.1:1", "-n", "-5"}, "-n -5"},
		{[]string{"client", "-api", "gonet", "-addr", "127.0.0.1:1", "-conns", "0"}, "-conns 0"},
		{[]string{"client", "-api", "gonet", "-addr", "127.0.0.1:1", "-depth", "0"}, "-depth 0"},
		{[]string{"client", "-api", "gonet", "-addr", "127.0.0.1:1", "-warmup", "-1"}, `invalid value "-1" for flag -warmup`},
		{[]string{"client", "-api", "gonet", "-addr", "127.0.0.1:1", "-reply-timeout", "-1s"}, "-reply-timeout -1s is negative"},
		{[]string{"client", "-api", "nosuch", "-addr", "127.0.0.1:1"}, `unknown api "nosuch"`},
		{[]string{"server", "-api", "nosuch"}, `unknown api "nosuch"`},
		{[]string{"server", "-api", "gonet", "-spin", "-1s"}, "-spin -1s is negative"},
		{[]string{"server", "-nosuchflag"}, "flag provided but not defined"},
		{[]string{"server", "-api", "gonet", "extra"}, "unexpected argument"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), c.args, &stdout, &stderr)
		if code != exitUsage {
			t.Errorf("%q: exit status %d, want %d", c.args, code, exitUsage)
		}
		if !strings.Contains(stderr.String(), c.want) || !strings.Contains(stderr.String(), "usage:") {
			t.Errorf("%q: stderr %q does not contain %q and the usage", c.args, &stderr, c.want)
		}
	}
}

func TestRuntimeErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	taken := ln.Addr().String()
	ln.Close()
	// The port is free now, nothing listens: dialing it is refused.
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"client", "-api", "gonet", "-addr", taken}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "dial") {
		t.Errorf("client to a closed port: status %d, stderr %q; want %d and a dial error", code, &stderr, exitFailure)
	}

	addr, _ := startServer(t, "-api", "gonet")
	stderr.Reset()
	code = run(context.Background(), []string{"server", "-api", "gonet", "-addr", addr}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "in use") {
		t.Errorf("server on a taken port: status %d, stderr %q; want %d and an address in use", code, &stderr, exitFailure)
	}
}

func TestSpinIgnoredByGoNet(t *testing.T) {
	addr, _ := startServer(t, "-api", "gonet", "-spin", "50us")
	var stdout, stderr bytes.Buffer
	args := []string{"client", "-api", "gonet", "-addr", addr, "-n", "100", "-spin", "50us"}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("client exited with status %d; stderr:\n%s", code, &stderr)
	}
	if m := parseSummary(t, strings.TrimSpace(stdout.String())); m["spin_us"] != "0" {
		t.Errorf("spin_us=%s for an api without spinning, want 0", m["spin_us"])
	}
	if !strings.Contains(stderr.String(), "ignoring -spin") {
		t.Errorf("no warning about the ignored -spin in %q", &stderr)
	}
}

func TestMetricsEndpoint(t *testing.T) {
	for _, api := range []string{"gonet", "channel", "conn"} {
		t.Run(api, func(t *testing.T) {
			addr, stderr := startServer(t, "-api", api, "-metrics-addr", "127.0.0.1:0")
			url := strings.TrimSpace(stderr.waitLine(t, "echo server: metrics on "))
			if api != "gonet" {
				// Traffic first, so the transport counters have something to show.
				out := newLineWriter()
				if code := run(context.Background(), []string{"client", "-api", api, "-addr", addr, "-n", "50", "-size", "64"}, out, io.Discard); code != 0 {
					t.Fatalf("client exited %d", code)
				}
			}
			resp, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s", url, resp.Status)
			}
			want := `rubin_transport_messages_received_total{stack="` + api + `"}`
			if api != "gonet" && !strings.Contains(string(body), want) {
				t.Errorf("metrics lack %s:\n%s", want, body)
			}
		})
	}
}

func TestSummaryLineFormat(t *testing.T) {
	s := summary{
		transport: "tcp", api: "conn", size: 64, conns: 1, depth: 1, warmup: 1000,
		result: result{
			msgs: 10000,
			p50:  12345 * time.Nanosecond, p99: 45600 * time.Nanosecond, p999: 78900 * time.Nanosecond,
			wall: 810 * time.Millisecond,
		},
	}
	const want = "transport=tcp size=64 conns=1 msgs=10000 p50_us=12.3 p99_us=45.6 p999_us=78.9 msgs_per_s=12346 MBps=0.79 api=conn spin_us=0 depth=1 warmup=1000 wall_s=0.810"
	if got := s.String(); got != want+" cpu_ns_per_msg=- cgo_per_msg=- syscalls_per_msg=- switches_per_msg=-" {
		t.Errorf("summary line, unmetered\n got %s\nwant %s", got, want)
	}
	s.metered = true
	s.cost = cost.Reading{CPU: 203456789 * time.Nanosecond, Cgo: 30250, Syscalls: 40204, Switches: 5123, HasCPU: true, HasSyscalls: true}
	if got, want := s.String(), want+" cpu_ns_per_msg=20346 cgo_per_msg=3.02 syscalls_per_msg=4.02 switches_per_msg=0.51"; got != want {
		t.Errorf("summary line\n got %s\nwant %s", got, want)
	}
	s.cost.HasSyscalls, s.oneway = false, true
	if got, want := s.String(), want+" oneway=1 cpu_ns_per_msg=20346 cgo_per_msg=3.02 syscalls_per_msg=- switches_per_msg=0.51"; got != want {
		t.Errorf("summary line, one way, system calls not counted\n got %s\nwant %s", got, want)
	}
	s.oneway = false
	s.spin = 2500 * time.Nanosecond
	if got := parseSummary(t, s.String())["spin_us"]; got != "2.5" {
		t.Errorf("spin_us=%s, want 2.5", got)
	}
}

// TestClientSyscallsFlag runs the client counting system calls, the
// default, and with -syscalls=false.
func TestClientSyscallsFlag(t *testing.T) {
	addr, _ := startServer(t, "-api", "gonet")
	for _, syscalls := range []bool{true, false} {
		var stdout, stderr bytes.Buffer
		args := []string{"client", "-api", "gonet", "-addr", addr, "-n", "500", "-syscalls=" + strconv.FormatBool(syscalls)}
		if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
			t.Fatalf("%q: client exited with status %d; stderr:\n%s", args, code, &stderr)
		}
		m := parseSummary(t, strings.TrimSpace(stdout.String()))
		t.Logf("%s", strings.TrimSpace(stdout.String()))
		checkCosts(t, m, stderr.String(), syscalls)
	}
}

func TestAPINames(t *testing.T) {
	names := apiNames()
	if len(names) == 0 || names[0] != baselineAPI {
		t.Fatalf("apiNames() = %v, want %s first", names, baselineAPI)
	}
	if _, err := lookupAPI("nosuch"); err == nil || !strings.Contains(err.Error(), baselineAPI) {
		t.Errorf("lookupAPI(nosuch) = %v, want an error listing the apis", err)
	}
}

func TestClientDoesNotAllocatePerMessage(t *testing.T) {
	addr, _ := startServer(t, "-api", "gonet")
	for _, depth := range []int{1, 4} {
		cfg := clientConfig{network: "tcp", addr: addr, size: 512, conns: 2, depth: depth}
		mallocs := func(n int) uint64 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if _, err := runClient(context.Background(), apis[baselineAPI], cfg, n, 0, nil, io.Discard); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			return after.Mallocs - before.Mallocs
		}
		mallocs(100) // let the server and runtime settle
		small, large := mallocs(100), mallocs(5100)
		// The server, in this process too, allocates per connection only.
		if perMsg := float64(int64(large)-int64(small)) / 5000; perMsg > 0.05 {
			t.Errorf("depth %d: %.3f allocations per message (%d for 100 messages, %d for 5100)", depth, perMsg, small, large)
		}
	}
}

// TestEveryAPI holds every registered api to the contract of api: the
// summary counts every message, and a client whose server never answers
// returns the context's error promptly once the context is done.
func TestEveryAPI(t *testing.T) {
	for _, name := range apiNames() {
		t.Run(name, func(t *testing.T) {
			addr, _ := startServer(t, "-api", name)
			for _, depth := range []int{1, 4} {
				var stdout, stderr bytes.Buffer
				args := []string{"client", "-api", name, "-addr", addr,
					"-size", "1001", "-n", "600", "-conns", "3", "-depth", strconv.Itoa(depth)}
				if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
					t.Fatalf("depth %d: client exited with status %d; stderr:\n%s", depth, code, &stderr)
				}
				m := parseSummary(t, strings.TrimSpace(stdout.String()))
				if m["msgs"] != "600" || m["conns"] != "3" || m["api"] != name {
					t.Errorf("depth %d: summary %q", depth, &stdout)
				}
				checkCosts(t, m, stderr.String(), true)
			}

			// A server that accepts and reads but never answers.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						io.Copy(io.Discard, c)
					}()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			cfg := clientConfig{network: "tcp", addr: ln.Addr().String(), size: 64, conns: 2, depth: 2}
			returned := make(chan error, 1)
			go func() {
				_, err := runClient(ctx, apis[name], cfg, 100, 0, nil, io.Discard)
				returned <- err
			}()
			select {
			case err := <-returned:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("client of a silent server returned %v, want the context's deadline", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("client of a silent server did not return within 5s of its context's deadline")
			}
		})
	}
}

// TestRDMAEcho runs the apis that have RDMA over it, server and client in
// this process; it needs an RDMA device (see package rdmatest).
func TestRDMAEcho(t *testing.T) {
	ip := rdmatest.Addr(t)
	for _, name := range []string{"channel", "conn"} {
		t.Run(name, func(t *testing.T) {
			addr, _ := startServer(t, "-transport", "rdma", "-api", name, "-addr", net.JoinHostPort(ip, "0"))
			for _, c := range []struct {
				size, n, conns, depth int
				spin                  string
			}{
				{size: 64, n: 2000, conns: 1, depth: 1, spin: "0s"},
				{size: 1001, n: 1500, conns: 3, depth: 4, spin: "20us"},
				{size: 100 << 10, n: 100, conns: 2, depth: 2, spin: "0s"},
			} {
				var stdout, stderr bytes.Buffer
				args := []string{"client", "-transport", "rdma", "-api", name, "-addr", addr,
					"-size", strconv.Itoa(c.size), "-n", strconv.Itoa(c.n),
					"-conns", strconv.Itoa(c.conns), "-depth", strconv.Itoa(c.depth), "-spin", c.spin}
				if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
					t.Fatalf("%q: client exited with status %d; stderr:\n%s", args, code, &stderr)
				}
				out := strings.TrimSuffix(stdout.String(), "\n")
				if !strings.HasPrefix(out, "transport=rdma ") || strings.Contains(out, "\n") {
					t.Fatalf("%q: output is not one summary line of transport=rdma:\n%s", args, out)
				}
				m := parseSummary(t, out)
				t.Logf("%s", out)
				// Verbs calls are cgo calls.
				if cgo := checkCosts(t, m, stderr.String(), true); cgo <= 0 {
					t.Errorf("%q: cgo_per_msg=%s over RDMA", args, m["cgo_per_msg"])
				}
				want := map[string]string{
					"api": name, "size": strconv.Itoa(c.size), "conns": strconv.Itoa(c.conns),
					"msgs": strconv.Itoa(c.n), "depth": strconv.Itoa(c.depth),
				}
				for k, v := range want {
					if m[k] != v {
						t.Errorf("%q: %s=%q, want %q", args, k, m[k], v)
					}
				}
			}
		})
	}
}

// TestGoNetRejectsRDMA checks that -api gonet, Go's net package, refuses
// -transport rdma with a usage error that says why.
func TestGoNetRejectsRDMA(t *testing.T) {
	for _, args := range [][]string{
		{"server", "-api", "gonet", "-transport", "rdma"},
		{"client", "-api", "gonet", "-transport", "rdma", "-addr", "192.0.2.1:7100"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != exitUsage {
			t.Errorf("%q: exit status %d, want %d", args, code, exitUsage)
		}
		if !strings.Contains(stderr.String(), "no RDMA") {
			t.Errorf("%q: stderr %q does not say that gonet has no RDMA", args, &stderr)
		}
	}
}

// TestTimesAndTrace: -times writes one line per measured message, in the
// order they were sent, and -trace an execution trace, on the client and
// on the server (one at a time: a process takes one trace at a time).
func TestTimesAndTrace(t *testing.T) {
	dir := t.TempDir()
	srvTrace, cliTrace, times := filepath.Join(dir, "server.trace"), filepath.Join(dir, "client.trace"), filepath.Join(dir, "times")
	for _, tracer := range []string{"server", "client"} {
		var serverArgs, clientArgs []string
		if tracer == "server" {
			serverArgs = []string{"-trace", srvTrace}
		} else {
			clientArgs = []string{"-trace", cliTrace}
		}
		ctx, cancel := context.WithCancel(context.Background())
		stdout, stderr := newLineWriter(), newLineWriter()
		exited := make(chan int, 1)
		go func() {
			exited <- run(ctx, append([]string{"server", "-api", "channel"}, serverArgs...), stdout, stderr)
		}()
		addr := stdout.waitLine(t, "listening on ")
		const n, warmup = 300, 20
		var out, errOut bytes.Buffer
		args := append([]string{"client", "-api", "channel", "-addr", addr, "-n", strconv.Itoa(n),
			"-warmup", strconv.Itoa(warmup), "-syscalls=false", "-times", times}, clientArgs...)
		if code := run(context.Background(), args, &out, &errOut); code != exitOK {
			t.Fatalf("%q: client exited with status %d; stderr:\n%s", args, code, &errOut)
		}
		cancel()
		if code := <-exited; code != exitOK {
			t.Fatalf("server exited with status %d; stderr:\n%s", code, stderr)
		}

		data, err := os.ReadFile(times)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) != n+1 || lines[0] != "seq sent_us rtt_us" {
			t.Fatalf("-times wrote %d lines beginning %q; want a header and %d lines", len(lines), lines[0], n)
		}
		lastSent := -1.0
		for i, line := range lines[1:] {
			var seq int
			var sent, rtt float64
			if _, err := fmt.Sscanf(line, "%d %g %g", &seq, &sent, &rtt); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			if seq != warmup+i || sent < lastSent || rtt <= 0 {
				t.Fatalf("line %d %q: want seq %d, sent at or after %.1f, a positive round trip", i+1, line, warmup+i, lastSent)
			}
			lastSent = sent
		}
	}
	for _, path := range []string{srvTrace, cliTrace} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(data, []byte("go 1.")) || len(data) < 1000 {
			t.Errorf("%s: %d bytes beginning %q; want an execution trace", path, len(data), data[:min(len(data), 16)])
		}
	}
}
