//go:build linux && cgo

package rdma

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// echoServer serves l from a selector on its own goroutine until the test
// ends.
func echoServer(tb testing.TB, l *Listener) {
	tb.Helper()
	sel, err := selector.New(selector.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	l.SetBlocking(false)
	if _, err := sel.Register(l, selectionkey.OpAccept, nil); err != nil {
		tb.Fatal(err)
	}
	stop := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- echoLoop(sel, l, stop) }()
	tb.Cleanup(func() {
		close(stop)
		sel.Wakeup()
		if err := <-served; err != nil {
			tb.Error(err)
		}
		for _, k := range sel.Keys() {
			k.Channel().Close()
		}
		sel.Close()
	})
}

// echoClient dials an echo server on tr and returns a blocking conn.
func echoClient(tb testing.TB, tr *Transport, addr string) *Conn {
	tb.Helper()
	return echoClientOf(tb, tr, tr, addr)
}

// echoClientOf is echoClient with the server on srv and the client on tr.
func echoClientOf(tb testing.TB, srv, tr *Transport, addr string) *Conn {
	tb.Helper()
	l, err := srv.Listen(context.Background(), net.JoinHostPort(addr, "0"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	echoServer(tb, l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := tr.Dial(ctx, l.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends size bytes and waits for their echo.
func roundTrip(tb testing.TB, c *Conn, size int) {
	m, err := c.Pool().TryGet()
	if err != nil {
		tb.Fatal(err)
	}
	m.SetLen(size)
	if err := c.Send(m); err != nil {
		tb.Fatal(err)
	}
	echo, err := c.Receive()
	if err != nil {
		tb.Fatal(err)
	}
	if echo.Len() != size {
		tb.Fatalf("echo of %d bytes, want %d", echo.Len(), size)
	}
	echo.Release()
}

// TestEchoDoesNotAllocate holds the steady-state data path, client and
// selector-driven server together, to no heap allocation per message: a
// blocking Send and Receive on the client, the completion queue polled by
// the transport's poller on one side and by a selector on the other.
//
// The runtime allocates on its own at times. A goroutine that blocks on a
// contended mutex (the poller, on a connection whose Send is posting)
// takes a sudog from a per-processor cache, and a garbage collection
// empties the shared cache behind it, so now and then one window of 2000
// round trips counts a hundred of them. A window that allocates is
// measured again, up to three times in all, before the test fails: an
// allocation per message of ours shows in every window.
func TestEchoDoesNotAllocate(t *testing.T) {
	tr, addr := newTransport(t, Config{})
	c := echoClient(t, tr, addr)
	for _, size := range []int{64, 4 << 10, 64 << 10} {
		mallocs := func(n int) uint64 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range n {
				roundTrip(t, c, size)
			}
			runtime.ReadMemStats(&after)
			return after.Mallocs - before.Mallocs
		}
		mallocs(200) // let pools, queues and the runtime settle
		var seen []string
		for range 3 {
			small, large := mallocs(100), mallocs(2100)
			// The difference cancels what a measurement itself allocates.
			perMsg := float64(int64(large)-int64(small)) / 2000
			if perMsg <= 0.05 {
				seen = nil
				break
			}
			seen = append(seen, fmt.Sprintf("%.3f (%d for 100, %d for 2100)", perMsg, small, large))
		}
		if seen != nil {
			t.Errorf("%d bytes: allocations per round trip in three windows: %s", size, strings.Join(seen, "; "))
		}
	}
}

// BenchmarkEcho measures one round trip per iteration between a blocking
// client and a selector echo server in this process. Under Soft-RoCE the
// times say little (see docs/rdma.md); allocs/op, which covers both
// sides, must be 0.
func BenchmarkEcho(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 16 << 10, 100 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			tr, addr := newTransport(b, Config{})
			c := echoClient(b, tr, addr)
			times := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				roundTrip(b, c, size)
				times = append(times, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "p50-us")
		})
	}
}
