package node

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/link"
	"github.com/rubin-go/rubin/bft/wire"
	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// A peerLink is one link of a replica's event loop: a link.Chan whose
// handshake runs, or that is its peer's link, and its selection key. It
// belongs to the loop's goroutine but for queued, which others read.
type peerLink struct {
	ch     *link.Chan
	key    *selectionkey.Key
	dialer *dialer // the dialer that made it; nil: accepted
	peer   link.Peer
	up     bool // handshake done, registered as peer's link
	dead   bool
	// Output: frames appended since the channel last took everything,
	// whether the key waits for OpWrite, and since when output waits.
	frames  int
	writing bool
	blocked time.Time
	touched bool // appended to by this pass: flush at its end
	later   bool // in the loop's revisit list
	queued  atomic.Int64
	started time.Time
}

// A dialer keeps the link to one higher-ID replica up: it connects when
// none is up, and after a failure waits with a capped exponential backoff.
type dialer struct {
	peer link.Peer
	addr string
	key  []byte
	bo   backoff
	next time.Time // no attempt before
	cur  *peerLink // the link it made, until that fails
}

// eventLoop is a running replica's networking: one selector serving the
// listener and every link, on the goroutine that owns the core.
type eventLoop struct {
	tr       anytransport.Transport
	sel      *selector.Selector
	ln       anytransport.Listener
	pool     *bufpool.Pool
	bufCap   int // the largest message of the transport's pool buffers
	dialers  []*dialer
	shaking  []*peerLink // handshakes in progress
	revisit  []*peerLink // links whose input was left for the next pass
	touched  []*peerLink // links appended to during this pass
	dests    []*peerLink // scratch of route
	budget   passBudget
	nextTick time.Time
	// encode appends encMsg's encoding: one func for every unicast, not
	// a closure each.
	encMsg bft.Message
	encode func(dst []byte) []byte
}

// A passBudget bounds what one pass of the loop reads from the links
// before the core's Ready is collected: MaxDrain messages and
// InboundQueueBytes frame bytes. What is left waits in the transport,
// which pushes back on the senders.
type passBudget struct {
	msgs, bytes int
}

func (b passBudget) spent() bool { return b.msgs <= 0 || b.bytes <= 0 }

// maxBurst and maxBurstBytes bound what a loop reads from one link
// before it serves the others.
const (
	maxBurst      = 64
	maxBurstBytes = 1 << 20
)

// A turn counts what a loop read from one link since it came to it.
type turn struct{ n, size int }

// next returns pl's next received frame's payload, and false if pl has
// none now, or had its turn (maxBurst frames or maxBurstBytes), or the
// pass's budget b is spent; in those last cases pl waits in revisit for
// the next pass. An error is final for pl.
func (tu *turn) next(pl *peerLink, b *passBudget, revisit *[]*peerLink) ([]byte, bool, error) {
	if tu.n == maxBurst || tu.size >= maxBurstBytes || b.spent() {
		if !pl.later {
			pl.later = true
			*revisit = append(*revisit, pl)
		}
		return nil, false, nil
	}
	p, err := pl.ch.Next()
	if errors.Is(err, channel.ErrWouldBlock) {
		return nil, false, nil
	}
	if err != nil {
		if err == io.EOF {
			err = errors.New("closed by the peer")
		}
		return nil, false, err
	}
	tu.n++
	tu.size += len(p)
	b.msgs--
	b.bytes -= len(p)
	return p, true, nil
}

// backoff is a capped exponential backoff with jitter.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) reset() { b.cur = 0 }

// next returns the delay before the next attempt.
func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	// Jitter in [cur/2, cur): peers that lost each other together do not
	// retry in lockstep.
	return b.cur/2 + rand.N(b.cur/2+1)
}

// sharedMin is the smallest encoded broadcast that goes to its
// destinations as one shared pool buffer, each link sending its tag
// after it; a smaller one is copied into each link's buffer, which costs
// less than a message of its own for the tag.
const sharedMin = 1 << 10

// maxWaiting bounds the pool buffers a link's output holds while its
// channel does not take them: the pool is shared by every link, and a
// slow peer must not take it from the others.
const maxWaiting = 64

// run serves the links and runs the core until ctx is done or the
// replica's storage fails.
func (r *Replica) run(ctx context.Context, ev *eventLoop) {
	ev.nextTick = time.Now().Add(r.cfg.Tick)
	for ctx.Err() == nil {
		var err error
		if wait := time.Until(ev.nextTick); wait > 0 && len(ev.revisit) == 0 {
			_, err = ev.sel.SelectTimeout(wait)
		} else {
			_, err = ev.sel.SelectNow()
		}
		if err != nil {
			if ctx.Err() == nil {
				r.log.Error("select failed; stopping", "err", err)
			}
			return
		}
		ev.budget = passBudget{msgs: r.cfg.MaxDrain, bytes: r.cfg.InboundQueueBytes}
		for _, k := range ev.sel.SelectedKeys() {
			if k.IsAcceptable() {
				r.acceptAll(ev)
				continue
			}
			r.serve(ev, k.Attachment().(*peerLink), k.Ready())
		}
		if len(ev.revisit) > 0 && !ev.budget.spent() {
			again := ev.revisit
			ev.revisit = nil
			for _, pl := range again {
				pl.later = false
				if !pl.dead {
					r.read(ev, pl)
				}
			}
		}
		if now := time.Now(); !now.Before(ev.nextTick) {
			if r.suspect.Swap(false) {
				r.core.Suspect()
			}
			r.core.Tick()
			ev.nextTick = now.Add(r.cfg.Tick)
			r.housekeeping(ctx, ev, now)
		}
		if r.routesStale.Swap(false) {
			for id, pl := range r.routes {
				if pl.dead {
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
		if r.store != nil {
			// The writer wakes the selector when it made jobs durable.
			if err := r.routeDurable(); err != nil {
				r.failed = err
				r.log.Error("cannot persist; stopping without sending", "err", err)
				return
			}
		}
		r.flushTouched(ev)
		r.publish()
	}
}

// acceptAll accepts every waiting connection and starts its handshake.
func (r *Replica) acceptAll(ev *eventLoop) {
	for {
		conn, err := ev.ln.AcceptConn()
		if errors.Is(err, channel.ErrWouldBlock) {
			return
		}
		if err != nil {
			r.log.Warn("accept failed", "err", err)
			return
		}
		if err := conn.SetBlocking(false); err != nil {
			conn.Close()
			r.log.Warn("accept failed", "err", err)
			continue
		}
		pl := &peerLink{ch: link.AcceptChan(conn, r.self(), r.lookup, r.cfg.Link), started: time.Now()}
		if pl.key, err = ev.sel.Register(conn, selectionkey.OpRead, pl); err != nil {
			conn.Close()
			r.log.Warn("registering an accepted connection failed", "err", err)
			continue
		}
		ev.shaking = append(ev.shaking, pl)
		// The hello may be there already.
		r.handshake(ev, pl)
	}
}

func (r *Replica) self() link.Peer { return link.Replica(uint64(r.cfg.ID)) }

// dial starts d's connection.
func (r *Replica) dial(ctx context.Context, ev *eventLoop, d *dialer) {
	if pl := d.dial(ctx, ev.tr, ev.sel, r.self(), r.cfg.Link, r.log); pl != nil {
		ev.shaking = append(ev.shaking, pl)
	}
}

// dial connects to d's peer as self and registers the link, whose
// handshake then runs, with sel; after a failure it returns nil and d
// waits its backoff.
func (d *dialer) dial(ctx context.Context, tr anytransport.Transport, sel *selector.Selector, self link.Peer, opts link.Options, log *slog.Logger) *peerLink {
	conn, err := tr.Connect(ctx, d.addr)
	if err != nil {
		log.Debug("dial failed", "peer", d.peer, "addr", d.addr, "err", err)
		d.next = time.Now().Add(d.bo.next())
		return nil
	}
	ch, err := link.DialChan(conn, self, d.peer, d.key, opts)
	if err != nil {
		conn.Close()
		log.Error("cannot dial", "peer", d.peer, "err", err)
		d.next = time.Now().Add(d.bo.next())
		return nil
	}
	pl := &peerLink{ch: ch, dialer: d, started: time.Now()}
	// Registered while the connect is pending, so that over RDMA the
	// connection uses the selector's completion queue.
	if pl.key, err = sel.Register(conn, selectionkey.OpConnect, pl); err != nil {
		conn.Close()
		log.Debug("dial failed", "peer", d.peer, "addr", d.addr, "err", err)
		d.next = time.Now().Add(d.bo.next())
		return nil
	}
	d.cur = pl
	return pl
}

// serve handles what the selector reported for pl.
func (r *Replica) serve(ev *eventLoop, pl *peerLink, ready selectionkey.Ops) {
	if pl.dead {
		return
	}
	if ready&selectionkey.OpConnect != 0 {
		ok, err := pl.connected()
		if err != nil {
			r.fail(pl, err)
			return
		}
		if !ok {
			return
		}
	}
	if !pl.up {
		r.handshake(ev, pl)
		return
	}
	if ready&selectionkey.OpWrite != 0 {
		r.flush(pl)
		if pl.dead {
			return
		}
	}
	if ready&selectionkey.OpRead != 0 {
		r.read(ev, pl)
	}
}

// handshake advances pl's handshake; once it is done, pl becomes its
// peer's link and what arrived behind the handshake is read.
func (r *Replica) handshake(ev *eventLoop, pl *peerLink) {
	done, err := pl.advance()
	if err != nil {
		r.fail(pl, err)
		return
	}
	if !done {
		return
	}
	r.up(pl)
	r.read(ev, pl)
}

// up makes pl its peer's link, replacing (and closing) an older one: the
// newest authenticated link wins, so a peer that restarted is served at
// once.
func (r *Replica) up(pl *peerLink) {
	pl.up, pl.peer = true, pl.ch.Remote()
	r.linksMu.Lock()
	old := r.links[pl.peer]
	r.links[pl.peer] = pl
	r.linksMu.Unlock()
	if old != nil {
		r.log.Info("link replaced by a newer one", "peer", pl.peer)
		r.closeLink(old)
	} else {
		r.m.links.Inc()
	}
	if pl.dialer != nil {
		pl.dialer.bo.reset()
	}
	r.log.Info("link up", "peer", pl.peer, "addr", pl.ch.Conn().RemoteAddr())
}

// fail closes pl after err.
func (r *Replica) fail(pl *peerLink, err error) {
	if pl.dead {
		return
	}
	switch {
	case pl.up:
		r.linksMu.Lock()
		current := r.links[pl.peer] == pl
		if current {
			delete(r.links, pl.peer)
		}
		r.linksMu.Unlock()
		if current {
			r.m.links.Dec()
			r.log.Info("link down", "peer", pl.peer, "err", err)
		}
	case pl.dialer == nil:
		r.m.dropped.inc(reasonHandshake)
		r.log.Debug("handshake rejected", "addr", pl.ch.Conn().RemoteAddr(), "err", err)
	default:
		r.log.Debug("dial failed", "peer", pl.dialer.peer, "addr", pl.dialer.addr, "err", err)
	}
	r.closeLink(pl)
	if d := pl.dialer; d != nil && d.cur == pl {
		// Redial soon, but not in a tight loop if the peer keeps
		// closing fresh links.
		d.cur = nil
		d.next = time.Now().Add(d.bo.next())
	}
}

// closeLink closes pl; the routes through it are swept before the next
// Ready.
func (r *Replica) closeLink(pl *peerLink) {
	pl.dead = true
	pl.ch.Close()
	pl.queued.Store(0)
	if pl.peer.Client {
		r.routesStale.Store(true)
	}
}

// read receives, verifies, decodes and steps pl's frames until none is
// left, or pl had its burst (maxBurst frames or maxBurstBytes), or the
// pass's budget is spent; then pl waits for the next pass. A frame is
// verified where it arrived, in the transport's pool buffer, and copied
// into memory of its own before it is decoded: the core keeps decoded
// messages (requests in its log, signatures in certificates), and they
// must not pin receive buffers, which go back to the pool at once. A
// frame that does not decode closes the link: a correct peer never sends
// one.
func (r *Replica) read(ev *eventLoop, pl *peerLink) {
	debug := r.log.Enabled(context.Background(), slog.LevelDebug)
	var tu turn
	for {
		p, ok, err := tu.next(pl, &ev.budget, &ev.revisit)
		if err != nil {
			r.fail(pl, err)
			return
		}
		if !ok {
			return
		}
		m, err := wire.DecodeLimits(bytes.Clone(p), r.limits)
		if err != nil {
			r.m.dropped.inc(reasonDecode)
			r.log.Debug("malformed frame; closing link", "peer", pl.peer, "err", err)
			r.fail(pl, err)
			return
		}
		t := typeIndex(m.Type())
		r.m.received[t].Inc()
		if debug {
			r.log.Debug("received", "from", pl.peer, "type", typeNames[t], "bytes", len(p))
		}
		r.step(pl, m)
		if pl.dead {
			return
		}
	}
}

// flush hands pl's frames to its channel; what the channel cannot take
// yet waits for OpWrite.
func (r *Replica) flush(pl *peerLink) {
	if err := pl.flush(); err != nil {
		r.log.Debug("link write failed", "peer", pl.peer, "err", err)
		r.fail(pl, err)
	}
}

// connected finishes pl's pending connect: false while it is pending.
func (pl *peerLink) connected() (bool, error) {
	ok, err := pl.ch.Conn().FinishConnect()
	if err != nil || !ok {
		return false, err
	}
	return true, pl.key.SetInterest(selectionkey.OpRead)
}

// advance advances pl's handshake as far as it can go now and reports
// whether it is done; an error is final.
func (pl *peerLink) advance() (bool, error) {
	if pl.dialer != nil && pl.key.Interest()&selectionkey.OpConnect != 0 {
		return false, nil // the connect is pending: no hello yet
	}
	done, err := pl.ch.Handshake()
	if err == nil {
		err = pl.ch.Flush()
		if errors.Is(err, channel.ErrWouldBlock) {
			pl.writing = true
			err = pl.key.SetInterest(selectionkey.OpRead | selectionkey.OpWrite)
		}
	}
	return done && err == nil, err
}

// flush hands pl's frames to its channel, waiting for OpWrite while the
// channel cannot take them all; an error is final.
func (pl *peerLink) flush() error {
	err := pl.ch.Flush()
	switch {
	case errors.Is(err, channel.ErrWouldBlock):
		if pl.blocked.IsZero() {
			pl.blocked = time.Now()
		}
		if !pl.writing {
			pl.writing = true
			err = pl.key.SetInterest(selectionkey.OpRead | selectionkey.OpWrite)
		} else {
			err = nil
		}
	case err == nil:
		pl.frames, pl.blocked = 0, time.Time{}
		if pl.writing {
			pl.writing = false
			err = pl.key.SetInterest(selectionkey.OpRead)
		}
	}
	pl.queued.Store(int64(pl.ch.Queued()))
	return err
}

// flushTouched flushes the links appended to during this pass.
func (r *Replica) flushTouched(ev *eventLoop) {
	for i, pl := range ev.touched {
		pl.touched = false
		if !pl.dead {
			r.flush(pl)
		}
		ev.touched[i] = nil
	}
	ev.touched = ev.touched[:0]
}

// housekeeping runs at every tick: it times out handshakes and links
// whose output has waited longer than the write timeout, and dials the
// peers that are due.
func (r *Replica) housekeeping(ctx context.Context, ev *eventLoop, now time.Time) {
	ev.shaking = slices.DeleteFunc(ev.shaking, func(pl *peerLink) bool {
		if !pl.dead && !pl.up {
			if pl.dialer != nil && pl.key.Interest()&selectionkey.OpConnect != 0 {
				if now.Sub(pl.started) > cmp.Or(r.cfg.Link.HandshakeTimeout, link.DefaultHandshakeTimeout) {
					r.fail(pl, errors.New("connect timed out"))
				}
			} else {
				r.handshake(ev, pl)
			}
		}
		return pl.dead || pl.up
	})
	if wt := r.cfg.Link.WriteTimeout; wt > 0 {
		for _, pl := range r.links {
			if !pl.blocked.IsZero() && now.Sub(pl.blocked) > wt {
				r.fail(pl, errors.New("write timed out: the peer does not read"))
			}
		}
	}
	for _, d := range ev.dialers {
		if d.cur == nil && !now.Before(d.next) {
			r.dial(ctx, ev, d)
		}
	}
}

// full reports whether pl's output is at one of its bounds; the frames
// for it are dropped.
func (r *Replica) full(pl *peerLink) bool {
	return pl.full(r.cfg.OutboundQueue, r.cfg.OutboundQueueBytes)
}

// room returns the bytes pl's next frame may take: any size on an empty
// queue, else what is left under OutboundQueueBytes.
func (r *Replica) room(pl *peerLink) int { return pl.room(r.cfg.OutboundQueueBytes) }

// full reports whether pl is closed or its output holds frames frames,
// bytes bytes, or maxWaiting pool buffers.
func (pl *peerLink) full(frames, bytes int) bool {
	return pl.dead || pl.frames >= frames || pl.ch.Queued() >= bytes || pl.ch.Waiting() >= maxWaiting
}

// room returns the bytes pl's next frame may take, for a link whose
// output is bounded by bytes: 0 (any size) on an empty queue, else what
// is left.
func (pl *peerLink) room(bytes int) int {
	if q := pl.ch.Queued(); q > 0 {
		return max(bytes-q, 1)
	}
	return 0
}

// sendTo queues m to every link of dests: encoded straight into the link's
// pool buffer when it has one destination; encoded once into a pool buffer
// otherwise, which a large message's destinations share (each link sends
// its own tag after it) and a small one's copy.
func (r *Replica) sendTo(ev *eventLoop, m bft.Message, dests []*peerLink) {
	t := typeIndex(m.Type())
	if len(dests) == 1 {
		pl := dests[0]
		ev.encMsg = m
		n, err := pl.ch.Encode(r.room(pl), ev.encode)
		ev.encMsg = nil
		r.sent1(ev, pl, t, n, err)
		return
	}
	b, err := ev.pool.TryGet()
	if err != nil {
		r.m.dropped.add(reasonQueueFull, len(dests))
		return
	}
	defer b.Release()
	room := b.Full()[link.HeaderSize:link.HeaderSize:ev.bufCap]
	p := wire.Append(room, m)
	if cap(p) != cap(room) || len(p) < sharedMin {
		// Too large for one message, or small: each link copies it.
		for _, pl := range dests {
			n := 0
			if room := r.room(pl); room > 0 && link.HeaderSize+len(p)+link.TagSize > room {
				err = link.ErrNoRoom
			} else {
				n, err = pl.ch.Append(p)
			}
			r.sent1(ev, pl, t, n, err)
		}
		return
	}
	b.SetLen(link.HeaderSize + len(p))
	link.PutHeader(b.Bytes())
	for _, pl := range dests {
		n := 0
		if room := r.room(pl); room > 0 && b.Len()+link.TagSize > room {
			err = link.ErrNoRoom
		} else {
			n, err = pl.ch.SendShared(b)
		}
		r.sent1(ev, pl, t, n, err)
	}
}

// sent1 accounts for one frame of type t queued to pl (n bytes), or not
// (err).
func (r *Replica) sent1(ev *eventLoop, pl *peerLink, t, n int, err error) {
	switch {
	case err == nil:
		r.sent[t]++
		pl.frames++
		if !pl.touched {
			pl.touched = true
			ev.touched = append(ev.touched, pl)
		}
		if r.log.Enabled(context.Background(), slog.LevelDebug) {
			r.log.Debug("sent", "to", pl.peer, "type", typeNames[t], "bytes", n)
		}
	case errors.Is(err, link.ErrFrameTooLarge):
		r.m.dropped.inc(reasonTooLarge)
	case errors.Is(err, link.ErrNoRoom), errors.Is(err, bufpool.ErrExhausted):
		r.m.dropped.inc(reasonQueueFull)
	default:
		r.fail(pl, err)
	}
}

// linkPeers returns the peers that have a link up; safe from any
// goroutine.
func (r *Replica) linkPeers() []link.Peer {
	r.linksMu.Lock()
	defer r.linksMu.Unlock()
	ps := make([]link.Peer, 0, len(r.links))
	for p := range r.links {
		ps = append(ps, p)
	}
	return ps
}

// queuedTo returns the bytes waiting on the link to p; safe from any
// goroutine.
func (r *Replica) queuedTo(p link.Peer) int {
	r.linksMu.Lock()
	defer r.linksMu.Unlock()
	if pl := r.links[p]; pl != nil {
		return int(pl.queued.Load())
	}
	return 0
}

// network names the replica's transport.
func (r *Replica) network() string {
	if r.tr != nil && r.tr.Transport != "" {
		return r.tr.Transport
	}
	if r.cfg.Network != "" {
		return r.cfg.Network
	}
	return "tcp"
}

// openLoop opens the replica's transport and selector, listens on addr
// and makes the dialers of the higher-ID replicas.
func (r *Replica) openLoop(ctx context.Context, addr string) (_ *eventLoop, err error) {
	tr, scfg, err := openChannels(r.cfg.Network, r.tr)
	if err != nil {
		return nil, err
	}
	ev := &eventLoop{tr: tr, pool: tr.Pool(), bufCap: min(tr.Pool().BufferSize(), tr.MaxMessageSize())}
	ev.encode = func(dst []byte) []byte { return wire.Append(dst, ev.encMsg) }
	defer func() {
		if err != nil {
			r.closeLoop(ev)
		}
	}()
	if ev.sel, err = selector.New(scfg); err != nil {
		return nil, err
	}
	if ev.ln, err = tr.Listen(ctx, addr); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if err = ev.ln.SetBlocking(false); err != nil {
		return nil, err
	}
	if _, err = ev.sel.Register(ev.ln, selectionkey.OpAccept, nil); err != nil {
		return nil, err
	}
	for j := int(r.cfg.ID) + 1; j < r.n; j++ {
		key := r.cfg.Cluster.LinkKey(r.cfg.ID, bft.ReplicaID(j))
		if key == nil {
			r.log.Error("no link key; not dialing", "peer", j)
			continue
		}
		ev.dialers = append(ev.dialers, &dialer{
			peer: link.Replica(uint64(j)),
			addr: r.cfg.Cluster.Replicas[j].Addr,
			key:  key,
			bo:   backoff{min: r.cfg.RedialMin, max: r.cfg.RedialMax},
		})
	}
	r.loop.Store(ev)
	for _, d := range ev.dialers {
		r.dial(ctx, ev, d)
	}
	return ev, nil
}

// closeLoop closes every link, the listener, the selector and the
// transport.
func (r *Replica) closeLoop(ev *eventLoop) {
	r.linksMu.Lock()
	links := r.links
	r.links = make(map[link.Peer]*peerLink)
	r.linksMu.Unlock()
	for _, pl := range links {
		r.closeLink(pl)
		r.m.links.Dec()
	}
	for _, pl := range ev.shaking {
		if !pl.dead {
			r.closeLink(pl)
		}
	}
	for _, d := range ev.dialers {
		if d.cur != nil && !d.cur.dead {
			r.closeLink(d.cur)
		}
	}
	if ev.ln != nil {
		ev.ln.Close()
	}
	if ev.sel != nil {
		ev.sel.Close()
	}
	ev.tr.Close()
}
