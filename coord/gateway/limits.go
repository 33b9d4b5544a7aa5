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
	// DefaultMaxSessionsPerHost bounds the sessions of one client
	// address (Config.MaxSessionsPerHost): a client's sessions whose
	// connections ended linger until they expire, as many again as it
	// may have connections.
	DefaultMaxSessionsPerHost = 2 * DefaultMaxConnsPerHost
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
	// no session was opened for them: their client's address had
	// Config.MaxSessionsPerHost, or the replicas' session table was full
	// (tree.Config.MaxSessions).
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

// lingerGrace is how long past its timeout a session whose connection
// ended may still be open on the replicas: twice coord.Config.ClockSkew
// by default (the grace for a lying primary's clock), and the expiry
// look's interval.
const lingerGrace = 4*time.Second + 100*time.Millisecond

// admitSession counts a connection that asks for a new session against
// Config.MaxSessionsPerHost: it returns "" if the session may be opened,
// or why not. The session counts from then on.
func (s *Server) admitSession(c *conn) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLingering(time.Now())
	n := s.hostSessions[c.host] + len(s.lingering[c.host])
	if m := s.cfg.MaxSessionsPerHost; m > 0 && n >= m {
		return fmt.Sprintf("too many sessions from %s: %d open or not yet expired, max is %d", c.host, n, m)
	}
	s.hostSessions[c.host]++
	c.counted = true
	return ""
}

// linger keeps the session of a connection that ended counted against
// its address until it may have expired. s.mu must be held.
func (s *Server) linger(c *conn) {
	s.unlinger(c.session)
	m := s.lingering[c.host]
	if m == nil {
		m = make(map[int64]time.Time)
		s.lingering[c.host] = m
	}
	m[c.session] = time.Now().Add(c.timeout + lingerGrace)
	s.lingerHost[c.session] = c.host
}

// unlinger stops counting a session that is served again, or gone.
// s.mu must be held.
func (s *Server) unlinger(session int64) {
	host, ok := s.lingerHost[session]
	if !ok {
		return
	}
	delete(s.lingerHost, session)
	if m := s.lingering[host]; m != nil {
		delete(m, session)
		if len(m) == 0 {
			delete(s.lingering, host)
		}
	}
}

// pruneLingering forgets the lingering sessions that may have expired
// by now. s.mu must be held.
func (s *Server) pruneLingering(now time.Time) {
	for _, m := range s.lingering {
		for id, until := range m {
			if now.After(until) {
				s.unlinger(id)
			}
		}
	}
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
