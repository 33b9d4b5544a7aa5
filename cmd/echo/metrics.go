package main

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rubin-go/rubin/metrics"
)

// metricsRegistry holds the echo command's Prometheus collectors, which
// code in this package registers from init functions or before serving. The
// server's -metrics-addr serves it; the global default registry is not used.
var metricsRegistry = prometheus.NewRegistry()

// echoMetrics exports the counters of the rubin api the server runs: its
// transport, buffer pool and selectors.
var echoMetrics = metrics.New()

func init() { metricsRegistry.MustRegister(echoMetrics) }

// serveMetrics serves metricsRegistry at http://addr/metrics until ctx is
// done, and returns the address it listens on. Errors after it has started
// go to errLog.
func serveMetrics(ctx context.Context, addr string, errLog *log.Logger) (net.Addr, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(metricsRegistry, promhttp.HandlerOpts{
		ErrorLog: errLog,
	}))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          errLog,
	}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errLog.Print(err)
		}
	}()
	context.AfterFunc(ctx, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(shutdownCtx)
	})
	return ln.Addr(), nil
}
