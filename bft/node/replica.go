package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/link"
	"github.com/rubin-go/rubin/bft/wire"
	"github.com/rubin-go/rubin/selector"
)

// Defaults of ReplicaConfig and ClientConfig.
const (
	DefaultTick          = 5 * time.Millisecond
	DefaultOutboundQueue = 8192
	// Deprecated: ReplicaConfig.InboundQueue has no effect.
	DefaultInboundQueue = 4096
	DefaultMaxDrain     = 1024
	DefaultRedialMin    = 10 * time.Millisecond
	DefaultRedialMax    = time.Second
	DefaultWriteTimeout = 10 * time.Second
)

// Byte bounds of the queues, defaults of ReplicaConfig (a Client uses
// them too).
const (
	// DefaultInboundQueueBytes: four frames of the largest size (16
	// MiB), or thousands of ordinary messages.
	DefaultInboundQueueBytes = 64 << 20
	// DefaultOutboundQueueBytes: two frames of the largest size, or
	// thirty full 1 MiB batches to a peer that reads slowly.
	DefaultOutboundQueueBytes = 32 << 20
)

// ReplicaConfig configures a Replica.
type ReplicaConfig struct {
	Cluster *auth.Cluster
	ID      bft.ReplicaID
	// Network is the transport, "tcp" (default) or "rdma", used through
	// package rubin. Transport, if set, overrides it.
	Network   string
	Transport *rubin.Config
	App       bft.App
	// Tick is the core's tick; default 5ms.
	Tick time.Duration
	// Core is the protocol tuning; its ID, N, App and Auth are filled in
	// by the driver.
	Core   bft.Config
	Logger *slog.Logger // nil: discard
	// Registerer receives the metrics; nil: not exported (still kept).
	Registerer prometheus.Registerer

	// Listener, if set, gives the address to listen on instead of
	// Cluster.Replicas[ID].Addr (tests pass a listener on port 0): Run
	// closes it and listens on its address with the replica's transport,
	// whose channels the replica serves.
	Listener net.Listener
	// InboundQueue is not used by a Replica, which steps what it receives
	// at once (see MaxDrain); it is kept so that configurations still
	// build.
	//
	// Deprecated: it has no effect; bound a pass of the event loop with
	// InboundQueueBytes and MaxDrain.
	InboundQueue int
	// InboundQueueBytes bounds the frame bytes one pass of the event loop
	// reads from the links before it collects the core's Ready (default
	// DefaultInboundQueueBytes); what is left waits in the transport.
	InboundQueueBytes int
	// OutboundQueue bounds the frames waiting per link (default
	// DefaultOutboundQueue); a full queue drops new frames.
	OutboundQueue int
	// OutboundQueueBytes bounds the bytes of the frames waiting per link
	// for the channel to take them (default DefaultOutboundQueueBytes); a
	// frame that does not fit is dropped. A frame larger than the bound
	// is sent only from an empty queue.
	OutboundQueueBytes int
	// MaxDrain bounds how many inbound messages one pass of the event
	// loop steps before it collects Ready (default DefaultMaxDrain).
	MaxDrain int
	// RedialMin and RedialMax bound the backoff between dials of a peer
	// (defaults DefaultRedialMin, DefaultRedialMax).
	RedialMin, RedialMax time.Duration
	// Link tunes the links; a zero WriteTimeout becomes
	// DefaultWriteTimeout.
	Link link.Options
	// DataDir, if set, makes the replica durable: it persists what each
	// Ready asks (one fsync per Ready) in a write-ahead log and a
	// snapshot at every stable checkpoint in this directory before it
	// sends, and NewReplica recovers from them. Empty: the replica keeps
	// everything in memory and comes back empty after a restart (it says
	// so in its log).
	DataDir string
}

// Replica runs one PBFT replica: the protocol core (bft.Replica) and its
// links to the other replicas and to clients, on one event loop (see the
// package documentation).
//
// Connections: exactly one link per pair of replicas. The replica with the
// lower ID dials the one with the higher ID and redials with capped
// exponential backoff whenever the link breaks; the higher one accepts and
// rejects, in the handshake, a replica with a higher ID than its own (which
// should have been the acceptor). If an authenticated link from a peer
// arrives while one is up (the peer restarted), the new one replaces the
// old. Clients dial every replica; the newest link of a client replaces
// the older one. A client link may carry the requests of several client
// identities (a multiplexing Client); a client's replies go on the link
// that last delivered one of its requests (see package doc).
//
// Queueing: received frames are stepped as the loop reads them, so what
// the core cannot take yet waits in the transport (back-pressure on the
// sender). What the core sends is encoded once per message (a broadcast
// shares its bytes among its destinations) into the links' pool buffers,
// flushed once per pass. A full outbound queue, or a destination without
// a link, drops the message and counts it (metric
// rubin_bft_messages_dropped_total): one slow or Byzantine peer never
// stalls the core; PBFT's retransmission and state transfer recover.
type Replica struct {
	cfg    ReplicaConfig
	n      int
	core   *bft.Replica
	log    *slog.Logger
	m      *replicaMetrics
	limits wire.Limits
	tr     *rubin.Config // nil: cfg.Network's defaults
	addr   atomic.Pointer[string]
	status atomic.Pointer[bft.Status]
	loop   atomic.Pointer[eventLoop] // the latest Run's; read by LoopStats from any goroutine
	ready  chan struct{}
	ran    atomic.Bool

	// links holds the link of each peer that has one up (written by the
	// core goroutine under linksMu, which other goroutines read under).
	linksMu sync.Mutex
	links   map[link.Peer]*peerLink

	last bft.Status // last published status (core goroutine)
	// store persists the core's records (DataDir); nil keeps them in
	// memory. failed is the storage error that stopped the core.
	store  *storage
	failed error

	// Reply routes (core goroutine): the link that most recently
	// delivered a request of each client that the core took (see step).
	// One entry per client that sent through this replica over a link
	// still up, like the reply cache one per client; the entries of a
	// link are forgotten when it closes (routesStale tells the core
	// goroutine to sweep).
	routes      map[bft.ClientID]*peerLink
	routesStale atomic.Bool
	// suspect asks the loop to vote for a view change at its next tick
	// (Suspect).
	suspect atomic.Bool

	sent [len(typeNames)]int
}

// NewReplica checks cfg and builds the replica's core; Run starts it.
func NewReplica(cfg ReplicaConfig) (*Replica, error) {
	if cfg.Cluster == nil {
		return nil, errors.New("node: replica config: Cluster is required")
	}
	n := cfg.Cluster.N()
	if uint64(cfg.ID) >= uint64(n) {
		return nil, fmt.Errorf("node: replica config: ID %d not below N = %d", cfg.ID, n)
	}
	if cfg.App == nil {
		return nil, errors.New("node: replica config: App is required")
	}
	a, err := auth.NewReplicaAuth(cfg.Cluster, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("node: replica %d: %w", cfg.ID, err)
	}
	core := cfg.Core
	core.ID, core.N, core.App, core.Auth = cfg.ID, n, cfg.App, a
	core.Persist = cfg.DataDir != ""
	cr, err := bft.NewReplica(core)
	if err != nil {
		return nil, fmt.Errorf("node: replica %d: %w", cfg.ID, err)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&cfg.OutboundQueue, DefaultOutboundQueue)
	def(&cfg.InboundQueueBytes, DefaultInboundQueueBytes)
	def(&cfg.OutboundQueueBytes, DefaultOutboundQueueBytes)
	def(&cfg.MaxDrain, DefaultMaxDrain)
	if cfg.RedialMin <= 0 {
		cfg.RedialMin = DefaultRedialMin
	}
	if cfg.RedialMax < cfg.RedialMin {
		cfg.RedialMax = max(DefaultRedialMax, cfg.RedialMin)
	}
	if cfg.Link.WriteTimeout <= 0 {
		cfg.Link.WriteTimeout = DefaultWriteTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("replica", cfg.ID)
	store, err := recoverCore(cr, cfg.DataDir, n, log)
	if err != nil {
		return nil, fmt.Errorf("node: replica %d: %w", cfg.ID, err)
	}
	m, err := newReplicaMetrics(cfg.Registerer, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("node: replica %d: metrics: %w", cfg.ID, err)
	}
	r := &Replica{
		cfg:    cfg,
		n:      n,
		core:   cr,
		store:  store,
		log:    log,
		m:      m,
		limits: wire.Limits{MaxReplicas: n},
		tr:     cfg.Transport,
		ready:  make(chan struct{}),
		links:  make(map[link.Peer]*peerLink),
		routes: make(map[bft.ClientID]*peerLink),
	}
	addr := cfg.Cluster.Replicas[cfg.ID].Addr
	r.addr.Store(&addr)
	r.last = cr.Status()
	st := r.last
	r.status.Store(&st)
	return r, nil
}

// LoopStats returns the counters of the latest Run's event loop: its
// transport, buffer pool and selector (one poller); zero before the first
// Run. Safe from any goroutine. Package metrics exports them
// (Collector.AddStats), as cmd/bft does.
func (r *Replica) LoopStats() rubin.Stats {
	ev := r.loop.Load()
	if ev == nil {
		return rubin.Stats{}
	}
	return rubin.Stats{Transport: ev.tr.Stats(), Pool: ev.pool.Stats(), Selectors: []selector.Stats{ev.sel.Stats()}}
}

// Suspect has the replica vote for a view change at its next tick (see
// bft.Replica.Suspect), unless one is under way then. It is safe for
// concurrent use.
func (r *Replica) Suspect() { r.suspect.Store(true) }

// Status returns the core's status as of its last step; safe from any
// goroutine.
func (r *Replica) Status() bft.Status { return *r.status.Load() }

// Ready is closed once Run listens.
func (r *Replica) Ready() <-chan struct{} { return r.ready }

// Addr returns the address Run listens on once Ready is closed (useful
// with a Listener on port 0), the configured one before.
func (r *Replica) Addr() string { return *r.addr.Load() }

// lookup gives the handshake the key of an accepted peer: a client's, or
// a replica's whose ID is below ours (the lower ID dials).
func (r *Replica) lookup(p link.Peer) ([]byte, bool) {
	var k []byte
	if p.Client {
		k = r.cfg.Cluster.ClientLinkKey(bft.ClientID(p.ID), r.cfg.ID)
	} else if p.ID < uint64(r.cfg.ID) {
		k = r.cfg.Cluster.LinkKey(bft.ReplicaID(p.ID), r.cfg.ID)
	}
	return k, k != nil
}

// Run listens on the replica's address (or on Config.Listener's, which
// it closes), keeps the links to the other replicas up, serves clients
// and runs the core until ctx is done. It returns nil when ctx is done,
// after every link and the listener are closed; it returns an error if
// it cannot listen. A Replica runs once.
func (r *Replica) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return errors.New("node: Replica.Run called twice")
	}
	addr := r.Addr()
	if ln := r.cfg.Listener; ln != nil {
		// The links are the transport's channels, not net.Conns: the
		// replica listens on the listener's address itself.
		addr = ln.Addr().String()
		ln.Close()
	}
	ev, err := r.openLoop(ctx, addr)
	if err != nil {
		return fmt.Errorf("node: replica %d: %w", r.cfg.ID, err)
	}
	addr = ev.ln.LocalAddr().String()
	r.addr.Store(&addr)
	r.log.Info("listening", "addr", addr, "network", r.network())
	close(r.ready)
	if r.store != nil {
		r.store.start(ev.sel.Wakeup, r.m.storageMetrics())
	}
	stop := context.AfterFunc(ctx, ev.sel.Wakeup)
	r.run(ctx, ev)
	stop()
	r.closeLoop(ev)
	if r.store != nil {
		r.store.close()
	}
	if r.failed != nil {
		return fmt.Errorf("node: replica %d stopped: %w", r.cfg.ID, r.failed)
	}
	r.log.Info("stopped")
	return nil
}

// step hands m, from c, to the core. A request from a client link that the core
// took (nil error) or already holds (ErrDuplicate) makes that link the
// route of the request's client's replies: a client link may carry the
// requests of several clients (a multiplexing Client), and both outcomes
// mean the request is its client's (the core checked the authenticator
// of a request of any client other than the link's own). A duplicate
// counts because a backup that got the request in a pre-prepare first
// would otherwise have no route for the reply the client waits for.
//
// A FetchNotes of a client other than the link's own is stepped as its
// client's if the link is that client's route: the link carried an
// authenticated request of it, so it may fetch its notifications.
func (r *Replica) step(c *peerLink, m bft.Message) {
	from := bft.Target(c.peer)
	if fn, ok := m.(*bft.FetchNotes); ok && from.Client && r.routes[fn.Client] == c {
		from = bft.ToClient(fn.Client)
	}
	err := r.core.Step(from, m)
	if from.Client {
		if req, ok := m.(*bft.Request); ok && (err == nil || errors.Is(err, bft.ErrDuplicate)) {
			if r.routes[req.Client] != c {
				r.routes[req.Client] = c
			}
		}
	}
	if err != nil {
		reason := stepReason(err)
		r.m.dropped.inc(reason)
		if r.log.Enabled(context.Background(), slog.LevelDebug) {
			r.log.Debug("message dropped", "from", c.peer, "type", typeNames[typeIndex(m.Type())], "reason", reason, "err", err)
		}
	}
}

// linkFor returns the link to send e on, nil if there is none. A reply
// goes on its client's route, else on the link of the client's own
// identity.
func (r *Replica) linkFor(to bft.Target) *peerLink {
	if to.Client {
		id := bft.ClientID(to.ID)
		if c := r.routes[id]; c != nil {
			if !c.dead {
				return c
			}
			delete(r.routes, id)
		}
	}
	return r.links[link.Peer(to)]
}

// handleReady hands what the core asks to persist (DataDir) to the
// storage's writer, which returns the Ready's messages once durable (see
// routeDurable); without a data directory, or with nothing to write and
// nothing ahead of it, it routes them to the links' queues at once. It
// reports executed batches: persist, send, apply. An error means the
// storage failed and nothing of rd was sent.
func (r *Replica) handleReady(rd bft.Ready) error {
	now := true
	if r.store != nil {
		var err error
		if now, err = r.store.submit(&rd); err != nil {
			return err
		}
		if err := r.routeDurable(); err != nil {
			return err
		}
	}
	if now && len(rd.Messages) > 0 {
		r.route(rd.Messages)
	}
	for _, c := range rd.Committed {
		r.m.committedBatches.Inc()
		r.m.committedRequests.Add(float64(len(c.Batch)))
		r.m.batchSize.Observe(float64(len(c.Batch)))
		if b := int64(len(c.Batch)); b > r.m.maxBatch.Load() {
			r.m.maxBatch.Store(b)
		}
	}
	return nil
}

// routeDurable routes the messages of the Readies whose records the
// storage made durable since the last call, in order, and returns the
// storage's failure, if any.
func (r *Replica) routeDurable() error {
	jobs, err := r.store.takeDurable()
	for _, j := range jobs {
		if len(j.msgs) > 0 {
			r.route(j.msgs)
		}
	}
	return err
}

// publish makes the core's status visible to Status and the metrics, and
// logs view changes and state transfers.
func (r *Replica) publish() {
	s := r.core.Status()
	old := r.last
	if s.View != old.View || s.ViewChanging != old.ViewChanging {
		if s.ViewChanging {
			r.log.Info("view change started", "view", s.View, "from_view", old.View)
		} else {
			r.log.Info("view entered", "view", s.View, "primary", s.Primary, "last_executed", s.LastExecuted)
		}
	}
	if s.NewViews > old.NewViews {
		r.m.viewChanges.Add(float64(s.NewViews - old.NewViews))
	}
	if s.StateTransfers > old.StateTransfers {
		r.m.stateTransfers.Add(float64(s.StateTransfers - old.StateTransfers))
		r.log.Info("state transfer done", "seq", s.LastExecuted, "stable", s.Stable)
	}
	if s != old {
		r.m.view.Set(float64(s.View))
		r.m.stableSeq.Set(float64(s.Stable))
		r.m.lastExecuted.Set(float64(s.LastExecuted))
		r.m.checkpointLag.Set(float64(s.LastExecuted - min(s.Stable, s.LastExecuted)))
		r.last = s
		r.status.Store(&s)
	}
}

// route queues the messages of one Ready on the links, each message
// encoded once (see sendTo): the core expands a broadcast into consecutive
// envelopes of one message; a message repeated later in the Ready is
// encoded again. The links are flushed at the end of the loop's pass, so
// a burst of replies to one client link goes out in one message.
func (r *Replica) route(msgs []bft.Envelope) {
	ev := r.loop.Load()
	noLink := 0
	for i := 0; i < len(msgs); {
		m := msgs[i].Msg
		dests := ev.dests[:0]
		for ; i < len(msgs) && msgs[i].Msg == m; i++ {
			c := r.linkFor(msgs[i].To)
			switch {
			case c == nil:
				noLink++
			case r.full(c):
				r.m.dropped.inc(reasonQueueFull)
			default:
				dests = append(dests, c)
			}
		}
		if len(dests) > 0 {
			r.sendTo(ev, m, dests)
		}
		clear(dests)
		ev.dests = dests[:0]
	}
	if noLink > 0 {
		r.m.dropped.add(reasonNoLink, noLink)
	}
	for t, n := range r.sent {
		if n > 0 {
			r.m.sent[t].Add(float64(n))
			r.sent[t] = 0
		}
	}
}
