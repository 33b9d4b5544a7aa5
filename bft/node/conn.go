package node

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/link"
	"github.com/rubin-go/rubin/bft/wire"
)

// conn is one established link and its outbound queue. Frames are queued
// by the goroutine that owns the protocol core (enqueue never blocks) and
// written by the conn's writer goroutine, which drains the whole queue
// with link.Queue and ends each burst with one Flush. The receiving side
// (a reader goroutine) is the owner's business: see serve.
type conn struct {
	l    *link.Link
	peer link.Peer

	mu     sync.Mutex
	q      [][]byte // frames waiting for the writer
	max    int      // bound on len(q)
	maxB   int      // bound on nbytes
	nbytes int      // frame bytes queued or being written
	closed bool
	dead   atomic.Bool   // closed, readable without mu
	signal chan struct{} // capacity 1: the queue has something
	done   chan struct{} // closed by shutdown
	once   sync.Once
}

func newConn(l *link.Link, max, maxBytes int) *conn {
	return &conn{l: l, peer: l.Remote(), max: max, maxB: maxBytes, signal: make(chan struct{}, 1), done: make(chan struct{})}
}

// enqueueAll queues frames (shared and immutable: a frame may be queued to
// several conns) under one lock and one wake-up of the writer, and returns
// how many it queued: a prefix of frames; the rest did not fit the queue
// (max frames, and maxB bytes counting the frames the writer is still
// writing; a frame larger than maxB fits only an empty queue), or the
// conn is closed, and are dropped. Dropping rather than blocking
// keeps one slow or Byzantine peer from stalling the core and, through
// it, everyone else; PBFT retransmits what matters and a lagging replica
// catches up by state transfer.
func (c *conn) enqueueAll(frames [][]byte) int {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0
	}
	k := 0
	for k < len(frames) && len(c.q) < c.max {
		n := len(frames[k])
		if c.nbytes > 0 && c.nbytes+n > c.maxB {
			break
		}
		c.nbytes += n
		c.q = append(c.q, frames[k])
		k++
	}
	c.mu.Unlock()
	if k > 0 {
		c.wake()
	}
	return k
}

func (c *conn) wake() {
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// shutdown closes the link and stops the writer; safe to call many times
// from any goroutine.
func (c *conn) shutdown() {
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.q = nil
		c.mu.Unlock()
		c.dead.Store(true)
		close(c.done)
		c.l.Close()
	})
}

// writer drains the queue until shutdown or a write error, which shuts the
// conn down (so that its reader fails too).
func (c *conn) writer(log *slog.Logger, tooLarge func()) {
	defer c.shutdown()
	var batch [][]byte
	for {
		select {
		case <-c.done:
			return
		case <-c.signal:
		}
		c.mu.Lock()
		batch, c.q = c.q, batch[:0]
		c.mu.Unlock()
		size := 0
		for _, f := range batch {
			size += len(f)
		}
		for i, f := range batch {
			if err := c.l.Queue(f); err != nil {
				if errors.Is(err, link.ErrFrameTooLarge) {
					// Not final for the link: the frame was not written.
					tooLarge()
					continue
				}
				log.Debug("link write failed", "peer", c.peer, "err", err)
				return
			}
			batch[i] = nil
		}
		if err := c.l.Flush(); err != nil {
			log.Debug("link flush failed", "peer", c.peer, "err", err)
			return
		}
		c.mu.Lock()
		c.nbytes -= size
		c.mu.Unlock()
	}
}

// An encoder encodes messages into frames carved from shared buffers, one
// allocation for many messages rather than one each. A frame stays valid
// for good: writers only read it, and the encoder never writes over a
// frame it handed out.
type encoder struct {
	buf     []byte
	minSize int // the size of a fresh buffer
}

// encode returns m's frame.
func (e *encoder) encode(m bft.Message) []byte {
	if cap(e.buf)-len(e.buf) < e.minSize/64 {
		e.buf = make([]byte, 0, e.minSize)
	}
	start, c := len(e.buf), cap(e.buf)
	e.buf = wire.Append(e.buf, m)
	frame := e.buf[start:len(e.buf):len(e.buf)]
	if cap(e.buf) == c {
		return frame
	}
	// m outgrew the buffer and append moved it, copying the frames
	// before m along. The frame gets an array of its own and the next
	// buffer starts afresh at minSize: buffers do not grow from message
	// to message, and a frame a slow peer's queue holds pins no more
	// than a buffer of its own size or minSize.
	if start > 0 {
		frame = slices.Clone(frame)
	}
	e.buf = nil
	return frame
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

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
