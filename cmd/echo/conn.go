package main

import (
	"context"
	"net"

	"github.com/rubin-go/rubin"
)

// The conn api runs the echo protocol over rubin's net.Conn face, exactly as
// a program written for package net would after swapping net.Listen and
// net.Dial for rubin's: the same server and client code as gonet, with the
// listener and connections from a rubin.Config whose pollers spin for -spin.
func init() {
	registerAPI("conn", api{
		serve: func(ctx context.Context, cfg serverConfig) error {
			rc := rubin.Config{Transport: cfg.network, SpinBudget: cfg.spin}
			return serveNetConn(ctx, cfg, func(ctx context.Context, _, address string) (net.Listener, error) {
				ln, err := rc.Listen(ctx, address)
				if err != nil {
					return nil, err
				}
				if err := echoMetrics.AddStack("conn", &rc); err != nil {
					ln.Close()
					return nil, err
				}
				return ln, nil
			})
		},
		client: func(ctx context.Context, cfg clientConfig, rec *recorder) error {
			rc := rubin.Config{Transport: cfg.network, SpinBudget: cfg.spin}
			return runNetConnClient(ctx, cfg, rec, func(ctx context.Context, _, address string) (net.Conn, error) {
				return rc.Dial(ctx, address)
			})
		},
		spin: true,
	})
}
