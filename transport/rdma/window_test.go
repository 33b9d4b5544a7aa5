//go:build linux && cgo

package rdma

import (
	"bytes"
	"testing"
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
