package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/link"
	"github.com/rubin-go/rubin/bft/wire"
)

// ErrClosed is returned by Invoke on a closed Client.
var ErrClosed = errors.New("node: client closed")

// ClientConfig configures a Client.
type ClientConfig struct {
	Cluster *auth.Cluster
	ID      bft.ClientID
	// Network is the transport, "tcp" (default) or "rdma"; Transport, if
	// set, overrides it.
	Network   string
	Transport *rubin.Config
	// Tick is the client core's tick; default 5ms.
	Tick time.Duration
	// RetransmitTicks: ticks without a result before the request goes to
	// every replica (bft.ClientConfig; default 20).
	RetransmitTicks int
	// StartTimestamp: request timestamps start above it. Default: the
	// wall clock in nanoseconds, so a client restarted with the same ID
	// is not ignored as replaying old timestamps.
	StartTimestamp uint64
	Logger         *slog.Logger // nil: discard
	Registerer     prometheus.Registerer
	// RedialMin and RedialMax bound the backoff between dials of a
	// replica (defaults DefaultRedialMin, DefaultRedialMax).
	RedialMin, RedialMax time.Duration
	// Link tunes the links; a zero WriteTimeout becomes
	// DefaultWriteTimeout.
	Link link.Options
}

// Client is a PBFT client: it keeps a link to every replica (redialing
// with backoff) and runs the client core (bft.Client) on one goroutine.
// It has one request outstanding at a time: concurrent Invoke calls are
// served one after the other, in no particular order. Use several Clients
// (with distinct IDs) for concurrency.
type Client struct {
	cfg    ClientConfig
	n      int
	core   *bft.Client
	ccfg   bft.ClientConfig
	log    *slog.Logger
	m      *clientMetrics
	ep     *endpoint
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the core's goroutine exited

	sem     chan struct{} // one Invoke at a time
	calls   chan *call
	inbound chan reply
	once    sync.Once
}

type call struct {
	op    []byte
	ctx   context.Context
	start time.Time
	done  chan callResult // capacity 1, answered exactly once
}

type callResult struct {
	res []byte
	err error
}

type reply struct {
	from bft.ReplicaID
	rep  *bft.Reply
}

// NewClient starts a client: it connects to every replica in the
// background (replicas that are down are retried; it does not fail for
// them). ctx bounds the client's life like Close does.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Cluster == nil {
		return nil, errors.New("node: client config: Cluster is required")
	}
	a, err := auth.NewClientAuth(cfg.Cluster, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("node: client %d: %w", cfg.ID, err)
	}
	n := cfg.Cluster.N()
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.StartTimestamp == 0 {
		cfg.StartTimestamp = uint64(time.Now().UnixNano())
	}
	if cfg.RedialMin <= 0 {
		cfg.RedialMin = DefaultRedialMin
	}
	if cfg.RedialMax < cfg.RedialMin {
		cfg.RedialMax = max(DefaultRedialMax, cfg.RedialMin)
	}
	if cfg.Link.WriteTimeout <= 0 {
		cfg.Link.WriteTimeout = DefaultWriteTimeout
	}
	ccfg := bft.ClientConfig{ID: cfg.ID, N: n, RetransmitTicks: cfg.RetransmitTicks, Sign: a.Sign, StartTimestamp: cfg.StartTimestamp}
	core, err := bft.NewClient(ccfg)
	if err != nil {
		return nil, fmt.Errorf("node: client %d: %w", cfg.ID, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("client", cfg.ID)
	m, err := newClientMetrics(cfg.Registerer, cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("node: client %d: metrics: %w", cfg.ID, err)
	}
	tr := rubin.Config{Transport: cfg.Network}
	if cfg.Transport != nil {
		tr = *cfg.Transport
	}
	c := &Client{
		cfg:     cfg,
		n:       n,
		core:    core,
		ccfg:    ccfg,
		log:     log,
		m:       m,
		done:    make(chan struct{}),
		sem:     make(chan struct{}, 1),
		calls:   make(chan *call),
		inbound: make(chan reply, 4*n),
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.ep = &endpoint{
		self:    link.ClientPeer(uint64(cfg.ID)),
		log:     log,
		limits:  wire.Limits{MaxReplicas: n},
		opts:    cfg.Link,
		queue:   64,
		redial:  backoff{min: cfg.RedialMin, max: cfg.RedialMax},
		dropped: m.dropped,
		conns:   make(map[link.Peer]*conn),
		deliver: c.deliver,
	}
	// When ctx ends before Close, the links close too (Close still waits).
	context.AfterFunc(c.ctx, c.ep.close)
	for i := range n {
		key := cfg.Cluster.ClientLinkKey(cfg.ID, bft.ReplicaID(i))
		if key == nil {
			log.Error("no link key; not dialing", "replica", i)
			continue
		}
		addr := cfg.Cluster.Replicas[i].Addr
		c.ep.wg.Add(1)
		go func() {
			defer c.ep.wg.Done()
			c.ep.dialLoop(c.ctx, tr.Dial, addr, link.Replica(uint64(i)), key)
		}()
	}
	go c.loop()
	return c, nil
}

func (c *Client) deliver(from link.Peer, m bft.Message, done <-chan struct{}) bool {
	rep, ok := m.(*bft.Reply)
	if !ok || from.Client {
		c.m.dropped.inc(reasonUnexpected)
		c.log.Debug("unexpected message", "from", from, "type", typeNames[typeIndex(m.Type())])
		return true
	}
	select {
	case c.inbound <- reply{from: bft.ReplicaID(from.ID), rep: rep}:
		return true
	case <-done:
		return false
	}
}

// Invoke runs op through the replicated state machine and returns its
// result, once f+1 replicas sent the same one. One request is outstanding
// per Client: a concurrent Invoke waits for the one before it. If ctx ends
// first, Invoke returns ctx's error; the request may still execute, but
// the client no longer waits for it (its later replies are ignored).
// Retransmission, to every replica after Config.RetransmitTicks, is the
// client core's job.
func (c *Client) Invoke(ctx context.Context, op []byte) ([]byte, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, ErrClosed
	}
	defer func() { <-c.sem }()
	cl := &call{op: op, ctx: ctx, start: time.Now(), done: make(chan callResult, 1)}
	select {
	case c.calls <- cl:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.ctx.Done():
		return nil, ErrClosed
	}
	r := <-cl.done
	return r.res, r.err
}

// Close stops the client: it closes every link and returns after all the
// client's goroutines have exited. An Invoke in progress returns
// ErrClosed.
func (c *Client) Close() error {
	c.once.Do(func() {
		c.cancel()
		<-c.done
		c.ep.close()
		c.ep.wg.Wait()
	})
	return nil
}

// loop is the client core's goroutine.
func (c *Client) loop() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	var (
		cur    *call
		curTS  uint64
		lastTS = c.cfg.StartTimestamp
	)
	finish := func(res []byte, err error) {
		cur.done <- callResult{res: res, err: err}
		cur = nil
	}
	for {
		var curDone <-chan struct{}
		if cur != nil {
			curDone = cur.ctx.Done()
		}
		retransmit := false
		select {
		case <-c.ctx.Done():
			if cur != nil {
				finish(nil, ErrClosed)
			}
			return
		case cl := <-c.calls:
			ts, err := c.core.Propose(cl.op)
			if err != nil {
				cl.done <- callResult{err: err}
				break
			}
			cur, curTS, lastTS = cl, ts, ts
		case <-curDone:
			// Abandon the request: a fresh core, with timestamps above
			// the abandoned one, forgets it.
			finish(nil, cur.ctx.Err())
			cfg := c.ccfg
			cfg.StartTimestamp = lastTS
			core, err := bft.NewClient(cfg)
			if err == nil {
				c.core = core
			}
		case rp := <-c.inbound:
			if err := c.core.Step(rp.from, rp.rep); err != nil {
				c.m.dropped.inc(stepReason(err))
			}
		case <-t.C:
			c.core.Tick()
			retransmit = true
		}
		rd := c.core.Ready()
		if len(rd.Messages) > 0 {
			if retransmit {
				c.m.retransmissions.Inc()
				c.log.Debug("retransmitting request", "ts", curTS)
			}
			c.send(rd.Messages)
		}
		for _, d := range rd.Done {
			if cur != nil && d.Timestamp == curTS {
				c.m.completed.Inc()
				c.m.latency.Observe(time.Since(cur.start).Seconds())
				finish(d.Result, nil)
			}
		}
	}
}

func (c *Client) send(msgs []bft.Envelope) {
	var (
		last  bft.Message
		frame []byte
	)
	ep := c.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, e := range msgs {
		cn := ep.lookupLocked(link.Peer(e.To))
		if cn == nil {
			c.m.dropped.inc(reasonNoLink)
			continue
		}
		if e.Msg != last {
			last, frame = e.Msg, wire.Append(nil, e.Msg)
		}
		if !cn.enqueue(frame) {
			c.m.dropped.inc(reasonQueueFull)
		}
	}
}
