package selector

// The select loop: collecting ready keys from pollers, epoll and the ready
// queue, spinning, sleeping, and handing epoll's events to their sources.

import (
	"context"
	"fmt"
	"runtime"
	"runtime/trace"
	"time"

	"github.com/rubin-go/rubin/selectionkey"
)

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
	ceded := s.ceded.Load()
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
		// Arming polls once more, so a Nudge from before this point is
		// answered by it; only one from after it must keep us awake.
		s.nudged.Store(false)
		if !s.arm() {
			// Events raced with arming: poll again without sleeping.
			s.rearms.Add(1)
			if err := s.collect(0, true, true); err != nil {
				return 0, err
			}
		} else {
			s.sleeping.Store(true)
			queued := s.readyLen.Load() > 0
			var err error
			if queued || s.woken.Load() || s.closed.Load() || s.nudged.Swap(false) {
				s.sleeping.Store(false)
				err = s.collect(0, false, true)
			} else {
				s.sleeps.Add(1)
				if trace.IsEnabled() {
					traceSleep(start, budget, s.ceded.Load() != ceded)
				}
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
		if s.spin.adaptive() && cpusBusy(now) {
			s.ceded.Add(1) // other tasks wait for CPUs: sleep instead
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

// traceSleep logs, in the execution trace being taken, that a select that
// began waiting at start goes to sleep after spinning with budget (cut
// short if ceded), so that a trace viewer can tell a sleep after the spin
// budget from other waits.
func traceSleep(start time.Time, budget time.Duration, ceded bool) {
	trace.Log(context.Background(), "selector sleep", fmt.Sprintf("budget_us=%.1f waited_us=%.1f ceded=%t",
		float64(budget)/1e3, float64(time.Since(start))/1e3, ceded))
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
