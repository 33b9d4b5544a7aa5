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
	// RetransmitTicks: without a result after this many ticks, the
	// request goes again, to every replica; a read-only request (see
	// ProposeRead) is ordered instead. Default 20.
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

// Client is the deterministic core of a PBFT client: one outstanding
// request at a time (closed loop), ordered (Propose) or read-only
// (ProposeRead). Like Replica it has no goroutines,
// clocks or I/O and is not safe for concurrent use.
type Client struct {
	cfg     ClientConfig
	f       int
	q       int // 2f+1, the replies a read-only result needs
	ts      uint64
	view    uint64 // the view replies last showed
	out     *Request
	replies map[ReplicaID]*Reply
	timer   int
	sends   []Envelope
	done    []Result
	notes   noteQueue
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
	if cfg.FirstNote == 0 {
		cfg.FirstNote = 1
	}
	if cfg.NoteWindow <= 0 {
		cfg.NoteWindow = 64
	}
	if cfg.NoteBuffer <= 0 {
		cfg.NoteBuffer = 1 << 20
	}
	c := &Client{cfg: cfg, ts: cfg.StartTimestamp, replies: make(map[ReplicaID]*Reply)}
	c.f, c.q = quorum.Faults(cfg.N), quorum.Quorum(cfg.N)
	c.notes.init(c)
	return c, nil
}

// Propose sends op to the primary of the last view seen and returns the
// request's timestamp; the result comes in a later Ready's Done.
func (c *Client) Propose(op []byte) (uint64, error) {
	if c.out != nil {
		return 0, ErrBusy
	}
	c.ts++
	req := &Request{Client: c.cfg.ID, Timestamp: c.ts, Op: op}
	c.cfg.Sign(req)
	c.out = req
	clear(c.replies)
	c.timer = 0
	c.sends = append(c.sends, Envelope{To: ToReplica(ReplicaID(c.view % uint64(c.cfg.N))), Msg: req})
	return c.ts, nil
}

// ProposeRead sends op, which must not change the application's state, to
// every replica as a read-only request (see Querier), and returns its
// timestamp; the result comes in a later Ready's Done. The result is
// accepted once 2f+1 replicas answered it identically; when that cannot
// happen any more (their answers differ: a write ran concurrently, a
// replica lags or lies) or RetransmitTicks pass first, op is proposed as
// an ordered request of the same timestamp, and its result is accepted
// as Propose's are. Like Propose, it needs no request outstanding. A read
// answered without ordering leaves the timestamp unused: the next
// request gets it again.
func (c *Client) ProposeRead(op []byte) (uint64, error) {
	if c.out != nil {
		return 0, ErrBusy
	}
	req := &Request{Client: c.cfg.ID, Timestamp: c.ts + 1, ReadOnly: true, Op: op}
	c.cfg.Sign(req)
	c.out = req
	clear(c.replies)
	c.timer = 0
	c.toAll(req)
	return req.Timestamp, nil
}

// order turns the outstanding read-only request into an ordered one.
func (c *Client) order() {
	c.ts = c.out.Timestamp
	req := &Request{Client: c.cfg.ID, Timestamp: c.ts, Op: c.out.Op}
	c.cfg.Sign(req)
	c.out = req
	clear(c.replies)
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
	if c.out == nil || rep.Timestamp != c.out.Timestamp || rep.ReadOnly != c.out.ReadOnly {
		// Every request's replies after the f+1st end here: not
		// formatted, it is the common case.
		return errLateReply
	}
	c.replies[from] = rep
	var buf [16]uint64
	views := buf[:0]
	best := 0
	for _, o := range c.replies {
		if sameResult(o, rep) {
			views = append(views, o.View)
		}
		if rep.ReadOnly {
			k := 0
			for _, p := range c.replies {
				if sameResult(o, p) {
					k++
				}
			}
			best = max(best, k)
		}
	}
	need := c.f + 1
	if rep.ReadOnly {
		need = c.q
		if best+c.cfg.N-len(c.replies) < need {
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
	c.done = append(c.done, Result{Timestamp: rep.Timestamp, Result: rep.Result, Notes: rep.Notes, ReadOnly: rep.ReadOnly})
	c.notes.known = max(c.notes.known, rep.Notes)
	c.out = nil
	clear(c.replies)
	return nil
}

func sameResult(a, b *Reply) bool {
	return a.Notes == b.Notes && bytes.Equal(a.Result, b.Result)
}

// Tick advances the client's clock; on RetransmitTicks without a result
// the request goes to every replica (backups forward it to the primary
// and start their timers, which is what unseats a faulty primary). A
// client that knows of notifications it has not delivered for
// RetransmitTicks asks every replica for them (FetchNotes).
func (c *Client) Tick() {
	c.notes.tick()
	if c.out == nil {
		return
	}
	c.timer++
	if c.timer < c.cfg.RetransmitTicks {
		return
	}
	c.timer = 0
	if c.out.ReadOnly {
		c.order()
		return
	}
	c.toAll(c.out)
}

// Outstanding reports whether a request awaits its result.
func (c *Client) Outstanding() bool { return c.out != nil }

// Ready returns what accumulated since the last call and clears it.
func (c *Client) Ready() ClientReady {
	rd := ClientReady{Messages: c.sends, Done: c.done, Notes: c.notes.ready}
	c.sends, c.done, c.notes.ready = nil, nil, nil
	return rd
}
