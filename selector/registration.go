package selector

// Registrations: the channels a selector can register, Register, and the
// selector's side of a key, through which a channel reports readiness no
// descriptor shows (the ready queue) and hears of interest and cancellation.

import (
	"errors"
	"sync/atomic"

	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
)

// Selectable is a channel that can be registered with a selector. Its
// methods, but for those of channel.Channel, are called by the selector.
type Selectable interface {
	channel.Channel
	// ValidOps is the set of operations the channel supports.
	ValidOps() selectionkey.Ops
	// ReadyOps reports readiness that no descriptor shows, such as a
	// message already received into user space. It is called on the
	// selecting goroutine for keys the previous select selected.
	ReadyOps() selectionkey.Ops
	// SelectorHooks returns the channel's Hooks. It is called once per
	// Register. A channel can return an unexported view of itself, which
	// keeps the hooks out of the channel's own methods.
	SelectorHooks() Hooks
}

// Hooks are how a selector tells a channel about the channel's
// registrations.
type Hooks interface {
	// Bind hooks r's key into an event source of r.Selector(). It is
	// called once per registration, before Register returns. A channel can
	// be registered with one selector at a time.
	Bind(r *Registration) error
	// InterestChanged is called, from any goroutine, after the interest
	// set of r's key changed. A channel that is already ready for an
	// operation added to the set reports it with r.Ready.
	InterestChanged(r *Registration)
	// Unbind detaches r from its event source. It is called once, when
	// r's key is canceled (also by closing the channel or the selector).
	Unbind(r *Registration)
}

// ErrBlocking is returned by Register for a channel in blocking mode.
var ErrBlocking = errors.New("selector: channel is in blocking mode")

// Register registers ch with the selector for the operations in interest,
// with an attachment, and returns the new key. The channel must be in
// non-blocking mode.
func (s *Selector) Register(ch Selectable, interest selectionkey.Ops, attachment any) (*selectionkey.Key, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if ch.IsBlocking() {
		return nil, ErrBlocking
	}
	if bad := interest &^ ch.ValidOps(); bad != 0 {
		return nil, &selectionkey.InvalidOpsError{Ops: bad, Valid: ch.ValidOps()}
	}
	r := &Registration{sel: s, ch: ch, hooks: ch.SelectorHooks()}
	r.key = selectionkey.New(ch, ch.ValidOps(), interest, (*watcher)(r))
	r.key.Attach(attachment)
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, errClosed
	}
	s.keys[r.key] = r
	s.mu.Unlock()
	if err := r.hooks.Bind(r); err != nil {
		s.mu.Lock()
		delete(s.keys, r.key)
		s.mu.Unlock()
		return nil, err
	}
	r.bound.Store(true)
	if !r.key.Valid() { // canceled while binding
		r.unbind()
	}
	return r.key, nil
}

// A Registration is the selector's side of a key: what a channel's Bind is
// given to report readiness with.
type Registration struct {
	sel     *Selector
	key     *selectionkey.Key
	ch      Selectable
	hooks   Hooks
	pending atomic.Uint32 // ops reported by Ready, not yet collected
	queued  atomic.Bool   // in the selector's ready queue
	bound   atomic.Bool   // Bind succeeded
	unbound atomic.Bool   // Unbind called
	round   uint64        // last select round that selected the key; selecting goroutine only
}

// Key returns the registration's key.
func (r *Registration) Key() *selectionkey.Key { return r.key }

// Selector returns the selector the key belongs to.
func (r *Registration) Selector() *Selector { return r.sel }

// Ready reports the key ready for ops from any goroutine, for readiness no
// descriptor shows. The next select (or the one in progress) collects it.
func (r *Registration) Ready(ops selectionkey.Ops) {
	r.pending.Or(uint32(ops))
	if r.queued.Swap(true) {
		return
	}
	s := r.sel
	s.mu.Lock()
	s.readyq = append(s.readyq, r)
	s.readyLen.Store(int32(len(s.readyq)))
	s.mu.Unlock()
	s.wake()
}

func (r *Registration) unbind() {
	if !r.unbound.Swap(true) {
		r.hooks.Unbind(r)
	}
}

// watcher is the Registration seen by its key.
type watcher Registration

func (w *watcher) InterestChanged(*selectionkey.Key) {
	r := (*Registration)(w)
	r.hooks.InterestChanged(r)
}

func (w *watcher) Canceled(k *selectionkey.Key) {
	r := (*Registration)(w)
	s := r.sel
	s.mu.Lock()
	delete(s.keys, k)
	s.mu.Unlock()
	if r.bound.Load() {
		r.unbind()
	}
}
