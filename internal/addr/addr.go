// Package addr resolves "host:port" strings to TCP-style addresses, the way
// both of rubin's transports name endpoints: RDMA connections over rdma_cm
// use IP addresses and ports in the TCP port space, like TCP itself.
package addr

import (
	"context"
	"net"
)

// Resolve resolves address for op ("dial" or "listen") on network ("tcp"
// or "rdma"). An empty host stays unspecified; a name with both IPv4 and
// IPv6 addresses resolves to an IPv4 one. Errors are *net.OpError.
func Resolve(ctx context.Context, network, op, address string) (*net.TCPAddr, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: op, Net: network, Err: err}
	}
	portNum, err := net.DefaultResolver.LookupPort(ctx, "tcp", port)
	if err != nil {
		return nil, &net.OpError{Op: op, Net: network, Err: err}
	}
	if host == "" {
		return &net.TCPAddr{Port: portNum}, nil
	}
	if ip, zone, ok := parseIP(host); ok {
		return &net.TCPAddr{IP: ip, Port: portNum, Zone: zone}, nil
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, &net.OpError{Op: op, Net: network, Err: err}
	}
	best := ips[0]
	for _, ip := range ips {
		if ip.IP.To4() != nil {
			best = ip
			break
		}
	}
	return &net.TCPAddr{IP: best.IP, Port: portNum, Zone: best.Zone}, nil
}

// parseIP parses a literal IP address with an optional %zone.
func parseIP(host string) (net.IP, string, bool) {
	ip, zone := host, ""
	for i := 0; i < len(host); i++ {
		if host[i] == '%' {
			ip, zone = host[:i], host[i+1:]
			break
		}
	}
	parsed := net.ParseIP(ip)
	return parsed, zone, parsed != nil
}
