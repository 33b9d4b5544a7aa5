package gateway

import (
	"fmt"
	"time"
)

// Default connection bounds (Config.MaxConnsPerHost, Config.MaxConns).
const (
	// DefaultMaxConnsPerHost is ZooKeeper's default maxClientCnxns.
	DefaultMaxConnsPerHost = 60
	// DefaultMaxConns bounds all connections of a gateway.
	DefaultMaxConns = 1024
)

// maxConnectFrame bounds a connect request's frame. A ConnectRequest is
// five fixed fields and the session password, which the server chose (16
// bytes): under 50 bytes from every ZooKeeper client.
const maxConnectFrame = 4 << 10

// Stats are a gateway's counters.
type Stats struct {
	Conns    int // connections open, in their handshake or serving a session
	Sessions int // sessions served
	// RefusedPerHost counts the connections closed at once because their
	// client's address had Config.MaxConnsPerHost open; RefusedTotal
	// those closed because the gateway had Config.MaxConns open.
	RefusedPerHost uint64
	RefusedTotal   uint64
	// RefusedSessions counts the connections closed unanswered because
	// the replicas could open no session for them: their session table
	// was full (tree.Config.MaxSessions).
	RefusedSessions uint64
}

// Stats returns the gateway's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Conns: len(s.conns), Sessions: len(s.sessions), RefusedPerHost: s.refusedHost, RefusedTotal: s.refusedTotal, RefusedSessions: s.refusedSessions}
}

// admit counts a new connection from host against the bounds, as
// ZooKeeper's maxClientCnxns does: it returns "" if the connection may
// stay, or why not. s.mu must be held.
func (s *Server) admit(host string) string {
	if m := s.cfg.MaxConns; m > 0 && len(s.conns) >= m {
		s.refusedTotal++
		return fmt.Sprintf("too many connections: the gateway has %d, max is %d", len(s.conns), m)
	}
	if m := s.cfg.MaxConnsPerHost; m > 0 && s.perHost[host] >= m {
		s.refusedHost++
		return fmt.Sprintf("too many connections from %s: max is %d", host, m)
	}
	s.perHost[host]++
	return ""
}

// refuseSession counts and logs a connection closed because the replicas
// opened no session for it.
func (s *Server) refuseSession(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusedSessions++
	s.logRefusal(why)
}

// logRefusal logs a refused connection, at most once a second, with the
// number of refusals it did not log. s.mu must be held.
func (s *Server) logRefusal(why string) {
	now := time.Now()
	if now.Sub(s.refusalLogged) < time.Second {
		s.refusalsQuiet++
		return
	}
	s.cfg.Logger.Warn("connection refused", "why", why, "unlogged", s.refusalsQuiet)
	s.refusalLogged, s.refusalsQuiet = now, 0
}
