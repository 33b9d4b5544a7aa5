package rdma

import (
	"net"
	"testing"
)

func TestAddrString(t *testing.T) {
	for _, tc := range []struct {
		a    *Addr
		want string
	}{
		{&Addr{IP: net.IPv4(192, 0, 2, 7), Port: 18515}, "192.0.2.7:18515"},
		{&Addr{IP: net.ParseIP("2001:db8::1"), Port: 4791}, "[2001:db8::1]:4791"},
		{&Addr{Port: 80}, ":80"},
		{nil, "<nil>"},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("%#v.String() = %q; want %q", tc.a, got, tc.want)
		}
		if got := tc.a.Network(); got != "rdma" {
			t.Errorf("%#v.Network() = %q; want rdma", tc.a, got)
		}
	}
}
