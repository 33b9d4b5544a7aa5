//go:build linux

package selector_test

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubin-go/rubin/internal/leakcheck"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// patience bounds every wait; longer means a hang.
const patience = 10 * time.Second

// fdChan is a channel over a real descriptor, an eventfd or the read end
// of a pipe, that a test makes readable. It is its own event source, and
// it can also be ready in user space (userReady), as a channel with
// messages already received is.
type fdChan struct {
	t        testing.TB
	fd       int
	wfd      int // where signal writes: fd for an eventfd, the pipe's write end
	blocking atomic.Bool
	closed   atomic.Bool

	userReady atomic.Uint32 // what ReadyOps reports

	mu     sync.Mutex
	reg    *selector.Registration
	events uint32 // epoll events asked for

	binds, unbinds, changes atomic.Int32
	bindErr                 error
}

var (
	_ selector.Selectable = (*fdChan)(nil)
	_ selector.Source     = (*fdChan)(nil)
)

func newEventfdChan(t testing.TB) *fdChan {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	c := &fdChan{t: t, fd: fd, wfd: fd}
	t.Cleanup(func() { c.Close() })
	return c
}

func newPipeChan(t testing.TB) *fdChan {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	c := &fdChan{t: t, fd: p[0], wfd: p[1]}
	t.Cleanup(func() { c.Close() })
	return c
}

// signal makes the descriptor readable.
func (c *fdChan) signal() {
	var one = [8]byte{1}
	if _, err := unix.Write(c.wfd, one[:]); err != nil {
		c.t.Errorf("signal: %v", err)
	}
}

// drain makes the descriptor not readable.
func (c *fdChan) drain() {
	var buf [64]byte
	for {
		if _, err := unix.Read(c.fd, buf[:]); err != nil {
			return
		}
	}
}

func (c *fdChan) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.mu.Lock()
	r := c.reg
	c.mu.Unlock()
	if r != nil {
		r.Key().Cancel()
	}
	unix.Close(c.fd)
	if c.wfd != c.fd {
		unix.Close(c.wfd)
	}
	return nil
}

func (c *fdChan) LocalAddr() net.Addr { return nil }
func (c *fdChan) SetBlocking(b bool) error {
	c.blocking.Store(b)
	return nil
}
func (c *fdChan) IsBlocking() bool                { return c.blocking.Load() }
func (c *fdChan) ValidOps() selectionkey.Ops      { return selectionkey.OpRead | selectionkey.OpWrite }
func (c *fdChan) ReadyOps() selectionkey.Ops      { return selectionkey.Ops(c.userReady.Load()) }
func (c *fdChan) FD() int                         { return c.fd }
func (c *fdChan) Unbind(r *selector.Registration) { c.unbind(r) }
func (c *fdChan) SelectorHooks() selector.Hooks   { return c }

func (c *fdChan) Bind(r *selector.Registration) error {
	c.binds.Add(1)
	if c.bindErr != nil {
		return c.bindErr
	}
	c.mu.Lock()
	c.reg = r
	err := c.apply(r)
	c.mu.Unlock()
	if ops := c.ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
	return err
}

func (c *fdChan) InterestChanged(r *selector.Registration) {
	c.changes.Add(1)
	c.mu.Lock()
	if err := c.apply(r); err != nil {
		c.t.Errorf("InterestChanged: %v", err)
	}
	c.mu.Unlock()
	if ops := c.ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
}

// apply brings the epoll events in line with the interest set; mu held.
func (c *fdChan) apply(r *selector.Registration) error {
	var ev uint32
	if r.Key().Interest()&selectionkey.OpRead != 0 {
		ev = unix.EPOLLIN
	}
	var err error
	switch {
	case ev == c.events:
	case ev == 0:
		err = r.Selector().RemoveSource(c)
	case c.events == 0:
		err = r.Selector().AddSource(c, ev)
	default:
		err = r.Selector().ModifySource(c, ev)
	}
	if err == nil {
		c.events = ev
	}
	return err
}

func (c *fdChan) unbind(r *selector.Registration) {
	c.unbinds.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events != 0 {
		if err := r.Selector().RemoveSource(c); err != nil {
			c.t.Errorf("RemoveSource: %v", err)
		}
		c.events = 0
	}
	c.reg = nil
}

func (c *fdChan) Handle(events uint32, sink *selector.Sink) {
	c.mu.Lock()
	r := c.reg
	c.mu.Unlock()
	if r != nil && events&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		sink.Ready(r, selectionkey.OpRead)
	}
}

func (c *fdChan) registration() *selector.Registration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reg
}

func newSelector(t testing.TB, cfg selector.Config) *selector.Selector {
	t.Helper()
	s, err := selector.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func register(t testing.TB, s *selector.Selector, c selector.Selectable, ops selectionkey.Ops) *selectionkey.Key {
	t.Helper()
	c.SetBlocking(false)
	k, err := s.Register(c, ops, c)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return k
}

type selectResult struct {
	n    int
	keys []*selectionkey.Key
	err  error
	took time.Duration
}

// selectAsync runs select on another goroutine and waits until it sleeps
// (or has returned).
func selectAsync(t testing.TB, s *selector.Selector, sel func() (int, error)) <-chan selectResult {
	t.Helper()
	sleeps := s.Stats().Sleeps
	done := make(chan selectResult, 1)
	var returned atomic.Bool
	go func() {
		start := time.Now()
		n, err := sel()
		r := selectResult{n: n, err: err, took: time.Since(start)}
		if err == nil {
			r.keys = append(r.keys, s.SelectedKeys()...)
		}
		returned.Store(true)
		done <- r
	}()
	waitFor(t, "the select to sleep", func() bool { return s.Stats().Sleeps > sleeps || returned.Load() })
	return done
}

func await(t testing.TB, done <-chan selectResult, what string) selectResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(patience):
		t.Fatalf("%s: select did not return within %v", what, patience)
		return selectResult{}
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// selectOnly checks that a select returned exactly the keys want, each
// ready for ops.
func selectOnly(t testing.TB, n int, err error, got []*selectionkey.Key, ops selectionkey.Ops, want ...*selectionkey.Key) {
	t.Helper()
	if err != nil {
		t.Fatalf("select: %v", err)
	}
	if n != len(got) {
		t.Errorf("select returned %d, but SelectedKeys has %d keys", n, len(got))
	}
	if len(got) != len(want) {
		t.Fatalf("selected %d keys; want %d", len(got), len(want))
	}
	for _, w := range want {
		found := false
		for _, k := range got {
			if k == w {
				found = true
				if k.Ready() != ops {
					t.Errorf("key ready for %v; want %v", k.Ready(), ops)
				}
			}
		}
		if !found {
			t.Errorf("key %v not selected", w.Attachment())
		}
	}
}

func TestSelectNowWithNothingReady(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	c := newEventfdChan(t)
	register(t, s, c, selectionkey.OpRead)
	for _, sel := range []func() (int, error){s.SelectNow, func() (int, error) { return s.SelectTimeout(0) }, func() (int, error) { return s.SelectTimeout(-time.Second) }} {
		start := time.Now()
		n, err := sel()
		if err != nil || n != 0 || len(s.SelectedKeys()) != 0 {
			t.Errorf("select with nothing ready = %d, %v, keys %v; want 0, nil, none", n, err, s.SelectedKeys())
		}
		if d := time.Since(start); d > patience/2 {
			t.Errorf("non-blocking select took %v", d)
		}
	}
	if got := s.Stats().Sleeps; got != 0 {
		t.Errorf("non-blocking selects slept %d times", got)
	}
}

func TestSelectWakesOnDescriptor(t *testing.T) {
	for _, kind := range []struct {
		name string
		make func(testing.TB) *fdChan
	}{{"eventfd", newEventfdChan}, {"pipe", newPipeChan}} {
		t.Run(kind.name, func(t *testing.T) {
			leakcheck.Check(t)
			s := newSelector(t, selector.Config{})
			a, b := kind.make(t), kind.make(t)
			ka := register(t, s, a, selectionkey.OpRead)
			register(t, s, b, selectionkey.OpRead)
			done := selectAsync(t, s, s.Select)
			a.signal()
			r := await(t, done, "a descriptor became readable")
			selectOnly(t, r.n, r.err, r.keys, selectionkey.OpRead, ka)
			if ka.Attachment() != a {
				t.Errorf("attachment = %v; want the channel", ka.Attachment())
			}
		})
	}
}

func TestSelectTimeout(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	register(t, s, newEventfdChan(t), selectionkey.OpRead)
	const d = 50 * time.Millisecond
	start := time.Now()
	n, err := s.SelectTimeout(d)
	took := time.Since(start)
	if err != nil || n != 0 {
		t.Fatalf("SelectTimeout with nothing ready = %d, %v", n, err)
	}
	if took < d || took > patience/2 {
		t.Errorf("SelectTimeout(%v) returned after %v", d, took)
	}
	c := newEventfdChan(t)
	k := register(t, s, c, selectionkey.OpRead)
	c.signal()
	n, err = s.SelectTimeout(patience)
	selectOnly(t, n, err, s.SelectedKeys(), selectionkey.OpRead, k)
}

func TestWakeupWhileSelecting(t *testing.T) {
	for _, sel := range []struct {
		name string
		fn   func(*selector.Selector) func() (int, error)
	}{
		{"Select", func(s *selector.Selector) func() (int, error) { return s.Select }},
		{"SelectTimeout", func(s *selector.Selector) func() (int, error) {
			return func() (int, error) { return s.SelectTimeout(patience) }
		}},
	} {
		t.Run(sel.name, func(t *testing.T) {
			leakcheck.Check(t)
			s := newSelector(t, selector.Config{})
			register(t, s, newEventfdChan(t), selectionkey.OpRead)
			done := selectAsync(t, s, sel.fn(s))
			go s.Wakeup()
			r := await(t, done, "Wakeup")
			if r.err != nil || r.n != 0 {
				t.Errorf("woken select = %d, %v; want 0, nil", r.n, r.err)
			}
			if r.took > patience/2 {
				t.Errorf("woken select took %v", r.took)
			}
			if s.Stats().Wakeups == 0 {
				t.Errorf("Stats().Wakeups = 0 after waking a sleeping select")
			}
		})
	}
}

func TestWakeupBeforeSelect(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	register(t, s, newEventfdChan(t), selectionkey.OpRead)
	s.Wakeup()
	s.Wakeup() // not counted twice
	done := make(chan selectResult, 1)
	go func() {
		n, err := s.Select()
		done <- selectResult{n: n, err: err}
	}()
	if r := await(t, done, "a Wakeup before Select"); r.err != nil || r.n != 0 {
		t.Fatalf("Select after Wakeup = %d, %v", r.n, r.err)
	}
	// The wake-up is used up: the next select waits.
	const d = 30 * time.Millisecond
	start := time.Now()
	if n, err := s.SelectTimeout(d); n != 0 || err != nil || time.Since(start) < d {
		t.Errorf("second select after one Wakeup = %d, %v after %v; want a %v timeout", n, err, time.Since(start), d)
	}
}

func TestWakeupClearedBySelectNow(t *testing.T) {
	s := newSelector(t, selector.Config{})
	s.Wakeup()
	if _, err := s.SelectNow(); err != nil {
		t.Fatal(err)
	}
	const d = 30 * time.Millisecond
	start := time.Now()
	if _, err := s.SelectTimeout(d); err != nil || time.Since(start) < d {
		t.Errorf("select after Wakeup and SelectNow returned after %v, %v; want a %v timeout", time.Since(start), err, d)
	}
}

func TestConcurrentWakeups(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	c := newEventfdChan(t)
	k := register(t, s, c, selectionkey.OpRead)
	const wakers, each = 8, 500
	var wg sync.WaitGroup
	var running atomic.Int32
	running.Store(wakers)
	for range wakers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer running.Add(-1)
			for range each {
				s.Wakeup()
			}
		}()
	}
	deadline := time.Now().Add(patience)
	for running.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("wakers still running")
		}
		if _, err := s.SelectTimeout(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	s.SelectNow() // use up a pending wake-up
	// The wake-up machinery still works: a sleeping select is woken by one
	// Wakeup, and by a descriptor.
	done := selectAsync(t, s, s.Select)
	s.Wakeup()
	if r := await(t, done, "Wakeup after a storm of wake-ups"); r.err != nil {
		t.Fatal(r.err)
	}
	done = selectAsync(t, s, s.Select)
	c.signal()
	r := await(t, done, "a descriptor after a storm of wake-ups")
	selectOnly(t, r.n, r.err, r.keys, selectionkey.OpRead, k)
}

// A channel with no descriptor, ready only in user space, reported with
// Registration.Ready from another goroutine.
func TestReadyFromAnotherGoroutine(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	c := newEventfdChan(t)
	k := register(t, s, c, 0) // no interest in OpRead: not in epoll
	if err := k.SetInterest(selectionkey.OpWrite); err != nil {
		t.Fatal(err)
	}
	done := selectAsync(t, s, s.Select)
	go func() {
		c.userReady.Store(uint32(selectionkey.OpWrite))
		c.registration().Ready(selectionkey.OpWrite)
	}()
	r := await(t, done, "Registration.Ready")
	selectOnly(t, r.n, r.err, r.keys, selectionkey.OpWrite, k)
}

// Operations outside the interest set are not reported.
func TestReadyOutsideInterest(t *testing.T) {
	s := newSelector(t, selector.Config{})
	c := newEventfdChan(t)
	k := register(t, s, c, selectionkey.OpRead)
	c.registration().Ready(selectionkey.OpWrite)
	if n, err := s.SelectNow(); n != 0 || err != nil {
		t.Errorf("SelectNow after Ready(OpWrite) on a key interested in OpRead = %d, %v; want 0", n, err)
	}
	c.userReady.Store(uint32(selectionkey.OpRead | selectionkey.OpWrite))
	c.registration().Ready(selectionkey.OpRead | selectionkey.OpWrite)
	n, err := s.SelectNow()
	selectOnly(t, n, err, s.SelectedKeys(), selectionkey.OpRead, k)
}

func TestClose(t *testing.T) {
	leakcheck.Check(t)
	s, err := selector.New(selector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := newEventfdChan(t)
	k := register(t, s, c, selectionkey.OpRead)
	if !s.IsOpen() {
		t.Error("IsOpen() = false before Close")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Close(); err != nil {
			t.Errorf("second Close = %v; want nil", err)
		}
	}
	if s.IsOpen() {
		t.Error("IsOpen() = true after Close")
	}
	for name, sel := range map[string]func() (int, error){
		"Select":        s.Select,
		"SelectNow":     s.SelectNow,
		"SelectTimeout": func() (int, error) { return s.SelectTimeout(time.Second) },
	} {
		if _, err := sel(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s after Close = %v; want net.ErrClosed", name, err)
		}
	}
	if k.Valid() {
		t.Error("key valid after its selector closed")
	}
	if got := c.unbinds.Load(); got != 1 {
		t.Errorf("Unbind called %d times; want 1", got)
	}
	c2 := newEventfdChan(t)
	if _, err := s.Register(c2, selectionkey.OpRead, nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Register after Close = %v; want net.ErrClosed", err)
	}
	if err := s.AddSource(c2, unix.EPOLLIN); !errors.Is(err, net.ErrClosed) {
		t.Errorf("AddSource after Close = %v; want net.ErrClosed", err)
	}
	if got := c2.binds.Load(); got != 0 {
		t.Errorf("Bind called on Register after Close")
	}
	s.Wakeup() // harmless
}

func TestCloseWhileSelecting(t *testing.T) {
	leakcheck.Check(t)
	s, err := selector.New(selector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := newEventfdChan(t)
	k := register(t, s, c, selectionkey.OpRead)
	done := selectAsync(t, s, s.Select)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := await(t, done, "Close")
	if r.err != nil && !errors.Is(r.err, net.ErrClosed) {
		t.Errorf("select interrupted by Close = %v; want nil or net.ErrClosed", r.err)
	}
	if k.Valid() {
		t.Error("key valid after Close")
	}
}

// Readiness is level-triggered: a key still ready is selected again, from
// epoll for descriptors and from ReadyOps for user space.
func TestLevelTriggered(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	fd := newEventfdChan(t)
	user := newEventfdChan(t)
	kfd := register(t, s, fd, selectionkey.OpRead)
	kuser := register(t, s, user, selectionkey.OpWrite)
	fd.signal()
	user.userReady.Store(uint32(selectionkey.OpWrite))
	user.registration().Ready(selectionkey.OpWrite) // reported once
	for i := range 3 {
		n, err := s.SelectNow()
		if err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Fatalf("select %d of keys still ready = %d; want 2", i, n)
		}
		for _, k := range s.SelectedKeys() {
			want := selectionkey.OpRead
			if k == kuser {
				want = selectionkey.OpWrite
			}
			if k.Ready() != want {
				t.Errorf("select %d: key ready for %v; want %v", i, k.Ready(), want)
			}
		}
	}
	fd.drain()
	n, err := s.SelectNow()
	selectOnly(t, n, err, s.SelectedKeys(), selectionkey.OpWrite, kuser)
	user.userReady.Store(0)
	if n, err := s.SelectNow(); n != 0 || err != nil {
		t.Errorf("select with nothing ready any more = %d, %v", n, err)
	}
	_ = kfd
}

// Interest set changes take effect for a select in progress.
func TestInterestChangeDuringSelect(t *testing.T) {
	leakcheck.Check(t)
	t.Run("added", func(t *testing.T) {
		s := newSelector(t, selector.Config{})
		c := newEventfdChan(t)
		k := register(t, s, c, 0)
		c.signal()
		done := selectAsync(t, s, func() (int, error) { return s.SelectTimeout(patience) })
		if err := k.AddInterest(selectionkey.OpRead); err != nil {
			t.Fatal(err)
		}
		r := await(t, done, "AddInterest(OpRead) on a readable descriptor")
		selectOnly(t, r.n, r.err, r.keys, selectionkey.OpRead, k)
	})
	t.Run("removed", func(t *testing.T) {
		s := newSelector(t, selector.Config{})
		c := newEventfdChan(t)
		k := register(t, s, c, selectionkey.OpRead)
		const d = 100 * time.Millisecond
		done := selectAsync(t, s, func() (int, error) { return s.SelectTimeout(d) })
		if err := k.RemoveInterest(selectionkey.OpRead); err != nil {
			t.Fatal(err)
		}
		c.signal()
		r := await(t, done, "timeout")
		if r.err != nil || r.n != 0 {
			t.Errorf("select after RemoveInterest(OpRead) = %d keys, %v; want none", r.n, r.err)
		}
	})
}

func TestSpinBudget(t *testing.T) {
	leakcheck.Check(t)
	t.Run("spins", func(t *testing.T) {
		s := newSelector(t, selector.Config{SpinBudget: 5 * time.Millisecond})
		register(t, s, newEventfdChan(t), selectionkey.OpRead)
		if _, err := s.SelectTimeout(20 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		st := s.Stats()
		if st.Spins == 0 {
			t.Errorf("Stats().Spins = 0 after a select with a spin budget")
		}
		if st.Sleeps != 1 {
			t.Errorf("Stats().Sleeps = %d after a select that spun and then slept; want 1", st.Sleeps)
		}
	})
	t.Run("finds events while spinning", func(t *testing.T) {
		s := newSelector(t, selector.Config{SpinBudget: patience})
		c := newEventfdChan(t)
		k := register(t, s, c, selectionkey.OpRead)
		go func() {
			for deadline := time.Now().Add(patience); s.Stats().Spins == 0 && time.Now().Before(deadline); {
				time.Sleep(100 * time.Microsecond)
			}
			c.signal()
		}()
		n, err := s.Select()
		selectOnly(t, n, err, s.SelectedKeys(), selectionkey.OpRead, k)
		if st := s.Stats(); st.Sleeps != 0 {
			t.Errorf("select slept %d times within its spin budget", st.Sleeps)
		}
	})
	t.Run("within the timeout", func(t *testing.T) {
		s := newSelector(t, selector.Config{SpinBudget: patience})
		const d = 20 * time.Millisecond
		start := time.Now()
		if _, err := s.SelectTimeout(d); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > patience/4 {
			t.Errorf("SelectTimeout(%v) with a spin budget of %v took %v", d, patience, took)
		}
	})
	t.Run("zero", func(t *testing.T) {
		s := newSelector(t, selector.Config{})
		s.SelectTimeout(5 * time.Millisecond)
		if got := s.Stats().Spins; got != 0 {
			t.Errorf("Stats().Spins = %d without a spin budget", got)
		}
	})
}

// TestAdaptiveSpin checks the default budget: a selector with a poller
// starts out spinning up to the cap, stops spinning once its waits are
// mostly longer than the cap, and spins again once events come quickly.
func TestAdaptiveSpin(t *testing.T) {
	leakcheck.Check(t)
	const limit = 200 * time.Microsecond
	src := newPollSource(t)
	s := newSelector(t, selector.Config{MaxSpin: limit})
	if got := s.Stats().SpinBudget; got != 0 {
		t.Errorf("SpinBudget %v without a poller; want 0", got)
	}
	c := &polledChan{fdChan: fdChan{t: t, fd: -1}, src: src}
	k := register(t, s, c, selectionkey.OpRead)
	if got := s.Stats().SpinBudget; got != limit {
		t.Errorf("SpinBudget %v with a poller and no history; want the cap %v", got, limit)
	}
	for range 16 {
		if _, err := s.SelectTimeout(2 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Stats().SpinBudget; got != 0 {
		t.Errorf("SpinBudget %v after 16 selects that waited past the cap; want 0", got)
	}
	spins := s.Stats().Spins
	if _, err := s.SelectTimeout(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Spins; got != spins {
		t.Errorf("a select spun %d rounds with a budget of 0", got-spins)
	}
	// Events that are there at once are waits of zero: spinning pays again.
	for range 16 {
		src.mu.Lock()
		src.pending = true
		src.mu.Unlock()
		n, err := s.SelectTimeout(patience)
		selectOnly(t, n, err, s.SelectedKeys(), selectionkey.OpRead, k)
	}
	if got := s.Stats().SpinBudget; got <= 0 || got > limit {
		t.Errorf("SpinBudget %v after 16 quick events; want within (0, %v]", got, limit)
	}
}

// pollSource is a shared event source with a descriptor nobody writes: it
// finds events only by polling, like an RDMA completion queue whose
// notification is re-armed before sleeping.
type pollSource struct {
	fd      int
	mu      sync.Mutex
	regs    []*selector.Registration
	pending bool // an event waits to be polled
	raceAt  int  // Arm call that reports a race, having queued an event
	arms    int
	polls   int
}

// newPollSource returns a pollSource on an eventfd, closed when the test
// ends.
func newPollSource(t testing.TB) *pollSource {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &pollSource{fd: fd}
}

func (p *pollSource) FD() int                                   { return p.fd }
func (p *pollSource) Handle(events uint32, sink *selector.Sink) {}

func (p *pollSource) Poll(sink *selector.Sink) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.polls++
	if !p.pending {
		return false
	}
	p.pending = false
	for _, r := range p.regs {
		sink.Ready(r, selectionkey.OpRead)
	}
	return true
}

func (p *pollSource) Arm() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arms++
	if p.arms == p.raceAt {
		p.pending = true // arrived before notification was enabled
		return true
	}
	return false
}

// polledChan is a channel served by a shared pollSource.
type polledChan struct {
	fdChan
	src *pollSource
}

func (c *polledChan) Bind(r *selector.Registration) error {
	c.src.mu.Lock()
	c.src.regs = append(c.src.regs, r)
	first := len(c.src.regs) == 1
	c.src.mu.Unlock()
	if first {
		return r.Selector().AddSource(c.src, unix.EPOLLIN)
	}
	return nil
}

func (c *polledChan) SelectorHooks() selector.Hooks            { return c }
func (c *polledChan) InterestChanged(r *selector.Registration) {}
func (c *polledChan) Unbind(r *selector.Registration) {
	c.unbinds.Add(1)
	r.Selector().RemoveSource(c.src)
}

func TestPollerArmRace(t *testing.T) {
	leakcheck.Check(t)
	src := newPollSource(t)
	src.raceAt = 1
	s := newSelector(t, selector.Config{})
	c := &polledChan{fdChan: fdChan{t: t, fd: -1}, src: src}
	k := register(t, s, c, selectionkey.OpRead)
	done := make(chan selectResult, 1)
	go func() {
		n, err := s.SelectTimeout(patience)
		done <- selectResult{n: n, err: err, keys: append([]*selectionkey.Key(nil), s.SelectedKeys()...)}
	}()
	r := await(t, done, "an event that raced with Arm")
	selectOnly(t, r.n, r.err, r.keys, selectionkey.OpRead, k)
	src.mu.Lock()
	arms, polls := src.arms, src.polls
	src.mu.Unlock()
	if arms != 1 || polls < 2 {
		t.Errorf("Arm called %d times, Poll %d; want Arm once and Poll again after it", arms, polls)
	}
	if st := s.Stats(); st.Sleeps != 0 {
		t.Errorf("select slept %d times although Arm reported a race", st.Sleeps)
	}

	// An event found by Poll before sleeping is selected at once.
	src.mu.Lock()
	src.pending = true
	src.mu.Unlock()
	n, err := s.SelectTimeout(patience)
	selectOnly(t, n, err, s.SelectedKeys(), selectionkey.OpRead, k)

	// A removed poller is not polled any more.
	k.Cancel()
	src.mu.Lock()
	polls = src.polls
	src.pending = true
	src.mu.Unlock()
	if n, err := s.SelectNow(); n != 0 || err != nil {
		t.Errorf("SelectNow after the poller was removed = %d, %v", n, err)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.polls != polls {
		t.Errorf("removed poller polled %d more times", src.polls-polls)
	}
}

// TestNudgeRearms: a Nudge makes a sleeping select arm its pollers once
// more and sleep again, without returning; a Nudge that came before the
// select armed is answered by that arm and costs no second one.
func TestNudgeRearms(t *testing.T) {
	leakcheck.Check(t)
	src := newPollSource(t)
	s := newSelector(t, selector.Config{SpinBudget: selector.NoSpin})
	register(t, s, &polledChan{fdChan: fdChan{t: t, fd: -1}, src: src}, selectionkey.OpRead)
	arms := func() int {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.arms
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(patience); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: arms %d, sleeps %d", what, arms(), s.Stats().Sleeps)
			}
		}
	}
	s.Nudge()
	done := make(chan selectResult, 1)
	go func() {
		n, err := s.SelectTimeout(patience)
		done <- selectResult{n: n, err: err}
	}()
	waitFor("the select sleeps", func() bool { return s.Stats().Sleeps == 1 })
	if n := arms(); n != 1 {
		t.Errorf("armed %d times before sleeping; want once, the earlier Nudge answered by it", n)
	}
	s.Nudge()
	waitFor("the nudged select arms again and sleeps", func() bool { return arms() == 2 && s.Stats().Sleeps == 2 })
	select {
	case r := <-done:
		t.Fatalf("a Nudge made the select return %d, %v", r.n, r.err)
	default:
	}
	s.Wakeup()
	if r := await(t, done, "Wakeup"); r.n != 0 || r.err != nil {
		t.Errorf("select after Wakeup = %d, %v; want 0, nil", r.n, r.err)
	}
}

func TestCanceledKeysNotSelected(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	a, b, u := newEventfdChan(t), newEventfdChan(t), newEventfdChan(t)
	ka := register(t, s, a, selectionkey.OpRead)
	kb := register(t, s, b, selectionkey.OpRead)
	ku := register(t, s, u, selectionkey.OpWrite)
	a.signal()
	b.signal()
	u.userReady.Store(uint32(selectionkey.OpWrite))
	u.registration().Ready(selectionkey.OpWrite) // queued, then canceled
	ka.Cancel()
	ka.Cancel()
	ku.Cancel()
	n, err := s.SelectNow()
	selectOnly(t, n, err, s.SelectedKeys(), selectionkey.OpRead, kb)
	// Canceled after being selected: not selected again.
	kb.Cancel()
	if n, err := s.SelectNow(); n != 0 || err != nil {
		t.Errorf("SelectNow with every key canceled = %d, %v", n, err)
	}
	for _, c := range []*fdChan{a, b, u} {
		if got := c.unbinds.Load(); got != 1 {
			t.Errorf("Unbind called %d times; want 1", got)
		}
	}
	if keys := s.Keys(); len(keys) != 0 {
		t.Errorf("Keys() = %v after every key was canceled", keys)
	}
	if err := ka.SetInterest(selectionkey.OpRead); !errors.Is(err, selectionkey.ErrCanceled) {
		t.Errorf("SetInterest on a canceled key = %v; want ErrCanceled", err)
	}
	if st := s.Stats(); st.Keys != 0 || st.Sources != 0 {
		t.Errorf("Stats() = %+v; want no keys and no sources", st)
	}
}

func TestRegister(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	c := newEventfdChan(t)
	c.SetBlocking(true)
	if _, err := s.Register(c, selectionkey.OpRead, nil); !errors.Is(err, selector.ErrBlocking) {
		t.Errorf("Register of a blocking channel = %v; want ErrBlocking", err)
	}
	c.SetBlocking(false)
	var invalid *selectionkey.InvalidOpsError
	if _, err := s.Register(c, selectionkey.OpAccept, nil); !errors.As(err, &invalid) || invalid.Ops != selectionkey.OpAccept {
		t.Errorf("Register for an operation the channel lacks = %v; want an InvalidOpsError for accept", err)
	}
	if got := c.binds.Load(); got != 0 {
		t.Errorf("Bind called %d times by refused Registers", got)
	}
	failing := newEventfdChan(t)
	failing.bindErr = errors.New("no room")
	if _, err := s.Register(failing, selectionkey.OpRead, nil); !errors.Is(err, failing.bindErr) {
		t.Errorf("Register with a failing Bind = %v; want its error", err)
	}
	if keys := s.Keys(); len(keys) != 0 {
		t.Errorf("Keys() = %v after refused Registers", keys)
	}
	k := register(t, s, c, selectionkey.OpRead|selectionkey.OpWrite)
	if k.Channel() != c || k.Interest() != selectionkey.OpRead|selectionkey.OpWrite || k.ValidOps() != c.ValidOps() || !k.Valid() {
		t.Errorf("new key: channel %v, interest %v, valid ops %v, valid %v", k.Channel(), k.Interest(), k.ValidOps(), k.Valid())
	}
	if keys := s.Keys(); len(keys) != 1 || keys[0] != k {
		t.Errorf("Keys() = %v; want the new key", keys)
	}
	if st := s.Stats(); st.Keys != 1 || st.Sources != 1 {
		t.Errorf("Stats() = %+v; want one key, one source", st)
	}
}

// A key that is always ready in user space must not starve descriptors:
// selects that return at once because of it still look at epoll.
func TestUserSpaceReadinessDoesNotStarveDescriptors(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	busy := newEventfdChan(t)
	kbusy := register(t, s, busy, selectionkey.OpWrite)
	busy.userReady.Store(uint32(selectionkey.OpWrite))
	busy.registration().Ready(selectionkey.OpWrite)
	fd := newEventfdChan(t)
	kfd := register(t, s, fd, selectionkey.OpRead)
	for _, sel := range []func() (int, error){s.Select, func() (int, error) { return s.SelectTimeout(patience) }} {
		fd.signal()
		found := false
		for range 3 {
			if _, err := sel(); err != nil {
				t.Fatal(err)
			}
			for _, k := range s.SelectedKeys() {
				found = found || k == kfd
			}
		}
		if !found {
			t.Error("a readable descriptor was not selected in 3 selects beside a key always ready in user space")
		}
		fd.drain()
	}
	_ = kbusy
}

func TestStats(t *testing.T) {
	s := newSelector(t, selector.Config{})
	a, b := newEventfdChan(t), newEventfdChan(t)
	register(t, s, a, selectionkey.OpRead)
	register(t, s, b, selectionkey.OpRead)
	a.signal()
	b.signal()
	s.SelectNow()
	s.SelectNow()
	b.drain()
	s.SelectNow()
	st := s.Stats()
	want := selector.Stats{Selects: 3, Selected: 5, Keys: 2, Sources: 2}
	if st != want {
		t.Errorf("Stats() = %+v; want %+v", st, want)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []selector.Config{{SpinBudget: -2}, {MaxSpin: -1}, {MaxEvents: -1}} {
		if s, err := selector.New(cfg); err == nil {
			s.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// More ready descriptors than MaxEvents are all selected, over selects.
func TestMaxEvents(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{MaxEvents: 2})
	keys := make(map[*selectionkey.Key]bool)
	for range 5 {
		c := newEventfdChan(t)
		keys[register(t, s, c, selectionkey.OpRead)] = false
		c.signal()
	}
	for range 5 {
		if _, err := s.SelectNow(); err != nil {
			t.Fatal(err)
		}
		for _, k := range s.SelectedKeys() {
			keys[k] = true
		}
	}
	for k, seen := range keys {
		if !seen {
			t.Errorf("key %v never selected", k.Attachment())
		}
	}
}

// A channel registered, already ready, while another goroutine sleeps in
// a select, is selected by that select.
func TestRegisterDuringSelect(t *testing.T) {
	leakcheck.Check(t)
	for _, kind := range []string{"descriptor", "user space"} {
		t.Run(kind, func(t *testing.T) {
			s := newSelector(t, selector.Config{})
			register(t, s, newEventfdChan(t), selectionkey.OpRead)
			done := selectAsync(t, s, func() (int, error) { return s.SelectTimeout(patience) })
			c := newEventfdChan(t)
			ops := selectionkey.OpRead
			if kind == "descriptor" {
				c.signal()
			} else {
				ops = selectionkey.OpWrite
				c.userReady.Store(uint32(ops))
			}
			k := register(t, s, c, ops)
			r := await(t, done, "Register of a ready channel")
			selectOnly(t, r.n, r.err, r.keys, ops, k)
		})
	}
}

// Keys are canceled and channels closed by other goroutines while one
// selects in a loop; under -race this checks the selector's locking.
func TestCancelRacesWithSelect(t *testing.T) {
	leakcheck.Check(t)
	s := newSelector(t, selector.Config{})
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := s.SelectTimeout(time.Millisecond); err != nil {
				done <- err
				return
			}
			for _, k := range s.SelectedKeys() {
				k.Channel().(*fdChan).drain()
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				c := newEventfdChan(t)
				k := register(t, s, c, selectionkey.OpRead)
				c.signal()
				c.registration().Ready(selectionkey.OpRead)
				switch (g + i) % 3 {
				case 0:
					k.Cancel()
				case 1:
					c.Close()
				default:
					k.SetInterest(0)
					k.Cancel()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Keys != 0 || st.Sources != 0 {
		t.Errorf("Stats() after every key was canceled = %+v", st)
	}
}
