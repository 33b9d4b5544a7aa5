package rubin

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// A stack is one Config's transport and poller goroutines. Stacks live as
// long as the process, like the runtime's network poller.
type stack struct {
	cfg     Config
	tr      anytransport.Transport
	pollers []*poller
	next    atomic.Uint32
}

// A poller runs one selector on its own goroutine and passes readiness on
// to the conns and listeners registered with it.
type poller struct {
	sel *selector.Selector
}

// A waiter is what a poller hands readiness to: the key's attachment.
type waiter interface {
	ready(k *selectionkey.Key)
}

func newStack(cfg Config) (*stack, error) {
	tr, err := anytransport.Open(cfg.Transport, anytransport.Config{MaxMessageSize: cfg.MaxMessageSize, SpinBudget: cfg.SpinBudget})
	if err != nil {
		return nil, err
	}
	s := &stack{cfg: cfg, tr: tr}
	for range cfg.Pollers {
		sel, err := selector.New(selector.Config{SpinBudget: cfg.SpinBudget})
		if err != nil {
			for _, p := range s.pollers {
				p.sel.Close()
			}
			tr.Close()
			return nil, err
		}
		p := &poller{sel: sel}
		s.pollers = append(s.pollers, p)
		go p.run()
	}
	return s, nil
}

func (p *poller) run() {
	for {
		if _, err := p.sel.Select(); err != nil {
			return // closed
		}
		for _, k := range p.sel.SelectedKeys() {
			if w, ok := k.Attachment().(waiter); ok {
				w.ready(k)
			}
		}
	}
}

// pick chooses a poller for a new channel, round robin.
func (s *stack) pick() *poller {
	return s.pollers[int(s.next.Add(1))%len(s.pollers)]
}

// dial connects to address. The connection is registered with a poller
// while its connect is pending, so that a transport that binds it to a
// selector when the connect completes (RDMA: its queue pair to the
// selector's completion queue) binds it to that poller's.
func (s *stack) dial(ctx context.Context, address string) (net.Conn, error) {
	ch, err := s.tr.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	c, err := s.register(ch, s.pick(), selectionkey.OpConnect)
	if err != nil {
		return nil, err
	}
	if err := c.awaitConnect(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (s *stack) listen(ctx context.Context, address string) (net.Listener, error) {
	ln, err := s.tr.Listen(ctx, address)
	if err != nil {
		return nil, err
	}
	l := &listener{s: s, ln: ln, p: s.pick(), signal: make(chan struct{}, 1), done: make(chan struct{})}
	if err := ln.SetBlocking(false); err != nil {
		ln.Close()
		return nil, err
	}
	if l.key, err = l.p.sel.Register(ln, 0, l); err != nil {
		ln.Close()
		return nil, &net.OpError{Op: "listen", Net: s.cfg.Transport, Addr: ln.LocalAddr(), Err: err}
	}
	return l, nil
}

// register puts a channel, connected or with its connect pending, in
// non-blocking mode and registers it with p's selector for ops, with its
// net.Conn face as the attachment. It closes the channel if it fails.
func (s *stack) register(ch anytransport.Conn, p *poller, ops selectionkey.Ops) (*conn, error) {
	c := newConn(s, ch)
	if err := ch.SetBlocking(false); err != nil {
		ch.Close()
		return nil, err
	}
	key, err := p.sel.Register(ch, ops, c)
	if err != nil {
		ch.Close()
		return nil, &net.OpError{Op: "register", Net: s.cfg.Transport, Addr: ch.RemoteAddr(), Err: err}
	}
	c.key = key
	return c, nil
}

func (s *stack) stats() Stats {
	st := Stats{Transport: s.tr.Stats(), Pool: s.tr.Pool().Stats()}
	for _, p := range s.pollers {
		st.Selectors = append(st.Selectors, p.sel.Stats())
	}
	return st
}

// notify signals a capacity-one channel without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
