package rubin

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// A Stack is what one Config's connections run on: a transport, with its
// buffer pool (and for RDMA its device), and poller goroutines that run
// the selectors serving the connections. Close releases it together with
// every listener and connection made from it, as sql.DB.Close does for
// its connections.
//
// The package-level Listen and Dial, and a Dialer or ListenConfig without
// a Stack, use a default Stack per network that lives as long as the
// process, like the runtime's network poller.
//
// Where the selector is not supported (off Linux), a "tcp" Stack carries
// package net's connections instead of rubin's channels, and its Stats
// are zero.
//
// A Stack is made by NewStack; the zero Stack is not usable. Multiple
// goroutines may invoke methods on a Stack simultaneously.
type Stack struct {
	cfg Config // normalized
	g   *guard
	be  backend
}

// A backend makes a Stack's connections. Its listeners and connections
// enter g while they set up, and close once the guard is shut.
type backend interface {
	dial(ctx context.Context, address string) (net.Conn, error)
	listen(ctx context.Context, address string) (net.Listener, error)
	stats() Stats
	// close is called once, after the guard is shut: it closes every
	// listener and connection, waiting for those entering to leave, and
	// then releases what the backend holds.
	close() error
}

// Stats gathers the counters of a stack's parts.
type Stats struct {
	Transport channel.Stats
	Pool      bufpool.Stats
	Selectors []selector.Stats
}

// NewStack makes a Stack for cfg: it opens the transport and starts the
// pollers.
func NewStack(cfg Config) (*Stack, error) {
	cfg = cfg.normalized()
	s, err := openStack(cfg, openBackend)
	if err != nil {
		return nil, fmt.Errorf("rubin: %s stack: %w", cfg.Transport, err)
	}
	return s, nil
}

// openStack makes a Stack for the normalized cfg with the backend open
// makes.
func openStack(cfg Config, open func(Config, *guard) (backend, error)) (*Stack, error) {
	g := newGuard()
	be, err := open(cfg, g)
	if err != nil {
		g.shut()
		return nil, err
	}
	return &Stack{cfg: cfg, g: g, be: be}, nil
}

// Listen announces on the local address with the Stack's transport.
func (s *Stack) Listen(ctx context.Context, address string) (net.Listener, error) {
	if !s.g.enter() {
		return nil, s.closedError("listen")
	}
	defer s.g.leave()
	ln, err := s.be.listen(ctx, address)
	if err != nil && s.g.isShut() {
		return nil, s.closedError("listen")
	}
	return ln, err
}

// Dial connects to the address with the Stack's transport; ctx bounds the
// connect. Its signature is the dialer function that
// grpc.WithContextDialer and similar hooks take.
func (s *Stack) Dial(ctx context.Context, address string) (net.Conn, error) {
	if !s.g.enter() {
		return nil, s.closedError("dial")
	}
	defer s.g.leave()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.g.ctx, cancel) // Close ends a pending dial
	defer stop()
	c, err := s.be.dial(ctx, address)
	if err != nil && s.g.isShut() {
		return nil, s.closedError("dial")
	}
	return c, err
}

// Stats returns the counters of the Stack's transport, buffer pool and
// pollers.
func (s *Stack) Stats() Stats { return s.be.stats() }

// Close closes the Stack's listeners and connections, stops its pollers
// and closes its transport. Pending and later Accept, Read and Write
// calls on them, and pending and later Dial and Listen calls on the
// Stack, fail with errors wrapping net.ErrClosed. Close returns when the
// Stack's goroutines have exited; closing it again returns an error
// wrapping net.ErrClosed.
func (s *Stack) Close() error {
	if !s.g.shut() {
		return s.closedError("close")
	}
	return s.be.close()
}

func (s *Stack) closedError(op string) error {
	return &net.OpError{Op: op, Net: s.cfg.Transport, Err: net.ErrClosed}
}

// A guard is a Stack's open/closed state. Dials, listens and accepts enter
// it while they set up a connection or listener, so that Close, after
// shutting it, waits for them and then finds everything to close.
type guard struct {
	ctx    context.Context // done once shut
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newGuard() *guard {
	g := &guard{}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// enter reports whether the guard is open and, if so, counts the caller
// in until leave.
func (g *guard) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *guard) leave() { g.wg.Done() }

// shut closes the guard and cancels its context; it reports whether it
// was open.
func (g *guard) shut() bool {
	g.mu.Lock()
	was := g.closed
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	return !was
}

func (g *guard) isShut() bool { return g.ctx.Err() != nil }

// wait waits for the callers inside to leave; call it after shut.
func (g *guard) wait() { g.wg.Wait() }

// A stack is the backend of rubin's channels: a transport and poller
// goroutines running its selectors.
type stack struct {
	cfg     Config
	g       *guard
	tr      anytransport.Transport
	pollers []*poller
	next    atomic.Uint32
	running sync.WaitGroup // the pollers' goroutines
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

func newStack(cfg Config, g *guard) (*stack, error) {
	tr, err := anytransport.Open(cfg.Transport, anytransport.Config{MaxMessageSize: cfg.MaxMessageSize, SpinBudget: cfg.SpinBudget})
	if err != nil {
		return nil, err
	}
	return newStackOn(cfg, g, tr)
}

// newStackOn is newStack over the transport tr, which it closes if it
// fails.
func newStackOn(cfg Config, g *guard, tr anytransport.Transport) (*stack, error) {
	s := &stack{cfg: cfg, g: g, tr: tr}
	// Unless the budget is fixed, the pollers sleep at once. A Read that
	// waits over RDMA polls the device itself (conn.Read), and a poller
	// spinning beside it would only compete with it for the CPU and take
	// its messages into the inbox first; over TCP nobody spins.
	budget := cfg.SpinBudget
	if budget == 0 {
		budget = selector.NoSpin
	}
	for range cfg.Pollers {
		sel, err := selector.New(selector.Config{SpinBudget: budget})
		if err != nil {
			s.stop()
			tr.Close()
			return nil, err
		}
		p := &poller{sel: sel}
		s.pollers = append(s.pollers, p)
		s.running.Go(p.run)
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

// close closes what is registered with the pollers, once the dials,
// listens and accepts setting up more have left the guard; then the
// selectors, which ends the pollers' goroutines; and last the transport,
// which releases the pool (and an RDMA device).
func (s *stack) close() error {
	s.g.wait() // dials end with the guard's context, accepts are refused
	for _, p := range s.pollers {
		for _, k := range p.sel.Keys() {
			if c, ok := k.Attachment().(io.Closer); ok {
				_ = c.Close() // one closed meanwhile only says so
			}
		}
	}
	s.stop()
	return s.tr.Close()
}

// stop closes the selectors and waits for the pollers to return.
func (s *stack) stop() {
	for _, p := range s.pollers {
		p.sel.Close()
	}
	s.running.Wait()
}

// notify signals a capacity-one channel without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// drain takes a signal from a capacity-one channel if there is one.
func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}
