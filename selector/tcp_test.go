//go:build linux

package selector_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rubin-go/rubin/internal/leakcheck"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/tcp"
)

// TestTCPConns serves many TCP connections from one selector: each
// becomes readable when its peer sends, and only then.
func TestTCPConns(t *testing.T) {
	leakcheck.Check(t)
	tr, err := tcp.New(tcp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	l, err := tr.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := newSelector(t, selector.Config{})
	const n = 16
	clients := make([]*tcp.Conn, n)
	keys := make(map[*selectionkey.Key]int)
	for i := range n {
		c, err := tr.Dial(context.Background(), l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
		sc, err := l.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		keys[register(t, s, sc, selectionkey.OpRead)] = i
	}
	if n, err := s.SelectNow(); n != 0 || err != nil {
		t.Fatalf("SelectNow before anything was sent = %d, %v", n, err)
	}
	// Every other client sends.
	for i := 0; i < n; i += 2 {
		b, err := tr.Pool().TryGet()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(b, "from %d", i)
		if err := clients[i].Send(b); err != nil {
			t.Fatal(err)
		}
	}
	got := make(map[int]bool)
	waitFor(t, "every sender's key to be selected", func() bool {
		if _, err := s.SelectTimeout(patience); err != nil {
			t.Fatal(err)
		}
		for _, k := range s.SelectedKeys() {
			i := keys[k]
			if i%2 != 0 {
				t.Fatalf("key of client %d, which sent nothing, selected for %v", i, k.Ready())
			}
			if k.Ready() != selectionkey.OpRead {
				t.Errorf("key ready for %v; want read", k.Ready())
			}
			if got[i] {
				continue
			}
			got[i] = true
			b, err := k.Channel().(*tcp.Conn).Receive()
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("from %d", i); string(b.Bytes()) != want {
				t.Errorf("client %d's message = %q; want %q", i, b.Bytes(), want)
			}
			b.Release()
		}
		return len(got) == n/2
	})
	if n, err := s.SelectNow(); n != 0 || err != nil {
		t.Errorf("SelectNow after every message was received = %d, %v", n, err)
	}
}
