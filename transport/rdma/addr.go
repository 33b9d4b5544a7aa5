package rdma

import (
	"net"
	"strconv"
)

// Addr is the address of an RDMA endpoint. rdma_cm names endpoints by IP
// address and port, in the TCP port space, but an Addr's network is
// "rdma", so that an address says which transport it belongs to. Conns
// and Listeners report their addresses as *Addr.
type Addr struct {
	IP   net.IP
	Port int
}

// Network returns "rdma".
func (a *Addr) Network() string { return "rdma" }

// String returns host:port, with an IPv6 host in brackets; an
// unspecified IP is left out, as in ":port".
func (a *Addr) String() string {
	if a == nil {
		return "<nil>"
	}
	host := ""
	if len(a.IP) != 0 {
		host = a.IP.String()
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// rdmaAddr converts the TCP-style address of rdma_cm and of name
// resolution; nil stays nil.
func rdmaAddr(a *net.TCPAddr) *Addr {
	if a == nil {
		return nil
	}
	return &Addr{IP: a.IP, Port: a.Port}
}
