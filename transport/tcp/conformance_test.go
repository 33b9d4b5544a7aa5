//go:build linux

package tcp

import (
	"context"
	"net"
	"testing"

	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/channel/channeltest"
)

// factory describes tr, listening on host, to the conformance suite.
func factory(tr *Transport, host string) channeltest.Factory {
	return channeltest.Factory{
		Name:           "tcp",
		MaxMessageSize: tr.MaxMessageSize(),
		Pool:           tr.Pool(),
		Listen: func() (channel.Listener, error) {
			return tr.Listen(context.Background(), net.JoinHostPort(host, "0"))
		},
		Dial: func(ctx context.Context, addr net.Addr) (channel.Conn, error) {
			return tr.Dial(ctx, addr.String())
		},
		Connect: func(ctx context.Context, addr net.Addr) (channel.Conn, error) {
			return tr.Connect(ctx, addr.String())
		},
	}
}

func TestConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		host string
		cfg  Config
	}{
		{"default", "127.0.0.1", Config{}},
		// A staging buffer smaller than most messages, and a short send
		// queue, take the transport's other paths.
		{"small-buffers", "127.0.0.1", Config{MaxMessageSize: 100 << 10, ReadBuffer: 256, SendQueue: 8 << 10}},
		{"ipv6", "::1", Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.host == "::1" {
				ln, err := net.Listen("tcp6", "[::1]:0")
				if err != nil {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				ln.Close()
			}
			tr, err := New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			channeltest.Run(t, factory(tr, tc.host))
		})
	}
}
