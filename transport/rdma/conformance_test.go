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
