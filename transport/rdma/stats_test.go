//go:build linux && cgo

package rdma

import (
	"bytes"
	"testing"
	"time"
)

// TestStatsOutliveTheirConnections: each connection counts its own
// traffic, and the transport's totals add up the open connections and the
// closed ones, so no counter goes back when a connection closes.
func TestStatsOutliveTheirConnections(t *testing.T) {
	tr, addr := newTransport(t, Config{})
	payload := bytes.Repeat([]byte{'x'}, 100)
	exchange := func(n int) {
		client, server := pair(t, tr, addr)
		for i := range n {
			if err := send(t, client, payload); err != nil {
				t.Fatal(err)
			}
			if got := receive(t, server); len(got) != len(payload) {
				t.Fatalf("message %d: %d bytes, want %d", i, len(got), len(payload))
			}
		}
		client.Close()
		server.Close()
		deadline := time.Now().Add(10 * time.Second)
		for tracked(tr, client) || tracked(tr, server) {
			if time.Now().After(deadline) {
				t.Fatal("the closed connections were not released within 10 s")
			}
			time.Sleep(time.Millisecond)
		}
	}
	check := func(when string, want uint64) {
		t.Helper()
		st := tr.Stats()
		if st.MessagesOut != want || st.MessagesIn != want || st.BytesOut != want*uint64(len(payload)) || st.BytesIn != st.BytesOut {
			t.Errorf("%s: %d messages (%d bytes) out and %d (%d bytes) in; want %d of %d bytes each way",
				when, st.MessagesOut, st.BytesOut, st.MessagesIn, st.BytesIn, want, len(payload))
		}
	}
	exchange(30)
	check("after one connection closed", 30)
	client, server := pair(t, tr, addr)
	for range 12 {
		if err := send(t, client, payload); err != nil {
			t.Fatal(err)
		}
		receive(t, server)
	}
	check("with a second connection open", 42)
	client.Close()
	server.Close()
	exchange(8)
	check("after more connections", 50)
}

// tracked reports whether tr still holds c among its open channels.
func tracked(tr *Transport, c *Conn) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	_, ok := tr.chans[c]
	return ok
}
