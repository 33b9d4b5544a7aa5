package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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
	// IDs are the client identities the Client multiplexes over its links
	// (default: just ID, which is otherwise not used). Each identity has
	// its own client core with up to Window requests outstanding, so a
	// Client runs up to len(IDs)*Window Invokes at once. The links
	// authenticate as IDs[0]; every request carries the authenticator of
	// its own identity, which is what the replicas check. Two Clients
	// running at once must not share an identity.
	IDs []bft.ClientID
	// Window bounds the ordered requests each identity has outstanding
	// at once (bft.ClientConfig.Window), at most the replicas'
	// bft.Config.ClientWindow. An identity's requests execute in the
	// order the Client proposed them, each once. Default 1: an identity
	// runs one request at a time.
	Window int
	// Network is the transport, "tcp" (default) or "rdma"; Transport, if
	// set, overrides it.
	Network   string
	Transport *rubin.Config
	// Tick is the client core's tick; default 5ms.
	Tick time.Duration
	// RetransmitTicks: ticks without a result before the request goes to
	// every replica, doubling with each retransmission (bft.ClientConfig;
	// default 20).
	RetransmitTicks int
	// StartTimestamp: request timestamps start above it. Default: the
	// wall clock in nanoseconds, so a client restarted with the same ID
	// is not ignored as replaying old timestamps.
	StartTimestamp uint64
	// OnNote, if set, is called for every notification an identity
	// delivers (bft.ExecContext.Notify: f+1 replicas sent it
	// identically), in number order per identity, and for every range
	// of them that is lost (bft.Note.Lost). It runs on the Client's
	// goroutine: it must return quickly and must not call the Client.
	// With OnNote set, every identity's core is ticked, so that one that
	// missed notifications fetches them.
	OnNote     func(id bft.ClientID, n bft.Note)
	Logger     *slog.Logger // nil: discard
	Registerer prometheus.Registerer
	// RedialMin and RedialMax bound the backoff between dials of a
	// replica (defaults DefaultRedialMin, DefaultRedialMax).
	RedialMin, RedialMax time.Duration
	// Link tunes the links; a zero WriteTimeout becomes
	// DefaultWriteTimeout.
	Link link.Options
}

// Client is a PBFT client: it keeps one link to every replica (redialing
// with backoff) and runs one client core (bft.Client) per identity of
// ClientConfig.IDs, all on one goroutine. Invoke is safe for concurrent
// use: up to len(IDs)*Window requests are outstanding at once, up to
// Window of them under each identity; further calls wait, and start in
// the order they reached the Client. A call takes an idle identity if
// there is one, else the identity with the fewest requests outstanding
// that has room in its window. The requests of one identity execute in
// the order they started. Replies are routed to the core of the identity
// they answer.
//
// The goroutine runs an event loop: one selector serves the links to the
// replicas, as link.Chans on the channels of the Client's own transport,
// as a Replica's do. Each pass reads what the links hold (within a
// budget), takes every call waiting, ticks the cores when a Tick has
// passed, then collects their output, encoding requests straight into
// the links' pool buffers, and flushes every link written to once, so
// the requests of many identities to one replica go out in one message.
//
// A replica sends an identity's replies on the link its requests last
// arrived on (or on the link of that client's own identity). So that
// every replica knows the route before it has a reply to send, an
// identity's first request after a link to a replica came up goes to that
// replica too, not only to the primary.
type Client struct {
	cfg    ClientConfig
	n      int
	log    *slog.Logger
	m      *clientMetrics
	limits wire.Limits
	ev     *clientLoop
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop exited
	once   sync.Once

	// Calls handed to the loop, under mu; closed once the loop exited.
	mu        sync.Mutex
	closed    bool
	incoming  []*call
	abandoned []*call // calls whose ctx ended
	linksUp   atomic.Int32
	// mismatches counts, per replica, its replies that differed from a
	// result (Mismatches).
	mismatches []atomic.Uint64

	// Owned by the loop's goroutine.
	slots   []*slot
	byID    map[bft.ClientID]*slot
	free    []*slot     // identities without a request outstanding
	dirty   []*slot     // cores that may have a Ready
	pending []*call     // calls waiting for room, in arrival order
	links   []*peerLink // per replica: its link, if up
}

// slot is one client identity and its core.
type slot struct {
	ccfg bft.ClientConfig
	core *bft.Client
	// calls are the core's outstanding requests, in timestamp order;
	// an abandoned one stays until its result comes or the core is
	// replaced.
	calls  []*call
	live   int // calls not abandoned
	lastTS uint64
	dirty  bool
	retx   bool // ticked: messages in the next Ready are retransmissions
	// seen[i] is the link to replica i this identity last sent a request
	// on: a replica that has not seen the identity on its current link
	// gets its next request too (see Client).
	seen []*peerLink
}

type call struct {
	op       []byte
	read     bool // asked for with InvokeRead
	readOnly bool // proposed with ProposeRead
	ctx      context.Context
	start    time.Time
	slot     *slot
	ts       uint64
	answered bool
	done     chan callResult // capacity 1, answered exactly once
}

type callResult struct {
	res []byte
	id  bft.ClientID // the request's identity
	ts  uint64       // and timestamp
	err error
}

// NewClient starts a client: it connects to every replica in the
// background (replicas that are down are retried; it does not fail for
// them). ctx bounds the client's life like Close does.
func NewClient(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Cluster == nil {
		return nil, errors.New("node: client config: Cluster is required")
	}
	if len(cfg.IDs) == 0 {
		cfg.IDs = []bft.ClientID{cfg.ID}
	}
	if cfg.Window <= 0 {
		cfg.Window = 1
	}
	cfg.IDs = slices.Clone(cfg.IDs)
	cfg.ID = cfg.IDs[0]
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
	slots := make([]*slot, len(cfg.IDs))
	byID := make(map[bft.ClientID]*slot, len(cfg.IDs))
	for i, id := range cfg.IDs {
		if byID[id] != nil {
			return nil, fmt.Errorf("node: client %d: identity %d given twice", cfg.ID, id)
		}
		a, err := auth.NewClientAuth(cfg.Cluster, id)
		if err != nil {
			return nil, fmt.Errorf("node: client %d: %w", id, err)
		}
		ccfg := bft.ClientConfig{ID: id, N: n, Window: cfg.Window, RetransmitTicks: cfg.RetransmitTicks, Sign: a.Sign, StartTimestamp: cfg.StartTimestamp}
		core, err := bft.NewClient(ccfg)
		if err != nil {
			return nil, fmt.Errorf("node: client %d: %w", id, err)
		}
		slots[i] = &slot{ccfg: ccfg, core: core, lastTS: cfg.StartTimestamp, seen: make([]*peerLink, n), calls: make([]*call, 0, cfg.Window)}
		byID[id] = slots[i]
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("client", cfg.ID)
	m, err := newClientMetrics(cfg.Registerer, cfg.ID, n)
	if err != nil {
		return nil, fmt.Errorf("node: client %d: metrics: %w", cfg.ID, err)
	}
	free := make([]*slot, len(slots))
	for i := range slots {
		free[i] = slots[len(slots)-1-i] // IDs[0] first
	}
	c := &Client{
		cfg:    cfg,
		n:      n,
		log:    log,
		m:      m,
		limits: wire.Limits{MaxReplicas: n},
		done:   make(chan struct{}),
		slots:  slots,
		byID:   byID,
		free:   free,
		links:  make([]*peerLink, n),

		mismatches: make([]atomic.Uint64, n),
	}
	if c.ev, err = c.openLoop(); err != nil {
		return nil, fmt.Errorf("node: client %d: %w", cfg.ID, err)
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	go c.run()
	return c, nil
}

func (c *Client) unexpected(from link.Peer, m bft.Message) {
	c.m.dropped.inc(reasonUnexpected)
	c.log.Debug("unexpected message", "from", from, "type", typeNames[typeIndex(m.Type())])
}

// Invoke runs op through the replicated state machine and returns its
// result, once f+1 replicas sent the same one. It is safe for concurrent
// use: up to len(ClientConfig.IDs)*Window calls are outstanding at once;
// more wait for room, in the order they came. If ctx ends first, Invoke
// returns ctx's error; the request may still execute, but the client no
// longer waits for it (its result is dropped when it comes, and once every
// request of its identity is abandoned, the identity gets a fresh core
// whose timestamps are above the abandoned requests', so their later
// replies are ignored). Retransmission, to every replica after
// Config.RetransmitTicks, is the client core's job.
func (c *Client) Invoke(ctx context.Context, op []byte) ([]byte, error) {
	r := c.invoke(ctx, op, false)
	return r.res, r.err
}

// InvokeRead is Invoke for an op that does not change the application's
// state, which must be a bft.Querier: it goes to every replica as a
// read-only request, answered once 2f+1 replicas return the same result
// from their state, and is ordered like Invoke's only if they do not (see
// bft.Client.ProposeRead). A read-only request needs an identity with
// nothing outstanding; when every identity has requests outstanding, the
// read is ordered at once, behind them, on one with room in its window.
// Either way the read is linearizable.
func (c *Client) InvokeRead(ctx context.Context, op []byte) ([]byte, error) {
	r := c.invoke(ctx, op, true)
	return r.res, r.err
}

func (c *Client) invoke(ctx context.Context, op []byte, read bool) callResult {
	return c.begin(ctx, op, read).wait()
}

// A Call is a request Start handed to the Client.
type Call struct {
	c  *Client
	cl *call
	r  *callResult // set at start when the call never reached the loop
}

// Start is Invoke without the wait: the Client has the call when Start
// returns, so calls started one after another from one goroutine start
// in that order, and those of one identity execute in it. Wait returns
// the result.
func (c *Client) Start(ctx context.Context, op []byte) *Call {
	return c.begin(ctx, op, false)
}

// Wait waits for the call's result, or for the end of Start's ctx, and
// returns what Invoke would have. It may be called once.
func (k *Call) Wait() ([]byte, error) {
	r := k.wait()
	return r.res, r.err
}

func (c *Client) begin(ctx context.Context, op []byte, read bool) *Call {
	if err := ctx.Err(); err != nil {
		return &Call{r: &callResult{err: err}}
	}
	cl := &call{op: op, read: read, ctx: ctx, start: time.Now(), done: make(chan callResult, 1)}
	if !c.post(&c.incoming, cl) {
		return &Call{r: &callResult{err: ErrClosed}}
	}
	return &Call{c: c, cl: cl}
}

func (k *Call) wait() callResult {
	if k.r != nil {
		return *k.r
	}
	select {
	case r := <-k.cl.done:
		return r
	case <-k.cl.ctx.Done():
		// Tell the loop, which answers (with ctx's error, or the result
		// if it had it first); a loop that exited answered every call.
		k.c.post(&k.c.abandoned, k.cl)
		return <-k.cl.done
	}
}

// post hands cl to the loop in q and wakes the loop if q was empty; it
// fails once the loop exited.
func (c *Client) post(q *[]*call, cl *call) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	*q = append(*q, cl)
	if len(*q) == 1 {
		// Under mu: the loop closes the selector only after it set
		// closed.
		c.ev.sel.Wakeup()
	}
	return true
}

// takeCalls starts or queues the calls Invoke handed over, then drops
// the abandoned ones.
func (c *Client) takeCalls() {
	c.mu.Lock()
	in, ab := c.incoming, c.abandoned
	c.incoming, c.abandoned = nil, nil
	c.mu.Unlock()
	for _, cl := range in {
		c.enqueue(cl)
	}
	for _, cl := range ab {
		c.drop(cl)
	}
}

// LinksUp returns the number of replicas the client has a link to now.
// A read-only request (InvokeRead) goes to every replica once, and is
// ordered if 2f+1 do not answer: a caller that must not have it ordered
// waits for the links first.
func (c *Client) LinksUp() int { return int(c.linksUp.Load()) }

// Close stops the client: it closes every link and its transport and
// returns after the client's goroutine has exited. Invokes in progress
// return ErrClosed.
func (c *Client) Close() error {
	c.once.Do(func() {
		c.cancel()
		<-c.done
	})
	return nil
}

func (c *Client) touch(s *slot) {
	if !s.dirty {
		s.dirty = true
		c.dirty = append(c.dirty, s)
	}
}

// enqueue starts cl, or queues it behind the calls waiting for room.
func (c *Client) enqueue(cl *call) {
	c.pending = append(c.pending, cl)
	c.schedule()
}

// schedule starts the waiting calls, oldest first, while an identity has
// room for the oldest.
func (c *Client) schedule() {
	k := 0
	for k < len(c.pending) {
		s := c.room()
		if s == nil {
			break
		}
		c.start(s, c.pending[k])
		k++
	}
	if k > 0 {
		clear(c.pending[:k])
		c.pending = c.pending[k:]
	}
}

// room returns an idle identity, IDs[0] first, or else the identity with
// the fewest requests outstanding below its window; nil if none has room.
// An identity with a read-only request outstanding has none (the core
// takes no request beside it).
func (c *Client) room() *slot {
	if len(c.free) > 0 {
		return c.free[len(c.free)-1]
	}
	var best *slot
	for _, s := range c.slots {
		if n := len(s.calls); n < c.cfg.Window && !s.calls[0].readOnly && (best == nil || n < len(best.calls)) {
			best = s
		}
	}
	return best
}

// start proposes cl's op on s, which has room: read-only if s is idle and
// cl is a read, ordered otherwise.
func (c *Client) start(s *slot, cl *call) {
	propose := s.core.Propose
	if cl.read && len(s.calls) == 0 {
		propose = s.core.ProposeRead
		cl.readOnly = true
	}
	ts, err := propose(cl.op)
	if err != nil { // impossible: s has room; do not panic
		c.answer(cl, callResult{err: err})
		return
	}
	if len(s.calls) == 0 {
		c.free = slices.DeleteFunc(c.free, func(f *slot) bool { return f == s })
		s.retx = false
	}
	cl.slot, cl.ts = s, ts
	s.calls = append(s.calls, cl)
	s.live++
	s.lastTS = max(s.lastTS, ts)
	c.touch(s)
}

// answer hands r to cl's Invoke, unless it was answered already.
func (c *Client) answer(cl *call, r callResult) {
	if !cl.answered {
		cl.answered = true
		cl.done <- r
	}
}

// complete answers the call of s whose request d answers, unless it was
// abandoned, and frees the identity once nothing is outstanding.
func (c *Client) complete(s *slot, d bft.Result) {
	i := slices.IndexFunc(s.calls, func(cl *call) bool { return cl.ts == d.Timestamp })
	if i < 0 {
		return
	}
	cl := s.calls[i]
	s.calls = slices.Delete(s.calls, i, i+1)
	if len(s.calls) == 0 {
		c.free = append(c.free, s)
	}
	if cl.answered {
		return
	}
	s.live--
	c.m.completed.Inc()
	c.m.latency.Observe(time.Since(cl.start).Seconds())
	c.answer(cl, callResult{res: d.Result, id: s.ccfg.ID, ts: d.Timestamp})
}

// drop abandons cl: a waiting call leaves the queue; a started one is
// answered with its context's error and its result, when it comes, is
// dropped. Once every call of its identity is abandoned, a fresh core,
// with timestamps above the abandoned requests', forgets them.
func (c *Client) drop(cl *call) {
	if cl.answered {
		return
	}
	r := callResult{err: cl.ctx.Err()}
	s := cl.slot
	if s == nil {
		c.pending = slices.DeleteFunc(c.pending, func(p *call) bool { return p == cl })
		c.answer(cl, r)
		return
	}
	c.answer(cl, r)
	s.live--
	if s.live > 0 {
		return
	}
	cfg := s.ccfg
	cfg.StartTimestamp = s.lastTS
	cfg.FirstNote = s.core.NextNote()
	core, err := bft.NewClient(cfg)
	if err != nil {
		return // impossible: the configuration was valid before
	}
	s.core = core
	clear(s.calls)
	s.calls = s.calls[:0]
	c.free = append(c.free, s)
	c.schedule()
}

// stepNote hands a notification from replica from to its identity's core.
func (c *Client) stepNote(from bft.ReplicaID, m *bft.Notify) {
	s := c.byID[m.Client]
	if s == nil {
		c.m.dropped.inc(reasonInvalid)
		return
	}
	if err := s.core.StepNotify(from, m); err != nil {
		c.m.dropped.inc(stepReason(err))
		return
	}
	c.touch(s)
}

func (c *Client) stepOne(from bft.ReplicaID, rep *bft.Reply) {
	s := c.byID[rep.Client]
	if s == nil {
		c.m.dropped.inc(reasonInvalid)
		return
	}
	if err := s.core.Step(from, rep); err != nil {
		c.m.dropped.inc(stepReason(err))
		if s.core.Dissented() {
			c.touch(s) // a late reply differed from its result
		}
		return
	}
	c.touch(s)
}

// mismatch counts n replies of replica r that differed from the result
// f+1 replicas agreed on.
func (c *Client) mismatch(r int, n uint64) {
	if r < len(c.m.mismatches) {
		c.m.mismatches[r].Add(float64(n))
		c.mismatches[r].Add(n)
	}
}

// Mismatches returns, for each replica, the replies to ordered requests
// it sent that differed from the result f+1 replicas agreed on: as
// correct replicas reply alike, each is a fault of that replica. Replies
// that come after the result are compared with the last few results of
// their identity; replies to read-only requests, which a correct
// replica that lags may answer from an older state, are not compared.
func (c *Client) Mismatches() []uint64 {
	out := make([]uint64, len(c.mismatches))
	for i := range c.mismatches {
		out[i] = c.mismatches[i].Load()
	}
	return out
}

// collect takes the Ready of every core that may have one, answers the
// calls that completed and queues the requests on the links.
func (c *Client) collect() {
	noLink := 0
	// A result frees room for a waiting call, whose identity is appended
	// to c.dirty: it is collected in the same pass.
	for k := 0; k < len(c.dirty); k++ {
		s := c.dirty[k]
		s.dirty = false
		rd := s.core.Ready()
		retx := s.retx
		s.retx = false
		if len(rd.Messages) > 0 {
			if retx {
				c.m.retransmissions.Inc()
				c.log.Debug("retransmitting requests", "client", s.ccfg.ID, "outstanding", s.core.InFlight())
			}
			var last bft.Message
			for _, e := range rd.Messages {
				last = e.Msg
				i := int(e.To.ID)
				if e.To.Client || i >= c.n || c.links[i] == nil {
					noLink++
					continue
				}
				s.seen[i] = c.links[i]
				c.send(c.links[i], e.Msg)
			}
			// The identity's request, to the replicas that have not
			// seen it on their current link.
			if _, ok := last.(*bft.Request); ok {
				for i, l := range c.links {
					if l != nil && s.seen[i] != l {
						s.seen[i] = l
						c.send(l, last)
					}
				}
			}
		}
		if c.cfg.OnNote != nil {
			for _, nt := range rd.Notes {
				c.cfg.OnNote(s.ccfg.ID, nt)
			}
		}
		for r, n := range rd.Dissent {
			if n > 0 {
				c.mismatch(r, n)
			}
		}
		for _, d := range rd.Done {
			c.complete(s, d)
		}
		if len(rd.Done) > 0 && len(c.pending) > 0 {
			c.schedule()
		}
	}
	clear(c.dirty)
	c.dirty = c.dirty[:0]
	if noLink > 0 {
		c.m.dropped.add(reasonNoLink, noLink)
	}
}
