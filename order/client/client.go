// Package client holds clients of the ordering service (package order)
// that pass over faulty orderers: a Deliverer, which hands on only blocks
// it verified by the orderers' signatures and Fabric's hash rules and
// leaves an orderer that fails, lies or withholds, and a Broadcaster,
// which gives an envelope to the next orderer when one is silent, fails
// or is unavailable. Both speak Fabric's AtomicBroadcast over gRPC.
package client

import (
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Options are what both clients take. A zero field takes its default.
type Options struct {
	// Patience is how long an orderer may keep the client waiting before
	// the client turns to the next (default 10s).
	Patience time.Duration
	// DialOptions are given to grpc.NewClient (default: no TLS).
	DialOptions []grpc.DialOption
	Logger      *slog.Logger // nil: discard
}

func (o Options) normalized() Options {
	if o.Patience <= 0 {
		o.Patience = 10 * time.Second
	}
	if o.DialOptions == nil {
		o.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}
