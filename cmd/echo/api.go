package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"strings"
	"time"
)

// An api is one way of running the echo protocol: a server and a client
// written against one of rubin's programming interfaces, or against Go's net
// package as the baseline. Each file that provides one registers it from an
// init function with registerAPI, under the name that -api selects.
//
// The contract, for both functions:
//
//   - Transport: cfg.network is the -transport value ("tcp" or "rdma"), to be
//     handed to the transport unchanged; an api that cannot use it returns
//     an error, and says so up front in its check function.
//   - Cancellation: both return promptly once ctx is done, having closed
//     every channel, connection and listener they opened and stopped every
//     goroutine they started.
//   - Spin: cfg.spin is the -spin busy-poll budget. An api honours it only if
//     its spin field is true; otherwise the command reports spin_us=0.
//
// serve listens on cfg.addr, calls cfg.ready exactly once with the bound
// address before it accepts anything, and then echoes every byte it receives
// on each connection back on the same connection, for any number of
// concurrent connections, until ctx is done. It returns nil after ctx is
// done, and an error if it cannot listen or cannot go on accepting. A
// failure of one connection is logged to cfg.log and does not stop the
// server.
//
// client opens cfg.conns connections to cfg.addr and on each runs a
// ping-pong with up to cfg.depth messages in flight, until rec runs out of
// messages. For every message it:
//
//  1. takes a sequence number with rec.Next (and stops sending on this
//     connection once Next reports false);
//  2. fills a payload of cfg.size bytes with fillPayload(buf, seq);
//  3. notes the time, sends the payload, receives its cfg.size-byte echo,
//     and takes the round-trip time as the time since the note;
//  4. checks the echo with checkPayload(echo, seq), and fails with its error
//     if the echo is wrong;
//  5. calls rec.Record(seq, rtt).
//
// The hot path must not allocate per message: buffers are made once per
// connection. client returns nil once every message it took has been
// recorded. On the first failure it stops all its connections and returns
// an error that names the connection and the message; it must not call
// rec.Record after it has returned. If ctx is done first, it returns
// context.Cause(ctx).
type api struct {
	serve  func(ctx context.Context, cfg serverConfig) error
	client func(ctx context.Context, cfg clientConfig, rec *recorder) error
	// spin reports whether serve and client honour cfg.spin.
	spin bool
	// oneway reports whether client streams one way with cfg.oneway and
	// serve counts such a stream (see oneway.go).
	oneway bool
	// check, if set, rejects a -transport value the api cannot run over,
	// with an error that says why, before serve or client runs.
	check func(network string) error
}

// serverConfig is what an api's serve function is given.
type serverConfig struct {
	network string        // the -transport value: "tcp" or "rdma"
	addr    string        // the address to listen on; port 0 picks a free port
	spin    time.Duration // the busy-poll budget, if the api honours one
	// ready is called once, with the bound address, when the server listens.
	ready func(net.Addr)
	// log receives errors that end one connection but not the server.
	log *log.Logger
}

// clientConfig is what an api's client function is given.
type clientConfig struct {
	network string        // the -transport value: "tcp" or "rdma"
	addr    string        // the server's address
	size    int           // payload bytes per message, each way
	conns   int           // connections to open
	depth   int           // messages in flight per connection
	spin    time.Duration // the busy-poll budget, if the api honours one
	oneway  bool          // stream one way (-oneway); only apis with oneway set
	// replyTimeout is -reply-timeout: runClient, not the api, cancels
	// the client once no message has been recorded for this long; zero
	// waits without limit.
	replyTimeout time.Duration
	// times is where runClient, not the api, writes each measured
	// message's send and round-trip times (-times); nil: nowhere.
	times io.Writer
}

// apis holds the registered apis by name. It is written only by init
// functions, through registerAPI.
var apis = map[string]api{}

// registerAPI makes a selectable as -api name. It panics if the name is taken
// or a function is missing, which is a mistake in this program.
func registerAPI(name string, a api) {
	if _, dup := apis[name]; dup {
		panic("echo: api " + name + " registered twice")
	}
	if a.serve == nil || a.client == nil {
		panic("echo: api " + name + " registered without serve and client functions")
	}
	apis[name] = a
}

// lookupAPI returns the api registered as name, or an error that lists the
// registered ones.
func lookupAPI(name string) (api, error) {
	a, ok := apis[name]
	if !ok {
		return api{}, fmt.Errorf("unknown api %q (available: %s)", name, strings.Join(apiNames(), ", "))
	}
	return a, nil
}

// apiNames returns the registered api names: the gonet baseline first, then
// the others in alphabetical order.
func apiNames() []string {
	names := make([]string, 0, len(apis))
	for name := range apis {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == baselineAPI:
			return -1
		case b == baselineAPI:
			return 1
		}
		return strings.Compare(a, b)
	})
	return names
}
