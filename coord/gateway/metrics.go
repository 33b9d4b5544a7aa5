package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a gateway's Prometheus metrics (namespace rubin_coord,
// subsystem gateway, constant label gateway, its ID). They are kept
// whether or not Config.Registerer exports them.
type metrics struct {
	words   map[string]prometheus.Counter // four-letter words asked, by word
	latency prometheus.Histogram
	// exported are the collectors Config.Registerer takes.
	exported []prometheus.Collector
}

func newMetrics(s *Server) *metrics {
	cl := prometheus.Labels{"gateway": strconv.FormatInt(s.cfg.ID, 10)}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "rubin_coord", Subsystem: "gateway", Name: name, Help: help, ConstLabels: cl}
	}
	words := prometheus.NewCounterVec(prometheus.CounterOpts(opts("four_letter_words_total", "Four-letter words asked, by word (those not answered included).")), []string{"word"})
	m := &metrics{
		words: make(map[string]prometheus.Counter),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "rubin_coord", Subsystem: "gateway", Name: "request_latency_seconds",
			Help: "Time from a client's request arriving to its reply being queued, pings included.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16)}),
	}
	for _, w := range append(fourLetterWords, unsupportedWords...) {
		m.words[w] = words.WithLabelValues(w)
	}
	stats := func(f func(Stats) float64) func() float64 { return func() float64 { return f(s.Stats()) } }
	m.exported = []prometheus.Collector{
		words, m.latency,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("sessions", "Sessions the gateway serves.")),
			stats(func(st Stats) float64 { return float64(st.Sessions) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("connections", "Client connections open, in their handshake, serving a session or answering a four-letter word.")),
			stats(func(st Stats) float64 { return float64(st.Conns) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("outstanding_requests", "Client requests received and not yet answered.")),
			func() float64 { return float64(s.outstanding()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("refused_connections_per_host_total", "Connections closed at once: their client address had MaxConnsPerHost open.")),
			stats(func(st Stats) float64 { return float64(st.RefusedPerHost) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("refused_connections_total", "Connections closed at once: the gateway had MaxConns open.")),
			stats(func(st Stats) float64 { return float64(st.RefusedTotal) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts(opts("refused_sessions_total", "Connections closed unanswered: no session could be opened for them.")),
			stats(func(st Stats) float64 { return float64(st.RefusedSessions) })),
	}
	return m
}

// register exports the metrics to reg; on failure it leaves none
// registered.
func (m *metrics) register(reg prometheus.Registerer) error {
	for i, c := range m.exported {
		if err := reg.Register(c); err != nil {
			for _, c := range m.exported[:i] {
				reg.Unregister(c)
			}
			return err
		}
	}
	return nil
}

// fourLetter counts a four-letter word asked.
func (m *metrics) fourLetter(w string) {
	if c := m.words[w]; c != nil {
		c.Inc()
	}
}

func (m *metrics) observe(d time.Duration) { m.latency.Observe(d.Seconds()) }
