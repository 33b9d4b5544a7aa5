package addr

import (
	"context"
	"errors"
	"net"
	"testing"
)

func TestResolve(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		in   string
		want string
	}{
		{":7100", ":7100"},
		{"127.0.0.1:0", "127.0.0.1:0"},
		{"[::1]:80", "[::1]:80"},
		{"[fe80::1%lo]:80", "[fe80::1%lo]:80"},
		{"localhost:http", "127.0.0.1:80"},
	} {
		got, err := Resolve(ctx, "rdma", "dial", tc.in)
		if err != nil {
			t.Errorf("Resolve(%q): %v", tc.in, err)
			continue
		}
		if got.String() != tc.want {
			t.Errorf("Resolve(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{"no-port", "127.0.0.1:nosuchservice"} {
		_, err := Resolve(ctx, "rdma", "listen", in)
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Net != "rdma" || oe.Op != "listen" {
			t.Errorf("Resolve(%q) = %v; want a *net.OpError for listen rdma", in, err)
		}
	}
}
