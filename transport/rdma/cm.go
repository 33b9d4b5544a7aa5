//go:build linux && cgo

package rdma

import (
	"fmt"
	"sync"

	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// eventHandler is a channel that handles its connection-manager events.
type eventHandler interface {
	handleEvent(ev *verbs.Event, sink *selector.Sink)
}

// cmEvents is a channel's own connection-manager event channel: an event
// source in the epoll of the selector the channel is registered with, or
// of the transport's own selector while it is not registered. Events are
// handled on whichever goroutine gets to them first, one at a time.
type cmEvents struct {
	t     *Transport
	owner eventHandler
	ch    verbs.EventChannel
	fd    int

	mu      sync.Mutex // serializes handling and destruction
	dead    bool
	ev      verbs.Event
	private [verbs.PrivateMax]byte

	selMu sync.Mutex // guards sel; after mu
	sel   *selector.Selector
}

func newCMEvents(t *Transport, owner eventHandler) (*cmEvents, error) {
	ch, err := verbs.CreateEventChannel()
	if err != nil {
		return nil, err
	}
	m := &cmEvents{t: t, owner: owner, ch: ch, fd: ch.FD()}
	if err := m.moveTo(nil); err != nil {
		ch.Destroy()
		return nil, err
	}
	liveEventChannels.Add(1)
	return m, nil
}

// eventsPerHandle bounds the events one Handle takes, so that a burst of
// them (a listener's connect requests, each handed to a goroutine that
// sets its connection up) does not keep the selector's thread from the
// keys that became ready meanwhile. The channel is level-triggered, so
// what is left is reported on the selector's next pass.
const eventsPerHandle = 8

// FD implements selector.Source.
func (m *cmEvents) FD() int { return m.fd }

// Handle implements selector.Source.
func (m *cmEvents) Handle(_ uint32, sink *selector.Sink) { m.process(sink, eventsPerHandle) }

// process handles up to max pending events; every one if max is 0.
func (m *cmEvents) process(sink *selector.Sink, max int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n := 0; !m.dead && (max == 0 || n < max); n++ {
		if err := m.ch.Get(&m.ev, &m.private); err != nil {
			return
		}
		m.owner.handleEvent(&m.ev, sink)
	}
}

// moveTo makes sel (nil: the transport's own selector) watch the channel.
func (m *cmEvents) moveTo(sel *selector.Selector) error {
	if sel == nil {
		sel = m.t.home
	}
	m.selMu.Lock()
	defer m.selMu.Unlock()
	if m.sel == sel {
		return nil
	}
	if m.sel != nil {
		_ = m.sel.RemoveSource(m)
		m.sel = nil
	}
	if !sel.IsOpen() {
		return nil // the transport is closing
	}
	if err := sel.AddSource(m, selector.EventIn); err != nil {
		return fmt.Errorf("rdma: watching the event channel: %w", err)
	}
	m.sel = sel // level-triggered: events that came meanwhile are reported
	return nil
}

// destroyLocked destroys id, if valid, and the event channel. The caller
// holds m.mu.
func (m *cmEvents) destroyLocked(id verbs.ID) {
	if m.dead {
		return
	}
	m.dead = true
	m.selMu.Lock()
	if m.sel != nil {
		_ = m.sel.RemoveSource(m)
		m.sel = nil
	}
	m.selMu.Unlock()
	if id.Valid() {
		_ = id.Destroy()
	}
	m.ch.Destroy()
	liveEventChannels.Add(-1)
}

// destroy destroys the event channel of a channel that never had an ID.
func (m *cmEvents) destroy() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.destroyLocked(verbs.ID{})
}
