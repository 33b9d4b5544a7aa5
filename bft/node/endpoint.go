package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/link"
	"github.com/rubin-go/rubin/bft/wire"
)

// endpoint is a Client's link management: a registry of the established
// links (at most one per replica), the goroutines that dial and serve
// them, and their shutdown. (A Replica serves its links on an event loop:
// see loop.go.)
type endpoint struct {
	self    link.Peer
	log     *slog.Logger
	limits  wire.Limits
	opts    link.Options
	queue   int // outbound queue bound per link, in frames
	qBytes  int // and in bytes
	redial  backoff
	dropped *dropCounters
	// deliver hands decoded messages that arrived on c to the core's
	// goroutine: m alone if ms is nil, else the burst ms (in order, at
	// most maxBurst), with the bytes taken from inbound for them (the
	// core gives them back once it stepped them). It blocks (back-pressure
	// on the link) and returns false when c.done is closed.
	deliver func(c *conn, m bft.Message, ms []bft.Message, bytes int) bool
	// inbound, if set, bounds the frame bytes delivered and not yet
	// stepped by the core, over all links.
	inbound *byteBudget

	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	conns  map[link.Peer]*conn
}

// register makes c the link of its peer, replacing (and closing) an older
// one: the newest authenticated link wins, so a peer that restarted is
// served at once. It fails once the endpoint is closed.
func (e *endpoint) register(c *conn) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	old := e.conns[c.peer]
	e.conns[c.peer] = c
	e.mu.Unlock()
	if old != nil {
		e.log.Info("link replaced by a newer one", "peer", c.peer)
		old.shutdown()
	}
	return true
}

func (e *endpoint) unregister(c *conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conns[c.peer] != c {
		return false
	}
	delete(e.conns, c.peer)
	return true
}

// lookupLocked returns the link to p; the caller holds e.mu.
func (e *endpoint) lookupLocked(p link.Peer) *conn { return e.conns[p] }

// close closes every link and makes register fail from now on. The
// goroutines exit on their own; wait for them with e.wg.
func (e *endpoint) close() {
	e.mu.Lock()
	e.closed = true
	cs := make([]*conn, 0, len(e.conns))
	for _, c := range e.conns {
		cs = append(cs, c)
	}
	e.mu.Unlock()
	for _, c := range cs {
		c.shutdown()
	}
}

// serve runs an established link until it fails or the endpoint closes:
// a writer goroutine drains its queue, and this goroutine reads. The
// caller must be counted in e.wg.
func (e *endpoint) serve(l *link.Link) {
	c := newConn(l, e.queue, e.qBytes)
	if !e.register(c) {
		l.Close()
		return
	}
	e.log.Info("link up", "peer", c.peer, "addr", l.RemoteAddr())
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		c.writer(e.log, func() { e.dropped.inc(reasonTooLarge) })
	}()
	err := e.read(c)
	c.shutdown()
	if e.unregister(c) {
		e.log.Info("link down", "peer", c.peer, "err", err)
	}
}

// maxBurst and maxBurstBytes bound the messages read hands on together:
// a reader holds at most maxBurstBytes beyond its last frame while it
// waits for the inbound budget.
const (
	maxBurst      = 64
	maxBurstBytes = 1 << 20
)

// read receives, decodes and delivers frames until an error. Each frame
// has a buffer of its own (Recv allocates it) that the decoded message
// keeps. A frame that does not decode closes the link: a correct peer
// never sends one. Frames that arrived together (already buffered, up to
// maxBurst) are delivered together, so that the core sees a peer's burst
// (e.g. the requests of many clients multiplexed on one link) at once
// rather than racing the reader message by message.
func (e *endpoint) read(c *conn) error {
	var burst []bft.Message
	size := 0 // the burst's frame bytes
	flush := func() bool {
		took, ok := size, true
		if e.inbound != nil {
			if took, ok = e.inbound.take(size, c.done); !ok {
				return false
			}
		}
		size = 0
		if len(burst) == 1 {
			ok = e.deliver(c, burst[0], nil, took)
			burst = burst[:0]
		} else {
			ok = e.deliver(c, nil, burst, took)
			burst = nil
		}
		if !ok && e.inbound != nil {
			e.inbound.give(took)
		}
		return ok
	}
	for {
		b, err := c.l.Recv()
		if err != nil {
			if len(burst) > 0 {
				flush()
			}
			return err
		}
		m, err := wire.DecodeLimits(b, e.limits)
		if err != nil {
			e.dropped.inc(reasonDecode)
			e.log.Debug("malformed frame; closing link", "peer", c.peer, "err", err)
			if len(burst) > 0 {
				flush()
			}
			return err
		}
		if e.log.Enabled(context.Background(), slog.LevelDebug) {
			e.log.Debug("received", "from", c.peer, "type", typeNames[typeIndex(m.Type())], "bytes", len(b))
		}
		burst = append(burst, m)
		size += len(b)
		if len(burst) < maxBurst && size < maxBurstBytes && c.l.FrameBuffered() {
			continue
		}
		if !flush() {
			return errors.New("link closed")
		}
	}
}

// dialLoop keeps one link to remote up until ctx is done: it dials,
// handshakes and serves, and after a failure waits with a capped
// exponential backoff.
func (e *endpoint) dialLoop(ctx context.Context, dial func(context.Context, string) (net.Conn, error), addr string, remote link.Peer, key []byte) {
	bo := e.redial
	for ctx.Err() == nil {
		nc, err := dial(ctx, addr)
		if err == nil {
			stop := context.AfterFunc(ctx, func() { nc.Close() })
			var l *link.Link
			l, err = link.Client(nc, e.self, remote, key, e.opts)
			stop()
			if err == nil {
				bo.reset()
				e.serve(l)
				// Redial soon, but not in a tight loop if the peer keeps
				// closing fresh links.
			}
		}
		if err != nil && ctx.Err() == nil {
			e.log.Debug("dial failed", "peer", remote, "addr", addr, "err", err)
		}
		if !sleep(ctx, bo.next()) {
			return
		}
	}
}
