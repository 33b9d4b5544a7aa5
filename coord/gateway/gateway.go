package gateway

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
)

// Invoker runs ops on the replicated service. *node.Client is one. Its
// methods must be safe for concurrent use.
type Invoker interface {
	// Invoke orders op and returns the result f+1 replicas agreed on.
	Invoke(ctx context.Context, op []byte) ([]byte, error)
	// InvokeRead sends op as a read-only request and returns the result
	// 2f+1 replicas gave from their state, or, if they did not agree,
	// orders it as Invoke does.
	InvokeRead(ctx context.Context, op []byte) ([]byte, error)
}

// Config configures a Server. A zero field takes its default.
type Config struct {
	// Invoker reaches the replicas; required.
	Invoker Invoker
	// ID names the gateway in its ops: sessions belong to the gateway
	// that last connected them. Default: random. Two gateways must not
	// share one; with Notified it is the identity notified, and taken as
	// it is, 0 included.
	ID int64
	// Notified says the replicas notify the gateway when events wait for
	// its sessions: ID is a client identity of the cluster (listed in the
	// replicas' coord.Config.Clients), and the Invoker's client passes
	// that identity's notifications to Note (node.ClientConfig.OnNote).
	// The gateway then polls a session when told to, and every
	// PollInterval only as a safety net.
	Notified bool
	// Identities are the cluster's client identities the Invoker uses
	// (node.ClientConfig.IDs). A gateway with Notified or Identities set
	// claims its ID and these identities on the replicas
	// (coord.ClaimOp) before New returns, and renews the claim every
	// second: New fails with an error wrapping ErrHeld if a running
	// gateway holds the ID or one of the identities, and a gateway whose
	// claim another one took later (it could not renew it for the
	// replicas' coord.Config.ClaimLease) stops, and Serve returns such
	// an error.
	Identities []bft.ClientID
	// ClaimWait, if positive, is how long New waits for a conflicting
	// claim to lapse (the replicas' coord.Config.ClaimLease, 5s by
	// default, after its last renewal) rather than failing at once: for
	// a gateway restarted in place of one that stopped.
	ClaimWait time.Duration
	// PollInterval is how often sessions that may hold watches are
	// polled for their events (default 10ms, or 1s if Notified).
	PollInterval time.Duration
	// MaxConnsPerHost bounds the connections open at once from one client
	// address (IP), as ZooKeeper's maxClientCnxns does: a connection past
	// it is closed at once. Default DefaultMaxConnsPerHost (60, as
	// ZooKeeper's); negative: no bound.
	MaxConnsPerHost int
	// MaxSessionsPerHost bounds the sessions one client address may hold
	// through the gateway: those its connections serve, and those whose
	// connection ended less than their timeout (and the replicas' grace
	// for a lying primary's clock) ago, which the replicas may still
	// hold. A connect for a new session past it is closed unanswered.
	// Default DefaultMaxSessionsPerHost (twice DefaultMaxConnsPerHost);
	// negative: no bound.
	MaxSessionsPerHost int
	// MaxConns bounds the connections open at once from all clients: a
	// connection past it is closed at once. Default DefaultMaxConns;
	// negative: no bound.
	MaxConns int
	// HandshakeTimeout bounds how long a new connection may take to send
	// its connect request (default 10s).
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one write to a client (default 10s).
	WriteTimeout time.Duration
	// MaxPending bounds the bytes of a connection's requests waiting for
	// their turn (default 4 MiB; at least one frame is always taken).
	MaxPending int
	// MaxOutput bounds the bytes waiting to be written to a connection
	// (default 16 MiB); past it the connection is closed.
	MaxOutput int
	// FourLetterWords are the four-letter words the gateway answers,
	// comma-separated, as ZooKeeper's 4lw.commands.whitelist: "" for
	// DefaultFourLetterWords, "*" for all it supports, "none" for none.
	// A word not listed is answered as ZooKeeper answers one not in its
	// whitelist.
	FourLetterWords string
	// Registerer, if set, takes the gateway's Prometheus metrics
	// (namespace rubin_coord, subsystem gateway, label gateway=ID).
	Registerer prometheus.Registerer
	Logger     *slog.Logger // nil: discard
}

func (c Config) normalized() Config {
	if c.PollInterval <= 0 {
		c.PollInterval = 10 * time.Millisecond
		if c.Notified {
			c.PollInterval = time.Second
		}
	}
	if c.MaxConnsPerHost == 0 {
		c.MaxConnsPerHost = DefaultMaxConnsPerHost
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxSessionsPerHost == 0 {
		c.MaxSessionsPerHost = DefaultMaxSessionsPerHost
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 4 << 20
	}
	if c.MaxOutput <= 0 {
		c.MaxOutput = 16 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ErrClosed is returned by Serve after Close (or an error wrapping
// ErrHeld if the gateway stopped because another took its identity).
var ErrClosed = errors.New("gateway: closed")

// Server is a gateway: it serves ZooKeeper clients on the listeners given
// to Serve. Its methods are safe for concurrent use.
type Server struct {
	cfg    Config
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// wake asks the poller for a poll of the noted sessions; noteAll
	// says a notification was lost or named no session: poll them all.
	wake    chan struct{}
	noteAll atomic.Bool
	// lastOrder is when the gateway last sent an op to be ordered
	// (UnixNano), for the heartbeat.
	lastOrder atomic.Int64

	// holder is the number the gateway drew for its claim.
	holder int64

	words    map[string]bool // the four-letter words answered
	started  time.Time
	counters counters // of all connections, for the four-letter words
	metrics  *metrics

	mu        sync.Mutex
	closed    bool
	failed    error // why the gateway stopped itself (fail)
	listeners map[net.Listener]bool
	conns     map[*conn]bool
	perHost   map[string]int // the connections open from each client address
	// hostSessions counts, for each client address, the connections that
	// serve or are opening a session; lingering are the sessions whose
	// connection ended, by address, with when they may have expired.
	// Config.MaxSessionsPerHost bounds the two together.
	hostSessions map[string]int
	lingering    map[string]map[int64]time.Time
	lingerHost   map[int64]string // the address of each lingering session
	sessions     map[int64]*conn  // the connection serving each session

	refusedHost, refusedTotal, refusedSessions uint64 // Stats
	refusalLogged                              time.Time
	refusalsQuiet                              uint64 // refusals since, not logged
}

// New returns a gateway; it starts polling its sessions at once, and
// serves clients once Serve is called. A gateway with Config.Notified or
// Config.Identities first claims its identities on the replicas, and
// fails with an error wrapping ErrHeld if another gateway holds them.
func New(cfg Config) (*Server, error) {
	if cfg.Invoker == nil {
		return nil, errors.New("gateway: Config.Invoker is nil")
	}
	cfg = cfg.normalized()
	words, err := parseFourLetterWords(cfg.FourLetterWords)
	if err != nil {
		return nil, err
	}
	for cfg.ID == 0 && !cfg.Notified {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		cfg.ID = int64(binary.BigEndian.Uint64(b[:]) >> 1)
	}
	var holder int64
	for holder == 0 { // 0 only asks (coord.ClaimOp)
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		holder = int64(binary.BigEndian.Uint64(b[:]))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), holder: holder, words: words, started: time.Now(),
		listeners: make(map[net.Listener]bool), conns: make(map[*conn]bool), perHost: make(map[string]int), sessions: make(map[int64]*conn),
		hostSessions: make(map[string]int), lingering: make(map[string]map[int64]time.Time), lingerHost: make(map[int64]string)}
	s.metrics = newMetrics(s)
	if claims := cfg.Notified || len(cfg.Identities) > 0; claims {
		if err := s.claim(ctx); err != nil {
			cancel()
			return nil, err
		}
		s.wg.Add(1)
		go s.renewLoop()
	}
	s.wg.Add(1)
	go s.pollLoop()
	if cfg.Registerer != nil {
		if err := s.metrics.register(cfg.Registerer); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Serve accepts ZooKeeper clients on ln until ln fails or Close is called,
// and closes ln. It returns ErrClosed after Close, else the error of
// Accept.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return s.closedErr()
	}
	s.listeners[ln] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		ln.Close()
	}()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.stopped() {
				return s.closedErr()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: wait and go on,
				// as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return s.closedErr()
		}
		if why := s.admit(c.host); why != "" {
			s.logRefusal(why)
			s.mu.Unlock()
			nc.Close()
			continue
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Close stops the gateway: it closes its listeners and connections and
// returns once every goroutine it started has exited. The sessions stay
// on the replicas until they expire or their clients resume them through
// another gateway. It does not close the Invoker.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed { // else closed before, or stopped by fail
		s.closed = true
		for ln := range s.listeners {
			ln.Close()
		}
		for c := range s.conns {
			c.kill(errors.New("gateway closed"))
		}
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// stopped reports whether Close or fail stopped the gateway.
func (s *Server) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Sessions returns the number of sessions the gateway serves.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// outstanding returns the number of client requests received and not
// yet answered.
func (s *Server) outstanding() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for c := range s.conns {
		n += c.outstanding.Load()
	}
	return n
}

// bind makes c the connection of its session, closing the one that served
// it before (the client reconnected before the gateway saw the old
// connection go).
func (s *Server) bind(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if old := s.sessions[c.session]; old != nil && old != c {
		old.kill(errors.New("session resumed on another connection"))
	}
	s.sessions[c.session] = c
	if !c.counted {
		s.hostSessions[c.host]++
		c.counted = true
	}
	s.unlinger(c.session)
	return true
}

// forget removes a connection that ended.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[c] {
		delete(s.conns, c)
		if s.perHost[c.host]--; s.perHost[c.host] <= 0 {
			delete(s.perHost, c.host)
		}
	}
	if c.counted {
		if s.hostSessions[c.host]--; s.hostSessions[c.host] <= 0 {
			delete(s.hostSessions, c.host)
		}
	}
	if c.session != 0 && s.sessions[c.session] == c {
		delete(s.sessions, c.session)
		if !c.ended.Load() {
			s.linger(c)
		}
	}
}

// Note takes a notification the replicas sent the gateway's identity
// (Config.Notified): it names sessions with events waiting, which the
// gateway then polls. A lost notification, or one that names none, makes
// it poll every session that may hold watches. Note returns at once; it
// may be called from any goroutine, node.ClientConfig.OnNote's included.
func (s *Server) Note(n bft.Note) {
	ids := coord.NotedSessions(n.Payload)
	if n.Lost > 0 || ids == nil {
		s.noteAll.Store(true)
	} else {
		s.mu.Lock()
		for _, id := range ids {
			if c := s.sessions[id]; c != nil {
				c.noted.Store(true)
			}
		}
		s.mu.Unlock()
	}
	s.signalPoll()
}

func (s *Server) signalPoll() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pollLoop polls the sessions, one poll at a time: every PollInterval,
// and when notified.
func (s *Server) pollLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	// Sessions are renewed every third of their timeout, which may be
	// shorter than PollInterval.
	renew := time.NewTicker(min(s.cfg.PollInterval, time.Second))
	defer renew.Stop()
	for {
		tick := false
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			tick = true
		case <-renew.C:
		case <-s.wake:
		}
		s.pollOnce(tick)
	}
}

// pollOnce polls the sessions that are due and idle: those noted, those
// that may hold watches if tick or a notification was lost, and those
// not renewed for a third of their timeout. A noted session that is busy
// stays noted, and is polled when its request is done.
func (s *Server) pollOnce(tick bool) {
	now := time.Now()
	all := s.noteAll.Swap(false)
	var due []*conn
	s.mu.Lock()
	for _, c := range s.sessions {
		watching := c.watching.Load()
		noted := c.noted.Load() || all && watching
		if !noted && !(tick && watching) && now.Sub(time.Unix(0, c.touched.Load())) < c.timeout/3 {
			continue
		}
		select {
		case c.turn <- struct{}{}:
			c.noted.Store(false)
			due = append(due, c)
		default:
			// A request is in flight; it renews the session, and its
			// result may carry the events. If not, poll after it.
			if noted {
				c.noted.Store(true)
			}
		}
	}
	serving := len(s.sessions) > 0
	s.pruneLingering(now)
	s.mu.Unlock()
	if len(due) == 0 && serving && now.Sub(time.Unix(0, s.lastOrder.Load())) >= heartbeat {
		s.poll(nil, now)
	}
	for len(due) > 0 {
		n := min(len(due), maxPoll)
		s.poll(due[:n], now)
		due = due[n:]
	}
}

// maxPoll bounds the sessions of one poll, so that the op stays small.
const maxPoll = 4096

// heartbeat is how often, at least, a gateway that serves sessions has an
// op ordered: a poll of no session when it has nothing else to order.
// The gaps in agreed time then stay well under coord.Config.Outage (by
// default half the shortest session timeout, 2s), and a longer gap is an
// outage, which sessions' deadlines count only in part.
const heartbeat = time.Second

// order has op ordered by the replicas.
func (s *Server) order(ctx context.Context, op []byte) ([]byte, error) {
	s.lastOrder.Store(time.Now().UnixNano())
	return s.cfg.Invoker.Invoke(ctx, op)
}

// poll polls sessions whose turns it holds, and releases them.
func (s *Server) poll(due []*conn, now time.Time) {
	defer func() {
		for _, c := range due {
			<-c.turn
		}
	}()
	ids := make([]int64, len(due))
	for i, c := range due {
		ids[i] = c.session
	}
	res, err := s.order(s.ctx, coord.PollOp(s.cfg.ID, ids))
	if err != nil {
		if s.ctx.Err() == nil {
			s.cfg.Logger.Warn("poll failed", "err", err)
		}
		return
	}
	rs, err := coord.ParsePollResult(res)
	if err == nil && len(rs) != len(due) {
		err = fmt.Errorf("%d results for %d sessions", len(rs), len(due))
	}
	if err != nil {
		// f+1 replicas agreed on it: the cluster runs another version.
		s.cfg.Logger.Error("poll result", "err", err)
		return
	}
	for i, r := range rs {
		due[i].touched.Store(now.UnixNano())
		due[i].deliver(r.Status, r.Frames)
	}
}
