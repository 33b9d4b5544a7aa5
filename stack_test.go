package rubin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/internal/leakcheck"
)

// A stackKind makes one kind of Stack.
type stackKind struct {
	name string
	open func(t *testing.T) *rubin.Stack
}

// stackKinds are the backends a "tcp" Stack has: rubin's channels served by
// selectors, and package net's connections where the selector is not
// supported.
var stackKinds = []stackKind{
	{"selector", func(t *testing.T) *rubin.Stack {
		s, err := rubin.NewStack(rubin.Config{Pollers: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"net", func(*testing.T) *rubin.Stack { return rubin.NewNetStack() }},
}

// TestStackClose has a Stack listen, accept, dial and transfer, with calls
// pending in Accept, Read, Write and Dial, and closes the Stack alone: the
// pending calls and every later one fail with net.ErrClosed, and no
// goroutine or descriptor is left behind.
func TestStackClose(t *testing.T) {
	for _, k := range stackKinds {
		t.Run(k.name, func(t *testing.T) {
			leakcheck.Check(t) // descriptors (and goroutines), after the test's cleanups
			others := goleak.IgnoreCurrent()
			unreachable := blackhole(t)

			s := k.open(t)
			ctx := context.Background()
			ln, err := s.Listen(ctx, "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			c, peer := pair(t, s, ln)
			exchange(t, c, peer)

			// Connections whose peers are not the Stack's, so that the
			// peers stay open: a Read sees the Stack's Close, not EOF.
			// The dialed one's peer never reads, so a Write blocks.
			outside, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer outside.Close()
			dialed, err := s.Dial(ctx, outside.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			dialedPeer, err := outside.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer dialedPeer.Close()
			acceptedPeer, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer acceptedPeer.Close()
			accepted, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}

			pending := map[string]chan error{}
			start := func(name string, f func() error) {
				ch := make(chan error, 1)
				pending[name] = ch
				go func() { ch <- f() }()
			}
			start("Accept", func() error { _, err := ln.Accept(); return err })
			start("Read of a dialed conn", func() error { _, err := dialed.Read(make([]byte, 1)); return err })
			start("Read of an accepted conn", func() error { _, err := accepted.Read(make([]byte, 1)); return err })
			start("Write", func() error {
				chunk := make([]byte, 1<<20)
				for {
					if _, err := dialed.Write(chunk); err != nil {
						return err
					}
				}
			})
			start("Dial", func() error { _, err := s.Dial(ctx, unreachable); return err })
			time.Sleep(100 * time.Millisecond) // let them block
			for name, ch := range pending {
				select {
				case err := <-ch:
					t.Fatalf("%s returned before Close: %v", name, err)
				default:
				}
			}

			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not return")
			}
			for name, ch := range pending {
				select {
				case err := <-ch:
					if !errors.Is(err, net.ErrClosed) {
						t.Errorf("pending %s after Close: %v, want net.ErrClosed", name, err)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("pending %s did not return after Close", name)
				}
			}
			later := map[string]error{}
			_, later["Read"] = peer.Read(make([]byte, 1))
			_, later["Write"] = c.Write([]byte("x"))
			_, later["Accept"] = ln.Accept()
			_, later["Dial"] = s.Dial(ctx, ln.Addr().String())
			_, later["Listen"] = s.Listen(ctx, "127.0.0.1:0")
			later["Close"] = s.Close()
			for name, err := range later {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("%s after Close: %v, want net.ErrClosed", name, err)
				}
			}
			goleak.VerifyNone(t, others)
		})
	}
}

// pair dials ln over s and returns the dialed conn and the accepted one.
func pair(t *testing.T, s *rubin.Stack, ln net.Listener) (c, peer net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		p, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- p
	}()
	c, err := s.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if peer = <-accepted; peer == nil {
		t.FailNow()
	}
	return c, peer
}

// exchange sends "ping" from c to peer and "pong" back.
func exchange(t *testing.T, c, peer net.Conn) {
	t.Helper()
	for _, m := range []struct {
		from, to net.Conn
		msg      string
	}{{c, peer, "ping"}, {peer, c, "pong"}} {
		if _, err := m.from.Write([]byte(m.msg)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, len(m.msg))
		if _, err := io.ReadFull(m.to, b); err != nil {
			t.Fatal(err)
		}
		if string(b) != m.msg {
			t.Fatalf("read %q, want %q", b, m.msg)
		}
	}
}

// blackhole returns a loopback address whose connects stay pending: a
// listener that never accepts, with its backlog cut to zero (listen again
// on a listening socket sets it) and its queue already full, so the kernel
// drops further SYNs. Everything is closed when the test ends.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Control(func(fd uintptr) { err = unix.Listen(int(fd), 0) }); err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr // the queue is full
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("connects to a full backlog kept succeeding")
	return ""
}

// TestDialerHTTP runs net/http's server on a ListenConfig's listener and
// its client on a Dialer's connections, both on one Stack; closing the
// Stack stops the server.
func TestDialerHTTP(t *testing.T) {
	kinds := append(stackKinds, stackKind{"rdma", func(t *testing.T) *rubin.Stack {
		testAddr(t, "rdma") // skips without an RDMA device
		s, err := rubin.NewStack(rubin.Config{Transport: "rdma", Pollers: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			s := k.open(t)
			defer s.Close()
			address := "127.0.0.1:0"
			if k.name == "rdma" {
				address = testAddr(t, "rdma")
			}
			// net/http asks for "tcp"; an "rdma" Stack carries it over RDMA.
			ln, err := (&rubin.ListenConfig{Stack: s}).Listen(context.Background(), "tcp", address)
			if err != nil {
				t.Fatal(err)
			}
			body := bytes.Repeat([]byte("rubin "), 100<<10) // longer than one message
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "%s ", r.URL.Path)
				w.Write(body)
			})}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()

			client := &http.Client{Transport: &http.Transport{DialContext: (&rubin.Dialer{Stack: s}).DialContext}}
			defer client.CloseIdleConnections()
			for range 3 {
				resp, err := client.Get("http://" + ln.Addr().String() + "/hello")
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if want := append([]byte("/hello "), body...); !bytes.Equal(got, want) {
					t.Fatalf("got %d bytes %.20q..., want %d bytes %.20q...", len(got), got, len(want), want)
				}
			}
			if k.name != "net" {
				if n := s.Stats().Transport.ConnsOpened; n != 2 {
					t.Errorf("the Stack opened %d connections, want 2: the client's, kept alive, and the server's", n)
				}
			}

			s.Close()
			select {
			case err := <-served:
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("Serve after the Stack's Close: %v, want net.ErrClosed", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Serve did not return after the Stack's Close")
			}
			srv.Close()
		})
	}
}

// TestStackCloseRDMA checks that closing an RDMA Stack that listened,
// accepted, dialed and transferred ends a pending Accept and later calls
// with net.ErrClosed and releases the device's descriptors and every
// goroutine.
func TestStackCloseRDMA(t *testing.T) {
	address := testAddr(t, "rdma")
	leakcheck.Check(t)
	others := goleak.IgnoreCurrent()
	s, err := rubin.NewStack(rubin.Config{Transport: "rdma", Pollers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ln, err := s.Listen(ctx, address)
	if err != nil {
		t.Fatal(err)
	}
	c, peer := pair(t, s, ln)
	exchange(t, c, peer)
	accepted := make(chan error, 1)
	go func() { _, err := ln.Accept(); accepted <- err }()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("pending Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pending Accept did not return after Close")
	}
	_, rerr := peer.Read(make([]byte, 1))
	_, werr := c.Write([]byte("x"))
	_, derr := s.Dial(ctx, ln.Addr().String())
	for name, err := range map[string]error{"Read": rerr, "Write": werr, "Dial": derr} {
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s after Close: %v, want net.ErrClosed", name, err)
		}
	}
	goleak.VerifyNone(t, others)
}

// TestDialerNetworks: a Dialer or ListenConfig with a Stack takes the
// Stack's transport and "tcp", and refuses any other network; without
// one, it uses the default Stack of the network named.
func TestDialerNetworks(t *testing.T) {
	s, err := rubin.NewStack(rubin.Config{Pollers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	var unknown net.UnknownNetworkError
	if _, err := (&rubin.Dialer{Stack: s}).DialContext(ctx, "rdma", "127.0.0.1:1"); !errors.As(err, &unknown) {
		t.Errorf("dial rdma on a tcp Stack: %v, want a net.UnknownNetworkError", err)
	}
	if _, err := (&rubin.ListenConfig{Stack: s}).Listen(ctx, "udp", "127.0.0.1:0"); !errors.As(err, &unknown) {
		t.Errorf("listen udp on a tcp Stack: %v, want a net.UnknownNetworkError", err)
	}
	if _, err := (&rubin.Dialer{}).Dial("udp", "127.0.0.1:1"); !errors.As(err, &unknown) {
		t.Errorf("dial udp: %v, want a net.UnknownNetworkError", err)
	}

	ln, err := (&rubin.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0") // the default stack
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := (&rubin.Dialer{Stack: s}).Dial("tcp", ln.Addr().String()) // s dials it
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := s.Stats().Transport.ConnsOpened; n != 1 {
		t.Errorf("s opened %d connections, want 1: the dialed one", n)
	}
}
