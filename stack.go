package rubin

import (
	"context"
	"errors"
	"net"
	"sync/atomic"

	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/tcp"
)

// A stack is one Config's transport and poller goroutines. Stacks live as
// long as the process, like the runtime's network poller.
type stack struct {
	cfg     Config
	tr      *tcp.Transport
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
	tr, err := tcp.New(tcp.Config{MaxMessageSize: cfg.MaxMessageSize})
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

func (s *stack) dial(ctx context.Context, address string) (net.Conn, error) {
	ch, err := s.tr.Dial(ctx, address)
	if err != nil {
		return nil, err
	}
	return s.wrap(ch)
}

func (s *stack) listen(ctx context.Context, address string) (net.Listener, error) {
	ln, err := s.tr.Listen(ctx, address)
	if err != nil {
		return nil, err
	}
	l := &listener{s: s, ln: ln, signal: make(chan struct{}, 1), done: make(chan struct{})}
	if err := ln.SetBlocking(false); err != nil {
		ln.Close()
		return nil, err
	}
	p := s.pick()
	if l.key, err = p.sel.Register(ln, 0, l); err != nil {
		ln.Close()
		return nil, &net.OpError{Op: "listen", Net: s.cfg.Transport, Addr: ln.Addr(), Err: err}
	}
	return l, nil
}

// wrap turns a connected channel into a net.Conn served by a poller.
func (s *stack) wrap(ch *tcp.Conn) (net.Conn, error) {
	c := newConn(s, ch)
	if err := ch.SetBlocking(false); err != nil {
		ch.Close()
		return nil, err
	}
	key, err := s.pick().sel.Register(ch, selectionkey.OpRead, c)
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

// listener is the net.Listener face of a transport listener.
type listener struct {
	s      *stack
	ln     *tcp.Listener
	key    *selectionkey.Key
	signal chan struct{} // OpAccept seen
	done   chan struct{} // closed by Close
	closed atomic.Bool
}

func (l *listener) ready(k *selectionkey.Key) {
	_ = k.RemoveInterest(selectionkey.OpAccept)
	notify(l.signal)
}

// Accept waits for and returns the next connection.
func (l *listener) Accept() (net.Conn, error) {
	for {
		ch, err := l.ln.AcceptTCP()
		if err == nil {
			return l.s.wrap(ch)
		}
		if !errors.Is(err, errWouldBlock) {
			return nil, err
		}
		if err := l.key.AddInterest(selectionkey.OpAccept); err != nil {
			return nil, l.closedErr()
		}
		select {
		case <-l.signal:
		case <-l.done:
			return nil, l.closedErr()
		}
	}
}

func (l *listener) closedErr() error {
	return &net.OpError{Op: "accept", Net: l.s.cfg.Transport, Addr: l.ln.Addr(), Err: net.ErrClosed}
}

// Close stops listening; Accept calls blocked in it return.
func (l *listener) Close() error {
	if l.closed.Swap(true) {
		return &net.OpError{Op: "close", Net: l.s.cfg.Transport, Addr: l.ln.Addr(), Err: net.ErrClosed}
	}
	close(l.done)
	return l.ln.Close()
}

// Addr returns the listening address.
func (l *listener) Addr() net.Addr { return l.ln.Addr() }

// notify signals a capacity-one channel without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
