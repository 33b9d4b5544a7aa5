package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin/metrics"
)

// metricsRegistry holds the echo command's Prometheus collectors, which
// code in this package registers from init functions or before serving. The
// server's -metrics-addr serves it with metrics.Serve; the global default
// registry is not used.
var metricsRegistry = prometheus.NewRegistry()

// echoMetrics exports the counters of the rubin api the server runs: its
// transport, buffer pool and selectors.
var echoMetrics = metrics.New()

func init() { metricsRegistry.MustRegister(echoMetrics) }
