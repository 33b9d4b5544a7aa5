package bft

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/rubin-go/rubin/bft/internal/quorum"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	ID ClientID
	N  int // replicas
	// Window bounds the ordered requests outstanding at once, at most the
	// replicas' Config.ClientWindow; their timestamps are consecutive and
	// they execute in that order, each once, and their results come in
	// that order too. Default 1: closed loop.
	Window int
	// RetransmitTicks: without a result after this many ticks, the
	// request goes again, to every replica; a read-only request (see
	// ProposeRead) is ordered instead. Default 20. The wait doubles with
	// each retransmission, up to 8 times RetransmitTicks, and comes down
	// again as results come faster (see Tick).
	RetransmitTicks int
	// Sign fills r.Auth, the request's authenticator (package bft/auth).
	Sign func(r *Request)
	// FirstNote is the number of the first notification (see Notify)
	// the client delivers; the ones below it were delivered before (a
	// client that restarts passes the next one it expects). Default 1.
	FirstNote uint64
	// NoteWindow bounds the notifications ahead of the next one to
	// deliver that the client buffers copies of; NoteBuffer bounds the
	// payload bytes it buffers per replica. Defaults 64 and 1 MiB.
	NoteWindow int
	NoteBuffer int
	// StartTimestamp: timestamps start above it. A client that restarts
	// must pass one above every timestamp it used before (replicas
	// ignore requests at or below the last one executed), e.g. from a
	// clock or a persisted counter.
	StartTimestamp uint64
}

// Client is the deterministic core of a PBFT client: up to Window ordered
// requests outstanding (Propose), or one read-only request (ProposeRead).
// Like Replica it has no goroutines, clocks or I/O and is not safe for
// concurrent use.
type Client struct {
	cfg     ClientConfig
	f       int
	q       int // 2f+1, the replies a read-only result needs
	ts      uint64
	reads   uint64 // read-only requests proposed: the last one's Nonce
	view    uint64 // the view replies last showed
	started bool   // an ordered request was sent: the next follows it
	out     []*outstanding
	timer   int // ticks since the oldest outstanding request progressed
	// backoff doubles RetransmitTicks (at most maxRetransmitBackoff
	// times): raised by each retransmission, lowered by results that
	// came without one well within the wait (Tick).
	backoff uint
	now     uint64 // ticks since the client started
	sends   []Envelope
	done    []Result
	notes   noteQueue
	dissent []uint64 // Ready's Dissent, nil while all replies agreed
	recent  []Result // the last recentResults results of ordered requests, oldest first
}

// recentResults is how many results of ordered requests a client keeps
// after giving them out, to compare late replies with (Dissent).
const recentResults = 8

// outstanding is a request awaiting its result, or holding its result
// until the earlier ones have theirs.
type outstanding struct {
	req     *Request
	replies map[ReplicaID]*Reply
	result  *Result
	sent    uint64 // tick req was sent
	resent  bool   // req went again: its latency says nothing of the links
}

// errLateReply is Step's error for a reply to no outstanding request.
var errLateReply = fmt.Errorf("%w: reply for a request not outstanding", ErrStale)

// Result is a request's accepted result.
type Result struct {
	Timestamp uint64
	Result    []byte
	// Notes is the number of the client's last notification when the
	// request executed (or the read was answered): the notifications up
	// to it precede the result.
	Notes uint64
	// ReadOnly: 2f+1 replicas answered the read-only request from their
	// state; it was not ordered.
	ReadOnly bool
}

// ClientReady is what a client accumulated since the last Ready.
type ClientReady struct {
	Messages []Envelope
	Done     []Result
	// Notes are the notifications delivered, in number order.
	Notes []Note
	// Dissent is nil, or counts by replica the replies to ordered
	// requests that differed from the result f+1 replicas agreed on, since
	// the last Ready: correct replicas execute the same requests in the
	// same order and reply alike, so each is a fault of its sender (a
	// lie, or a state that diverged). A reply is compared with its result
	// when it came before it, or after it while the client still holds
	// the result (its request's or one of the last recentResults).
	// Replies to read-only requests are not compared: a correct replica
	// that lags answers them from an older state.
	Dissent []uint64
}

// NewClient validates cfg and fills its defaults.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.N < 4 {
		return nil, fmt.Errorf("bft: client config: N = %d, need at least 4", cfg.N)
	}
	if cfg.Sign == nil {
		return nil, errors.New("bft: client config: Sign is required")
	}
	if cfg.RetransmitTicks <= 0 {
		cfg.RetransmitTicks = 20
	}
	if cfg.Window <= 0 {
		cfg.Window = 1
	}
	if cfg.FirstNote == 0 {
		cfg.FirstNote = 1
	}
	if cfg.NoteWindow <= 0 {
		cfg.NoteWindow = 64
	}
	if cfg.NoteBuffer <= 0 {
		cfg.NoteBuffer = 1 << 20
	}
	c := &Client{cfg: cfg, ts: cfg.StartTimestamp}
	c.f, c.q = quorum.Faults(cfg.N), quorum.Quorum(cfg.N)
	c.notes.init(c)
	return c, nil
}

// Propose sends op to the primary of the last view seen and returns the
// request's timestamp; the result comes in a later Ready's Done, after
// the results of the requests proposed before it. It fails with ErrBusy
// when Window requests, or a read-only one, are outstanding. The client's
// first ordered request is flagged Restart: the replicas need not have
// executed the timestamps below it.
func (c *Client) Propose(op []byte) (uint64, error) {
	if len(c.out) >= c.cfg.Window || len(c.out) > 0 && c.out[0].req.ReadOnly {
		return 0, ErrBusy
	}
	c.ts++
	req := &Request{Client: c.cfg.ID, Timestamp: c.ts, Restart: !c.started, Op: op}
	c.started = true
	c.cfg.Sign(req)
	if len(c.out) == 0 {
		c.timer = 0
	}
	c.out = append(c.out, &outstanding{req: req, replies: make(map[ReplicaID]*Reply), sent: c.now})
	c.sends = append(c.sends, Envelope{To: ToReplica(ReplicaID(c.view % uint64(c.cfg.N))), Msg: req})
	return c.ts, nil
}

// ProposeRead sends op, which must not change the application's state, to
// every replica as a read-only request (see Querier), and returns its
// timestamp; the result comes in a later Ready's Done. The result is
// accepted once 2f+1 replicas answered it identically; when that cannot
// happen any more (their answers differ: a write ran concurrently, a
// replica lags or lies) or the retransmission wait passes first
// (RetransmitTicks, longer after slow results: see Tick), op is proposed as
// an ordered request of the same timestamp, and its result is accepted
// as Propose's are. It needs no request outstanding, so that the read
// sees the client's own writes. A read answered without ordering leaves
// the timestamp unused: the next request gets it again. Each read gets a
// new Nonce, and only answers that carry it count: an answer to an
// earlier read of the same timestamp, computed before a write the client
// saw complete, must not stand for this one.
func (c *Client) ProposeRead(op []byte) (uint64, error) {
	if len(c.out) > 0 {
		return 0, ErrBusy
	}
	c.reads++
	req := &Request{Client: c.cfg.ID, Timestamp: c.ts + 1, ReadOnly: true, Nonce: c.reads, Op: op}
	c.cfg.Sign(req)
	c.out = append(c.out, &outstanding{req: req, replies: make(map[ReplicaID]*Reply), sent: c.now})
	c.timer = 0
	c.toAll(req)
	return req.Timestamp, nil
}

// order turns the outstanding read-only request into an ordered one.
func (c *Client) order() {
	o := c.out[0]
	c.ts = o.req.Timestamp
	req := &Request{Client: c.cfg.ID, Timestamp: c.ts, Restart: !c.started, Op: o.req.Op}
	c.started = true
	c.cfg.Sign(req)
	o.req, o.sent = req, c.now
	clear(o.replies)
	c.timer = 0
	c.sends = append(c.sends, Envelope{To: ToReplica(ReplicaID(c.view % uint64(c.cfg.N))), Msg: req})
}

func (c *Client) toAll(m Message) {
	for i := 0; i < c.cfg.N; i++ {
		c.sends = append(c.sends, Envelope{To: ToReplica(ReplicaID(i)), Msg: m})
	}
}

// Step takes a reply from replica from (as the authenticated link says).
func (c *Client) Step(from ReplicaID, rep *Reply) error {
	if rep == nil {
		return fmt.Errorf("%w: nil reply", ErrInvalid)
	}
	if uint64(from) >= uint64(c.cfg.N) {
		return fmt.Errorf("%w: reply from %d, not a replica", ErrInvalid, from)
	}
	if rep.Replica != from {
		return fmt.Errorf("%w: reply claims replica %d, sent by %d", ErrForged, rep.Replica, from)
	}
	if rep.Client != c.cfg.ID {
		return fmt.Errorf("%w: reply for client %d", ErrInvalid, rep.Client)
	}
	var o *outstanding
	if len(c.out) > 0 && rep.Timestamp >= c.out[0].req.Timestamp {
		if i := rep.Timestamp - c.out[0].req.Timestamp; i < uint64(len(c.out)) {
			o = c.out[i] // timestamps are consecutive
		}
	}
	if o == nil || o.result != nil || rep.ReadOnly != o.req.ReadOnly || rep.Nonce != o.req.Nonce {
		// Every request's replies after the f+1st end here: not
		// formatted, it is the common case. So do answers to an
		// earlier read of the same timestamp (another Nonce).
		c.compareLate(rep, o)
		return errLateReply
	}
	o.replies[from] = rep
	var buf [16]uint64
	views := buf[:0]
	best := 0
	for _, a := range o.replies {
		if sameResult(a, rep) {
			views = append(views, a.View)
		}
		if rep.ReadOnly {
			k := 0
			for _, b := range o.replies {
				if sameResult(a, b) {
					k++
				}
			}
			best = max(best, k)
		}
	}
	need := c.f + 1
	if rep.ReadOnly {
		need = c.q
		if best+c.cfg.N-len(o.replies) < need {
			// The replicas yet to answer cannot make any result reach
			// 2f+1: order the request.
			c.order()
			return nil
		}
	}
	if len(views) < need {
		return nil
	}
	// Of f+1 matching replies at least one is correct: its view, or a
	// higher one, is current. The (f+1)-th highest view is safe to use.
	slices.SortFunc(views, func(a, b uint64) int { return cmp.Compare(b, a) })
	if v := views[c.f]; v > c.view {
		c.view = v
	}
	o.result = &Result{Timestamp: rep.Timestamp, Result: rep.Result, Notes: rep.Notes, ReadOnly: rep.ReadOnly}
	if !rep.ReadOnly {
		for _, a := range o.replies {
			if !sameResult(a, rep) {
				c.dissented(a.Replica)
			}
		}
	}
	o.replies = nil
	if !o.resent && !rep.ReadOnly {
		// Halve the wait while it stays above twice this request's
		// latency.
		for c.backoff > 0 && 2*(c.now-o.sent) < uint64(c.cfg.RetransmitTicks)<<(c.backoff-1) {
			c.backoff--
		}
	}
	c.notes.known = max(c.notes.known, rep.Notes)
	// Results come out in timestamp order.
	k := 0
	for k < len(c.out) && c.out[k].result != nil {
		r := *c.out[k].result
		c.done = append(c.done, r)
		if !r.ReadOnly {
			if len(c.recent) == recentResults {
				c.recent = slices.Delete(c.recent, 0, 1)
			}
			c.recent = append(c.recent, r)
		}
		k++
	}
	if k > 0 {
		clear(c.out[:k])
		c.out = c.out[k:]
		c.timer = 0
	}
	return nil
}

func sameResult(a, b *Reply) bool {
	return a.Notes == b.Notes && bytes.Equal(a.Result, b.Result)
}

// compareLate compares a reply that Step takes no more for its request,
// o if that is still outstanding, with the request's result if the
// client has it (see ClientReady.Dissent).
func (c *Client) compareLate(rep *Reply, o *outstanding) {
	if rep.ReadOnly {
		return
	}
	var r *Result
	if o != nil {
		r = o.result
	} else if i := slices.IndexFunc(c.recent, func(r Result) bool { return r.Timestamp == rep.Timestamp }); i >= 0 {
		r = &c.recent[i]
	}
	if r != nil && !r.ReadOnly && (r.Notes != rep.Notes || !bytes.Equal(r.Result, rep.Result)) {
		c.dissented(rep.Replica)
	}
}

// dissented counts a reply of replica r that differed from its result.
func (c *Client) dissented(r ReplicaID) {
	if c.dissent == nil {
		c.dissent = make([]uint64, c.cfg.N)
	}
	c.dissent[r]++
}

// Tick advances the client's clock; after RetransmitTicks without a
// result, every outstanding request goes to every replica (backups
// forward it to the primary and start their timers, which is what
// unseats a faulty primary), and a read-only request is ordered. A
// client that knows of notifications it has not delivered for
// RetransmitTicks asks every replica for them (FetchNotes).
//
// Each retransmission doubles the wait, up to 8 times RetransmitTicks,
// and a result that came without one halves it for as long as it stays
// above twice that result's latency (a request sent again says nothing:
// its result may answer either copy). A result that is slow, not lost, is
// queued behind the load: a copy of the request to every replica (N
// times its size) only lengthens the queues, and so the wait, and so
// the copies; resent at a fixed period, a loaded cluster on links
// slower than RetransmitTicks choked on the copies, and one whose
// results took a little longer than RetransmitTicks sent every request
// twice (TestSlowNetworkClientRetransmissions). A lost request or
// reply waits at most 8 times RetransmitTicks for its next copy.
func (c *Client) Tick() {
	c.now++
	c.notes.tick()
	if len(c.out) == 0 {
		return
	}
	c.timer++
	if c.timer < c.cfg.RetransmitTicks<<c.backoff {
		return
	}
	c.timer = 0
	if c.out[0].req.ReadOnly {
		c.order()
		return
	}
	c.backoff = min(c.backoff+1, maxRetransmitBackoff)
	for _, o := range c.out {
		if o.result == nil {
			o.resent = true
			c.toAll(o.req)
		}
	}
}

// maxRetransmitBackoff caps the doubling of a client's RetransmitTicks
// at 8 times: it bounds how long a client whose request or replies
// were lost waits, once the links work again, before it sends another
// copy.
const maxRetransmitBackoff = 3

// Outstanding reports whether a request awaits its result.
func (c *Client) Outstanding() bool { return len(c.out) > 0 }

// Dissented reports whether the next Ready has Dissent, which a reply
// Step refused as late may have added.
func (c *Client) Dissented() bool { return c.dissent != nil }

// InFlight is the number of requests outstanding.
func (c *Client) InFlight() int { return len(c.out) }

// Ready returns what accumulated since the last call and clears it.
func (c *Client) Ready() ClientReady {
	rd := ClientReady{Messages: c.sends, Done: c.done, Notes: c.notes.ready, Dissent: c.dissent}
	c.sends, c.done, c.notes.ready, c.dissent = nil, nil, nil, nil
	return rd
}
