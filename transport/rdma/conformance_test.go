//go:build linux && cgo

package rdma

import (
	"context"
	"net"
	"testing"

	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/channel/channeltest"
	"github.com/rubin-go/rubin/internal/rdmatest"
)

// newTransport returns a transport closed when the test ends, and the
// address of the device to listen on.
func newTransport(t testing.TB, cfg Config) (*Transport, string) {
	t.Helper()
	addr := rdmatest.Addr(t)
	tr, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	stop := debugLoop(tr)
	t.Cleanup(func() {
		stop()
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr, addr
}

func factory(tr *Transport, addr, name string) channeltest.Factory {
	return channeltest.Factory{
		Name:           name,
		MaxMessageSize: tr.MaxMessageSize(),
		Pool:           tr.Pool(),
		Listen: func() (channel.Listener, error) {
			return tr.Listen(context.Background(), net.JoinHostPort(addr, "0"))
		},
		Dial: func(ctx context.Context, a net.Addr) (channel.Conn, error) {
			return tr.Dial(ctx, a.String())
		},
		Connect: func(ctx context.Context, a net.Addr) (channel.Conn, error) {
			return tr.Connect(ctx, a.String())
		},
	}
}

func TestConformance(t *testing.T) {
	tr, addr := newTransport(t, Config{})
	channeltest.Run(t, factory(tr, addr, "rdma"))
}

func TestConformanceSRQ(t *testing.T) {
	tr, addr := newTransport(t, Config{SharedReceiveQueue: true, SRQSize: 64, MaxMessageSize: 64 << 10})
	channeltest.Run(t, factory(tr, addr, "rdma-srq"))
}

// TestAddrs checks that listeners and both ends of a connection report
// their addresses as *Addr, which a dial accepts back.
func TestAddrs(t *testing.T) {
	tr, addr := newTransport(t, Config{})
	l, err := tr.Listen(context.Background(), net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan channel.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	c, err := tr.Dial(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-accepted
	if s == nil {
		return
	}
	defer s.Close()
	for _, a := range []net.Addr{l.Addr(), c.LocalAddr(), c.RemoteAddr(), s.LocalAddr(), s.RemoteAddr()} {
		ra, ok := a.(*Addr)
		if !ok || ra.Network() != "rdma" || ra.IP == nil || ra.Port == 0 {
			t.Errorf("address %#v: want an *rdma.Addr with an IP and a port", a)
		}
	}
}
