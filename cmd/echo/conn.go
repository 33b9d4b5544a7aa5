package main

import (
	"context"

	"github.com/rubin-go/rubin"
)

// The conn api runs the echo protocol over rubin's net.Conn face, exactly as
// a program written for package net would after swapping net.Listen and
// net.Dial for rubin's: the same server and client code as gonet, with the
// listener and connections from a rubin.Stack whose spin budget is -spin.
func init() {
	registerAPI("conn", api{
		serve: func(ctx context.Context, cfg serverConfig) error {
			s, err := rubin.NewStack(rubin.Config{Transport: cfg.network, SpinBudget: cfg.spin})
			if err != nil {
				return err
			}
			defer s.Close()
			echoMetrics.AddStack("conn", s)
			return serveNetConn(ctx, cfg, (&rubin.ListenConfig{Stack: s}).Listen)
		},
		client: func(ctx context.Context, cfg clientConfig, rec *recorder) error {
			s, err := rubin.NewStack(rubin.Config{Transport: cfg.network, SpinBudget: cfg.spin})
			if err != nil {
				return err
			}
			defer s.Close()
			return runNetConnClient(ctx, cfg, rec, (&rubin.Dialer{Stack: s}).DialContext)
		},
		spin: true,
	})
}
