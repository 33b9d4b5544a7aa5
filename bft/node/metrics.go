package node

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin/bft"
)

// namespace is the Prometheus namespace of every metric of this package.
const namespace = "rubin_bft"

// typeNames are the label values of the per-type message counters,
// indexed by bft.MessageType; index 0 is for unknown types.
var typeNames = [...]string{
	"unknown", "request", "reply", "pre_prepare", "prepare", "commit",
	"checkpoint", "view_change", "new_view", "fetch_state", "state",
}

func typeIndex(t bft.MessageType) int {
	if int(t) < len(typeNames) {
		return int(t)
	}
	return 0
}

// Reasons a message is dropped or rejected (label "reason").
const (
	reasonDecode       = "decode"        // a frame that does not decode: the link is closed
	reasonQueueFull    = "queue_full"    // outbound queue to a slow peer full
	reasonNoLink       = "no_link"       // no link to the destination
	reasonInvalid      = "invalid"       // bft.ErrInvalid
	reasonForged       = "forged"        // bft.ErrForged
	reasonStale        = "stale"         // bft.ErrStale
	reasonWatermark    = "watermark"     // bft.ErrWatermark
	reasonDuplicate    = "duplicate"     // bft.ErrDuplicate
	reasonEquivocation = "equivocation"  // bft.ErrEquivocation
	reasonFull         = "core_full"     // bft.ErrFull
	reasonOther        = "other"         // any other Step error
	reasonTooLarge     = "frame_too_big" // a message larger than the link's frame limit
	reasonHandshake    = "handshake"     // a connection whose handshake failed (wrong key, unknown or unexpected peer)
	reasonUnexpected   = "unexpected"    // a message type the receiver never takes (a client got a non-reply)
)

var stepReasons = []struct {
	err    error
	reason string
}{
	{bft.ErrStale, reasonStale},
	{bft.ErrDuplicate, reasonDuplicate},
	{bft.ErrWatermark, reasonWatermark},
	{bft.ErrInvalid, reasonInvalid},
	{bft.ErrForged, reasonForged},
	{bft.ErrEquivocation, reasonEquivocation},
	{bft.ErrFull, reasonFull},
}

// stepReason classifies a Step error.
func stepReason(err error) string {
	for _, r := range stepReasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return reasonOther
}

// dropCounters caches the children of a dropped-messages counter vector.
type dropCounters struct {
	vec *prometheus.CounterVec
	m   map[string]prometheus.Counter
}

func newDropCounters(vec *prometheus.CounterVec) *dropCounters {
	d := &dropCounters{vec: vec, m: make(map[string]prometheus.Counter)}
	for _, r := range []string{reasonDecode, reasonQueueFull, reasonNoLink, reasonInvalid, reasonForged,
		reasonStale, reasonWatermark, reasonDuplicate, reasonEquivocation, reasonFull, reasonOther, reasonTooLarge,
		reasonHandshake, reasonUnexpected} {
		d.m[r] = vec.WithLabelValues(r)
	}
	return d
}

// inc is safe from any goroutine: the map is read-only after construction.
func (d *dropCounters) inc(reason string) {
	if c, ok := d.m[reason]; ok {
		c.Inc()
		return
	}
	d.vec.WithLabelValues(reason).Inc()
}

// add is inc n times.
func (d *dropCounters) add(reason string, n int) {
	if c, ok := d.m[reason]; ok {
		c.Add(float64(n))
		return
	}
	d.vec.WithLabelValues(reason).Add(float64(n))
}

// replicaMetrics are a replica driver's metrics. They are always
// maintained; they are registered only when a Registerer is given.
type replicaMetrics struct {
	committedRequests prometheus.Counter
	committedBatches  prometheus.Counter
	batchSize         prometheus.Histogram
	viewChanges       prometheus.Counter
	view              prometheus.Gauge
	checkpointLag     prometheus.Gauge
	stableSeq         prometheus.Gauge
	lastExecuted      prometheus.Gauge
	stateTransfers    prometheus.Counter
	sent              [len(typeNames)]prometheus.Counter
	received          [len(typeNames)]prometheus.Counter
	dropped           *dropCounters
	links             prometheus.Gauge
	// The storage writer's (-data-dir).
	storageSyncs       prometheus.Counter
	storageSyncSeconds prometheus.Histogram
	storageReadies     prometheus.Histogram

	// For tests: the largest batch executed.
	maxBatch atomic.Int64
}

func newReplicaMetrics(reg prometheus.Registerer, id bft.ReplicaID) (*replicaMetrics, error) {
	cl := prometheus.Labels{"replica": itoa(uint64(id))}
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: namespace, Name: name, Help: help, ConstLabels: cl}
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts(opts(name, help)))
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts(opts(name, help)))
	}
	sent := prometheus.NewCounterVec(prometheus.CounterOpts(opts("messages_sent_total", "Messages queued to links, by type (a broadcast counts once per destination).")), []string{"type"})
	recv := prometheus.NewCounterVec(prometheus.CounterOpts(opts("messages_received_total", "Messages received and decoded, by type.")), []string{"type"})
	drop := prometheus.NewCounterVec(prometheus.CounterOpts(opts("messages_dropped_total", "Messages dropped or rejected, by reason.")), []string{"reason"})
	m := &replicaMetrics{
		committedRequests: counter("committed_requests_total", "Requests executed."),
		committedBatches:  counter("committed_batches_total", "Batches (sequence numbers) executed."),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "batch_size", Help: "Requests per executed batch.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		viewChanges:    counter("view_changes_total", "New views entered."),
		view:           gauge("view", "Current view."),
		checkpointLag:  gauge("checkpoint_lag", "Last executed sequence number minus the last stable checkpoint."),
		stableSeq:      gauge("stable_checkpoint_seq", "Sequence number of the last stable checkpoint."),
		lastExecuted:   gauge("last_executed_seq", "Last executed sequence number."),
		stateTransfers: counter("state_transfers_total", "States restored by state transfer."),
		links:          gauge("links", "Links up (replicas and clients)."),
		storageSyncs:   counter("storage_syncs_total", "Log frames and snapshots made durable (-data-dir), one sync each."),
		storageSyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "storage_sync_seconds", Help: "Time to write and sync one log frame or snapshot.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 14),
		}),
		storageReadies: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "storage_readies_per_sync", Help: "Core outputs (Readies) whose records one sync made durable (group commit).", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(1, 2, 9),
		}),
	}
	if reg != nil {
		// A replica restarted in the same process with the same
		// Registerer takes over its predecessor's collectors.
		var err error
		for _, p := range []*prometheus.Counter{&m.committedRequests, &m.committedBatches, &m.viewChanges, &m.stateTransfers, &m.storageSyncs} {
			if *p, err = register(reg, *p); err != nil {
				return nil, err
			}
		}
		for _, p := range []*prometheus.Gauge{&m.view, &m.checkpointLag, &m.stableSeq, &m.lastExecuted, &m.links} {
			if *p, err = register(reg, *p); err != nil {
				return nil, err
			}
		}
		for _, p := range []*prometheus.Histogram{&m.batchSize, &m.storageSyncSeconds, &m.storageReadies} {
			if *p, err = register(reg, *p); err != nil {
				return nil, err
			}
		}
		for _, p := range []**prometheus.CounterVec{&sent, &recv, &drop} {
			if *p, err = register(reg, *p); err != nil {
				return nil, err
			}
		}
	}
	m.dropped = newDropCounters(drop)
	for i, n := range typeNames {
		m.sent[i] = sent.WithLabelValues(n)
		m.received[i] = recv.WithLabelValues(n)
	}
	return m, nil
}

// storageMetrics gives the storage writer its counters.
func (m *replicaMetrics) storageMetrics() storageMetrics {
	return storageMetrics{
		syncs:    m.storageSyncs.Inc,
		syncTime: func(d time.Duration) { m.storageSyncSeconds.Observe(d.Seconds()) },
		readies:  func(n int) { m.storageReadies.Observe(float64(n)) },
	}
}

// register registers c with reg, or returns the equal collector already
// registered.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if old, ok := are.ExistingCollector.(T); ok {
				return old, nil
			}
		}
		return c, err
	}
	return c, nil
}

// clientMetrics are a client driver's metrics.
type clientMetrics struct {
	completed       prometheus.Counter
	latency         prometheus.Histogram
	retransmissions prometheus.Counter
	dropped         *dropCounters
	mismatches      []prometheus.Counter // by replica
}

func newClientMetrics(reg prometheus.Registerer, id bft.ClientID, replicas int) (*clientMetrics, error) {
	cl := prometheus.Labels{"client": itoa(uint64(id))}
	drop := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "client", Name: "messages_dropped_total",
		Help: "Messages dropped or rejected, by reason.", ConstLabels: cl}, []string{"reason"})
	mism := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "client", Name: "mismatched_replies_total",
		Help: "Replies to ordered requests that differed from the result f+1 replicas agreed on, by replica: faults of that replica.", ConstLabels: cl}, []string{"replica"})
	m := &clientMetrics{
		completed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "client", Name: "completed_requests_total",
			Help: "Requests completed (f+1 matching replies).", ConstLabels: cl}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Subsystem: "client", Name: "latency_seconds",
			Help: "Request latency, from Invoke to the accepted result.", ConstLabels: cl,
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 16)}),
		retransmissions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "client", Name: "retransmissions_total",
			Help: "Requests retransmitted to every replica after a timeout.", ConstLabels: cl}),
	}
	if reg != nil {
		var err error
		for _, p := range []*prometheus.Counter{&m.completed, &m.retransmissions} {
			if *p, err = register(reg, *p); err != nil {
				return nil, err
			}
		}
		if m.latency, err = register(reg, m.latency); err != nil {
			return nil, err
		}
		if drop, err = register(reg, drop); err != nil {
			return nil, err
		}
		if mism, err = register(reg, mism); err != nil {
			return nil, err
		}
	}
	m.dropped = newDropCounters(drop)
	for i := range replicas {
		m.mismatches = append(m.mismatches, mism.WithLabelValues(itoa(uint64(i))))
	}
	return m, nil
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return string(b[i:])
}
