package rubin_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/metrics"
	"github.com/rubin-go/rubin/transport/rdma"
	_ "github.com/rubin-go/rubin/transport/rdma" // the rdma network
)

func TestEchoSmoke(t *testing.T) {
	testEchoSmoke(t, "tcp")
}

// TestEchoSmokeRDMA is TestEchoSmoke over RDMA; its largest write is
// split into several messages.
func TestEchoSmokeRDMA(t *testing.T) {
	testEchoSmoke(t, "rdma")
}

func testEchoSmoke(t *testing.T, network string) {
	ln, err := rubin.Listen(network, testAddr(t, network))
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
				io.Copy(c, c)
			}()
		}
	}()
	c, err := rubin.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, size := range []int{1, 64, 5000, 300000} {
		p := bytes.Repeat([]byte{byte(size)}, size)
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, p) {
			t.Fatal("mismatch")
		}
	}
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err = c.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("not a timeout: %v", err)
	}
}

// TestStatsRDMA checks that an RDMA stack counts its connections and
// messages, and exports them as metrics.
func TestStatsRDMA(t *testing.T) {
	address := testAddr(t, "rdma")
	s := newStack(t, rubin.Config{Transport: "rdma", MaxMessageSize: 64 << 10, Pollers: 2})
	c, peer := dialPair(t, s, address)
	p := bytes.Repeat([]byte{7}, 100<<10) // two messages
	if _, err := c.Write(p); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(peer, make([]byte, len(p))); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if tr := st.Transport; tr.ConnsOpened != 2 || tr.MessagesOut != 2 || tr.MessagesIn != 2 || tr.BytesIn != uint64(len(p)) {
		t.Errorf("transport counters %+v, want 2 connections opened and 2 messages of %d bytes in all each way", tr, len(p))
	}
	if len(st.Selectors) != 2 {
		t.Errorf("%d selectors counted, want 2", len(st.Selectors))
	}
	m := metrics.New()
	m.AddStack("rdma", s)
	if n := testutil.CollectAndCount(m, "rubin_transport_messages_received_total"); n != 1 {
		t.Errorf("%d series of rubin_transport_messages_received_total, want 1", n)
	}
}

// TestReadSpinSeesThePollersMessage checks that a Read spinning on the
// device stops as soon as the message it waits for is in the inbox, when
// the poller, which polls the same completion queue, took the message
// first. With a spin budget far longer than the test, a Read that only
// watched the channel would spin out the budget.
func TestReadSpinSeesThePollersMessage(t *testing.T) {
	const budget = time.Minute
	address := testAddr(t, "rdma")
	s := newStack(t, rubin.Config{Transport: "rdma", MaxMessageSize: 4 << 10, SpinBudget: budget})
	c, peer := dialPair(t, s, address)
	go func() {
		b := make([]byte, 1)
		for {
			if _, err := io.ReadFull(peer, b); err != nil {
				return
			}
			// Both the Read and the poller are spinning by now; either
			// may poll the answer off the completion queue.
			time.Sleep(time.Millisecond)
			if _, err := peer.Write(b); err != nil {
				return
			}
		}
	}()
	b := make([]byte, 1)
	for i := range 50 {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		// A millisecond's answer; a stalled Read waits a minute.
		if d := time.Since(start); d > budget/4 {
			t.Fatalf("round trip %d took %v: the Read spun on after the poller had its message", i, d)
		}
	}
}

// TestPollersSleepByDefault checks that with the default configuration
// only the Reads spin over RDMA: the pollers, which poll the same
// completion queues, never do, so that they do not compete with a spinning
// Read for the CPU.
func TestPollersSleepByDefault(t *testing.T) {
	address := testAddr(t, "rdma")
	s := newStack(t, rubin.Config{Transport: "rdma", MaxMessageSize: 4 << 10})
	c, peer := dialPair(t, s, address)
	go io.Copy(peer, peer)
	b := make([]byte, 64)
	for range 50 {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range s.Stats().Selectors {
		if st.Spins != 0 || st.SpinBudget != 0 {
			t.Errorf("poller %d spun %d rounds, with a budget of %v now; want none", i, st.Spins, st.SpinBudget)
		}
	}
}

// TestPollerSleepsBesideASpinningRead checks that a stack's poller sleeps
// while a Read spins on the same completion queue. Arming the queue fails
// while the Read holds it, and a poller that took that for a race polled
// again at once: 9 to 50 times per round trip in this test, holding the
// processor that the Read needed.
func TestPollerSleepsBesideASpinningRead(t *testing.T) {
	const msgs = 400
	address := testAddr(t, "rdma")
	s := newStack(t, rubin.Config{Transport: "rdma", MaxMessageSize: 4 << 10})
	c, peer := dialPair(t, s, address)
	go io.Copy(peer, peer)
	b := make([]byte, 64)
	for range msgs {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
	}
	var rearms uint64
	for _, st := range s.Stats().Selectors {
		rearms += st.Rearms
	}
	if rearms > msgs {
		t.Errorf("the pollers armed again without sleeping %d times in %d round trips; want at most one per round trip", rearms, msgs)
	}
}

// TestReadSpinEndsAtTheDeadline checks that a Read spinning on the device
// for a message that does not come returns at its deadline, however long
// the spin budget.
func TestReadSpinEndsAtTheDeadline(t *testing.T) {
	const budget = time.Minute
	address := testAddr(t, "rdma")
	s := newStack(t, rubin.Config{Transport: "rdma", MaxMessageSize: 4 << 10, SpinBudget: budget})
	c, _ := dialPair(t, s, address)
	start := time.Now()
	c.SetReadDeadline(start.Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read returned %v, want a deadline error", err)
	}
	if d := time.Since(start); d > budget/4 {
		t.Fatalf("a Read with a 50ms deadline returned after %v", d)
	}
}

// TestRDMAUnavailable checks the errors of the RDMA transport where it
// cannot run: without cgo or Linux, or without an RDMA device.
func TestRDMAUnavailable(t *testing.T) {
	if s, err := rubin.NewStack(rubin.Config{Transport: "rdma"}); err == nil {
		s.Close()
		t.Skip("the RDMA transport is available here")
	}
	_, dialErr := rubin.Dial("rdma", "192.0.2.1:7100")
	_, listenErr := rubin.Listen("rdma", ":0")
	for op, err := range map[string]error{"dial": dialErr, "listen": listenErr} {
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != op || oe.Net != "rdma" {
			t.Errorf("%s: %v, want a *net.OpError of %s rdma", op, err, op)
		}
		if !errors.Is(err, rdma.ErrNotSupported) && !errors.Is(err, rdma.ErrNoDevice) {
			t.Errorf("%s: %v, want rdma.ErrNotSupported or rdma.ErrNoDevice", op, err)
		}
	}
}

// TestBlockedWriteSleeps checks that a Write blocked behind a peer that
// does not read waits for the socket to drain instead of spinning with the
// poller: the poller's select count stays small while the writer waits.
func TestBlockedWriteSleeps(t *testing.T) {
	s := newStack(t, rubin.Config{MaxMessageSize: 64 << 10, Pollers: 1})
	c, _ := dialPair(t, s, "127.0.0.1:0") // the peer never reads

	writeErr := make(chan error, 1)
	go func() {
		chunk := make([]byte, 1<<20)
		for {
			if _, err := c.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
	}()
	selects := func() uint64 {
		return s.Stats().Selectors[0].Selects
	}
	// Wait until the writer is stuck: the count stops moving for three
	// windows in a row (on an emulated CPU the peer's side may still be
	// buffering what arrived after one quiet window).
	for deadline, quiet := time.Now().Add(10*time.Second), 0; quiet < 3; {
		last := selects()
		time.Sleep(100 * time.Millisecond)
		if selects()-last < 10 {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			t.Fatal("the poller never went quiet while the writer was blocked")
		}
	}
	before := selects()
	time.Sleep(300 * time.Millisecond)
	if n := selects() - before; n > 50 {
		t.Errorf("the poller selected %d times in 300ms while the writer waited", n)
	}
	c.Close()
	if err := <-writeErr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("blocked Write after Close: %v, want net.ErrClosed", err)
	}
}

// newStack makes a Stack for cfg, closed when the test ends.
func newStack(t testing.TB, cfg rubin.Config) *rubin.Stack {
	t.Helper()
	s, err := rubin.NewStack(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// dialPair listens on address with s, dials the listener and returns both
// ends, closed when the test ends.
func dialPair(t *testing.T, s *rubin.Stack, address string) (c, peer net.Conn) {
	t.Helper()
	ctx := context.Background()
	ln, err := s.Listen(ctx, address)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		p, err := ln.Accept()
		if err != nil {
			p = nil
		}
		accepted <- p
	}()
	c, err = s.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if peer = <-accepted; peer == nil {
		t.Fatal("Accept failed")
	}
	t.Cleanup(func() { peer.Close() })
	return c, peer
}

func TestCloseWrite(t *testing.T) { testCloseWrite(t, "tcp") }

func TestCloseWriteRDMA(t *testing.T) { testCloseWrite(t, "rdma") }

// testCloseWrite half-closes a connection, as a proxy passes an end of
// stream on: the peer reads everything and then io.EOF, and still answers.
func testCloseWrite(t *testing.T, network string) {
	ln, err := rubin.Listen(network, testAddr(t, network))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		got, err := io.ReadAll(c)
		if err != nil {
			served <- err
			return
		}
		_, err = c.Write(append([]byte("got "), got...))
		served <- err
	}()
	c, err := rubin.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	hc, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T has no CloseWrite", c)
	}
	if err := hc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("more")); err == nil {
		t.Errorf("Write after CloseWrite succeeded")
	}
	answer, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(answer) != "got hello" {
		t.Errorf("answer %q, want %q", answer, "got hello")
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}
