//go:build linux && cgo

package rdma

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/internal/rdmatest"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// TestHostilePeers puts peers that complete our handshake and then break
// the rules on one server selector, with the default configuration,
// beside a correct client: one sends beyond its credits, one floods within
// them, one sends and never reads. The server must hold the first to its
// window (see below) and cut the last off once its send queue is full, keep
// its pool within bounds, and keep answering the correct client, whose
// round trips stay within a small multiple of those it saw alone.
func TestHostilePeers(t *testing.T) {
	addr := rdmatest.Addr(t)
	server, _ := newTransport(t, Config{})
	goodTr, _ := newTransport(t, Config{})
	badTr, _ := newTransport(t, Config{})
	l, err := server.Listen(context.Background(), net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	echoServer(t, l)
	dial := func(tr *Transport) *Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := tr.Dial(ctx, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	good := dial(goodTr)
	rtts := func(n int) time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			start := time.Now()
			roundTrip(t, good, 64)
			d[i] = time.Since(start)
		}
		slices.Sort(d)
		return d[n/2]
	}
	rtts(50)
	alone := rtts(300)

	stop := make(chan struct{})
	var wg sync.WaitGroup

	// All three connect before any breaks a rule: they share one address,
	// which the listener refuses for a while once a connection from it
	// broke the protocol (penalties).
	cheat, flood, mute := dial(badTr), dial(badTr), dial(badTr)

	// A cheat: it believes it holds far more credits than we granted.
	cheat.mu.Lock()
	cheat.credits, cheat.maxCredits = 1<<14, 1<<14
	cheat.mu.Unlock()
	cheatErr := make(chan error, 1)
	go func() {
		for {
			for range 100 {
				if err := send(t, cheat, make([]byte, 64)); err != nil {
					cheatErr <- err
					return
				}
			}
			if _, err := cheat.Receive(); err != nil {
				cheatErr <- err
				return
			}
		}
	}()

	// A flood within the credits, read back as fast as it comes.
	defer func() { close(stop); flood.Close(); wg.Wait() }()
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if send(t, flood, make([]byte, 1024)) != nil {
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			b, err := flood.Receive()
			if err != nil {
				return
			}
			b.Release()
		}
	}()

	// A peer that sends and never reads: our echoes back up.
	muteErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				muteErr <- nil
				return
			default:
			}
			if err := send(t, mute, make([]byte, 64)); err != nil {
				muteErr <- err
				return
			}
		}
	}()

	under := rtts(300)
	// The cheat ends one of two ways: a message lands in a receive it
	// had no credit for and we cut it off with a protocol error, or the
	// device answers its sends beyond our posted receives with
	// receiver-not-ready, which paces it to the receives we post (and
	// breaks its queue pair once its retries run out). Either way it gets
	// no more of the server than its window.
	select {
	case err := <-cheatErr:
		t.Logf("the cheat's connection: %v (protocol errors counted by the server: %d)", err, server.protoErrs.Load())
	case <-time.After(10 * time.Second):
		t.Logf("the cheat is still connected after 10 s, paced by receiver-not-ready retries")
	}
	select {
	case err := <-muteErr:
		if err == nil {
			t.Errorf("the mute peer is still connected")
		}
		t.Logf("the mute peer's connection: %v", err)
	case <-time.After(20 * time.Second):
		t.Errorf("the mute peer is still connected after 20 s")
	}
	st := server.pool.Stats()
	t.Logf("round-trip p50 alone %v, beside the hostile peers %v; server pool: %d buffers in use, %d carved", alone, under, st.InUse, st.Allocated)
	if st.InUse > st.MaxBuffers/2 {
		t.Errorf("the server holds %d of its %d buffers", st.InUse, st.MaxBuffers)
	}
	if under > 20*alone {
		t.Errorf("round-trip p50 %v beside hostile peers, %v alone", under, alone)
	}
	if err := send(t, good, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, good); string(got) != "still here" {
		t.Fatalf("got %q", got)
	}
}

// TestHalfOpenHandshakeTimesOut: a peer that asks to connect, with a valid
// hello, and never completes the handshake holds a queue pair and its
// receives only until ConnectTimeout; then the listener forgets it and
// frees them.
func TestHalfOpenHandshakeTimesOut(t *testing.T) {
	addr := rdmatest.Addr(t)
	server, _ := newTransport(t, Config{ConnectTimeout: time.Second})
	l, err := server.Listen(context.Background(), net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	qps := liveQPs.Load()

	// The peer: rdma_cm alone, no queue pair, so nothing answers the
	// server's accept.
	ch, err := verbs.CreateEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Destroy()
	id, err := verbs.CreateID(ch)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	await := func(want verbs.EventType) {
		t.Helper()
		var ev verbs.Event
		var storage [verbs.PrivateMax]byte
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			switch err := ch.Get(&ev, &storage); {
			case errors.Is(err, verbs.ErrNoEvent):
				continue
			case err != nil:
				t.Fatal(err)
			case ev.Type != want:
				t.Fatalf("event %v, want %v", ev.Type, want)
			}
			return
		}
		t.Fatalf("no %v event", want)
	}
	la := l.Addr().(*Addr)
	if err := id.ResolveAddr(la.IP.String(), la.Port, 2000); err != nil {
		t.Fatal(err)
	}
	await(verbs.AddrResolved)
	if err := id.ResolveRoute(2000); err != nil {
		t.Fatal(err)
	}
	await(verbs.RouteResolved)
	if err := id.Connect(hello{maxMessage: 4096, credits: 1, ctrlCredits: 1, maxCredits: 1}.encode()); err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.pending)
	}
	start := time.Now()
	for pending() == 0 && time.Since(start) < 10*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	if pending() != 1 || liveQPs.Load() != qps+1 {
		t.Fatalf("%d pending connections and %d queue pairs after the request; want 1 and %d", pending(), liveQPs.Load(), qps+1)
	}
	for (pending() != 0 || liveQPs.Load() != qps) && time.Since(start) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if pending() != 0 || liveQPs.Load() != qps {
		t.Fatalf("%d pending connections and %d queue pairs %v after the request; want none left after ConnectTimeout (1 s)", pending(), liveQPs.Load()-qps, time.Since(start))
	}
	t.Logf("the half-open connection was dropped after %v", time.Since(start))
}
