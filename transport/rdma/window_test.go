//go:build linux && cgo

package rdma

import (
	"bytes"
	"testing"
	"time"
)

// TestWindowWidensForStreamsOnly: a connection that echoes one message at
// a time keeps its first receive window; one that streams widens it,
// doubling, up to RecvDepth, and every message still arrives in order.
func TestWindowWidensForStreamsOnly(t *testing.T) {
	tr, addr := newTransport(t, Config{})
	client, server := pair(t, tr, addr)
	for i := range 50 {
		if err := send(t, client, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, server); got[0] != byte(i) {
			t.Fatalf("message %d: got %d", i, got[0])
		}
		if err := send(t, server, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		receive(t, client)
	}
	if n := tr.widenings.Load(); n != 0 {
		t.Fatalf("ping-pong widened a window %d times", n)
	}

	const msgs = 2000
	payload := bytes.Repeat([]byte{'x'}, 1000)
	sent := make(chan error, 1)
	go func() {
		for i := range msgs {
			payload[0], payload[1] = byte(i), byte(i>>8)
			if err := send(t, client, payload); err != nil {
				sent <- err
				return
			}
		}
		sent <- client.Flush()
	}()
	for i := range msgs {
		got := receive(t, server)
		if int(got[0])|int(got[1])<<8 != i&0xffff || len(got) != len(payload) {
			t.Fatalf("message %d: got %d bytes, numbered %d", i, len(got), int(got[0])|int(got[1])<<8)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	server.mu.Lock()
	window := server.window
	server.mu.Unlock()
	if window < 16 || window > DefaultRecvDepth {
		t.Errorf("after a stream of %d messages the receive window is %d; want it widened toward %d", msgs, window, DefaultRecvDepth)
	}
	t.Logf("window %d after %d widenings", window, tr.widenings.Load())
}

// TestWindowLeavesHalfThePool: windows widen only while the pool keeps
// half its buffers for other connections and for messages. (Both ends
// share one pool here, so the sender's queue is kept short: queued
// messages hold buffers too.)
func TestWindowLeavesHalfThePool(t *testing.T) {
	tr, addr := newTransport(t, Config{MaxBuffers: 64, MaxMessageSize: 4 << 10, SendQueue: 16})
	client, server := pair(t, tr, addr)
	go func() {
		for range 1000 {
			if send(t, client, []byte("x")) != nil {
				return
			}
		}
	}()
	for range 1000 {
		receive(t, server)
	}
	server.mu.Lock()
	window := server.window
	server.mu.Unlock()
	if window > 32 {
		t.Errorf("receive window %d in a pool of 64 buffers; want at most half", window)
	}
	if tr.widenings.Load() == 0 {
		t.Errorf("the window never widened")
	}
}

// TestCreditsRideOnReplies: a selector server that answers every message
// returns the message's credit with its answer, so a ping-pong costs it no
// credit updates of their own (each a send, which under Soft-RoCE is a
// system call). The blocking client's credits ride on its next request
// as well, most of the time: the poller that serves it races the request.
func TestCreditsRideOnReplies(t *testing.T) {
	srv, addr := newTransport(t, Config{})
	cli, _ := newTransport(t, Config{})
	c := echoClientOf(t, srv, cli, addr)

	const msgs = 400
	for range 20 {
		roundTrip(t, c, 64)
	}
	before := srv.Stats().ControlOut
	for range msgs {
		roundTrip(t, c, 64)
	}
	updates := srv.Stats().ControlOut - before
	t.Logf("server: %d credit updates for %d echoed messages; client: %d", updates, msgs, cli.Stats().ControlOut)
	if updates > msgs/20 {
		t.Errorf("the echo server sent %d credit updates for %d messages it answered; want the credits on its answers", updates, msgs)
	}
}

// TestDeferredCreditsReachASleepingPoller: a blocking reader that takes
// its messages slowly, so that the poller serving its connection sleeps in
// between, still returns every credit: the update that Receive leaves to
// the next poll wakes the poller. A lost update would stop the sender for
// good, since the reader sends nothing that could carry the credits.
func TestDeferredCreditsReachASleepingPoller(t *testing.T) {
	tr, addr := newTransport(t, Config{})
	client, server := pair(t, tr, addr)
	const msgs = 30
	sent := make(chan error, 1)
	go func() {
		for i := range msgs {
			if err := send(t, client, []byte{byte(i)}); err != nil {
				sent <- err
				return
			}
		}
		sent <- client.Flush()
	}()
	stuck := time.AfterFunc(20*time.Second, func() {
		t.Errorf("the reader waited 20 s for its messages\n%s", tr.dumpState())
		server.Close()
	})
	defer stuck.Stop()
	for i := range msgs {
		time.Sleep(5 * time.Millisecond)
		if got := receive(t, server); got[0] != byte(i) {
			t.Fatalf("message %d: got %d", i, got[0])
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}
