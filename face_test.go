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

	"github.com/rubin-go/rubin"
)

func TestEchoSmoke(t *testing.T) {
	ln, err := rubin.Listen("tcp", "127.0.0.1:0")
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
	c, err := rubin.Dial("tcp", ln.Addr().String())
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

// TestBlockedWriteSleeps checks that a Write blocked behind a peer that
// does not read waits for the socket to drain instead of spinning with the
// poller: the poller's select count stays small while the writer waits.
func TestBlockedWriteSleeps(t *testing.T) {
	cfg := rubin.Config{MaxMessageSize: 64 << 10, Pollers: 1} // a stack of its own
	ctx := context.Background()
	ln, err := cfg.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := cfg.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := <-accepted // never reads until the end
	defer peer.Close()

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
		st, err := cfg.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Selectors[0].Selects
	}
	// Wait until the writer is stuck: the count stops moving.
	var before uint64
	for deadline := time.Now().Add(10 * time.Second); ; {
		before = selects()
		time.Sleep(100 * time.Millisecond)
		if selects()-before < 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the poller never went quiet while the writer was blocked")
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := selects() - before; n > 50 {
		t.Errorf("the poller selected %d times in 300ms while the writer waited", n)
	}
	c.Close()
	if err := <-writeErr; !errors.Is(err, net.ErrClosed) {
		t.Errorf("blocked Write after Close: %v, want net.ErrClosed", err)
	}
}
