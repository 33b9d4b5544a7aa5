package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/internal/cost"
)

// A client whose server does not speak its mode or api, or stops
// answering, must fail with an error that says so, soon, and must not
// burn a CPU while it waits. Every run here has a context deadline well
// above the time allowed, so that a client that hangs fails the test
// instead of hanging the suite.

// runBounded runs the command with args under a deadline of limit and
// returns its exit status, its stderr, how long it took and the CPU time
// the process spent meanwhile (zero if unknown).
func runBounded(t *testing.T, limit time.Duration, args ...string) (code int, stderr string, took, cpu time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	meter := cost.Open(cost.Config{})
	defer meter.Close()
	var stdout, errb bytes.Buffer
	before, start := meter.Read(), time.Now()
	code = run(ctx, args, &stdout, &errb)
	took = time.Since(start)
	if spent := meter.Read().Sub(before); spent.HasCPU {
		cpu = spent.CPU
	}
	return code, errb.String(), took, cpu
}

// TestOnewayAgainstEchoServer runs a one-way client against servers of
// the apis that only echo, the default one among them. Such a server
// sends the client's request to stream back instead of accepting it; the
// client must say that -oneway needs -api channel, at once, rather than
// stream into a server that echoes.
func TestOnewayAgainstEchoServer(t *testing.T) {
	for _, name := range []string{"conn", baselineAPI} {
		t.Run(name, func(t *testing.T) {
			addr, _ := startServer(t, "-api", name)
			code, stderr, took, _ := runBounded(t, 10*time.Second, "client", "-api", "channel", "-oneway",
				"-addr", addr, "-size", "4096", "-n", "200000", "-syscalls=false")
			if code != exitFailure {
				t.Errorf("exit status %d, want %d", code, exitFailure)
			}
			if !strings.Contains(stderr, "one-way") || !strings.Contains(stderr, "-api channel") {
				t.Errorf("stderr %q does not say that -oneway needs a server with -api channel", stderr)
			}
			if took > 3*time.Second {
				t.Errorf("the client took %v to give up", took.Round(time.Millisecond))
			}
		})
	}
}

// TestGoNetClientAgainstMessageServer runs the gonet client, which sends
// bare bytes, against the servers that take messages: they hang up on
// it, and the client must say that the apis may differ.
func TestGoNetClientAgainstMessageServer(t *testing.T) {
	for _, name := range []string{"conn", "channel"} {
		t.Run(name, func(t *testing.T) {
			addr, _ := startServer(t, "-api", name)
			for _, depth := range []string{"1", "4"} {
				code, stderr, took, _ := runBounded(t, 10*time.Second, "client", "-api", baselineAPI,
					"-addr", addr, "-depth", depth, "-syscalls=false")
				if code != exitFailure || !strings.Contains(stderr, "same -api") {
					t.Errorf("depth %s: exit status %d, stderr %q; want %d and a question about -api", depth, code, stderr, exitFailure)
				}
				if took > 3*time.Second {
					t.Errorf("depth %s: the client took %v to give up", depth, took.Round(time.Millisecond))
				}
			}
		})
	}
}

// stallingServer listens on loopback and, on every connection, echoes the
// first echoBytes bytes it reads, then reads and drops the rest without
// answering. It returns its address.
func stallingServer(t *testing.T, echoBytes int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveConns(t, ln, func(c net.Conn) {
		io.CopyN(c, c, echoBytes)
		io.Copy(io.Discard, c)
	})
	return ln.Addr().String()
}

// TestClientGivesUpWithoutReplies runs every client against a server that
// never answers, and against one that answers for a while and then stops:
// each client must fail soon after -reply-timeout with an error that
// names the server, having slept, not spun, while it waited.
func TestClientGivesUpWithoutReplies(t *testing.T) {
	const timeout = 500 * time.Millisecond
	clients := [][]string{{"-api", "gonet"}, {"-api", "conn"}, {"-api", "channel"}, {"-api", "channel", "-oneway"}}
	for _, echoBytes := range []int64{0, 50 << 10} {
		addr := stallingServer(t, echoBytes)
		for _, c := range clients {
			name := strings.Join(c, " ")
			if echoBytes > 0 {
				if c[len(c)-1] == "-oneway" {
					continue // an echoed request to stream is refused at once
				}
				name += " after a while"
			}
			t.Run(name, func(t *testing.T) {
				args := append([]string{"client", "-addr", addr, "-size", "1000", "-n", "1000", "-warmup", "0",
					"-reply-timeout", timeout.String(), "-syscalls=false"}, c...)
				code, stderr, took, cpu := runBounded(t, 10*time.Second, args...)
				if code != exitFailure {
					t.Errorf("exit status %d, want %d", code, exitFailure)
				}
				want := "no reply from " + addr + " in " + timeout.String()
				if !strings.Contains(stderr, want) || !strings.Contains(stderr, "-api") {
					t.Errorf("stderr %q does not say %q and ask about -api", stderr, want)
				}
				if took < timeout || took > timeout+2*time.Second {
					t.Errorf("the client gave up after %v, want soon after %v", took.Round(time.Millisecond), timeout)
				}
				// A client that spins while it waits spends a CPU's worth
				// of time; one that sleeps spends next to nothing.
				if cpu > took/4 {
					t.Errorf("the client spent %v of CPU in %v of waiting", cpu.Round(time.Millisecond), took.Round(time.Millisecond))
				}
			})
		}
	}
}

// TestOnewayRejectsStrayMessage runs a one-way client against a server
// that accepts the stream, then sends a message in the middle of it and
// stops reading. The stray message makes the connection readable; the
// client must take it and fail, not select the connection again and
// again while its sends wait for room.
func TestOnewayRejectsStrayMessage(t *testing.T) {
	tr, err := openTransport("tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ln, err := tr.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	stop := make(chan struct{})
	defer close(stop)
	wg.Go(func() {
		c, err := ln.AcceptConn()
		if err != nil {
			return
		}
		defer c.Close()
		if err := strayAfterAccept(c); err != nil {
			t.Errorf("server: %v", err)
		}
		<-stop // hold the connection, reading nothing more
	})
	code, stderr, took, _ := runBounded(t, 10*time.Second, "client", "-api", "channel", "-oneway",
		"-addr", ln.LocalAddr().String(), "-size", "4096", "-n", "200000", "-syscalls=false")
	if code != exitFailure || !strings.Contains(stderr, "in the middle of the one-way stream") {
		t.Errorf("exit status %d, stderr %q; want %d and the stray message named", code, stderr, exitFailure)
	}
	if took > 3*time.Second {
		t.Errorf("the client took %v to give up", took.Round(time.Millisecond))
	}
}

// strayAfterAccept plays a server that accepts a one-way stream on c and
// sends a stray message after the first data messages.
func strayAfterAccept(c anytransport.Conn) error {
	send := func(p []byte) error {
		b, err := c.Pool().TryGet()
		if err != nil {
			return err
		}
		b.Write(p)
		return c.Send(b)
	}
	for i := 0; ; i++ {
		b, err := c.Receive()
		if err != nil {
			return err
		}
		begin := bytes.Equal(b.Bytes(), onewayBegin)
		b.Release()
		switch {
		case i == 0 && !begin:
			return io.ErrUnexpectedEOF
		case i == 0:
			if err := send(onewayAccept); err != nil {
				return err
			}
		case i == 10:
			return send([]byte("a stray message"))
		}
	}
}
