package tcp

import (
	"net"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// Listener is a listening TCP socket: a channel.Listener that a selector
// can watch for OpAccept. It is safe for concurrent use.
type Listener struct {
	t        *Transport
	fd       sysfd
	laddr    *net.TCPAddr
	blocking atomic.Bool
	closing  atomic.Bool
	binding
}

var (
	_ channel.Listener    = (*Listener)(nil)
	_ selector.Selectable = (*Listener)(nil)
	_ selector.Source     = (*listenerSource)(nil)
	_ selector.Hooks      = (*listenerSource)(nil)
)

// Accept waits for (in blocking mode) and returns the next connection, in
// blocking mode. In non-blocking mode it returns ErrWouldBlock when none
// is pending.
func (l *Listener) Accept() (channel.Conn, error) {
	c, err := l.AcceptTCP()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// AcceptTCP is Accept returning the concrete type.
func (l *Listener) AcceptTCP() (*Conn, error) {
	if !l.fd.acquire() {
		return nil, l.closedErr()
	}
	defer l.fd.release()
	for {
		nfd, sa, err := accept(l.fd.fd)
		switch err {
		case nil:
			if err := unix.SetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1); err != nil {
				unix.Close(nfd)
				return nil, opError("accept", l.laddr, "setsockopt", err)
			}
			c := l.t.newConn(nfd, tcpAddr(sa))
			c.connected()
			c.blocking.Store(true)
			return c, nil
		case unix.EINTR, unix.ECONNABORTED:
			continue
		case unix.EAGAIN:
			if !l.blocking.Load() {
				return nil, channel.ErrWouldBlock
			}
			if err := l.fd.wait(unix.POLLIN); err != nil {
				return nil, opError("accept", l.laddr, "poll", err)
			}
			if l.fd.closed() {
				return nil, l.closedErr()
			}
		default:
			if l.fd.closed() {
				return nil, l.closedErr()
			}
			return nil, opError("accept", l.laddr, "accept4", err)
		}
	}
}

// Close stops listening. Accept calls blocked in it return an error that
// satisfies errors.Is(err, net.ErrClosed). Close is idempotent.
func (l *Listener) Close() error {
	if l.closing.Swap(true) {
		return nil
	}
	if r := l.reg.Load(); r != nil {
		r.Key().Cancel()
	}
	l.fd.close()
	return nil
}

func (l *Listener) closedErr() error {
	return &net.OpError{Op: "accept", Net: "tcp", Addr: l.laddr, Err: net.ErrClosed}
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.laddr }

// LocalAddr returns the listening address.
func (l *Listener) LocalAddr() net.Addr { return l.laddr }

// SetBlocking sets the mode of Accept.
func (l *Listener) SetBlocking(block bool) error {
	if block && l.reg.Load() != nil {
		return channel.ErrRegistered
	}
	l.blocking.Store(block)
	return nil
}

// IsBlocking reports the mode of Accept.
func (l *Listener) IsBlocking() bool { return l.blocking.Load() }

// ValidOps implements selector.Selectable: a listener accepts.
func (l *Listener) ValidOps() selectionkey.Ops { return selectionkey.OpAccept }

// ReadyOps implements selector.Selectable: a listener keeps nothing in
// user space.
func (l *Listener) ReadyOps() selectionkey.Ops { return 0 }

// SelectorHooks implements selector.Selectable.
func (l *Listener) SelectorHooks() selector.Hooks { return l.source() }

// Bind implements selector.Hooks.
func (s *listenerSource) Bind(r *selector.Registration) error {
	l := (*Listener)(s)
	if l.closing.Load() {
		return l.closedErr()
	}
	return l.bind(s, r, l.want)
}

// InterestChanged implements selector.Hooks.
func (s *listenerSource) InterestChanged(*selector.Registration) {
	_ = s.update(s, (*Listener)(s).want)
}

// Unbind implements selector.Hooks.
func (s *listenerSource) Unbind(r *selector.Registration) { s.unbind(s, r) }

func (l *Listener) want(interest selectionkey.Ops) uint32 {
	if interest&selectionkey.OpAccept != 0 {
		return selector.EventIn
	}
	return 0
}

// listenerSource is a Listener as its selector sees it, as connSource is a
// Conn.
type listenerSource Listener

func (l *Listener) source() *listenerSource { return (*listenerSource)(l) }

// FD implements selector.Source.
func (s *listenerSource) FD() int { return s.fd.fd }

// Handle implements selector.Source.
func (s *listenerSource) Handle(events uint32, sink *selector.Sink) {
	if r := s.reg.Load(); r != nil {
		sink.Ready(r, selectionkey.OpAccept)
	}
}
