// Package rubin is the net.Conn face of rubin-go: Listen and Dial give a
// net.Listener and net.Conn over any of rubin's transports, so a program
// that speaks net.Conn switches from TCP to RDMA by changing the network
// name (or a -transport flag):
//
//	conn, err := rubin.Dial("tcp", "10.0.0.2:7100")  // was net.Dial("tcp", ...)
//
// TCP is built in. RDMA is opt-in, so that programs that do not use it
// need neither cgo nor the verbs libraries: import its transport for its
// side effect, as with a database/sql driver,
//
//	import _ "github.com/rubin-go/rubin/transport/rdma"
//
// and the network "rdma" works; without the import, Dial and Listen of
// "rdma" fail with an error that names it. Metrics are opt-in too
// (metrics.Collector.AddStack).
//
// Underneath, every connection is a message channel (package channel)
// registered with a selector (package selector); a few poller goroutines
// run the selectors and hand received messages to readers. Read and Write
// are the byte stream net.Conn promises: a Write is sent as one message or,
// above the maximum message size, as several, and a Read returns bytes of
// one message at a time. Programs that want the message channels, the
// selector and zero-copy buffers directly use those packages instead.
//
// Errors follow package net: *net.OpError wrapping, io.EOF when the peer
// closed, net.ErrClosed after Close, os.ErrDeadlineExceeded after a
// deadline.
package rubin

import (
	"context"
	"net"
)

// Listen announces on the local address with the given network's
// transport ("tcp" or "rdma"), using the default configuration.
func Listen(network, address string) (net.Listener, error) {
	return (&Config{Transport: network}).Listen(context.Background(), address)
}

// Dial connects to the address with the given network's transport
// ("tcp" or "rdma"), using the default configuration.
func Dial(network, address string) (net.Conn, error) {
	return DialContext(context.Background(), network, address)
}

// DialContext is Dial with a context that bounds the connect.
func DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return (&Config{Transport: network}).Dial(ctx, address)
}
