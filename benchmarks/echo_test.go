// Package benchmarks holds in-process Go benchmarks of rubin's echo paths
// beside Go's net as the baseline, and (in echobench) the runner that
// measures them as separate pinned processes.
//
// In-process figures put client and server on one scheduler, so they show
// allocations and relative costs rather than deployable latencies; run
// echobench for those.
package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/tcp"
)

var sizes = []int{64, 1 << 10, 16 << 10, 100 << 10}

// BenchmarkEcho measures one round trip per iteration on each path. The
// allocation figure covers client and server together: the selector path
// must report 0 allocs/op.
func BenchmarkEcho(b *testing.B) {
	for _, size := range sizes {
		b.Run(fmt.Sprintf("channel/%d", size), func(b *testing.B) { benchChannel(b, size) })
		b.Run(fmt.Sprintf("conn/%d", size), func(b *testing.B) {
			benchNetConn(b, size, func(ctx context.Context, addr string) (net.Conn, error) {
				return rubin.DialContext(ctx, "tcp", addr)
			}, func(addr string) (net.Listener, error) { return rubin.Listen("tcp", addr) })
		})
		b.Run(fmt.Sprintf("gonet/%d", size), func(b *testing.B) {
			var d net.Dialer
			benchNetConn(b, size, func(ctx context.Context, addr string) (net.Conn, error) {
				return d.DialContext(ctx, "tcp", addr)
			}, func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) })
		})
	}
}

// rtts collects round-trip times and reports their median.
type rtts []time.Duration

func (r rtts) report(b *testing.B) {
	if len(r) == 0 {
		return
	}
	s := slices.Clone(r)
	slices.Sort(s)
	b.ReportMetric(float64(s[len(s)/2].Nanoseconds())/1e3, "p50-us")
}

// benchChannel runs a selector echo server and a blocking channel client.
func benchChannel(b *testing.B, size int) {
	tr, err := tcp.New(tcp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := tr.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- selectorEcho(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	c, err := tr.Dial(ctx, ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	times := make(rtts, 0, b.N)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		m, err := tr.Pool().TryGet()
		if err != nil {
			b.Fatal(err)
		}
		m.SetLen(size)
		start := time.Now()
		if err := c.Send(m); err != nil {
			b.Fatal(err)
		}
		echo, err := c.Receive()
		if err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
		if echo.Len() != size {
			b.Fatalf("echo of %d bytes, want %d", echo.Len(), size)
		}
		echo.Release()
	}
	b.StopTimer()
	times.report(b)
}

// selectorEcho serves ln on one selector until ctx is done, sending every
// received buffer back as it is.
func selectorEcho(ctx context.Context, ln *tcp.Listener) error {
	sel, err := selector.New(selector.Config{})
	if err != nil {
		return err
	}
	defer sel.Close()
	defer ln.Close()
	stop := context.AfterFunc(ctx, sel.Wakeup)
	defer stop()
	if err := ln.SetBlocking(false); err != nil {
		return err
	}
	if _, err := sel.Register(ln, selectionkey.OpAccept, nil); err != nil {
		return err
	}
	for ctx.Err() == nil {
		if _, err := sel.Select(); err != nil {
			return err
		}
		for _, k := range sel.SelectedKeys() {
			if k.IsAcceptable() {
				c, err := ln.AcceptTCP()
				if errors.Is(err, channel.ErrWouldBlock) {
					continue
				}
				if err != nil {
					return err
				}
				defer c.Close()
				if err := c.SetBlocking(false); err != nil {
					return err
				}
				if _, err := sel.Register(c, selectionkey.OpRead, nil); err != nil {
					return err
				}
				continue
			}
			c := k.Channel().(*tcp.Conn)
			for {
				m, err := c.Receive()
				if errors.Is(err, channel.ErrWouldBlock) {
					break
				}
				if err != nil {
					c.Close()
					break
				}
				if err := c.Send(m); err != nil {
					c.Close()
					break
				}
				if c.ReadyOps()&selectionkey.OpRead == 0 {
					break
				}
			}
		}
	}
	return nil
}

// benchNetConn runs a goroutine-per-connection echo server and a
// write-then-read-back client over net.Conn values.
func benchNetConn(b *testing.B, size int, dial func(context.Context, string) (net.Conn, error), listen func(string) (net.Listener, error)) {
	ln, err := listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
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
				buf := make([]byte, 64<<10)
				_, _ = io.CopyBuffer(c, struct{ io.Reader }{c}, buf)
			}()
		}
	}()
	c, err := dial(context.Background(), ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, size)
	times := make(rtts, 0, b.N)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	times.report(b)
}
