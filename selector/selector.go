// Package selector multiplexes many channels on one goroutine, like
// java.nio.channels.Selector, over a hybrid event queue: one epoll instance
// that sleeps on the descriptors of event sources, plus a queue of keys that
// sources report ready without any descriptor becoming readable.
//
// # Event sources
//
// Transports provide event sources. A TCP socket is one; an RDMA completion
// channel, shared by every RDMA channel of a selector, is another. A Source
// provides:
//
//	FD() int             the descriptor the selector sleeps on, registered
//	                     with AddSource for a set of epoll events.
//	Handle(ev, sink)     called on the selecting goroutine when epoll reports
//	                     FD with events ev; it reports ready keys to sink.
//	                     It may be called once more after RemoveSource, and
//	                     must then do nothing harmful.
//
// A source that can look for events without sleeping also implements Poller:
//
//	Poll(sink) bool      called on the selecting goroutine before it sleeps
//	                     and on every pass while it spins; it reports ready
//	                     keys to sink and tells whether it found any. It
//	                     must not make a system call when it finds nothing.
//	Arm() bool           called just before the selector sleeps, to re-enable
//	                     notification on FD; it returns true if events may
//	                     have arrived before notification was enabled, and
//	                     the selector polls again instead of sleeping.
//
// A source that outlives a selector, such as a completion queue that
// channels still use, also implements Closer: the selector's Close calls
// SelectorClosed once for every source still added, after the last select
// has returned, so the source can move elsewhere or release itself.
//
// # Spinning
//
// Waking a sleeping thread costs more than polling for a short while, so a
// select that finds nothing spins before it sleeps: it polls every Poller
// on each pass, looks at epoll only every few passes and reads the clock
// only every few passes, so a pass makes no system call. By default the
// spin budget adapts (see Config.SpinBudget): it follows the recent waits
// of selects, up to Config.MaxSpin, and drops to nothing when waits are
// mostly longer than that; Stats reports the budget in force.
//
// Any goroutine can also report a key ready with Registration.Ready, for
// readiness that no descriptor shows, such as a message already buffered in
// user space; it wakes a sleeping selector.
//
// # Channels
//
// A channel that can be registered implements Selectable: Register calls its
// Bind method with the new key's Registration, and the channel hooks the key
// into a source of the selector (its own, or a shared one it finds or
// creates). The channel is told when the key's interest set changes and when
// the key is canceled.
//
// Readiness is level-triggered: a key whose channel is still ready for an
// operation in its interest set is selected again by the next select. For
// readiness that lives in user space, the selector asks each key selected
// last time for its channel's ReadyOps, and a channel whose interest set
// grows reports what it already has with Registration.Ready.
//
// The selector is Linux only: its event source is epoll (epoll_linux.go).
// Elsewhere the package builds, so programs that import it compile, and New
// returns ErrNotSupported; so do the transports built on it.
package selector

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
)

// Source is an event source; see the package documentation.
type Source interface {
	FD() int
	Handle(events uint32, sink *Sink)
}

// Poller is a source that can be polled without sleeping; see the package
// documentation.
type Poller interface {
	Source
	Poll(sink *Sink) bool
	Arm() bool
}

// Closer is a source that wants to know when its selector closes; see the
// package documentation.
type Closer interface {
	Source
	SelectorClosed(s *Selector)
}

// Selectable is a channel that can be registered with a selector. Its
// methods, but for those of channel.Channel, are called by the selector.
type Selectable interface {
	channel.Channel
	// ValidOps is the set of operations the channel supports.
	ValidOps() selectionkey.Ops
	// ReadyOps reports readiness that no descriptor shows, such as a
	// message already received into user space. It is called on the
	// selecting goroutine for keys the previous select selected.
	ReadyOps() selectionkey.Ops
	// Bind hooks r's key into an event source of r.Selector(). It is
	// called once per registration, before Register returns. A channel can
	// be registered with one selector at a time.
	Bind(r *Registration) error
	// InterestChanged is called, from any goroutine, after the interest
	// set of r's key changed. A channel that is already ready for an
	// operation added to the set reports it with r.Ready.
	InterestChanged(r *Registration)
	// Unbind detaches r from its event source. It is called once, when
	// r's key is canceled (also by closing the channel or the selector).
	Unbind(r *Registration)
}

// ErrBlocking is returned by Register for a channel in blocking mode.
var ErrBlocking = errors.New("selector: channel is in blocking mode")

// errClosed satisfies errors.Is(err, net.ErrClosed).
var errClosed = fmt.Errorf("selector: %w", net.ErrClosed)

// Config configures a Selector. The zero value is usable.
type Config struct {
	// SpinBudget is how long a select keeps polling its sources before it
	// sleeps in epoll: waking a sleeping thread costs more than polling
	// for a short while. Zero (the default) adapts the budget to the
	// recent waits, up to MaxSpin, for selectors that have a Poller (an
	// RDMA completion queue); a selector of sockets only then sleeps at
	// once. A positive value is a fixed budget; NoSpin (negative) never
	// spins.
	SpinBudget time.Duration
	// MaxSpin caps the adaptive spin budget. Default DefaultMaxSpin.
	MaxSpin time.Duration
	// MaxEvents is how many epoll events one system call returns at most.
	// Default 256.
	MaxEvents int
}

// Stats counts a selector's work since it was opened.
type Stats struct {
	Selects  uint64 // calls of Select, SelectTimeout and SelectNow
	Selected uint64 // keys selected, summed over all selects
	Spins    uint64 // polling rounds while spinning
	Sleeps   uint64 // times the selector slept in epoll
	Wakeups  uint64 // times a sleeping selector was woken by Wakeup or Ready
	Keys     int    // keys registered now
	Sources  int    // event sources now
	// SpinBudget is how long the next select would spin: the fixed
	// budget, or the adaptive one learned so far.
	SpinBudget time.Duration
}

// Selector multiplexes channels. Select, SelectTimeout, SelectNow and
// SelectedKeys belong to one goroutine at a time (concurrent selects are
// serialized); Register, Wakeup, Keys, Stats and Close may be called from
// any goroutine.
type Selector struct {
	cfg Config
	ep  *epoll // the event source: epoll on Linux (epoll_linux.go)

	selectMu sync.Mutex // held by a select in progress, and by Close
	selected []*Registration
	keysOut  []*selectionkey.Key
	spare    []*Registration // the other selected slice, swapped each round
	round    uint64
	sink     Sink
	scratch  []Source

	spin     *spinner
	pollers  atomic.Pointer[[]Poller] // copied on write under mu
	readyLen atomic.Int32             // len(readyq), read without mu

	mu      sync.Mutex // guards the fields below
	sources map[int32]sourceEntry
	keys    map[*selectionkey.Key]*Registration
	readyq  []*Registration
	nextGen uint32

	closed   atomic.Bool
	sleeping atomic.Bool // in epoll_wait with a nonzero timeout
	woken    atomic.Bool // Wakeup called since the last select returned
	signaled atomic.Bool // wakefd written and not yet drained

	selects, selectedN, spins, sleeps, wakeups atomic.Uint64
}

type sourceEntry struct {
	src Source
	gen uint32
}

// New opens a selector.
func New(cfg Config) (*Selector, error) {
	if (cfg.SpinBudget < 0 && cfg.SpinBudget != NoSpin) || cfg.MaxSpin < 0 || cfg.MaxEvents < 0 {
		return nil, fmt.Errorf("selector: negative value in config %+v", cfg)
	}
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = 256
	}
	if cfg.MaxSpin == 0 {
		cfg.MaxSpin = DefaultMaxSpin
	}
	ep, err := openEpoll(cfg.MaxEvents)
	if err != nil {
		return nil, err
	}
	s := &Selector{
		cfg:     cfg,
		ep:      ep,
		sources: make(map[int32]sourceEntry),
		keys:    make(map[*selectionkey.Key]*Registration),
		nextGen: 1,
		spin:    newSpinner(cfg.SpinBudget, cfg.MaxSpin),
	}
	s.pollers.Store(new([]Poller))
	s.sink.s = s
	return s, nil
}

// Register registers ch with the selector for the operations in interest,
// with an attachment, and returns the new key. The channel must be in
// non-blocking mode.
func (s *Selector) Register(ch Selectable, interest selectionkey.Ops, attachment any) (*selectionkey.Key, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if ch.IsBlocking() {
		return nil, ErrBlocking
	}
	if bad := interest &^ ch.ValidOps(); bad != 0 {
		return nil, &selectionkey.InvalidOpsError{Ops: bad, Valid: ch.ValidOps()}
	}
	r := &Registration{sel: s, ch: ch}
	r.key = selectionkey.New(ch, ch.ValidOps(), interest, (*watcher)(r))
	r.key.Attach(attachment)
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, errClosed
	}
	s.keys[r.key] = r
	s.mu.Unlock()
	if err := ch.Bind(r); err != nil {
		s.mu.Lock()
		delete(s.keys, r.key)
		s.mu.Unlock()
		return nil, err
	}
	r.bound.Store(true)
	if !r.key.Valid() { // canceled while binding
		r.unbind()
	}
	return r.key, nil
}

// AddSource adds src to the epoll set, watching its descriptor for events
// (EPOLLIN, EPOLLOUT, ...; level-triggered unless EPOLLET is given).
func (s *Selector) AddSource(src Source, events uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return errClosed
	}
	fd := int32(src.FD())
	gen := s.nextGen
	s.nextGen++
	if s.nextGen == 0 {
		s.nextGen = 1
	}
	if err := s.ep.add(fd, events, gen); err != nil {
		return fmt.Errorf("selector: adding fd %d: %w", fd, err)
	}
	s.sources[fd] = sourceEntry{src: src, gen: gen}
	if p, ok := src.(Poller); ok {
		old := *s.pollers.Load()
		ps := append(old[:len(old):len(old)], p)
		s.pollers.Store(&ps)
	}
	return nil
}

// ModifySource changes the epoll events watched for src.
func (s *Selector) ModifySource(src Source, events uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fd := int32(src.FD())
	e, ok := s.sources[fd]
	if !ok || e.src != src {
		if s.closed.Load() {
			return errClosed
		}
		return fmt.Errorf("selector: modifying fd %d: not a source of this selector", fd)
	}
	if err := s.ep.modify(fd, events, e.gen); err != nil {
		return fmt.Errorf("selector: modifying fd %d: %w", fd, err)
	}
	return nil
}

// RemoveSource removes src from the epoll set. It must be called before
// src's descriptor is closed. Removing a source that is not there is not an
// error.
func (s *Selector) RemoveSource(src Source) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fd := int32(src.FD())
	e, ok := s.sources[fd]
	if !ok || e.src != src {
		return nil
	}
	delete(s.sources, fd)
	if p, ok := src.(Poller); ok {
		old := *s.pollers.Load()
		kept := make([]Poller, 0, len(old))
		for _, q := range old {
			if q != p {
				kept = append(kept, q)
			}
		}
		s.pollers.Store(&kept)
	}
	if err := s.ep.remove(fd); err != nil && !s.closed.Load() {
		return fmt.Errorf("selector: removing fd %d: %w", fd, err)
	}
	return nil
}

// Select waits until at least one key is selected, Wakeup is called, or the
// selector is closed, and returns the number of keys selected. The keys are
// in SelectedKeys.
func (s *Selector) Select() (int, error) { return s.doSelect(-1) }

// SelectTimeout is like Select but waits at most d; d <= 0 means do not
// wait, like SelectNow.
func (s *Selector) SelectTimeout(d time.Duration) (int, error) {
	if d <= 0 {
		return s.doSelect(0)
	}
	return s.doSelect(d)
}

// SelectNow selects the keys that are ready now, without waiting.
func (s *Selector) SelectNow() (int, error) { return s.doSelect(0) }

// SelectedKeys returns the keys selected by the last select. The slice is
// owned by the selector and valid until the next select.
func (s *Selector) SelectedKeys() []*selectionkey.Key { return s.keysOut }

// Wakeup makes a select in progress return at once, or, if none is, the
// next one. It may be called from any goroutine.
func (s *Selector) Wakeup() {
	s.woken.Store(true)
	s.wake()
}

// wake interrupts epoll_wait if the selector sleeps there.
func (s *Selector) wake() {
	if s.sleeping.Load() && !s.signaled.Swap(true) {
		s.wakeups.Add(1)
		s.ep.signal()
	}
}

// doSelect implements the selects; timeout < 0 waits without limit.
func (s *Selector) doSelect(timeout time.Duration) (int, error) {
	s.selectMu.Lock()
	defer s.selectMu.Unlock()
	if s.closed.Load() {
		return 0, errClosed
	}
	s.selects.Add(1)
	s.round++
	previous := s.selected
	s.selected = s.keysOutReset()
	for _, r := range previous {
		if r.key.Valid() {
			s.sink.Ready(r, r.ch.ReadyOps())
		}
	}
	clear(previous)
	s.spare = previous[:0]

	// Without a spin budget, a select that may wait goes straight to
	// epoll_wait with its timeout: a non-blocking epoll_wait first would
	// cost a system call per select.
	budget := s.spin.budget(len(*s.pollers.Load()) > 0)
	polled := timeout == 0 || budget > 0
	if err := s.collect(0, true, polled); err != nil {
		return 0, err
	}
	if len(s.selected) > 0 || s.woken.Swap(false) || timeout == 0 {
		// Keys ready in user space (ReadyOps, the ready queue) must not
		// starve the descriptors: look at epoll too before returning.
		if !polled {
			if err := s.collect(0, false, true); err != nil {
				return 0, err
			}
		}
		if timeout != 0 && len(s.selected) > 0 {
			s.spin.record(0) // a select that may wait did not need to
		}
		return s.finish()
	}
	start := time.Now()
	var deadline time.Time
	if timeout > 0 {
		deadline = start.Add(timeout)
	}
	if budget > 0 {
		found, err := s.spinFor(start, budget, deadline)
		if err != nil {
			return 0, err
		}
		if found {
			return s.finishWaited(start)
		}
	}
	for {
		if timeout > 0 && !time.Now().Before(deadline) {
			if waited := time.Since(start); waited > s.cfg.MaxSpin {
				s.spin.record(waited) // nothing came within the cap
			}
			return s.finish()
		}
		if !s.arm() {
			// Events raced with arming: poll again without sleeping.
			if err := s.collect(0, true, true); err != nil {
				return 0, err
			}
		} else {
			s.sleeping.Store(true)
			queued := s.readyLen.Load() > 0
			var err error
			if queued || s.woken.Load() || s.closed.Load() {
				s.sleeping.Store(false)
				err = s.collect(0, false, true)
			} else {
				s.sleeps.Add(1)
				err = s.park(deadline)
			}
			s.sleeping.Store(false)
			if err != nil {
				return 0, err
			}
		}
		if len(s.selected) > 0 || s.woken.Swap(false) || s.closed.Load() {
			return s.finishWaited(start)
		}
	}
}

// spinFor polls the sources until one reports a key, Wakeup is called, the
// selector closes, budget has passed since start, or the deadline (zero:
// none) passes; it reports whether it found something to return. See the
// package documentation on spinning for what a pass costs.
func (s *Selector) spinFor(start time.Time, budget time.Duration, deadline time.Time) (bool, error) {
	spinUntil := start.Add(budget)
	if !deadline.IsZero() && deadline.Before(spinUntil) {
		spinUntil = deadline // SelectTimeout waits at most its timeout
	}
	yielded := start
	pass := uint64(0)
	defer func() { s.spins.Add(pass % clockEvery) }()
	for {
		pass++
		pollers := *s.pollers.Load()
		epoll := len(pollers) == 0 || pass%epollEvery == 0
		if err := s.collect(0, true, epoll); err != nil {
			return false, err
		}
		if len(s.selected) > 0 || s.woken.Swap(false) || s.closed.Load() {
			return true, nil
		}
		if pass%clockEvery != 0 {
			continue
		}
		s.spins.Add(clockEvery)
		now := time.Now()
		if !now.Before(spinUntil) {
			return false, nil
		}
		if now.Sub(yielded) >= yieldEvery {
			// Let goroutines that share this thread run, and threads
			// of other processes that share this CPU: a spinning
			// selector must not starve the readers it just woke, nor
			// the peer whose message it waits for.
			runtime.Gosched()
			yieldThread()
			yielded = now
		}
	}
}

// finishWaited is finish for a select that waited since start: the wait
// teaches the adaptive spin budget, unless only Wakeup ended it.
func (s *Selector) finishWaited(start time.Time) (int, error) {
	if len(s.selected) > 0 {
		s.spin.record(time.Since(start))
	}
	return s.finish()
}

// park sleeps until epoll has events or the deadline (zero: none) passes,
// as a goroutine parked in the runtime's poller, then collects.
func (s *Selector) park(deadline time.Time) error {
	n, err := s.ep.park(deadline)
	if err != nil {
		return s.parkError(err)
	}
	if n > 0 {
		s.dispatch(n)
	}
	s.drainReady()
	return nil
}

func (s *Selector) parkError(err error) error {
	if s.closed.Load() {
		return errClosed
	}
	return fmt.Errorf("selector: waiting for events: %w", err)
}

// keysOutReset clears the returned keys and hands out the spare
// registration slice for a new round.
func (s *Selector) keysOutReset() []*Registration {
	clear(s.keysOut)
	s.keysOut = s.keysOut[:0]
	return s.spare
}

func (s *Selector) finish() (int, error) {
	for _, r := range s.selected {
		s.keysOut = append(s.keysOut, r.key)
	}
	s.selectedN.Add(uint64(len(s.selected)))
	return len(s.selected), nil
}

// arm re-enables notification on every Poller; false if one saw a race.
func (s *Selector) arm() bool {
	pollers := *s.pollers.Load()
	ok := true
	for _, p := range pollers {
		if p.Arm() {
			ok = false
		}
	}
	return ok
}

// collect gathers ready keys into the selected set: from pollers (if poll),
// from epoll (if epoll, waiting up to ms milliseconds; -1 without limit),
// and from the ready queue.
func (s *Selector) collect(ms int, poll, epoll bool) error {
	if poll {
		for _, p := range *s.pollers.Load() {
			p.Poll(&s.sink)
		}
	}
	if epoll {
		n, err := s.ep.wait(ms)
		if err != nil {
			if s.closed.Load() {
				return errClosed
			}
			return fmt.Errorf("selector: epoll_wait: %w", err)
		}
		if n > 0 {
			s.dispatch(n)
		}
	}
	s.drainReady()
	return nil
}

// dispatch hands the first n events of the last wait to their sources.
func (s *Selector) dispatch(n int) {
	srcs := s.scratch[:0]
	s.mu.Lock()
	for i := range n {
		fd, _, gen, wake := s.ep.event(i)
		if wake {
			srcs = append(srcs, nil)
			continue
		}
		e, ok := s.sources[fd]
		if !ok || e.gen != gen {
			srcs = append(srcs, nil) // removed since epoll_wait returned
			continue
		}
		srcs = append(srcs, e.src)
	}
	s.mu.Unlock()
	for i, src := range srcs {
		_, events, _, wake := s.ep.event(i)
		if src != nil {
			src.Handle(events, &s.sink)
		} else if wake {
			s.ep.clearSignal()
			s.signaled.Store(false)
		}
	}
	clear(srcs)
	s.scratch = srcs[:0]
}

// drainReady moves keys reported with Registration.Ready into the
// selected set.
func (s *Selector) drainReady() {
	if s.readyLen.Load() == 0 {
		return
	}
	s.mu.Lock()
	q := s.readyq
	s.readyq = nil
	s.readyLen.Store(0)
	s.mu.Unlock()
	for _, r := range q {
		r.queued.Store(false)
		s.sink.Ready(r, selectionkey.Ops(r.pending.Swap(0)))
	}
	if q != nil {
		clear(q)
		s.mu.Lock()
		if s.readyq == nil {
			s.readyq = q[:0] // reuse the backing array
		}
		s.mu.Unlock()
	}
}

// Keys returns the keys registered now.
func (s *Selector) Keys() []*selectionkey.Key {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]*selectionkey.Key, 0, len(s.keys))
	for k := range s.keys {
		keys = append(keys, k)
	}
	return keys
}

// Stats returns the selector's counters.
func (s *Selector) Stats() Stats {
	s.mu.Lock()
	keys, sources := len(s.keys), len(s.sources)
	s.mu.Unlock()
	return Stats{
		SpinBudget: s.spin.budget(len(*s.pollers.Load()) > 0),
		Selects:    s.selects.Load(),
		Selected:   s.selectedN.Load(),
		Spins:      s.spins.Load(),
		Sleeps:     s.sleeps.Load(),
		Wakeups:    s.wakeups.Load(),
		Keys:       keys,
		Sources:    sources,
	}
}

// Close cancels every key, makes a select in progress return, and releases
// the selector's descriptors. Later selects fail with an error that
// satisfies errors.Is(err, net.ErrClosed). Close does not close the
// channels. It is idempotent.
func (s *Selector) Close() error {
	s.mu.Lock()
	if s.closed.Swap(true) {
		s.mu.Unlock()
		return nil
	}
	keys := make([]*selectionkey.Key, 0, len(s.keys))
	for k := range s.keys {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	s.Wakeup()
	for _, k := range keys {
		k.Cancel()
	}
	s.selectMu.Lock() // wait for a select in progress to return
	defer s.selectMu.Unlock()
	// Forget the sources still added: once closed, the epoll descriptor's
	// number may be reused, and RemoveSource or ModifySource must not
	// reach whatever has it then.
	s.mu.Lock()
	var closers []Closer
	for _, e := range s.sources {
		if c, ok := e.src.(Closer); ok {
			closers = append(closers, c)
		}
	}
	clear(s.sources)
	s.pollers.Store(new([]Poller))
	err := s.ep.close()
	s.mu.Unlock()
	for _, c := range closers {
		c.SelectorClosed(s)
	}
	if err != nil {
		return fmt.Errorf("selector: close: %w", err)
	}
	return nil
}

// IsOpen reports whether the selector has not been closed.
func (s *Selector) IsOpen() bool { return !s.closed.Load() }

// A Sink collects the keys that sources find ready during a select. It is
// only valid on the selecting goroutine, inside Handle and Poll.
type Sink struct{ s *Selector }

// Selector returns the selector that is selecting.
func (k *Sink) Selector() *Selector { return k.s }

// Ready reports r's key ready for ops; operations outside the key's
// interest set, and keys that are canceled or of another selector, are
// ignored.
func (k *Sink) Ready(r *Registration, ops selectionkey.Ops) {
	s := k.s
	if r.sel != s || !r.key.Valid() {
		return
	}
	ops &= r.key.Interest()
	if ops == 0 {
		return
	}
	if r.round != s.round {
		r.round = s.round
		r.key.SetReady(ops)
		s.selected = append(s.selected, r)
		return
	}
	r.key.SetReady(r.key.Ready() | ops)
}

// A Registration is the selector's side of a key: what a channel's Bind is
// given to report readiness with.
type Registration struct {
	sel     *Selector
	key     *selectionkey.Key
	ch      Selectable
	pending atomic.Uint32 // ops reported by Ready, not yet collected
	queued  atomic.Bool   // in the selector's ready queue
	bound   atomic.Bool   // Bind succeeded
	unbound atomic.Bool   // Unbind called
	round   uint64        // last select round that selected the key; selecting goroutine only
}

// Key returns the registration's key.
func (r *Registration) Key() *selectionkey.Key { return r.key }

// Selector returns the selector the key belongs to.
func (r *Registration) Selector() *Selector { return r.sel }

// Ready reports the key ready for ops from any goroutine, for readiness no
// descriptor shows. The next select (or the one in progress) collects it.
func (r *Registration) Ready(ops selectionkey.Ops) {
	r.pending.Or(uint32(ops))
	if r.queued.Swap(true) {
		return
	}
	s := r.sel
	s.mu.Lock()
	s.readyq = append(s.readyq, r)
	s.readyLen.Store(int32(len(s.readyq)))
	s.mu.Unlock()
	s.wake()
}

func (r *Registration) unbind() {
	if !r.unbound.Swap(true) {
		r.ch.Unbind(r)
	}
}

// watcher is the Registration seen by its key.
type watcher Registration

func (w *watcher) InterestChanged(*selectionkey.Key) {
	r := (*Registration)(w)
	r.ch.InterestChanged(r)
}

func (w *watcher) Canceled(k *selectionkey.Key) {
	r := (*Registration)(w)
	s := r.sel
	s.mu.Lock()
	delete(s.keys, k)
	s.mu.Unlock()
	if r.bound.Load() {
		r.unbind()
	}
}
