package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/link"
	"github.com/rubin-go/rubin/bft/wire"
	"github.com/rubin-go/rubin/internal/leakcheck"
)

const testTick = 2 * time.Millisecond

// testCore is small-window tuning so checkpoints, view changes and state
// transfers happen within a test's time.
func testCore() bft.Config {
	return bft.Config{CheckpointInterval: 16, WatermarkWindow: 64, RequestTicks: 50, ViewChangeTicks: 50, FetchTicks: 10}
}

var warmed sync.Once

// warm creates rubin's default TCP stack (poller goroutines that live as
// long as the process) before a leak check takes its baseline.
func warm(t testing.TB) {
	warmed.Do(func() {
		ln, err := rubin.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	})
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("NODE_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testCluster struct {
	t       testing.TB
	tune    func(*ReplicaConfig) // nil: the defaults
	cl      *auth.Cluster
	core    bft.Config
	tick    time.Duration
	reg     *prometheus.Registry
	reps    []*Replica
	apps    []*kv.Store
	cancels []context.CancelFunc
	errs    []chan error
	// dataDir, if set, names replica i's data directory ("" for none).
	dataDir func(i int) string
}

// newTestCluster starts n replicas with kv apps on listeners of port 0.
func newTestCluster(t testing.TB, n, clients int, core bft.Config, tick time.Duration) *testCluster {
	t.Helper()
	return newTestClusterDirs(t, n, clients, core, tick, nil)
}

// newTestClusterDirs is newTestCluster with data directories (dataDir(i),
// "" for none).
func newTestClusterDirs(t testing.TB, n, clients int, core bft.Config, tick time.Duration, dataDir func(int) string) *testCluster {
	t.Helper()
	return newTestClusterTuned(t, n, clients, core, tick, dataDir, nil)
}

// newTestClusterTuned is newTestClusterDirs with tune applied to every
// replica's configuration.
func newTestClusterTuned(t testing.TB, n, clients int, core bft.Config, tick time.Duration, dataDir func(int) string, tune func(*ReplicaConfig)) *testCluster {
	t.Helper()
	cl, err := auth.Generate(n, clients, "127.0.0.1", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	lns := make([]net.Listener, n)
	for i := range n {
		ln, err := rubin.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		cl.Replicas[i].Addr = ln.Addr().String()
	}
	tc := &testCluster{t: t, cl: cl, core: core, tick: tick, tune: tune, reg: prometheus.NewRegistry(),
		reps: make([]*Replica, n), apps: make([]*kv.Store, n),
		cancels: make([]context.CancelFunc, n), errs: make([]chan error, n), dataDir: dataDir}
	for i := range n {
		tc.start(i, lns[i])
	}
	t.Cleanup(tc.stopAll)
	return tc
}

func (tc *testCluster) start(i int, ln net.Listener) {
	tc.t.Helper()
	app := kv.New(kv.Config{})
	var dir string
	if tc.dataDir != nil {
		dir = tc.dataDir(i)
	}
	// A restarted replica takes over its predecessor's metrics.
	cfg := ReplicaConfig{Registerer: tc.reg, DataDir: dir,
		Cluster: tc.cl, ID: bft.ReplicaID(i), Network: "tcp", App: app, Tick: tc.tick,
		Core: tc.core, Logger: testLogger(tc.t), Listener: ln,
		RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond,
	}
	if tc.tune != nil {
		tc.tune(&cfg)
	}
	r, err := NewReplica(cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	select {
	case <-r.Ready():
	case err := <-errc:
		cancel()
		tc.t.Fatalf("replica %d: %v", i, err)
	}
	tc.reps[i], tc.apps[i], tc.cancels[i], tc.errs[i] = r, app, cancel, errc
}

// stop cancels replica i's Run and waits for it to return.
func (tc *testCluster) stop(i int) {
	if tc.cancels[i] == nil {
		return
	}
	tc.cancels[i]()
	select {
	case err := <-tc.errs[i]:
		if err != nil {
			tc.t.Errorf("replica %d: Run: %v", i, err)
		}
	case <-time.After(10 * time.Second):
		tc.t.Errorf("replica %d: Run did not return", i)
	}
	tc.cancels[i] = nil
}

func (tc *testCluster) stopAll() {
	for i := range tc.reps {
		tc.stop(i)
	}
}

func (tc *testCluster) client(ctx context.Context, id int) *Client {
	tc.t.Helper()
	c, err := NewClient(ctx, ClientConfig{Registerer: tc.reg, Cluster: tc.cl, ID: bft.ClientID(id), Network: "tcp", Tick: tc.tick,
		Logger: testLogger(tc.t), RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { c.Close() })
	return c
}

// waitConverged waits until the running replicas in ids report the same
// last executed sequence number, at least min.
func (tc *testCluster) waitConverged(ids []int, minSeq uint64, timeout time.Duration) uint64 {
	tc.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		seq := tc.reps[ids[0]].Status().LastExecuted
		same := seq >= minSeq
		for _, i := range ids[1:] {
			if tc.reps[i].Status().LastExecuted != seq {
				same = false
			}
		}
		if same {
			return seq
		}
		if time.Now().After(deadline) {
			var sts []string
			for _, i := range ids {
				s := tc.reps[i].Status()
				sts = append(sts, fmt.Sprintf("%d: %+v", i, s))
			}
			tc.t.Fatalf("replicas did not converge: %v", sts)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkSameState stops every replica and compares their snapshots.
func (tc *testCluster) checkSameState() { tc.checkSameStateOf(all(len(tc.apps))) }

// waitConvergedOrAlone is waitConverged for every replica but one that is
// alone in a view change above the others' view, if one is: it timed a
// request the others executed without it and blamed the primary, which
// keeps it out of the normal case until the others change view too
// (PBFT's rule; see TestBackupCrashAndRestart). After half the timeout it
// also leaves out one replica that is behind the others with no request
// pending and no view change: it missed the pre-prepares of the last
// slots (its links were still coming up) and, with no more requests,
// nothing makes it ask for them before the next checkpoint, which PBFT
// allows. It returns the replicas that converged.
func (tc *testCluster) waitConvergedOrAlone(minSeq uint64, timeout time.Duration) []int {
	tc.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ids := all(len(tc.reps))
		var top uint64
		sts := make([]bft.Status, len(tc.reps))
		for i, r := range tc.reps {
			sts[i] = r.Status()
			top = max(top, sts[i].LastExecuted)
		}
		for i, s := range sts {
			next := sts[(i+1)%len(sts)]
			if s.ViewChanging && s.View > next.View && len(ids) == len(tc.reps) {
				ids = append(ids[:i:i], ids[i+1:]...)
			}
		}
		if len(ids) == len(tc.reps) && time.Since(start) > timeout/2 {
			for i, s := range sts {
				if s.LastExecuted < top && !s.ViewChanging && s.Pending == 0 {
					ids = append(ids[:i:i], ids[i+1:]...)
					tc.t.Logf("replica %d is behind at slot %d with nothing pending; the others executed %d", i, s.LastExecuted, top)
					break
				}
			}
		}
		seq := tc.reps[ids[0]].Status().LastExecuted
		same := seq >= minSeq
		for _, i := range ids[1:] {
			same = same && tc.reps[i].Status().LastExecuted == seq
		}
		if same {
			return ids
		}
		if time.Now().After(deadline) {
			tc.waitConverged(ids, minSeq, 0) // fails, saying how
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkSameStateOf stops the cluster and checks that replicas ids hold
// the same application state.
func (tc *testCluster) checkSameStateOf(ids []int) {
	tc.t.Helper()
	tc.stopAll()
	first := ids[0]
	want := tc.apps[first].Snapshot()
	for _, i := range ids[1:] {
		if got := tc.apps[i].Snapshot(); !bytes.Equal(got, want) {
			tc.t.Errorf("replica %d state differs from replica %d (%d keys vs %d)", i, first, tc.apps[i].Len(), tc.apps[first].Len())
		}
	}
}

func all(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}

func invoke(t testing.TB, c *Client, op []byte) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Invoke(ctx, op)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	return res
}

func TestKV(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	tc := newTestCluster(t, 4, 1, testCore(), testTick)
	ctx := context.Background()
	c := tc.client(ctx, 0)
	const keys = 40
	for i := range keys {
		res := invoke(t, c, kv.EncodePut(fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)))
		if _, found, err := kv.DecodeResult(res); err != nil || found {
			t.Fatalf("put k%d: found %v err %v", i, found, err)
		}
	}
	for i := range keys {
		res := invoke(t, c, kv.EncodeGet(fmt.Appendf(nil, "k%d", i)))
		v, found, err := kv.DecodeResult(res)
		if err != nil || !found || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("get k%d: %q %v %v", i, v, found, err)
		}
	}
	res := invoke(t, c, kv.EncodeGet([]byte("missing")))
	if _, found, err := kv.DecodeResult(res); err != nil || found {
		t.Fatalf("get missing: found %v err %v", found, err)
	}
	// A loaded machine can hold one replica back: it executes the
	// requests later, or catches up by state transfer and counts none
	// of them. So the count asks for three replicas' worth, as PBFT
	// needs 2f+1 to go on; waitConverged below checks all four.
	checkMetrics(t, tc.reg, map[string]float64{
		"rubin_bft_committed_requests_total":        3 * (2*keys + 1),
		"rubin_bft_client_completed_requests_total": 2*keys + 1,
	})
	c.Close()
	if _, err := c.Invoke(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Invoke after Close: %v, want ErrClosed", err)
	}
	tc.waitConverged(all(4), 2*keys+1, 10*time.Second)
	tc.checkSameState()
	for i, a := range tc.apps {
		if a.Len() != keys {
			t.Errorf("replica %d holds %d keys, want %d", i, a.Len(), keys)
		}
	}
}

// workload runs clients that each Invoke Add on their own counter key in a
// loop until stop is closed; it counts the completed requests.
type workload struct {
	done  atomic.Int64
	errs  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
	sums  []atomic.Int64
	first error
	mu    sync.Mutex
}

func runWorkload(tc *testCluster, clients []*Client, perClient int) *workload {
	w := &workload{stop: make(chan struct{}), sums: make([]atomic.Int64, len(clients))}
	for i, c := range clients {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			key := fmt.Appendf(nil, "ctr%d", i)
			for n := 0; perClient <= 0 || n < perClient; n++ {
				select {
				case <-w.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				res, err := c.Invoke(ctx, kv.EncodeAdd(key, 1))
				cancel()
				if err != nil {
					w.errs.Add(1)
					w.mu.Lock()
					if w.first == nil {
						w.first = err
					}
					w.mu.Unlock()
					continue
				}
				v, found, err := kv.DecodeResult(res)
				if err != nil || !found || len(v) != 8 {
					w.mu.Lock()
					if w.first == nil {
						w.first = fmt.Errorf("bad result %q %v %v", v, found, err)
					}
					w.mu.Unlock()
					continue
				}
				w.sums[i].Add(1)
				w.done.Add(1)
			}
		}()
	}
	return w
}

func (w *workload) halt() {
	close(w.stop)
	w.wg.Wait()
}

func TestConcurrentClients(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	core := testCore()
	core.CheckpointInterval, core.WatermarkWindow = 64, 256
	tc := newTestCluster(t, 4, 16, core, testTick)
	var clients []*Client
	for i := range 16 {
		clients = append(clients, tc.client(context.Background(), i))
	}
	const per = 200
	start := time.Now()
	w := runWorkload(tc, clients, per)
	w.wg.Wait()
	if w.first != nil {
		t.Fatalf("workload: %v (%d errors)", w.first, w.errs.Load())
	}
	if got := w.done.Load(); got != 16*per {
		t.Fatalf("%d requests completed, want %d", got, 16*per)
	}
	t.Logf("%d requests in %v", 16*per, time.Since(start))
	maxBatch := int64(0)
	for _, r := range tc.reps {
		maxBatch = max(maxBatch, r.m.maxBatch.Load())
	}
	if maxBatch <= 1 {
		t.Errorf("largest batch %d: no batching", maxBatch)
	}
	t.Logf("largest batch %d", maxBatch)
	for _, c := range clients {
		c.Close()
	}
	tc.waitConverged(all(4), 0, 10*time.Second)
	tc.checkSameState()
	// Every counter holds exactly its client's completed requests.
	for i := range clients {
		v, found := tc.apps[0].Lookup(fmt.Appendf(nil, "ctr%d", i))
		if !found || len(v) != 8 || int64(v[7])|int64(v[6])<<8 != per {
			t.Errorf("ctr%d = %x, want %d", i, v, per)
		}
	}
}

func TestPrimaryCrashAndRestart(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	tc := newTestCluster(t, 4, 4, testCore(), testTick)
	var clients []*Client
	for i := range 4 {
		clients = append(clients, tc.client(context.Background(), i))
	}
	w := runWorkload(tc, clients, 0)
	waitFor(t, 10*time.Second, "progress before the crash", func() bool { return w.done.Load() >= 100 })

	tc.stop(0) // the primary of view 0
	killed := w.done.Load()
	waitFor(t, 15*time.Second, "progress after the crash", func() bool { return w.done.Load() >= killed+100 })
	for i := 1; i < 4; i++ {
		if v := tc.reps[i].Status().View; v == 0 {
			t.Errorf("replica %d still in view 0", i)
		}
	}
	t.Logf("view after crash: %d", tc.reps[1].Status().View)

	// Restart with an empty app on the same address: Run listens on it.
	tc.start(0, nil)
	restarted := w.done.Load()
	waitFor(t, 20*time.Second, "restarted replica catching up", func() bool {
		return w.done.Load() >= restarted+100 && tc.reps[0].Status().LastExecuted >= tc.reps[1].Status().Stable && tc.reps[0].Status().StateTransfers > 0
	})
	w.halt()
	if w.first != nil {
		t.Logf("workload errors: %d, first: %v", w.errs.Load(), w.first)
	}
	for _, c := range clients {
		c.Close()
	}
	tc.waitConverged(all(4), 0, 20*time.Second)
	st := tc.reps[0].Status()
	t.Logf("restarted replica: %+v", st)
	tc.checkSameState()
	var sum int64
	for i := range w.sums {
		sum += w.sums[i].Load()
	}
	t.Logf("%d requests completed", sum)
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestBadPeers(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	tc := newTestCluster(t, 4, 2, testCore(), testTick)
	c := tc.client(context.Background(), 0)
	invoke(t, c, kv.EncodePut([]byte("a"), []byte("1")))

	target := tc.cl.Replicas[1].Addr
	dial := func() net.Conn {
		nc, err := rubin.Dial("tcp", target)
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	opts := link.Options{HandshakeTimeout: 2 * time.Second}

	// A wrong key: the handshake fails.
	bad := bytes.Repeat([]byte{7}, link.KeySize)
	if l, err := link.Client(dial(), link.Replica(0), link.Replica(1), bad, opts); err == nil {
		l.Close()
		t.Error("handshake with a wrong key succeeded")
	}
	// A replica that should accept, dialing: rejected.
	if l, err := link.Client(dial(), link.Replica(3), link.Replica(1), tc.cl.LinkKey(3, 1), opts); err == nil {
		l.Close()
		t.Error("replica 3 dialing replica 1 was accepted")
	}
	// Garbage after a valid handshake, as client 1: the link is closed.
	l, err := link.Client(dial(), link.ClientPeer(1), link.Replica(1), tc.cl.ClientLinkKey(1, 1), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Send([]byte{0xff, 0x01, 0x02}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Recv(); err == nil {
		t.Error("link survived a garbage frame")
	}
	l.Close()
	// A well-formed message no client may send (a forged commit): dropped
	// by the core, the link stays.
	l, err = link.Client(dial(), link.ClientPeer(1), link.Replica(1), tc.cl.ClientLinkKey(1, 1), opts)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := l.Send(wire.Append(nil, &bft.Commit{View: 0, Seq: 1, Replica: 0})); err != nil {
			t.Fatal(err)
		}
		// A request with a bad authenticator.
		if err := l.Send(wire.Append(nil, &bft.Request{Client: 1, Timestamp: 1, Op: []byte("x"), Auth: []byte("junk")})); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "forged messages counted", func() bool {
		return counterValue(tc.reps[1].m.dropped.m[reasonInvalid])+counterValue(tc.reps[1].m.dropped.m[reasonForged]) >= 10
	})
	l.Close()

	for i := range 20 {
		invoke(t, c, kv.EncodePut(fmt.Appendf(nil, "k%d", i), []byte("v")))
	}
	if n := counterValue(tc.reps[1].m.dropped.m[reasonDecode]); n != 1 {
		t.Errorf("decode drops = %v, want 1", n)
	}
	if n := counterValue(tc.reps[1].m.dropped.m[reasonHandshake]); n < 2 {
		t.Errorf("handshake rejections = %v, want 2", n)
	}
	c.Close()
	tc.waitConverged(all(4), 21, 10*time.Second)
	tc.checkSameState()
}

// checkMetrics gathers reg and checks that each named metric family
// exists and sums to at least the given value over its series.
func checkMetrics(t *testing.T, reg *prometheus.Registry, want map[string]float64) {
	t.Helper()
	// Replicas may lag a little behind the client's f+1 replies.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch {
				case m.Counter != nil:
					got[mf.GetName()] += m.Counter.GetValue()
				case m.Gauge != nil:
					got[mf.GetName()] += m.Gauge.GetValue()
				case m.Histogram != nil:
					got[mf.GetName()] += float64(m.Histogram.GetSampleCount())
				}
			}
		}
		ok := true
		for name, v := range want {
			if got[name] < v {
				ok = false
				if time.Now().After(deadline) {
					t.Errorf("metric %s = %v, want at least %v", name, got[name], v)
				}
			}
		}
		for _, name := range []string{"rubin_bft_batch_size", "rubin_bft_messages_sent_total", "rubin_bft_messages_received_total",
			"rubin_bft_view", "rubin_bft_checkpoint_lag", "rubin_bft_stable_checkpoint_seq", "rubin_bft_client_latency_seconds"} {
			if _, found := got[name]; !found {
				t.Errorf("metric %s missing", name)
				return
			}
		}
		if ok || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBackupCrashAndRestart(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	tc := newTestCluster(t, 4, 2, testCore(), testTick)
	clients := []*Client{tc.client(context.Background(), 0), tc.client(context.Background(), 1)}
	w := runWorkload(tc, clients, 0)
	waitFor(t, 10*time.Second, "progress", func() bool { return w.done.Load() >= 50 })
	// Replica 3 is only ever dialed (the lower IDs dial it): they must
	// redial it after its restart.
	tc.stop(3)
	at := w.done.Load()
	waitFor(t, 10*time.Second, "progress without replica 3", func() bool { return w.done.Load() >= at+100 })
	tc.start(3, nil)
	at = w.done.Load()
	waitFor(t, 20*time.Second, "replica 3 catching up", func() bool {
		return w.done.Load() >= at+100 && tc.reps[3].Status().LastExecuted >= tc.reps[0].Status().Stable && tc.reps[3].Status().StateTransfers > 0
	})
	w.halt()
	for _, c := range clients {
		c.Close()
	}
	if s := tc.reps[3].Status(); s.ViewChanging && s.View > tc.reps[0].Status().View {
		// While it was catching up, replica 3 could not execute the
		// requests it held and blamed the primary: a view change alone,
		// which keeps it out of the normal case until the others change
		// view too (PBFT's rule; docs/bft.md, fault model). It still
		// follows the stable checkpoints, which the wait above checked.
		t.Logf("replica 3 is alone in a view change to %d; checking the other three", s.View)
		tc.waitConverged([]int{0, 1, 2}, 0, 20*time.Second)
		tc.checkSameStateOf([]int{0, 1, 2})
		return
	}
	tc.waitConverged(all(4), 0, 20*time.Second)
	if v := tc.reps[0].Status().View; v != 0 {
		t.Logf("view changed to %d", v)
	}
	tc.checkSameState()
}

func TestInvokeCancelAndRestartAll(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	tc := newTestCluster(t, 4, 1, testCore(), testTick)
	c := tc.client(context.Background(), 0)
	invoke(t, c, kv.EncodePut([]byte("a"), []byte("1")))
	tc.stopAll()

	// No replica: Invoke gives up with its context, and a concurrent one
	// waits its turn and gives up too.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	errc := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Invoke(ctx, kv.EncodeGet([]byte("a")))
			errc <- err
		}()
	}
	for range 2 {
		if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Invoke with no replica: %v, want DeadlineExceeded", err)
		}
	}

	// A fresh cluster on the same addresses: the client redials, and its
	// abandoned request does not block the next one.
	for i := range tc.reps {
		tc.start(i, nil)
	}
	res := invoke(t, c, kv.EncodePut([]byte("b"), []byte("2")))
	if _, found, err := kv.DecodeResult(res); err != nil || found {
		t.Fatalf("put b: found %v err %v", found, err)
	}

	// Run fails when it cannot listen.
	r, err := NewReplica(ReplicaConfig{Cluster: tc.cl, ID: 2, App: kv.New(kv.Config{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err == nil {
		t.Error("Run on an address in use succeeded")
	}
	c.Close()
	// A replica may miss the put's pre-prepare while the fresh cluster's
	// links come up, and start a view change alone.
	ids := tc.waitConvergedOrAlone(1, 10*time.Second)
	if len(ids) < 4 {
		t.Logf("replicas %v converged; the other is alone in a view change", ids)
	}
	tc.checkSameStateOf(ids)
}

// One Client multiplexes many identities over one link per replica: its
// Invokes run concurrently, each under its own identity, replies reach
// the right identity's core, and every replica routes them without the
// client having to retransmit.
func TestMultiplexedClient(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	const ids = 8
	core := testCore()
	core.CheckpointInterval, core.WatermarkWindow = 64, 256
	tc := newTestCluster(t, 4, ids+1, core, testTick)
	var idl []bft.ClientID
	for i := range ids {
		idl = append(idl, bft.ClientID(i+1))
	}
	c, err := NewClient(context.Background(), ClientConfig{Registerer: tc.reg, Cluster: tc.cl, IDs: idl, Network: "tcp",
		Tick: testTick, RetransmitTicks: 1000, Logger: testLogger(t), RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 10*time.Second, "client links", func() bool { return c.linksUp.Load() == 4 })
	// 2*ids workers: half of them wait for a free identity at any time.
	workers := make([]*Client, 2*ids)
	for i := range workers {
		workers[i] = c
	}
	const per = 100
	w := runWorkload(tc, workers, per)
	w.wg.Wait()
	if w.first != nil {
		t.Fatalf("workload: %v (%d errors)", w.first, w.errs.Load())
	}
	if got := w.done.Load(); got != 2*ids*per {
		t.Fatalf("%d requests completed, want %d", got, 2*ids*per)
	}
	// With RetransmitTicks far beyond the test, every request completed
	// with replies routed on the first try.
	if n := testutil.ToFloat64(c.m.completed); n != 2*ids*per {
		t.Errorf("%v requests completed, want %d", n, 2*ids*per)
	}
	if n := testutil.ToFloat64(c.m.retransmissions); n != 0 {
		t.Errorf("%v retransmissions, want none", n)
	}
	// The links are those of the first identity only.
	for i, r := range tc.reps {
		for _, p := range r.linkPeers() {
			if p.Client && p.ID != uint64(idl[0]) {
				t.Errorf("replica %d has a link for %v", i, p)
			}
		}
	}

	// Cancelling abandons only the cancelled call's identity; after all
	// replicas are gone, every identity's call gives up with its context.
	tc.stopAll()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	errc := make(chan error, 2*ids)
	for range 2 * ids {
		go func() {
			_, err := c.Invoke(ctx, kv.EncodeGet([]byte("a")))
			errc <- err
		}()
	}
	for range 2 * ids {
		if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Invoke with no replica: %v, want DeadlineExceeded", err)
		}
	}
	for i := range tc.reps {
		tc.start(i, nil)
	}
	w = runWorkload(tc, workers, 5)
	w.wg.Wait()
	if w.first != nil {
		t.Fatalf("workload after restart: %v (%d errors)", w.first, w.errs.Load())
	}
	c.Close()
	if _, err := c.Invoke(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Invoke after Close: %v, want ErrClosed", err)
	}
	// A replica that came back after the others may have timed the
	// workload's first requests before its peers reached it.
	tc.checkSameStateOf(tc.waitConvergedOrAlone(0, 10*time.Second))
}
