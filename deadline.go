package rubin

import (
	"sync"
	"sync/atomic"
	"time"
)

// A deadline is a channel that is closed when a settable point in time
// passes, for goroutines to select on. The zero value has no deadline.
type deadline struct {
	mu      sync.Mutex
	timer   *time.Timer
	expired chan struct{} // closed when the deadline has passed
	fired   atomic.Bool   // expired is closed: what passed reads, without mu
}

// set moves the deadline to t; the zero t means none.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.expired // the timer fired, or is firing: wait for the close
	}
	d.timer = nil
	if d.expired == nil || isClosed(d.expired) {
		d.expired = make(chan struct{})
	}
	d.fired.Store(false)
	switch dur := time.Until(t); {
	case t.IsZero():
	case dur > 0:
		ch := d.expired
		d.timer = time.AfterFunc(dur, func() {
			d.fired.Store(true) // before the close, which set waits for
			close(ch)
		})
	default:
		d.fired.Store(true)
		close(d.expired)
	}
}

// wait returns a channel closed when the deadline passes.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.expired == nil {
		d.expired = make(chan struct{})
	}
	return d.expired
}

// passed reports whether the deadline has passed, without a lock: the
// read and write paths ask on every call.
func (d *deadline) passed() bool { return d.fired.Load() }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
