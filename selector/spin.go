package selector

import (
	"runtime"
	"sync/atomic"
	"time"
)

// NoSpin as Config.SpinBudget makes every select sleep at once.
const NoSpin time.Duration = -1

// DefaultMaxSpin is the default cap of the adaptive spin budget. It is
// large because a sleeping thread that a completion wakes can cost
// hundreds of microseconds (emulated machines, deep CPU idle states):
// a wait shorter than that is cheaper spun than slept. And a spinner
// learns from round trips that include the peer's wake-ups: when both
// sides sleep, the round trip grows by two of them, and a cap below it
// keeps both sleeping. Over Soft-RoCE a 4 KiB echo through the net.Conn
// face takes about 1.1 ms there and back when both sides spin, and a
// 16 KiB channel echo 1.8-2.5 ms; a 1 ms cap held both at 3.5-5.4 ms.
const DefaultMaxSpin = 4 * time.Millisecond

// How the spin loop spends its passes: a pass polls every Poller (a
// completion queue poll needs no system call) and the ready queue (an
// atomic load); epoll, the clock and the scheduler are consulted only
// every so many passes, so that spinning costs no system call per pass.
const (
	// epollEvery is how many passes go by between two non-blocking
	// epoll_waits, for sources that only a descriptor reports (sockets,
	// event channels), when there are pollers to poll in between.
	epollEvery = 16
	// clockEvery is how many passes go by between two clock readings.
	clockEvery = 8
	// yieldEvery is how long a spin goes before it lets the goroutines
	// that share its thread run (runtime.Gosched), and other processes'
	// threads that share its CPU (sched_yield). Yielding on every pass
	// wakes the runtime's idle threads over and over, each of which polls
	// the runtime's own network poller: a system call storm.
	yieldEvery = 50 * time.Microsecond
)

// spinHistory is how many recent waits the adaptive budget learns from.
const spinHistory = 16

// probeEvery is how many waits in a row an adaptive spinner sleeps
// through before it spins one to the cap (a probe).
const probeEvery = 16

// A spinner decides how long a select polls before it sleeps. With a
// fixed budget it always answers that budget. Adaptively, it learns from
// the recent waits (the time from the moment a select starts waiting until
// it finds a key): if most of them were shorter than the cap, it spins a
// little longer than the longest of those; otherwise spinning would mostly
// be wasted and it does not spin.
//
// A wait that sleeps lasts as long as the wake-up, which can itself exceed
// the cap (a millisecond on an emulated machine), so once the budget falls
// to zero, the waits it measures no longer say whether spinning would pay:
// without help it would stay at zero for good. So after probeEvery waits
// in a row without spinning, one wait spins to the cap; if the event comes
// within it, the spinner forgets what it measured while sleeping and
// learns afresh.
//
// Only the selecting goroutine calls budget and record; Stats reads
// current.
type spinner struct {
	fixed   time.Duration // > 0: always this; < 0: never spin
	cap     time.Duration // the adaptive budget's bound
	waits   [spinHistory]time.Duration
	n       int  // waits recorded, up to spinHistory
	next    int  // ring index of the next wait
	dry     int  // waits in a row recorded with a budget of zero
	probing bool // the current wait spins to the cap as a probe
	current atomic.Int64
}

func newSpinner(fixed, cap time.Duration) *spinner {
	sp := &spinner{fixed: fixed, cap: cap}
	sp.current.Store(int64(sp.compute()))
	return sp
}

// adaptive reports whether the budget is learned.
func (sp *spinner) adaptive() bool { return sp.fixed == 0 }

// budget is how long the next select spins. An adaptive spinner spins only
// for selectors with pollers: epoll alone is as cheap to sleep in as to
// poll, and a socket's wake-up goes through the runtime's poller anyway.
func (sp *spinner) budget(pollers bool) time.Duration {
	if sp.adaptive() && !pollers {
		return 0
	}
	return time.Duration(sp.current.Load())
}

// record learns one wait.
func (sp *spinner) record(w time.Duration) {
	if !sp.adaptive() {
		return
	}
	if sp.probing {
		sp.probing = false
		if w <= sp.cap {
			sp.n, sp.next = 0, 0 // the probe paid: learn afresh
		}
	}
	sp.waits[sp.next] = w
	sp.next = (sp.next + 1) % spinHistory
	sp.n = min(sp.n+1, spinHistory)
	b := sp.compute()
	if b > 0 {
		sp.dry = 0
	} else if sp.dry++; sp.dry >= probeEvery {
		sp.dry = 0
		sp.probing = true
		b = sp.cap
	}
	sp.current.Store(int64(b))
}

// compute derives the budget from the recorded waits: until it has seen a
// few, the cap; then half again the longest wait under the cap if at least
// half the waits were under it, else none.
func (sp *spinner) compute() time.Duration {
	switch {
	case sp.fixed < 0:
		return 0
	case sp.fixed > 0:
		return sp.fixed
	case sp.n < spinHistory/4:
		return sp.cap
	}
	short := 0
	var longest time.Duration
	for _, w := range sp.waits[:sp.n] {
		if w <= sp.cap {
			short++
			longest = max(longest, w)
		}
	}
	if 2*short < sp.n {
		return 0
	}
	return min(sp.cap, longest+longest/2+minSpin)
}

// minSpin is added to every adaptive budget, so that a run of very short
// waits does not make it too short to catch the next one.
const minSpin = 5 * time.Microsecond

// A Spinner decides, as a selector does for its selects, how long a caller
// that polls for something should spin before it sleeps: adaptively, from
// the waits it records, up to a cap. It is for code that polls outside a
// selector, such as package rubin's net.Conn face, whose Read polls the
// completion queue itself before it waits for its poller. A Spinner is
// not safe for concurrent use.
type Spinner struct{ sp *spinner }

// NewSpinner returns a Spinner with a fixed budget (fixed > 0), one that
// never spins (NoSpin), or, with fixed zero, one that adapts up to max
// (DefaultMaxSpin if zero).
func NewSpinner(fixed, max time.Duration) Spinner {
	if max <= 0 {
		max = DefaultMaxSpin
	}
	return Spinner{newSpinner(fixed, max)}
}

// Budget is how long the next wait should spin.
func (s Spinner) Budget() time.Duration { return s.sp.budget(true) }

// Record learns one wait: the time from when the caller began waiting
// until what it waited for came, whether it spun or slept.
func (s Spinner) Record(wait time.Duration) { s.sp.record(wait) }

// Spin calls ready until it reports true or the budget, counted from
// start, has passed, paced as a selector's spin is: the clock is read
// every few passes, and every yieldEvery the goroutines and threads that
// share the CPU get to run. It reports whether ready did.
func (s Spinner) Spin(start time.Time, ready func() bool) bool {
	until := start.Add(s.Budget())
	yielded := start
	for pass := 1; ; pass++ {
		if ready() {
			return true
		}
		if pass%clockEvery != 0 {
			continue
		}
		now := time.Now()
		if !now.Before(until) || s.sp.adaptive() && cpusBusy(now) {
			return false
		}
		if now.Sub(yielded) >= yieldEvery {
			runtime.Gosched()
			yieldThread()
			yielded = now
		}
	}
}
