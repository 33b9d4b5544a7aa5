package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/internal/leakcheck"
)

// windowClient is a Client of identities ids with the given window.
func (tc *testCluster) windowClient(ids []bft.ClientID, window int) *Client {
	tc.t.Helper()
	c, err := NewClient(context.Background(), ClientConfig{Registerer: tc.reg, Cluster: tc.cl, IDs: ids, Window: window,
		Network: "tcp", Tick: tc.tick, Logger: testLogger(tc.t), RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { c.Close() })
	return c
}

// counted is one increment of the counter "ctr": the counter's value
// after it executed (so its place in the execution order), and the
// identity and timestamp the Client gave its request.
type counted struct {
	value uint64
	id    bft.ClientID
	ts    uint64
}

// counter runs increments of "ctr" through a Client and records them.
type counter struct {
	c    *Client
	mu   sync.Mutex
	got  []counted
	errs []error
	wg   sync.WaitGroup
}

func (k *counter) add(ctx context.Context) {
	r := k.c.invoke(ctx, kv.EncodeAdd([]byte("ctr"), 1), false)
	k.mu.Lock()
	defer k.mu.Unlock()
	if r.err != nil {
		k.errs = append(k.errs, r.err)
		return
	}
	v, found, err := kv.DecodeResult(r.res)
	if err != nil || !found || len(v) != 8 {
		k.errs = append(k.errs, fmt.Errorf("bad result %x %v %v", v, found, err))
		return
	}
	k.got = append(k.got, counted{value: binary.BigEndian.Uint64(v), id: r.id, ts: r.ts})
}

// run starts workers goroutines that each add per times.
func (k *counter) run(workers, per int) {
	for range workers {
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			for range per {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				k.add(ctx)
				cancel()
			}
		}()
	}
}

// check waits for the workers and checks what they got: no errors,
// want results, every value once, and each identity's requests executed
// in its timestamp order (the order the Client proposed them). It
// returns the highest value.
func (k *counter) check(t *testing.T, want int) uint64 {
	t.Helper()
	k.wg.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.errs) > 0 {
		t.Fatalf("%d invokes failed, first: %v", len(k.errs), k.errs[0])
	}
	if len(k.got) != want {
		t.Fatalf("%d results, want %d", len(k.got), want)
	}
	seen := make(map[uint64]bool)
	var top uint64
	for _, g := range k.got {
		if seen[g.value] {
			t.Fatalf("value %d returned twice", g.value)
		}
		seen[g.value] = true
		top = max(top, g.value)
	}
	got := slices.Clone(k.got)
	slices.SortFunc(got, func(a, b counted) int {
		if a.id != b.id {
			return int(a.id) - int(b.id)
		}
		return int(a.ts - b.ts)
	})
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if a.id == b.id && (a.ts == b.ts || a.value > b.value) {
			t.Fatalf("identity %d: timestamp %d got %d, timestamp %d got %d", a.id, a.ts, a.value, b.ts, b.value)
		}
	}
	k.got = k.got[:0]
	return top
}

func readCounter(t *testing.T, c *Client) uint64 {
	t.Helper()
	v, found, err := kv.DecodeResult(invoke(t, c, kv.EncodeGet([]byte("ctr"))))
	if err != nil || !found || len(v) != 8 {
		t.Fatalf("get ctr: %x %v %v", v, found, err)
	}
	return binary.BigEndian.Uint64(v)
}

// One identity keeps a window of requests outstanding: the replicas hold
// all of them at once while they cannot commit, calls beyond the window
// wait, a call abandoned inside the window leaves the others be, and
// every result is the right one, executed once, in the order the Client
// proposed.
func TestClientWindow(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	const window = 8
	tc := newTestCluster(t, 4, 1, testCore(), testTick)
	c := tc.windowClient([]bft.ClientID{0}, window)
	k := &counter{c: c}
	k.run(1, 1) // links up, the counter exists
	k.check(t, 1)

	// Without replicas 2 and 3 nothing commits: the requests wait at the
	// replicas, all of the window's.
	tc.stop(2)
	tc.stop(3)
	k.run(window-1, 1)
	waitFor(t, 10*time.Second, "a window of requests held", func() bool {
		return tc.reps[0].Status().Pending >= window-1 || tc.reps[1].Status().Pending >= window-1
	})
	// The window's last place: abandoned, while the others stay.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, err := c.Invoke(ctx, kv.EncodeAdd([]byte("ctr"), 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Invoke without a quorum: %v, want DeadlineExceeded", err)
	}
	cancel()
	k.run(3*window, 1) // they wait for room
	tc.start(2, nil)
	tc.start(3, nil)
	top := k.check(t, 4*window-1)
	// The abandoned increment executed too, once.
	if got := readCounter(t, c); got != top || got != 4*window+1 {
		t.Errorf("ctr = %d, highest result %d, want %d", got, top, 4*window+1)
	}

	k.run(4*window, 25)
	k.check(t, 4*window*25)
	c.Close()
	// A replica may have blamed the primary for requests it held while
	// it caught up, and changed view alone.
	tc.checkSameStateOf(tc.waitConvergedOrAlone(1, 20*time.Second))
}

// Two identities with windows keep going across a crash of the primary:
// every call completes with its own result, each executed once, in the
// order of its identity's timestamps.
func TestClientWindowViewChange(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	core := testCore()
	core.CheckpointInterval, core.WatermarkWindow = 32, 128
	tc := newTestCluster(t, 4, 2, core, testTick)
	c := tc.windowClient([]bft.ClientID{0, 1}, 6)
	k := &counter{c: c}
	var done atomic.Int64
	stop := make(chan struct{})
	for range 24 {
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				k.add(ctx)
				cancel()
				done.Add(1)
			}
		}()
	}
	waitFor(t, 10*time.Second, "progress before the crash", func() bool { return done.Load() >= 200 })
	tc.stop(0)
	crashed := done.Load()
	waitFor(t, 20*time.Second, "progress after the crash", func() bool { return done.Load() >= crashed+200 })
	close(stop)
	k.wg.Wait()
	for i := 1; i < 4; i++ {
		if v := tc.reps[i].Status().View; v == 0 {
			t.Errorf("replica %d still in view 0", i)
		}
	}
	n := int(done.Load())
	if top := k.check(t, n); top != uint64(n) {
		t.Errorf("highest value %d, want %d", top, n)
	}
	c.Close()
	tc.waitConverged([]int{1, 2, 3}, 1, 20*time.Second)
	tc.checkSameStateOf([]int{1, 2, 3})
}

// liar is a Byzantine replica's application: it executes every op, so
// its state stays right, but answers each with a result of its own that
// still decodes (a counter one higher, a value found).
type liar struct {
	*kv.Store
	lies atomic.Int64
}

func (l *liar) lie(res []byte) []byte {
	l.lies.Add(1)
	v, found, err := kv.DecodeResult(res)
	if err != nil || !found || len(v) != 8 {
		return kv.EncodeGet([]byte("lie")) // any bytes but the right ones
	}
	w := binary.BigEndian.AppendUint64(nil, binary.BigEndian.Uint64(v)+1)
	out := bytes.Clone(res)
	copy(out[len(out)-8:], w)
	return out
}

func (l *liar) Execute(ctx bft.ExecContext, op []byte) []byte {
	return l.lie(l.Store.Execute(ctx, op))
}

func (l *liar) Query(ctx bft.QueryContext, op []byte) []byte {
	return l.lie(l.Store.Query(ctx, op))
}

// The primary lies in every result, executed and read: windows of
// concurrent increments and reads still get the right results only.
func TestClientWindowByzantine(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	lying := &liar{}
	tc := newTestClusterTuned(t, 4, 1, testCore(), testTick, nil, func(rc *ReplicaConfig) {
		if rc.ID == 0 {
			lying.Store = rc.App.(*kv.Store)
			rc.App = lying
		}
	})
	c := tc.windowClient([]bft.ClientID{0}, 8)
	k := &counter{c: c}
	k.run(16, 20)
	// Reads alongside: a read never sees less than the reader's own
	// last increment, nor more than all of them.
	var rwg sync.WaitGroup
	rerr := make(chan error, 4)
	for range 4 {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			var last uint64
			for range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				r := c.invoke(ctx, kv.EncodeAdd([]byte("ctr"), 1), false)
				if r.err == nil {
					var v []byte
					if v, _, r.err = kv.DecodeResult(r.res); r.err == nil {
						last = binary.BigEndian.Uint64(v)
					}
				}
				if r.err != nil {
					cancel()
					rerr <- r.err
					return
				}
				res, err := c.InvokeRead(ctx, kv.EncodeGet([]byte("ctr")))
				cancel()
				v, found, derr := kv.DecodeResult(res)
				if err != nil || derr != nil || !found || len(v) != 8 {
					rerr <- fmt.Errorf("read: %x %v %v %v", v, found, err, derr)
					return
				}
				if got := binary.BigEndian.Uint64(v); got < last || got > 16*20+4*20 {
					rerr <- fmt.Errorf("read %d after own increment to %d", got, last)
					return
				}
			}
		}()
	}
	k.check(t, 16*20)
	rwg.Wait()
	close(rerr)
	for err := range rerr {
		t.Fatal(err)
	}
	if got := readCounter(t, c); got != 16*20+4*20 {
		t.Errorf("ctr = %d, want %d", got, 16*20+4*20)
	}
	if lying.lies.Load() == 0 {
		t.Fatal("the liar never answered")
	}
	c.Close()
	tc.waitConverged(all(4), 1, 20*time.Second)
	tc.checkSameState()
}

// Closing a Client answers every call: those outstanding in its windows,
// those waiting for room, and those made after Close, each with its
// result or ErrClosed; none hangs and no goroutine stays.
func TestClientWindowClose(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	tc := newTestCluster(t, 4, 2, testCore(), testTick)
	c := tc.windowClient([]bft.ClientID{0, 1}, 4)
	invoke(t, c, kv.EncodePut([]byte("a"), []byte("1")))
	// Without a quorum the calls stay outstanding or wait for room.
	tc.stop(2)
	tc.stop(3)
	const calls = 32
	errc := make(chan error, calls)
	for i := range calls {
		go func() {
			op := kv.EncodeAdd([]byte("ctr"), 1)
			if i%4 == 0 {
				_, err := c.InvokeRead(context.Background(), kv.EncodeGet([]byte("a")))
				errc <- err
				return
			}
			_, err := c.Invoke(context.Background(), op)
			errc <- err
		}()
	}
	// Both identities busy: a write fills its identity's window, a read
	// takes its identity alone (bft.Client.ProposeRead), and without a
	// quorum it ends up ordered; which comes first is up to the
	// scheduler.
	waitFor(t, 10*time.Second, "both identities busy", func() bool {
		return tc.reps[0].Status().Pending+tc.reps[0].Status().Reads >= 2 || tc.reps[1].Status().Pending+tc.reps[1].Status().Reads >= 2
	})
	c.Close()
	for range calls {
		select {
		case err := <-errc:
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("Invoke across Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an Invoke did not return after Close")
		}
	}
	if _, err := c.InvokeRead(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("InvokeRead after Close: %v, want ErrClosed", err)
	}
}

// Calls that one goroutine Starts execute in the order it started them,
// even beyond the window, and each Wait returns its own call's result.
func TestClientStartOrder(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	tc := newTestCluster(t, 4, 1, testCore(), testTick)
	c := tc.windowClient([]bft.ClientID{0}, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var calls []*Call
	for range 40 {
		calls = append(calls, c.Start(ctx, kv.EncodeAdd([]byte("ctr"), 1)))
	}
	for i, call := range calls {
		res, err := call.Wait()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		v, found, err := kv.DecodeResult(res)
		if err != nil || !found || len(v) != 8 {
			t.Fatalf("call %d: bad result %x %v %v", i, v, found, err)
		}
		if got := binary.BigEndian.Uint64(v); got != uint64(i+1) {
			t.Fatalf("call %d executed as increment %d: Start's calls execute in the order started", i, got)
		}
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if _, err := c.Start(done, kv.EncodeAdd([]byte("ctr"), 1)).Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with an ended context: %v, want Canceled", err)
	}
	c.Close()
	if _, err := c.Start(ctx, kv.EncodeAdd([]byte("ctr"), 1)).Wait(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start on a closed client: %v, want ErrClosed", err)
	}
}
