package server

import (
	"strconv"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin/order"
)

// metrics are an orderer's Prometheus metrics (namespace rubin_order,
// constant label orderer):
//
//	rubin_order_broadcast_total{status}  counter (Broadcast answers; SUCCESS: ordered)
//	rubin_order_blocks_cut_total         counter
//	rubin_order_blocks_final_total       counter
//	rubin_order_block_envelopes          histogram (envelopes per block cut)
//	rubin_order_block_bytes              histogram (envelope bytes per block cut)
//	rubin_order_cut_wait_seconds         histogram (agreed time from a block's first envelope to its cut)
//
// The block metrics count what the App executes, so a replica replaying
// its log after a restart counts those blocks again.
type metrics struct {
	broadcast        *prometheus.CounterVec
	answers          map[cb.Status]prometheus.Counter // broadcast's counter of each status Fabric defines
	cut, final       prometheus.Counter
	envelopes, bytes prometheus.Histogram
	wait             prometheus.Histogram
}

var _ order.Observer = (*metrics)(nil)

func newMetrics(reg prometheus.Registerer, id int) *metrics {
	labels := prometheus.Labels{"orderer": strconv.Itoa(id)}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "rubin_order", Name: name, Help: help, ConstLabels: labels}
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		o := opts(name, help)
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: o.Namespace, Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels, Buckets: buckets})
	}
	m := &metrics{
		broadcast: prometheus.NewCounterVec(prometheus.CounterOpts(opts("broadcast_total", "Broadcast answers by status; SUCCESS means ordered.")), []string{"status"}),
		cut:       prometheus.NewCounter(prometheus.CounterOpts(opts("blocks_cut_total", "Blocks cut."))),
		final:     prometheus.NewCounter(prometheus.CounterOpts(opts("blocks_final_total", "Blocks final: signed by 2f+1 orderers."))),
		envelopes: hist("block_envelopes", "Envelopes per block cut.", prometheus.ExponentialBuckets(1, 2, 12)),
		bytes:     hist("block_bytes", "Envelope bytes per block cut.", prometheus.ExponentialBuckets(1024, 4, 10)),
		wait:      hist("cut_wait_seconds", "Agreed time from a block's first envelope to its cut.", prometheus.ExponentialBuckets(0.001, 2, 14)),
	}
	m.answers = make(map[cb.Status]prometheus.Counter, len(cb.Status_name))
	for st := range cb.Status_name {
		m.answers[cb.Status(st)] = m.broadcast.WithLabelValues(cb.Status(st).String())
	}
	reg.MustRegister(m.broadcast, m.cut, m.final, m.envelopes, m.bytes, m.wait)
	return m
}

func (m *metrics) Cut(_ uint64, envelopes, bytes int, wait time.Duration) {
	m.cut.Inc()
	m.envelopes.Observe(float64(envelopes))
	m.bytes.Observe(float64(bytes))
	m.wait.Observe(wait.Seconds())
}

func (m *metrics) Final(uint64) { m.final.Inc() }

// answered counts a Broadcast answer; m may be nil.
func (m *metrics) answered(st cb.Status) {
	if m == nil {
		return
	}
	if c, ok := m.answers[st]; ok {
		c.Inc()
		return
	}
	m.broadcast.WithLabelValues(st.String()).Inc()
}
