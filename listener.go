package rubin

import (
	"errors"
	"net"
	"sync/atomic"

	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selectionkey"
)

// listener is the net.Listener face of a transport listener.
type listener struct {
	s      *stack
	ln     anytransport.Listener
	p      *poller // the poller ln is registered with
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
		ch, err := l.ln.AcceptConn()
		if err == nil {
			return l.serve(ch)
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

// serve registers an accepted channel with a poller for reading: the
// listener's own if the transport bound the channel to it, else the next.
// Once the stack is closing it closes the channel instead.
func (l *listener) serve(ch anytransport.Conn) (net.Conn, error) {
	if !l.s.g.enter() {
		ch.Close()
		return nil, l.closedErr()
	}
	defer l.s.g.leave()
	p := l.p
	if !l.s.tr.AcceptsOnListenerSelector() {
		p = l.s.pick()
	}
	c, err := l.s.register(ch, p, selectionkey.OpRead)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (l *listener) closedErr() error {
	return &net.OpError{Op: "accept", Net: l.s.cfg.Transport, Addr: l.ln.LocalAddr(), Err: net.ErrClosed}
}

// Close stops listening; Accept calls blocked in it return.
func (l *listener) Close() error {
	if l.closed.Swap(true) {
		return &net.OpError{Op: "close", Net: l.s.cfg.Transport, Addr: l.ln.LocalAddr(), Err: net.ErrClosed}
	}
	close(l.done)
	return l.ln.Close()
}

// Addr returns the listening address.
func (l *listener) Addr() net.Addr { return l.ln.LocalAddr() }
