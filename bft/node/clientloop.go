package node

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/link"
	"github.com/rubin-go/rubin/bft/wire"
	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// clientLoop is a Client's networking: one selector serving a link to
// every replica, on the goroutine that owns the cores.
type clientLoop struct {
	tr       anytransport.Transport
	sel      *selector.Selector
	dialers  []*dialer   // one per replica with a link key
	shaking  []*peerLink // handshakes in progress
	revisit  []*peerLink // links whose input was left for the next pass
	touched  []*peerLink // links appended to during this pass
	budget   passBudget
	nextTick time.Time
	stop     func() bool // stops waking the selector when ctx ends
	// queue and qBytes bound a link's output, in frames and bytes.
	queue, qBytes int
	// encode appends encMsg's encoding: one func for every message.
	encMsg bft.Message
	encode func(dst []byte) []byte
}

// maxClientDrain bounds the messages one pass of a Client's loop reads
// before it collects the cores' output.
const maxClientDrain = 1024

// openLoop opens the Client's transport and selector and makes a dialer
// per replica; run dials.
func (c *Client) openLoop() (_ *clientLoop, err error) {
	tr, scfg, err := openChannels(c.cfg.Network, c.cfg.Transport)
	if err != nil {
		return nil, err
	}
	ev := &clientLoop{tr: tr, queue: max(64, 4*len(c.slots)*c.cfg.Window), qBytes: DefaultOutboundQueueBytes}
	ev.encode = func(dst []byte) []byte { return wire.Append(dst, ev.encMsg) }
	if ev.sel, err = selector.New(scfg); err != nil {
		tr.Close()
		return nil, err
	}
	for i := range c.n {
		key := c.cfg.Cluster.ClientLinkKey(c.cfg.ID, bft.ReplicaID(i))
		if key == nil {
			c.log.Error("no link key; not dialing", "replica", i)
			continue
		}
		ev.dialers = append(ev.dialers, &dialer{
			peer: link.Replica(uint64(i)),
			addr: c.cfg.Cluster.Replicas[i].Addr,
			key:  key,
			bo:   backoff{min: c.cfg.RedialMin, max: c.cfg.RedialMax},
		})
	}
	return ev, nil
}

// run is the Client's goroutine: it serves the links and runs the cores
// until the Client's context ends, then answers every call left with
// ErrClosed and closes the links, the selector and the transport.
func (c *Client) run() {
	defer close(c.done)
	ev := c.ev
	ev.stop = context.AfterFunc(c.ctx, ev.sel.Wakeup)
	for _, d := range ev.dialers {
		c.dial(d)
	}
	ev.nextTick = time.Now().Add(c.cfg.Tick)
	for c.ctx.Err() == nil {
		var err error
		if wait := time.Until(ev.nextTick); wait > 0 && len(ev.revisit) == 0 {
			_, err = ev.sel.SelectTimeout(wait)
		} else {
			_, err = ev.sel.SelectNow()
		}
		if err != nil {
			if c.ctx.Err() == nil {
				c.log.Error("select failed; stopping", "err", err)
			}
			break
		}
		ev.budget = passBudget{msgs: maxClientDrain, bytes: DefaultInboundQueueBytes}
		for _, k := range ev.sel.SelectedKeys() {
			c.serve(k.Attachment().(*peerLink), k.Ready())
		}
		if len(ev.revisit) > 0 && !ev.budget.spent() {
			again := ev.revisit
			ev.revisit = nil
			for _, pl := range again {
				pl.later = false
				if !pl.dead {
					c.read(pl)
				}
			}
		}
		if now := time.Now(); !now.Before(ev.nextTick) {
			// Collected before new calls start: what the ticked cores
			// send is retransmissions only.
			c.tick()
			ev.nextTick = now.Add(c.cfg.Tick)
			c.housekeeping(now)
			c.collect()
		}
		c.takeCalls()
		if len(c.dirty) > 0 {
			c.collect()
		}
		c.flushTouched()
	}
	c.shutdown()
}

// tick ticks the cores with requests outstanding, or every core if
// notifications are delivered.
func (c *Client) tick() {
	if len(c.free) == len(c.slots) && c.cfg.OnNote == nil {
		return
	}
	for _, s := range c.slots {
		if busy := s.core.Outstanding(); busy || c.cfg.OnNote != nil {
			s.core.Tick()
			s.retx = busy
			c.touch(s)
		}
	}
}

// shutdown answers every call left with ErrClosed, refuses new ones, and
// closes the links, the selector and the transport.
func (c *Client) shutdown() {
	ev := c.ev
	c.mu.Lock()
	c.closed = true
	in := c.incoming
	c.incoming, c.abandoned = nil, nil
	c.mu.Unlock()
	for _, cl := range slices.Concat(in, c.pending) {
		c.answer(cl, callResult{err: ErrClosed})
	}
	c.pending = nil
	for _, s := range c.slots {
		for _, cl := range s.calls {
			c.answer(cl, callResult{err: ErrClosed})
		}
	}
	ev.stop()
	for _, pl := range c.links {
		if pl != nil {
			c.closeLink(pl)
		}
	}
	for _, pl := range ev.shaking {
		if !pl.dead {
			c.closeLink(pl)
		}
	}
	ev.sel.Close()
	ev.tr.Close()
}

// dial starts d's connection.
func (c *Client) dial(d *dialer) {
	ev := c.ev
	if pl := d.dial(c.ctx, ev.tr, ev.sel, link.ClientPeer(uint64(c.cfg.ID)), c.cfg.Link, c.log); pl != nil {
		ev.shaking = append(ev.shaking, pl)
	}
}

// serve handles what the selector reported for pl.
func (c *Client) serve(pl *peerLink, ready selectionkey.Ops) {
	if pl.dead {
		return
	}
	if ready&selectionkey.OpConnect != 0 {
		ok, err := pl.connected()
		if err != nil {
			c.fail(pl, err)
			return
		}
		if !ok {
			return
		}
	}
	if !pl.up {
		c.handshake(pl)
		return
	}
	if ready&selectionkey.OpWrite != 0 {
		c.flush(pl)
		if pl.dead {
			return
		}
	}
	if ready&selectionkey.OpRead != 0 {
		c.read(pl)
	}
}

// handshake advances pl's handshake; once it is done, pl becomes its
// replica's link and what arrived behind the handshake is read.
func (c *Client) handshake(pl *peerLink) {
	done, err := pl.advance()
	if err != nil {
		c.fail(pl, err)
		return
	}
	if !done {
		return
	}
	pl.up, pl.peer = true, pl.ch.Remote()
	c.links[pl.peer.ID] = pl // the dialer's replica: the handshake proved it
	c.linksUp.Add(1)
	pl.dialer.bo.reset()
	c.log.Info("link up", "peer", pl.peer, "addr", pl.ch.Conn().RemoteAddr())
	c.read(pl)
}

// fail closes pl after err; its dialer redials after a backoff.
func (c *Client) fail(pl *peerLink, err error) {
	if pl.dead {
		return
	}
	if pl.up {
		c.log.Info("link down", "peer", pl.peer, "err", err)
	} else {
		c.log.Debug("dial failed", "peer", pl.dialer.peer, "addr", pl.dialer.addr, "err", err)
	}
	c.closeLink(pl)
	if d := pl.dialer; d.cur == pl {
		// Redial soon, but not in a tight loop if the replica keeps
		// closing fresh links.
		d.cur = nil
		d.next = time.Now().Add(d.bo.next())
	}
}

func (c *Client) closeLink(pl *peerLink) {
	if pl.up && c.links[pl.peer.ID] == pl {
		c.links[pl.peer.ID] = nil
		c.linksUp.Add(-1)
	}
	pl.dead = true
	pl.ch.Close()
	pl.queued.Store(0)
}

// read receives, verifies, decodes and steps pl's frames until none is
// left, or pl had its burst, or the pass's budget is spent; then pl waits
// for the next pass. A frame is copied out of its receive buffer before
// it is decoded: a result is handed to Invoke's caller, and must not pin
// the transport's buffer. A frame that does not decode closes the link:
// a correct replica never sends one.
func (c *Client) read(pl *peerLink) {
	ev := c.ev
	debug := c.log.Enabled(context.Background(), slog.LevelDebug)
	from := bft.ReplicaID(pl.peer.ID)
	var tu turn
	for {
		p, ok, err := tu.next(pl, &ev.budget, &ev.revisit)
		if err != nil {
			c.fail(pl, err)
			return
		}
		if !ok {
			return
		}
		m, err := wire.DecodeLimits(bytes.Clone(p), c.limits)
		if err != nil {
			c.m.dropped.inc(reasonDecode)
			c.log.Debug("malformed frame; closing link", "peer", pl.peer, "err", err)
			c.fail(pl, err)
			return
		}
		if debug {
			c.log.Debug("received", "from", pl.peer, "type", typeNames[typeIndex(m.Type())], "bytes", len(p))
		}
		switch m := m.(type) {
		case *bft.Reply:
			c.stepOne(from, m)
		case *bft.Notify:
			c.stepNote(from, m)
		default:
			c.unexpected(pl.peer, m)
		}
	}
}

// send encodes m into pl's output, unless pl's output is at its bounds
// (the message is dropped and counted: the core retransmits).
func (c *Client) send(pl *peerLink, m bft.Message) {
	ev := c.ev
	if pl.full(ev.queue, ev.qBytes) {
		c.m.dropped.inc(reasonQueueFull)
		return
	}
	ev.encMsg = m
	_, err := pl.ch.Encode(pl.room(ev.qBytes), ev.encode)
	ev.encMsg = nil
	switch {
	case err == nil:
		pl.frames++
		if !pl.touched {
			pl.touched = true
			ev.touched = append(ev.touched, pl)
		}
	case errors.Is(err, link.ErrFrameTooLarge):
		c.m.dropped.inc(reasonTooLarge)
	case errors.Is(err, link.ErrNoRoom), errors.Is(err, bufpool.ErrExhausted):
		c.m.dropped.inc(reasonQueueFull)
	default:
		c.fail(pl, err)
	}
}

// flush hands pl's frames to its channel; what the channel cannot take
// yet waits for OpWrite.
func (c *Client) flush(pl *peerLink) {
	if err := pl.flush(); err != nil {
		c.fail(pl, err)
	}
}

// flushTouched flushes the links appended to during this pass.
func (c *Client) flushTouched() {
	ev := c.ev
	for i, pl := range ev.touched {
		pl.touched = false
		if !pl.dead {
			c.flush(pl)
		}
		ev.touched[i] = nil
	}
	ev.touched = ev.touched[:0]
}

// housekeeping runs at every tick: it times out handshakes and links
// whose output has waited longer than the write timeout, and dials the
// replicas that are due.
func (c *Client) housekeeping(now time.Time) {
	ev := c.ev
	ev.shaking = slices.DeleteFunc(ev.shaking, func(pl *peerLink) bool {
		if !pl.dead && !pl.up {
			if pl.key.Interest()&selectionkey.OpConnect != 0 {
				if now.Sub(pl.started) > cmp.Or(c.cfg.Link.HandshakeTimeout, link.DefaultHandshakeTimeout) {
					c.fail(pl, errors.New("connect timed out"))
				}
			} else {
				c.handshake(pl)
			}
		}
		return pl.dead || pl.up
	})
	for _, pl := range c.links {
		if pl != nil && !pl.blocked.IsZero() && now.Sub(pl.blocked) > c.cfg.Link.WriteTimeout {
			c.fail(pl, errors.New("write timed out: the replica does not read"))
		}
	}
	for _, d := range ev.dialers {
		if d.cur == nil && !now.Before(d.next) {
			c.dial(d)
		}
	}
}
