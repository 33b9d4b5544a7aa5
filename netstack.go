package rubin

import (
	"context"
	"net"
	"sync"
)

// A netStack is the backend of a "tcp" Stack where the selector is not
// supported: package net's connections, kept in a set so that Close
// closes them.
type netStack struct {
	g    *guard
	mu   sync.Mutex
	open map[net.Conn]struct{}
	lns  map[*netListener]struct{}
}

func newNetStack(g *guard) *netStack {
	return &netStack{g: g, open: map[net.Conn]struct{}{}, lns: map[*netListener]struct{}{}}
}

// dial is called inside the guard (Stack.Dial).
func (s *netStack) dial(ctx context.Context, address string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	return s.track(c), nil
}

// listen is called inside the guard (Stack.Listen).
func (s *netStack) listen(ctx context.Context, address string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	l := &netListener{Listener: ln, s: s}
	s.mu.Lock()
	s.lns[l] = struct{}{}
	s.mu.Unlock()
	return l, nil
}

func (s *netStack) track(c net.Conn) net.Conn {
	tc := &netConn{Conn: c, s: s}
	s.mu.Lock()
	s.open[tc] = struct{}{}
	s.mu.Unlock()
	return tc
}

func (s *netStack) stats() Stats { return Stats{} }

// close closes every listener and connection, once those being set up
// have left the guard.
func (s *netStack) close() error {
	s.g.wait()
	s.mu.Lock()
	lns, conns := s.lns, s.open
	s.lns, s.open = map[*netListener]struct{}{}, map[net.Conn]struct{}{}
	s.mu.Unlock()
	for l := range lns {
		l.Listener.Close()
	}
	for c := range conns {
		c.(*netConn).Conn.Close()
	}
	return nil
}

// netConn is a net.Conn that leaves its stack's set when closed.
type netConn struct {
	net.Conn
	s *netStack
}

func (c *netConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.open, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// netListener is a net.Listener whose connections join its stack's set.
type netListener struct {
	net.Listener
	s *netStack
}

func (l *netListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if !l.s.g.enter() {
		c.Close()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: net.ErrClosed}
	}
	defer l.s.g.leave()
	return l.s.track(c), nil
}

func (l *netListener) Close() error {
	l.s.mu.Lock()
	delete(l.s.lns, l)
	l.s.mu.Unlock()
	return l.Listener.Close()
}
