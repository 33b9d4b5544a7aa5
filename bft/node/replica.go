package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/link"
	"github.com/rubin-go/rubin/bft/wire"
)

// Defaults of ReplicaConfig and ClientConfig.
const (
	DefaultTick          = 5 * time.Millisecond
	DefaultInboundQueue  = 4096
	DefaultOutboundQueue = 8192
	DefaultMaxDrain      = 1024
	DefaultRedialMin     = 10 * time.Millisecond
	DefaultRedialMax     = time.Second
	DefaultWriteTimeout  = 10 * time.Second
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

	// Listener, if set, is used (and closed by Run) instead of listening
	// on Cluster.Replicas[ID].Addr: tests pass a listener on port 0.
	Listener net.Listener
	// InboundQueue bounds the deliveries of decoded messages waiting for
	// the core (default DefaultInboundQueue): a delivery is one message,
	// or a burst of up to 64 that arrived together on one link. A full
	// queue blocks the links' readers (back-pressure through the
	// transport).
	InboundQueue int
	// InboundQueueBytes bounds the same deliveries in frame bytes, over
	// all links (default DefaultInboundQueueBytes); a reader whose
	// delivery does not fit blocks like on a full InboundQueue.
	InboundQueueBytes int
	// OutboundQueue bounds the frames waiting per link (default
	// DefaultOutboundQueue); a full queue drops new frames.
	OutboundQueue int
	// OutboundQueueBytes bounds the bytes of the frames waiting or being
	// written per link (default DefaultOutboundQueueBytes); a frame that
	// does not fit is dropped. A frame larger than the bound is sent only
	// from an empty queue.
	OutboundQueueBytes int
	// MaxDrain bounds how many inbound messages the core takes before it
	// collects Ready (default DefaultMaxDrain; a burst is taken whole).
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

// Replica runs one PBFT replica: the protocol core (bft.Replica) on one
// goroutine, and links to the other replicas and to clients.
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
// Queueing: decoded messages go to the core through one bounded channel;
// when it is full, link readers block (back-pressure on the sender). What
// the core sends is encoded once per message (a broadcast shares its bytes
// among its destinations) and queued per link; each link's writer
// goroutine drains its queue with one Flush per burst. A full outbound
// queue, or a destination without a link, drops the message and counts it
// (metric rubin_bft_messages_dropped_total): one slow or Byzantine peer
// never stalls the core; PBFT's retransmission and state transfer recover.
type Replica struct {
	cfg    ReplicaConfig
	n      int
	core   *bft.Replica
	log    *slog.Logger
	m      *replicaMetrics
	ep     *endpoint
	tr     *rubin.Config // nil: cfg.Network's default stack
	addr   atomic.Pointer[string]
	status atomic.Pointer[bft.Status]
	ready  chan struct{}
	ran    atomic.Bool

	inbound chan inbound
	last    bft.Status // last published status (core goroutine)
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
	routes      map[bft.ClientID]*conn
	routesStale atomic.Bool

	// Scratch of route, reused across Readies.
	enc     encoder
	batches map[*conn]int // index into out
	out     []connBatch
	sent    [len(typeNames)]int
}

// connBatch is what one Ready queues on one link, in order.
type connBatch struct {
	c      *conn
	frames [][]byte
	types  []uint8
}

// inbound is what a link's reader hands to the core: one message m, or a
// burst ms.
type inbound struct {
	c     *conn
	m     bft.Message
	ms    []bft.Message
	bytes int // taken from the inbound budget
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
	def(&cfg.InboundQueue, DefaultInboundQueue)
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
		cfg:     cfg,
		n:       n,
		core:    cr,
		store:   store,
		log:     log,
		m:       m,
		tr:      cfg.Transport,
		ready:   make(chan struct{}),
		inbound: make(chan inbound, cfg.InboundQueue),
		batches: make(map[*conn]int),
		enc:     encoder{minSize: 32 << 10},
		routes:  make(map[bft.ClientID]*conn),
	}
	lim := wire.Limits{MaxReplicas: n}
	r.ep = &endpoint{
		self:     link.Replica(uint64(cfg.ID)),
		log:      log,
		limits:   lim,
		opts:     cfg.Link,
		queue:    cfg.OutboundQueue,
		qBytes:   cfg.OutboundQueueBytes,
		inbound:  newByteBudget(cfg.InboundQueueBytes),
		redial:   backoff{min: cfg.RedialMin, max: cfg.RedialMax},
		dropped:  m.dropped,
		received: &m.received,
		links:    m.links,
		conns:    make(map[link.Peer]*conn),
		deliver:  r.deliver,
		down: func(c *conn) {
			if c.peer.Client {
				r.routesStale.Store(true)
			}
		},
	}
	addr := cfg.Cluster.Replicas[cfg.ID].Addr
	r.addr.Store(&addr)
	r.last = cr.Status()
	st := r.last
	r.status.Store(&st)
	return r, nil
}

// Status returns the core's status as of its last step; safe from any
// goroutine.
func (r *Replica) Status() bft.Status { return *r.status.Load() }

// Ready is closed once Run listens.
func (r *Replica) Ready() <-chan struct{} { return r.ready }

// Addr returns the address Run listens on once Ready is closed (useful
// with a Listener on port 0), the configured one before.
func (r *Replica) Addr() string { return *r.addr.Load() }

func (r *Replica) deliver(c *conn, m bft.Message, ms []bft.Message, bytes int) bool {
	select {
	case r.inbound <- inbound{c: c, m: m, ms: ms, bytes: bytes}:
		return true
	case <-c.done:
		return false
	}
}

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

// Run listens on the replica's address (or uses Config.Listener), keeps
// the links to the other replicas up, serves clients and runs the core
// until ctx is done. It returns nil when ctx is done, after every
// goroutine it started has exited and every link and the listener are
// closed; it returns an error if it cannot listen. A Replica runs once.
func (r *Replica) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return errors.New("node: Replica.Run called twice")
	}
	tr, err := openTransport(r.cfg.Network, r.tr)
	if err != nil {
		return fmt.Errorf("node: replica %d: %w", r.cfg.ID, err)
	}
	defer tr.close()
	ln := r.cfg.Listener
	if ln == nil {
		ln, err = tr.listen(ctx, r.Addr())
		if err != nil {
			return fmt.Errorf("node: replica %d: listen on %s: %w", r.cfg.ID, r.Addr(), err)
		}
	}
	addr := ln.Addr().String()
	r.addr.Store(&addr)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.log.Info("listening", "addr", addr, "network", tr.name())
	close(r.ready)

	ep := r.ep
	ep.wg.Add(1)
	go func() {
		defer ep.wg.Done()
		ep.acceptLoop(ctx, ln, r.lookup)
	}()
	for j := int(r.cfg.ID) + 1; j < r.n; j++ {
		key := r.cfg.Cluster.LinkKey(r.cfg.ID, bft.ReplicaID(j))
		if key == nil {
			r.log.Error("no link key; not dialing", "peer", j)
			continue
		}
		addr := r.cfg.Cluster.Replicas[j].Addr
		ep.wg.Add(1)
		go func() {
			defer ep.wg.Done()
			ep.dialLoop(ctx, tr.dial, addr, link.Replica(uint64(j)), key)
		}()
	}

	r.loop(ctx)

	cancel()
	ln.Close()
	ep.close()
	ep.wg.Wait()
	if r.store != nil {
		r.store.close()
	}
	if r.failed != nil {
		return fmt.Errorf("node: replica %d stopped: %w", r.cfg.ID, r.failed)
	}
	r.log.Info("stopped")
	return nil
}

// loop is the core's goroutine.
func (r *Replica) loop(ctx context.Context) {
	t := time.NewTicker(r.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-r.inbound:
			n := r.stepAll(in)
		drain:
			for n < r.cfg.MaxDrain {
				select {
				case in = <-r.inbound:
					n += r.stepAll(in)
				default:
					break drain
				}
			}
		case <-t.C:
			r.core.Tick()
		}
		if r.routesStale.Swap(false) {
			for id, c := range r.routes {
				if c.dead.Load() {
					delete(r.routes, id)
				}
			}
		}
		if r.core.HasReady() {
			if err := r.handleReady(r.core.Ready()); err != nil {
				r.failed = err
				r.log.Error("cannot persist; stopping without sending", "err", err)
				return
			}
		}
		r.publish()
	}
}

// stepAll steps in's messages, gives their bytes back to the inbound
// budget, and returns how many there were.
func (r *Replica) stepAll(in inbound) int {
	defer r.ep.inbound.give(in.bytes)
	if in.ms == nil {
		r.step(in.c, in.m)
		return 1
	}
	for _, m := range in.ms {
		r.step(in.c, m)
	}
	return len(in.ms)
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
func (r *Replica) step(c *conn, m bft.Message) {
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
// identity. The caller holds r.ep.mu.
func (r *Replica) linkFor(to bft.Target) *conn {
	if to.Client {
		id := bft.ClientID(to.ID)
		if c := r.routes[id]; c != nil {
			if !c.dead.Load() {
				return c
			}
			delete(r.routes, id)
		}
	}
	return r.ep.lookupLocked(link.Peer(to))
}

// handleReady persists what the core asks (DataDir), then routes its
// messages to the links' queues, then reports executed batches: persist,
// send, apply. An error means the records are not durable and nothing
// was sent.
func (r *Replica) handleReady(rd bft.Ready) error {
	if r.store != nil {
		if err := r.store.save(&rd); err != nil {
			return err
		}
	}
	if len(rd.Messages) > 0 {
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

// route encodes the messages of one Ready (each once: a broadcast's
// envelopes share their bytes; frames are carved from shared buffers, not
// allocated one by one: the writers only read them) and
// queues them per link, each link's frames under one lock and one wake-up
// of its writer, so a burst of replies to one client link goes out in one
// flush.
func (r *Replica) route(msgs []bft.Envelope) {
	debug := r.log.Enabled(context.Background(), slog.LevelDebug)
	var (
		last  bft.Message
		frame []byte
	)
	noLink := 0
	ep := r.ep
	ep.mu.Lock()
	for _, e := range msgs {
		c := r.linkFor(e.To)
		if c == nil {
			noLink++
			continue
		}
		if e.Msg != last {
			// The core expands a broadcast into consecutive envelopes;
			// a message repeated later in the Ready is encoded again.
			last, frame = e.Msg, r.enc.encode(e.Msg)
		}
		i, ok := r.batches[c]
		if !ok {
			i = len(r.out)
			r.batches[c] = i
			if i < cap(r.out) {
				r.out = r.out[:i+1]
				r.out[i].c = c
			} else {
				r.out = append(r.out, connBatch{c: c})
			}
		}
		b := &r.out[i]
		b.frames = append(b.frames, frame)
		b.types = append(b.types, uint8(typeIndex(e.Msg.Type())))
	}
	for i := range r.out {
		b := &r.out[i]
		k := b.c.enqueueAll(b.frames)
		for j, t := range b.types {
			if j < k {
				r.sent[t]++
				if debug {
					r.log.Debug("sent", "to", b.c.peer, "type", typeNames[t], "bytes", len(b.frames[j]))
				}
			}
		}
		if d := len(b.frames) - k; d > 0 {
			r.m.dropped.add(reasonQueueFull, d)
		}
		clear(b.frames)
		b.frames, b.types, b.c = b.frames[:0], b.types[:0], nil
	}
	ep.mu.Unlock()
	r.out = r.out[:0]
	clear(r.batches)
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
