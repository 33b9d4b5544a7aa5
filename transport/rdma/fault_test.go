//go:build linux && cgo

package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/rdmatest"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// pair connects a client and a server conn over tr, both blocking.
func pair(t *testing.T, tr *Transport, addr string) (client, server *Conn) {
	t.Helper()
	l, err := tr.Listen(context.Background(), net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan *Conn, 1)
	go func() {
		c, err := l.AcceptRDMA()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err = tr.Dial(ctx, l.Addr().String())
	if err != nil {
		t.Fatalf("%v\n%s", err, tr.dumpState())
	}
	server = <-accepted
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func send(t *testing.T, c *Conn, payload []byte) error {
	t.Helper()
	b, err := c.Pool().Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.Write(payload)
	return c.Send(b)
}

func receive(t *testing.T, c *Conn) []byte {
	t.Helper()
	b, err := c.Receive()
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	defer b.Release()
	return append([]byte(nil), b.Bytes()...)
}

// TestSlowReaderPushesBack: a peer that does not read stops its sender
// once the credits and the send queue are used up, without an error, and
// everything arrives, in order, once it reads.
func TestSlowReaderPushesBack(t *testing.T) {
	tr, addr := newTransport(t, Config{RecvDepth: 4, SendQueue: 64 << 10, MaxMessageSize: 4 << 10})
	client, server := pair(t, tr, addr)
	client.SetBlocking(false)
	payload := bytes.Repeat([]byte{'x'}, 1000)
	sent := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		b, _ := client.Pool().Get(context.Background())
		b.Write(payload)
		b.Bytes()[0] = byte(sent)
		err := client.Send(b)
		if errors.Is(err, channel.ErrWouldBlock) {
			b.Release()
			break
		}
		if err != nil {
			t.Fatalf("Send %d: %v", sent, err)
		}
		sent++
	}
	if sent < 4 || sent > 4+64+1 {
		t.Fatalf("sent %d messages before ErrWouldBlock; want the credits (4) plus a 64 KiB queue", sent)
	}
	time.Sleep(100 * time.Millisecond)
	server.mu.Lock()
	inbox := server.inbox.len()
	server.mu.Unlock()
	if inbox > 4 {
		t.Errorf("the non-reading side holds %d messages; credits allow 4", inbox)
	}
	client.SetBlocking(true)
	go client.Flush()
	for i := range sent {
		if got := receive(t, server); got[0] != byte(i) || len(got) != len(payload) {
			t.Fatalf("message %d: got %d bytes starting %d", i, len(got), got[0])
		}
	}
	if err := send(t, client, []byte("still alive")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, server); string(got) != "still alive" {
		t.Fatalf("got %q", got)
	}
}

// TestBrokenQueuePairClosesOnlyItsConn: a message larger than the
// receiver's buffers breaks the receiving queue pair (the sender is
// forced past its own check); that connection reports the completion
// status, and another one on the same completion queue carries on.
func TestBrokenQueuePairClosesOnlyItsConn(t *testing.T) {
	tr, addr := newTransport(t, Config{MaxMessageSize: 4 << 10})
	bigTr, _ := newTransport(t, Config{MaxMessageSize: 8 << 10})
	l, err := tr.Listen(context.Background(), net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	go func() {
		if c, err := bigTr.Dial(ctx, l.Addr().String()); err == nil {
			t.Cleanup(func() { c.Close() })
			c.max.Store(8 << 10) // pretend the peer accepts it
			send(t, c, make([]byte, 6<<10))
		}
	}()
	bad, err := l.AcceptRDMA()
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	good, err := tr.Dial(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	goodServer, err := l.AcceptRDMA()
	if err != nil {
		t.Fatal(err)
	}
	defer goodServer.Close()
	_, err = bad.Receive()
	if err == nil || !strings.Contains(err.Error(), "completion") {
		t.Fatalf("Receive on the broken conn = %v; want the completion's error", err)
	}
	t.Logf("broken conn: %v", err)
	if err := send(t, good, []byte("fine")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, goodServer); string(got) != "fine" {
		t.Fatalf("got %q", got)
	}
}

// TestPeerCrash: a peer process killed in the middle of a stream is seen
// as the end of the stream after what arrived, and leaves other
// connections alone.
func TestPeerCrash(t *testing.T) {
	if os.Getenv("RUBIN_RDMA_CRASH_PEER") != "" {
		crashPeer()
		return
	}
	tr, addr := newTransport(t, Config{})
	l, err := tr.Listen(context.Background(), net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerCrash$")
	cmd.Env = append(os.Environ(), "RUBIN_RDMA_CRASH_PEER="+l.Addr().String())
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	crashed, err := l.AcceptRDMA()
	if err != nil {
		t.Fatal(err)
	}
	defer crashed.Close()
	healthyClient, healthy := pair(t, tr, addr)
	for i := range 10 {
		if got := receive(t, crashed); len(got) != 1000 {
			t.Fatalf("message %d: %d bytes", i, len(got))
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := crashed.Receive()
		if err == nil {
			b.Release()
			continue
		}
		if err != io.EOF {
			t.Fatalf("Receive after the peer died = %v; want io.EOF", err)
		}
		break
	}
	if time.Now().After(deadline) {
		t.Fatal("the peer's death took too long to notice")
	}
	if err := send(t, healthyClient, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, healthy); string(got) != "ok" {
		t.Fatalf("healthy conn got %q", got)
	}
}

// crashPeer is the process TestPeerCrash kills: it streams messages until
// it dies.
func crashPeer() {
	tr, err := New(Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := tr.Dial(context.Background(), os.Getenv("RUBIN_RDMA_CRASH_PEER"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for {
		b, _ := c.Pool().Get(context.Background())
		b.Write(make([]byte, 1000))
		if c.Send(b) != nil {
			os.Exit(0)
		}
	}
}

// TestManyConnections serves 256 connections from one selector over a
// shared receive queue, then checks that every queue pair, completion
// queue and event channel is released.
func TestManyConnections(t *testing.T) {
	manyConnections(t, 256, Config{SharedReceiveQueue: true, SRQSize: 1024, PeerCredits: 4, MaxMessageSize: 4 << 10, SendDepth: 16, SignalEvery: 4})
}

// TestManyConnectionsDefault holds 1024 connections open at once on one
// server selector with the default configuration, echoes messages on all
// of them, then checks that closing everything releases every resource.
// They are more than one completion queue of the default size serves, so
// the selector gets several.
func TestManyConnectionsDefault(t *testing.T) {
	manyConnections(t, 1024, Config{})
}

// manyConnections opens conns connections to one server selector, dialing
// a few at a time as clients arriving do; once all are open, each echoes
// a few messages, all at once. Closing everything must release every
// resource.
func manyConnections(t *testing.T, conns int, cfg Config) {
	addr := rdmatest.Addr(t)
	before := LiveResources()
	server, _ := newTransport(t, cfg)
	client, _ := newTransport(t, cfg)
	l, err := server.Listen(context.Background(), net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	sel, err := selector.New(selector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l.SetBlocking(false)
	if _, err := sel.Register(l, selectionkey.OpAccept, nil); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- echoLoop(sel, l, stop) }()

	const dialers = 16
	cs := make([]*Conn, conns)
	var (
		wg         sync.WaitGroup
		errs       = make(chan error, conns)
		next       = make(chan int)
		dialFailed atomic.Bool
	)
	for range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				c, err := client.Dial(ctx, l.Addr().String())
				cancel()
				if err != nil {
					errs <- fmt.Errorf("conn %d: %w", i, err)
					dialFailed.Store(true)
					continue
				}
				cs[i] = c
			}
		}()
	}
	for i := range conns {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, c := range cs {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 4 {
				msg := fmt.Sprintf("%v message %d", c.LocalAddr(), j)
				if err := send(t, c, []byte(msg)); err != nil {
					errs <- err
					return
				}
				b, err := c.Receive()
				if err != nil {
					errs <- fmt.Errorf("%v: %w", c.LocalAddr(), err)
					return
				}
				if got := string(b.Bytes()); got != msg {
					errs <- fmt.Errorf("echoed %q, want %q", got, msg)
				}
				b.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 10 {
			t.Error(err)
		}
	}
	if n > 10 {
		t.Errorf("and %d more errors", n-10)
	}
	if dialFailed.Load() {
		t.Logf("server state after the failed dials:\n%s", server.engineState())
		t.Logf("client state after the failed dials:\n%s", client.engineState())
	}
	if got := len(sel.Keys()); got != conns+1 {
		t.Errorf("server selector has %d keys; want %d connections and the listener", got, conns)
	}
	server.mu.Lock()
	cqs := len(server.engines)
	server.mu.Unlock()
	t.Logf("%d connections: the server carved %d buffers of %d bytes and polls %d completion queues", conns, server.pool.Stats().Allocated, server.pool.BufferSize(), cqs)
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
	close(stop)
	sel.Wakeup()
	if err := <-served; err != nil {
		t.Error(err)
	}
	for _, k := range sel.Keys() {
		k.Channel().Close()
	}
	sel.Close()
	client.Close()
	server.Close()
	deadline := time.Now().Add(10 * time.Second)
	for LiveResources() != before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := LiveResources(); got != before {
		t.Errorf("resources after closing everything: %+v; before: %+v", got, before)
	}
}

// echoLoop echoes every message on every connection l accepts, on one
// selector, until stop is closed.
func echoLoop(sel *selector.Selector, l *Listener, stop chan struct{}) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if _, err := sel.SelectTimeout(100 * time.Millisecond); err != nil {
			return err
		}
		for _, k := range sel.SelectedKeys() {
			if k.IsAcceptable() {
				for {
					c, err := l.AcceptRDMA()
					if err != nil {
						break
					}
					c.SetBlocking(false)
					if _, err := sel.Register(c, selectionkey.OpRead, nil); err != nil {
						return err
					}
				}
				continue
			}
			c := k.Channel().(*Conn)
			for {
				b, err := c.Receive()
				if errors.Is(err, channel.ErrWouldBlock) {
					break
				}
				if err != nil {
					c.Close()
					break
				}
				if err := c.Send(b); err != nil {
					if errors.Is(err, channel.ErrWouldBlock) {
						b.Release()
					}
					c.Close()
					break
				}
			}
		}
	}
}

// TestRefusedWhenSRQFull checks that a listener whose shared receive
// queue has no credits left for one more connection refuses it and lives
// on: the refused connection's queue pair and ID are destroyed once, by
// its teardown. The ID used to be destroyed before that too, and
// destroying the queue pair and the ID again crashed the process.
func TestRefusedWhenSRQFull(t *testing.T) {
	const dials = 8
	srv, addr := newTransport(t, Config{SharedReceiveQueue: true, SRQSize: 8, PeerCredits: 2, MaxMessageSize: 4 << 10})
	cli, _ := newTransport(t, Config{MaxMessageSize: 4 << 10})
	ctx := context.Background()
	ln, err := srv.Listen(ctx, net.JoinHostPort(addr, "0"))
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
			t.Cleanup(func() { c.Close() })
		}
	}()
	refused := 0
	for range dials {
		c, err := cli.Dial(ctx, ln.Addr().String())
		if err != nil {
			refused++
			continue
		}
		defer c.Close()
	}
	if refused == 0 {
		t.Fatalf("a shared receive queue of 8 took all %d connections", dials)
	}
	if n, last := srv.Rejects(); n == 0 || last == nil || !strings.Contains(last.Error(), "shared receive queue full") {
		t.Fatalf("the listener counted %d rejects, the last for %v; want the shared receive queue full", n, last)
	}
}

// TestTeardownLeavesTheSelector: a connection's teardown (destroying its
// queue pair and its connection-manager ID, system calls that took up to
// 130 ms in the Soft-RoCE VM) runs off the goroutine of the selector that
// serves it, so the selector's other connections are answered meanwhile.
// Here the server's teardown of a closed connection takes half a second,
// and another connection's round trips must not wait for it.
func TestTeardownLeavesTheSelector(t *testing.T) {
	server, dial := echoOnOwnTransports(t)
	mustDial := func() *Conn {
		c, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	good, doomed := mustDial(), mustDial()
	roundTrip(t, good, 64)
	roundTrip(t, doomed, 64)

	const hold = 500 * time.Millisecond
	entered := make(chan struct{}, 1)
	hook := func(c *Conn) {
		if c.t != server {
			return
		}
		select {
		case entered <- struct{}{}:
		default:
		}
		time.Sleep(hold)
	}
	testHookTeardown.Store(&hook)
	defer testHookTeardown.Store(nil)
	doomed.Close()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not tear the closed connection down within 10 s")
	}
	if worst := worstRoundTrip(t, good, hold); worst >= hold/2 {
		t.Errorf("a round trip took %v while the server tore another connection down (%v)", worst, hold)
	}
}

// TestAcceptLeavesTheSelector: setting up an accepted connection (its
// event channel, queue pair, receives and accept, system calls that took
// up to 80 ms in the Soft-RoCE VM) runs off the goroutine of the selector
// the listener is registered with, so its connections are answered
// meanwhile. Here one setup takes half a second, and another connection's
// round trips must not wait for it.
func TestAcceptLeavesTheSelector(t *testing.T) {
	_, dial := echoOnOwnTransports(t)
	good, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, good, 64)

	const hold = 500 * time.Millisecond
	entered := make(chan struct{}, 1)
	hook := func(*Listener) {
		select {
		case entered <- struct{}{}:
		default:
		}
		time.Sleep(hold)
	}
	testHookAccept.Store(&hook)
	defer testHookAccept.Store(nil)
	dialed := make(chan error, 1)
	go func() {
		c, err := dial()
		if err == nil {
			err = echoOnce(c, 64)
		}
		dialed <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not take the connect request within 10 s")
	}
	if worst := worstRoundTrip(t, good, hold); worst >= hold/2 {
		t.Errorf("a round trip took %v while the server set up another connection (%v)", worst, hold)
	}
	if err := <-dialed; err != nil {
		t.Errorf("the slow connection: %v", err)
	}
}

// echoOnOwnTransports starts an echo server on a transport of its own and
// returns that transport and a dialer to the server from another
// transport; what it dials is closed when the test ends.
func echoOnOwnTransports(t *testing.T) (server *Transport, dial func() (*Conn, error)) {
	server, _ = newTransport(t, Config{})
	clientTr, _ := newTransport(t, Config{})
	l, err := server.Listen(context.Background(), net.JoinHostPort(rdmatest.Addr(t), "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	echoServer(t, l)
	return server, func() (*Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := clientTr.Dial(ctx, l.Addr().String())
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	}
}

// worstRoundTrip returns the slowest of the 64 B round trips on c during
// d.
func worstRoundTrip(t *testing.T, c *Conn, d time.Duration) time.Duration {
	var worst time.Duration
	for start := time.Now(); time.Since(start) < d; {
		t0 := time.Now()
		roundTrip(t, c, 64)
		worst = max(worst, time.Since(t0))
	}
	return worst
}

// echoOnce is roundTrip for goroutines other than the test's: it returns
// what went wrong.
func echoOnce(c *Conn, size int) error {
	m, err := c.Pool().TryGet()
	if err != nil {
		return err
	}
	m.SetLen(size)
	if err := c.Send(m); err != nil {
		return err
	}
	echo, err := c.Receive()
	if err != nil {
		return err
	}
	defer echo.Release()
	if echo.Len() != size {
		return fmt.Errorf("echo of %d bytes, want %d", echo.Len(), size)
	}
	return nil
}
