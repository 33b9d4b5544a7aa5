package selector

// Event sources: the contract of the package documentation, adding and
// removing sources, and the Sink through which they report ready keys.

import (
	"fmt"

	"github.com/rubin-go/rubin/selectionkey"
)

// Source is an event source; see the package documentation.
type Source interface {
	FD() int
	Handle(events uint32, sink *Sink)
}

// Poller is a source that can be polled without sleeping; see the package
// documentation.
type Poller interface {
	Source
	Poll(sink *Sink) bool
	Arm() bool
}

// Closer is a source that wants to know when its selector closes; see the
// package documentation.
type Closer interface {
	Source
	SelectorClosed(s *Selector)
}

type sourceEntry struct {
	src Source
	gen uint32
}

// AddSource adds src to the epoll set, watching its descriptor for events
// (EPOLLIN, EPOLLOUT, ...; level-triggered unless EPOLLET is given).
func (s *Selector) AddSource(src Source, events uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return errClosed
	}
	fd := int32(src.FD())
	gen := s.nextGen
	s.nextGen++
	if s.nextGen == 0 {
		s.nextGen = 1
	}
	if err := s.ep.add(fd, events, gen); err != nil {
		return fmt.Errorf("selector: adding fd %d: %w", fd, err)
	}
	s.sources[fd] = sourceEntry{src: src, gen: gen}
	if p, ok := src.(Poller); ok {
		old := *s.pollers.Load()
		ps := append(old[:len(old):len(old)], p)
		s.pollers.Store(&ps)
	}
	return nil
}

// ModifySource changes the epoll events watched for src.
func (s *Selector) ModifySource(src Source, events uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fd := int32(src.FD())
	e, ok := s.sources[fd]
	if !ok || e.src != src {
		if s.closed.Load() {
			return errClosed
		}
		return fmt.Errorf("selector: modifying fd %d: not a source of this selector", fd)
	}
	if err := s.ep.modify(fd, events, e.gen); err != nil {
		return fmt.Errorf("selector: modifying fd %d: %w", fd, err)
	}
	return nil
}

// RemoveSource removes src from the epoll set. It must be called before
// src's descriptor is closed. Removing a source that is not there is not an
// error.
func (s *Selector) RemoveSource(src Source) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fd := int32(src.FD())
	e, ok := s.sources[fd]
	if !ok || e.src != src {
		return nil
	}
	delete(s.sources, fd)
	if p, ok := src.(Poller); ok {
		old := *s.pollers.Load()
		kept := make([]Poller, 0, len(old))
		for _, q := range old {
			if q != p {
				kept = append(kept, q)
			}
		}
		s.pollers.Store(&kept)
	}
	if err := s.ep.remove(fd); err != nil && !s.closed.Load() {
		return fmt.Errorf("selector: removing fd %d: %w", fd, err)
	}
	return nil
}

// A Sink collects the keys that sources find ready during a select. It is
// only valid on the selecting goroutine, inside Handle and Poll.
type Sink struct{ s *Selector }

// Selector returns the selector that is selecting.
func (k *Sink) Selector() *Selector { return k.s }

// Ready reports r's key ready for ops; operations outside the key's
// interest set, and keys that are canceled or of another selector, are
// ignored.
func (k *Sink) Ready(r *Registration, ops selectionkey.Ops) {
	s := k.s
	if r.sel != s || !r.key.Valid() {
		return
	}
	ops &= r.key.Interest()
	if ops == 0 {
		return
	}
	if r.round != s.round {
		r.round = s.round
		r.key.SetReady(ops)
		s.selected = append(s.selected, r)
		return
	}
	r.key.SetReady(r.key.Ready() | ops)
}
