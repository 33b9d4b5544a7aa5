// Package metrics exports the counters of rubin's parts (selectors, buffer
// pools, transports) to Prometheus, and Serve serves a registry over HTTP
// for the commands.
//
// The parts count with plain atomic integers; a Collector reads them only
// when Prometheus scrapes, so nothing on the message path calls into the
// Prometheus client.
//
// A Collector exports stacks: a transport, its buffer pool, and the
// selectors (pollers) that serve its channels. Every series of a stack has
// the label stack, so its transport, pool and selector series join on it;
// the selectors' series have the label poller too, the poller's index:
//
//	rubin_transport_messages_received_total{stack="conn"}
//	rubin_pool_buffers_in_use{stack="conn"}
//	rubin_selector_keys{poller="0",stack="conn"}
//
// Counters end in _total; the rest are gauges.
package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selector"
)

const namespace = "rubin"

// The labels: every series has stackLabel, a selector's also pollerLabel.
const (
	stackLabel  = "stack"
	pollerLabel = "poller"
)

func desc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, labels, nil)
}

// A series is one exported value of a part of type T.
type series[T any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(T) float64
}

var selectorSeries = []series[selector.Stats]{
	{desc("selector", "selects_total", "Select, SelectTimeout and SelectNow calls.", stackLabel, pollerLabel), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Selects) }},
	{desc("selector", "selected_keys_total", "Keys selected, summed over all selects.", stackLabel, pollerLabel), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Selected) }},
	{desc("selector", "spins_total", "Polling rounds spent spinning before sleeping.", stackLabel, pollerLabel), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Spins) }},
	{desc("selector", "sleeps_total", "Times the selector slept in epoll_wait.", stackLabel, pollerLabel), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Sleeps) }},
	{desc("selector", "spins_ceded_total", "Adaptive spins cut short because runnable tasks were waiting for CPUs; the select slept instead.", stackLabel, pollerLabel), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Ceded) }},
	{desc("selector", "rearms_total", "Times arming found a poller busy or events already there, and the select polled again instead of sleeping.", stackLabel, pollerLabel), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Rearms) }},
	{desc("selector", "wakeups_total", "Times a sleeping selector was woken by another goroutine.", stackLabel, pollerLabel), prometheus.CounterValue, func(s selector.Stats) float64 { return float64(s.Wakeups) }},
	{desc("selector", "keys", "Keys registered now.", stackLabel, pollerLabel), prometheus.GaugeValue, func(s selector.Stats) float64 { return float64(s.Keys) }},
	{desc("selector", "spin_budget_seconds", "How long the next select spins before it sleeps (fixed or adaptive).", stackLabel, pollerLabel), prometheus.GaugeValue, func(s selector.Stats) float64 { return s.SpinBudget.Seconds() }},
}

var poolSeries = []series[bufpool.Stats]{
	{desc("pool", "buffer_size_bytes", "Capacity of each buffer.", stackLabel), prometheus.GaugeValue, func(s bufpool.Stats) float64 { return float64(s.BufferSize) }},
	{desc("pool", "buffers_max", "The bound on buffers.", stackLabel), prometheus.GaugeValue, func(s bufpool.Stats) float64 { return float64(s.MaxBuffers) }},
	{desc("pool", "buffers_allocated", "Buffers carved from slabs so far.", stackLabel), prometheus.GaugeValue, func(s bufpool.Stats) float64 { return float64(s.Allocated) }},
	{desc("pool", "buffers_in_use", "Buffers owned by callers now.", stackLabel), prometheus.GaugeValue, func(s bufpool.Stats) float64 { return float64(s.InUse) }},
	{desc("pool", "gets_total", "Buffers handed out.", stackLabel), prometheus.CounterValue, func(s bufpool.Stats) float64 { return float64(s.Gets) }},
	{desc("pool", "waits_total", "Gets that waited for a release.", stackLabel), prometheus.CounterValue, func(s bufpool.Stats) float64 { return float64(s.Waits) }},
	{desc("pool", "exhausted_total", "TryGets that failed because every buffer was in use.", stackLabel), prometheus.CounterValue, func(s bufpool.Stats) float64 { return float64(s.Exhausted) }},
}

var transportSeries = []series[channel.Stats]{
	{desc("transport", "messages_received_total", "Messages received.", stackLabel), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.MessagesIn) }},
	{desc("transport", "messages_sent_total", "Messages sent.", stackLabel), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.MessagesOut) }},
	{desc("transport", "received_bytes_total", "Payload bytes received.", stackLabel), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.BytesIn) }},
	{desc("transport", "sent_bytes_total", "Payload bytes sent.", stackLabel), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.BytesOut) }},
	{desc("transport", "connections_opened_total", "Connections established.", stackLabel), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.ConnsOpened) }},
	{desc("transport", "connections_closed_total", "Connections closed.", stackLabel), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.ConnsClosed) }},
	{desc("transport", "control_sent_total", "Payload-less messages the transport sent on its own (RDMA credit updates, FINs and drain markers).", stackLabel), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.ControlOut) }},
	{desc("transport", "protocol_errors_total", "Connections closed for bad input from the peer.", stackLabel), prometheus.CounterValue, func(s channel.Stats) float64 { return float64(s.ProtocolErrors) }},
}

// A Transport is what Collector.AddTransport reads: a transport's counters
// and its buffer pool. *tcp.Transport and *rdma.Transport are Transports.
type Transport interface {
	Stats() channel.Stats
	Pool() *bufpool.Pool
}

// A Collector is a prometheus.Collector over any number of stacks, each
// under a name that becomes its stack label. Its methods are safe for
// concurrent use.
type Collector struct {
	mu     sync.Mutex
	stacks map[string]func() rubin.Stats // by name
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns an empty Collector.
func New() *Collector {
	return &Collector{stacks: map[string]func() rubin.Stats{}}
}

// AddTransport exports a stack put together by hand: tr's counters, its
// buffer pool, and the selectors that serve its channels as pollers 0, 1,
// ... in the order given. Every series has the label stack=name. It
// replaces any stack of that name.
func (c *Collector) AddTransport(name string, tr Transport, pollers ...*selector.Selector) {
	pollers = append([]*selector.Selector(nil), pollers...)
	c.AddStats(name, func() rubin.Stats {
		st := rubin.Stats{Transport: tr.Stats(), Pool: tr.Pool().Stats()}
		for _, s := range pollers {
			st.Selectors = append(st.Selectors, s.Stats())
		}
		return st
	})
}

// AddStack exports s (package rubin's net.Conn face): its transport,
// buffer pool and pollers' selectors, with the label stack=name. It
// replaces any stack of that name.
func (c *Collector) AddStack(name string, s *rubin.Stack) { c.AddStats(name, s.Stats) }

// AddStats exports, with the label stack=name, what stats returns at each
// scrape: for a stack whose parts change over its life, such as a BFT
// replica's event loop, which is made anew by each Run. stats must be
// safe to call from any goroutine. It replaces any stack of that name.
func (c *Collector) AddStats(name string, stats func() rubin.Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stacks[name] = stats
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, selectorSeries)
	describe(ch, poolSeries)
	describe(ch, transportSeries)
}

// Collect implements prometheus.Collector. It reads each stack's counters
// once.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, read := range c.stacks {
		st := read()
		collect(ch, transportSeries, st.Transport, name)
		collect(ch, poolSeries, st.Pool, name)
		for i, sel := range st.Selectors {
			collect(ch, selectorSeries, sel, name, strconv.Itoa(i))
		}
	}
}

func describe[T any](ch chan<- *prometheus.Desc, all []series[T]) {
	for _, s := range all {
		ch <- s.desc
	}
}

// collect sends the series of one part, whose counters are st, with the
// label values given.
func collect[T any](ch chan<- prometheus.Metric, all []series[T], st T, labels ...string) {
	for _, s := range all {
		ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(st), labels...)
	}
}
