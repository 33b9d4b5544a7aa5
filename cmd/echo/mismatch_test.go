package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/internal/cost"
)

// A client whose server does not speak its mode or api must fail with an
// error that says so, soon, and must not burn a CPU meanwhile. Every run here has a context deadline well
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
