package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"

	"github.com/rubin-go/rubin/order"
)

// errCensored is why a data source is left when another orderer showed
// a block that it did not send within the censorship timeout.
var errCensored = errors.New("client: the next block withheld while another orderer has it")

// A watch follows the headers of the orderers other than the data source
// while the client reads blocks from it, and ends the data source's
// stream (errCensored) when it withholds a block one of them showed.
// Its fields after mu are guarded by mu.
type watch struct {
	c      *Deliverer
	censor context.CancelCauseFunc // ends the data source's stream
	timer  *time.Timer             // runs fire at the earliest deadline
	wg     sync.WaitGroup          // the header streams' goroutines

	mu     sync.Mutex
	closed bool
	next   uint64    // the next block the data source owes
	since  time.Time // when the data source sent its last block, or the watch began
	heads  []head    // by orderer ID
}

// head is what a watch keeps of one orderer's header stream.
type head struct {
	// b is the latest header the orderer sent, not yet verified, with
	// the block's metadata and no data; nil: none.
	b *cb.Block
	// at is when the orderer sent the first of its headers of block
	// next or later: a later header replaces b but keeps at, so that an
	// orderer that keeps sending headers does not put off the deadline.
	at time.Time
	// stop ends the orderer's header stream; nil: not followed.
	stop context.CancelFunc
	// left: the orderer sent a header that did not verify, or none.
	left bool
}

// watch starts following the headers of blocks start to stop of every
// orderer but source, under ctx, the data source's stream's context,
// which censor cancels. It returns nil, a watch that does nothing, if
// there is no SeekHeaders.
func (c *Deliverer) watch(ctx context.Context, censor context.CancelCauseFunc, source int, start, stop uint64) *watch {
	if c.cfg.SeekHeaders == nil {
		return nil
	}
	w := &watch{c: c, censor: censor, next: start, since: time.Now(), heads: make([]head, len(c.cfg.Orderers))}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	for j, addr := range c.cfg.Orderers {
		if j == source || addr == "" {
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		w.heads[j].stop = cancel
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer cancel()
			err := w.follow(fctx, j, start, stop)
			c.cfg.Logger.Debug("header stream ended", "orderer", j, "source", source, "err", err)
		}()
	}
	return w
}

// follow reads orderer j's headers of blocks start to stop and offers
// each to the watch, until the stream fails or the watch leaves j.
func (w *watch) follow(ctx context.Context, j int, start, stop uint64) error {
	seek, err := w.c.cfg.SeekHeaders(start, stop)
	if err != nil {
		return err
	}
	stream, done, err := w.c.open(ctx, j, seek)
	if err != nil {
		return err
	}
	defer done()
	for {
		r, err := stream.Recv()
		if err != nil {
			return err
		}
		b := r.GetBlock()
		if b == nil {
			return fmt.Errorf("status %v", r.GetStatus())
		}
		if !w.offer(j, b) {
			return errors.New("left")
		}
	}
}

// offer keeps b, a header orderer j sent, if it is of block next or a
// later one than j sent before, and returns false if j is no longer
// followed.
func (w *watch) offer(j int, b *cb.Block) bool {
	h := b.GetHeader()
	w.mu.Lock()
	defer w.mu.Unlock()
	hd := &w.heads[j]
	switch {
	case w.closed || hd.left:
		return false
	case h == nil:
		w.leave(j)
		return false
	case h.Number < w.next:
		return true
	case hd.b == nil || hd.b.Header.Number < w.next:
		hd.at = time.Now()
	case h.Number <= hd.b.Header.Number:
		return true
	}
	hd.b = &cb.Block{Header: h, Metadata: b.Metadata}
	w.arm()
	return true
}

// took tells the watch that the data source sent every block before
// next.
func (w *watch) took(next uint64) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next, w.since = next, time.Now()
	w.arm()
}

// deadline is when the data source must have sent block next, given
// orderer j's header, and false if j sent no header of block next or
// later. Called with mu held.
func (w *watch) deadline(j int) (time.Time, bool) {
	hd := &w.heads[j]
	if hd.b == nil || hd.b.Header.Number < w.next {
		return time.Time{}, false
	}
	at := hd.at
	if w.since.After(at) {
		at = w.since
	}
	return at.Add(w.c.cfg.CensorshipTimeout), true
}

// arm sets the timer to the earliest deadline, or stops it if there is
// none. Called with mu held.
func (w *watch) arm() {
	var first time.Time
	for j := range w.heads {
		if d, ok := w.deadline(j); ok && (first.IsZero() || d.Before(first)) {
			first = d
		}
	}
	if first.IsZero() {
		w.timer.Stop()
		return
	}
	w.timer.Reset(time.Until(first))
}

// fire checks the headers whose deadline passed, and ends the data
// source's stream if one of them verifies; an orderer whose header does
// not is left.
func (w *watch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	now := time.Now()
	for j := range w.heads {
		d, ok := w.deadline(j)
		if !ok || d.After(now) {
			continue
		}
		b := w.heads[j].b
		if err := order.VerifySignatures(b, w.c.cfg.Keys, w.c.cfg.Quorum); err != nil {
			w.c.cfg.Logger.Debug("header stream left", "orderer", j, "err", err)
			w.leave(j)
			continue
		}
		w.censor(fmt.Errorf("%w: orderer %d sent the header of block %d, and block %d did not come within %v", errCensored, j, b.Header.Number, w.next, w.c.cfg.CensorshipTimeout))
		return
	}
	w.arm()
}

// leave stops following orderer j. Called with mu held.
func (w *watch) leave(j int) {
	hd := &w.heads[j]
	hd.b, hd.left = nil, true
	hd.stop()
}

// close ends the header streams and waits for their goroutines.
func (w *watch) close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.closed = true
	w.timer.Stop()
	for _, hd := range w.heads {
		if hd.stop != nil {
			hd.stop()
		}
	}
	w.mu.Unlock()
	w.wg.Wait()
}
