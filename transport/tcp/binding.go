package tcp

import (
	"sync"
	"sync/atomic"

	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// A binding is a channel's registration with a selector, with the epoll
// events asked for its descriptor. A descriptor that wants no events is
// taken out of epoll altogether, since epoll reports hang-ups even to a
// descriptor that asked for nothing, and a level-triggered hang-up nobody
// wants would keep the selector spinning.
type binding struct {
	mu     sync.Mutex // guards events and the epoll membership; before the selector's lock
	reg    atomic.Pointer[selector.Registration]
	events uint32
}

// bind attaches src to r's selector; want maps the interest set (and the
// channel's state) to epoll events.
func (b *binding) bind(src selector.Source, r *selector.Registration, want func(selectionkey.Ops) uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.reg.CompareAndSwap(nil, r) {
		return errRegisteredTwice
	}
	if err := b.apply(src, r, want(r.Key().Interest())); err != nil {
		b.reg.Store(nil)
		return err
	}
	return nil
}

// update brings the epoll events in line with want, if src is bound.
func (b *binding) update(src selector.Source, want func(selectionkey.Ops) uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.reg.Load()
	if r == nil {
		return nil
	}
	return b.apply(src, r, want(r.Key().Interest()))
}

func (b *binding) apply(src selector.Source, r *selector.Registration, ev uint32) error {
	if ev == b.events {
		return nil
	}
	s := r.Selector()
	var err error
	switch {
	case ev == 0:
		err = s.RemoveSource(src)
	case b.events == 0:
		err = s.AddSource(src, ev)
	default:
		err = s.ModifySource(src, ev)
	}
	if err == nil {
		b.events = ev
	}
	return err
}

// unbind detaches src from r's selector.
func (b *binding) unbind(src selector.Source, r *selector.Registration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reg.Load() != r {
		return
	}
	if b.events != 0 {
		_ = r.Selector().RemoveSource(src)
		b.events = 0
	}
	b.reg.Store(nil)
}
