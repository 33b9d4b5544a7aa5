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
// mostly longer than that, spinning one wait in sixteen to the cap to
// find out whether that is still so; Stats reports the budget in force.
//
// Any goroutine can also report a key ready with Registration.Ready, for
// readiness that no descriptor shows, such as a message already buffered in
// user space; it wakes a sleeping selector.
//
// # Channels
//
// A channel that can be registered implements Selectable: Register calls the
// Bind method of its Hooks with the new key's Registration, and the channel
// hooks the key into a source of the selector (its own, or a shared one it
// finds or creates). The Hooks are told when the key's interest set changes
// and when the key is canceled.
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

// The Selector: its configuration, opening and closing it, the selects and
// Wakeup, and what it reports of itself. Sources are added in source.go,
// channels registered in registration.go, and the select loop is in loop.go.

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/selectionkey"
)

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
	// Rearms counts the times arming found a poller busy or events
	// already there, so the select polled again instead of sleeping.
	Rearms uint64
	// Ceded counts adaptive spins cut short because runnable tasks were
	// waiting for CPUs (pressure.go): the select slept instead.
	Ceded   uint64
	Wakeups uint64 // times a sleeping selector was woken by Wakeup or Ready
	Keys    int    // keys registered now
	Sources int    // event sources now
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
	nudged   atomic.Bool // Nudge called since the select last began to arm its pollers
	signaled atomic.Bool // wakefd written and not yet drained

	selects, selectedN, spins, sleeps, rearms, ceded, wakeups atomic.Uint64
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

// Nudge makes a select that sleeps, or is about to, poll and arm its
// Pollers once more; one that is polling carries on and one that returns
// keys returns them as before. A Poller that has work for its next Poll
// or Arm which no completion will bring (such as a message to send) calls
// it. It may be called from any goroutine.
func (s *Selector) Nudge() {
	s.nudged.Store(true)
	s.wake()
}

// wake interrupts epoll_wait if the selector sleeps there.
func (s *Selector) wake() {
	if s.sleeping.Load() && !s.signaled.Swap(true) {
		s.wakeups.Add(1)
		s.ep.signal()
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
		Rearms:     s.rearms.Load(),
		Ceded:      s.ceded.Load(),
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
