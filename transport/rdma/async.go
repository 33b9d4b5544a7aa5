//go:build linux && cgo

package rdma

import (
	"fmt"

	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// asyncEvents is a device's asynchronous event descriptor, a source of the
// transport's own selector. An error of a queue pair breaks its
// connection; an error of a completion queue, a shared receive queue, the
// port or the device breaks every connection on the device, which could
// otherwise wait for completions that never come. Other events (a queue
// pair's last work request reached, a port coming up) are only counted.
type asyncEvents struct {
	t   *Transport
	dev *device
	fd  int
}

// watchAsyncEvents adds every device's asynchronous events to the
// transport's own selector.
func (t *Transport) watchAsyncEvents() error {
	for _, dev := range t.devices {
		fd, err := dev.ctx.WatchAsyncEvents()
		if err == nil {
			err = t.home.AddSource(&asyncEvents{t: t, dev: dev, fd: fd}, selector.EventIn)
		}
		if err != nil {
			return fmt.Errorf("rdma: device %s: asynchronous events: %w", dev.ctx.Name(), err)
		}
	}
	return nil
}

// FD implements selector.Source.
func (a *asyncEvents) FD() int { return a.fd }

// Handle implements selector.Source: it takes every pending event.
func (a *asyncEvents) Handle(uint32, *selector.Sink) {
	for {
		ev, err := a.dev.ctx.AsyncEvent()
		if err != nil {
			return // none left, or the device is going away
		}
		a.t.asyncEvents.Add(1)
		why := fmt.Errorf("rdma: device %s: asynchronous event: %v", a.dev.ctx.Name(), ev.Type)
		switch ev.Type {
		case verbs.QPFatal, verbs.QPReqErr, verbs.QPAccessErr, verbs.PathMigErr:
			a.t.failConns(a.dev, func(qpn uint32) bool { return qpn == ev.QPNum }, why)
		case verbs.CQErr, verbs.SRQErr, verbs.PortErr, verbs.DeviceFatal:
			a.t.failConns(a.dev, func(uint32) bool { return true }, why)
		}
	}
}

// failConns breaks the connections on dev whose queue pair numbers match.
func (t *Transport) failConns(dev *device, match func(qpn uint32) bool, why error) {
	var hit []*Conn
	t.mu.Lock()
	for _, e := range t.engines {
		if e.dev != dev {
			continue
		}
		for qpn, c := range *e.conns.Load() {
			if match(qpn) {
				hit = append(hit, c)
			}
		}
	}
	t.mu.Unlock()
	for _, c := range hit {
		c.mu.Lock()
		c.failLocked(why)
		c.mu.Unlock()
		c.signal(selectionkey.OpRead|selectionkey.OpWrite, nil)
	}
}
