// Package metrics exports the counters of rubin's parts (selectors, buffer
// pools, transports) to Prometheus, and Serve serves a registry over HTTP
// for the commands.
//
// The parts count with plain atomic integers; a Collector reads them only
// when Prometheus scrapes, so nothing on the message path calls into the
// Prometheus client.
package metrics

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selector"
)

const namespace = "rubin"

func desc(subsystem, name, help, label string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, []string{label}, nil)
}

// A series is one exported value of a part of type T.
type series[T any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(T) float64
}

var selectorSeries = []series[selector.Stats]{
	{desc("selector", "selects_total", "Select, SelectTimeout and SelectNow calls.", "selector"), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Selects) }},
	{desc("selector", "selected_keys_total", "Keys selected, summed over all selects.", "selector"), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Selected) }},
	{desc("selector", "spins_total", "Polling rounds spent spinning before sleeping.", "selector"), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Spins) }},
	{desc("selector", "sleeps_total", "Times the selector slept in epoll_wait.", "selector"), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Sleeps) }},
	{desc("selector", "wakeups_total", "Times a sleeping selector was woken by another goroutine.", "selector"), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Wakeups) }},
	{desc("selector", "keys", "Keys registered now.", "selector"), prometheus.GaugeValue, func(s selector.Stats) float64 { return float64(s.Keys) }},
	{desc("selector", "spin_budget_seconds", "How long the next select spins before it sleeps (fixed or adaptive).", "selector"), prometheus.GaugeValue, func(s selector.Stats) float64 { return s.SpinBudget.Seconds() }},
}

var poolSeries = []series[bufpool.Stats]{
	{desc("pool", "buffer_size_bytes", "Capacity of each buffer.", "pool"), prometheus.GaugeValue, func(s bufpool.Stats) float64 { return float64(s.BufferSize) }},
	{desc("pool", "buffers_max", "The bound on buffers.", "pool"), prometheus.GaugeValue, func(s bufpool.Stats) float64 { return float64(s.MaxBuffers) }},
	{desc("pool", "buffers_allocated", "Buffers carved from slabs so far.", "pool"), prometheus.GaugeValue, func(s bufpool.Stats) float64 { return float64(s.Allocated) }},
	{desc("pool", "buffers_in_use", "Buffers owned by callers now.", "pool"), prometheus.GaugeValue, func(s bufpool.Stats) float64 { return float64(s.InUse) }},
	{desc("pool", "gets_total", "Buffers handed out.", "pool"), prometheus.CounterValue, func(s bufpool.Stats) float64 { return float64(s.Gets) }},
	{desc("pool", "waits_total", "Gets that waited for a release.", "pool"), prometheus.CounterValue, func(s bufpool.Stats) float64 { return float64(s.Waits) }},
	{desc("pool", "exhausted_total", "TryGets that failed because every buffer was in use.", "pool"), prometheus.CounterValue, func(s bufpool.Stats) float64 { return float64(s.Exhausted) }},
}

var transportSeries = []series[channel.Stats]{
	{desc("transport", "messages_received_total", "Messages received.", "transport"), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.MessagesIn) }},
	{desc("transport", "messages_sent_total", "Messages sent.", "transport"), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.MessagesOut) }},
	{desc("transport", "received_bytes_total", "Payload bytes received.", "transport"), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.BytesIn) }},
	{desc("transport", "sent_bytes_total", "Payload bytes sent.", "transport"), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.BytesOut) }},
	{desc("transport", "connections_opened_total", "Connections established.", "transport"), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.ConnsOpened) }},
	{desc("transport", "connections_closed_total", "Connections closed.", "transport"), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.ConnsClosed) }},
	{desc("transport", "protocol_errors_total", "Connections closed for bad input from the peer.", "transport"), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.ProtocolErrors) }},
}

// A Collector is a prometheus.Collector over any number of selectors,
// pools and transports, each under a name that becomes its label. Its
// methods are safe for concurrent use.
type Collector struct {
	mu         sync.Mutex
	selectors  map[string]func() selector.Stats
	pools      map[string]func() bufpool.Stats
	transports map[string]func() channel.Stats
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns an empty Collector.
func New() *Collector {
	return &Collector{
		selectors:  map[string]func() selector.Stats{},
		pools:      map[string]func() bufpool.Stats{},
		transports: map[string]func() channel.Stats{},
	}
}

// AddSelector exports s under the label selector=name, replacing any
// selector of that name.
func (c *Collector) AddSelector(name string, s *selector.Selector) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.selectors[name] = s.Stats
}

// AddPool exports p under the label pool=name.
func (c *Collector) AddPool(name string, p *bufpool.Pool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pools[name] = p.Stats
}

// AddTransport exports a transport's counters, read by stats, under the
// label transport=name.
func (c *Collector) AddTransport(name string, stats func() channel.Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.transports[name] = stats
}

// AddStack exports the counters of cfg's stack (package rubin's net.Conn
// face, creating the stack if needed): its transport and buffer pool under
// the label name, its pollers' selectors as name/0, name/1, ...
func (c *Collector) AddStack(name string, cfg *rubin.Config) error {
	st, err := cfg.Stats()
	if err != nil {
		return err
	}
	read := func() rubin.Stats {
		st, _ := cfg.Stats() // the stack exists: it cannot fail now
		return st
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.transports[name] = func() channel.Stats { return read().Transport }
	c.pools[name] = func() bufpool.Stats { return read().Pool }
	for i := range st.Selectors {
		c.selectors[fmt.Sprintf("%s/%d", name, i)] = func() selector.Stats { return read().Selectors[i] }
	}
	return nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, selectorSeries)
	describe(ch, poolSeries)
	describe(ch, transportSeries)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	collect(ch, selectorSeries, c.selectors)
	collect(ch, poolSeries, c.pools)
	collect(ch, transportSeries, c.transports)
}

func describe[T any](ch chan<- *prometheus.Desc, all []series[T]) {
	for _, s := range all {
		ch <- s.desc
	}
}

func collect[T any](ch chan<- prometheus.Metric, all []series[T], parts map[string]func() T) {
	for name, stats := range parts {
		st := stats()
		for _, s := range all {
			ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(st), name)
		}
	}
}
