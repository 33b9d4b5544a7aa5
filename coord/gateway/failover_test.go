package gateway_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/coordtest"
)

// replicaFaults are the faults a nemesis switches on and off in one
// replica: a pause, lies, and a clock that swings. Each is off until
// switched on.
type replicaFaults struct {
	// The gate holds the replica's Execute and Query while paused, and
	// with them its event loop, which calls them: the replica stops as a
	// process stopped by a signal would, once it has something to run.
	gate
	lying atomic.Bool  // every answer to a client is a coordtest.Liar's
	lies  atomic.Int64 // answers falsified
	skew  atomic.Pointer[func() time.Time]
}

// clock is the replica's clock (bft.Config.Clock): the real one, or the
// swinging one while skew holds it.
func (f *replicaFaults) clock() time.Time {
	if c := f.skew.Load(); c != nil {
		return (*c)()
	}
	return time.Now()
}

func (f *replicaFaults) setClock(c func() time.Time) {
	if c == nil {
		f.skew.Store(nil)
	} else {
		f.skew.Store(&c)
	}
}

// app is app under the faults.
func (f *replicaFaults) app(app *coord.App) bft.App {
	return faultyApp{Liar: coordtest.Liar{App: app, OnLie: func() { f.lies.Add(1) }}, f: f}
}

type faultyApp struct {
	coordtest.Liar
	f *replicaFaults
}

func (a faultyApp) Execute(ctx bft.ExecContext, op []byte) []byte {
	a.f.wait(context.Background())
	if a.f.lying.Load() {
		return a.Liar.Execute(ctx, op)
	}
	return a.App.Execute(ctx, op)
}

func (a faultyApp) Query(ctx bft.QueryContext, op []byte) []byte {
	a.f.wait(context.Background())
	if a.f.lying.Load() {
		return a.Liar.Query(ctx, op)
	}
	return a.App.Query(ctx, op)
}

// status returns replica i's status.
func (tc *testCluster) status(i int) bft.Status {
	tc.mu.Lock()
	r := tc.reps[i]
	tc.mu.Unlock()
	return r.Status()
}

// latest returns the status of the replica, other than except, that
// executed furthest: one that is neither crashed nor paused, nor behind.
func (tc *testCluster) latest(except int) bft.Status {
	var st bft.Status
	for i := range tc.reps {
		if s := tc.status(i); i != except && (s.LastExecuted > st.LastExecuted || s.LastExecuted == st.LastExecuted && s.View > st.View) {
			st = s
		}
	}
	return st
}

// primary returns the primary as the replica that executed furthest
// knows it.
func (tc *testCluster) primary() int { return int(tc.latest(-1).Primary) }

// catchUp waits until replica i executed as far as the others had when
// it was called.
func (tc *testCluster) catchUp(i int) {
	tc.t.Helper()
	var target uint64
	for j := range tc.reps {
		if j != i {
			target = max(target, tc.status(j).LastExecuted)
		}
	}
	waitFor(tc.t, 20*time.Second, fmt.Sprintf("replica %d to catch up", i), func() bool { return tc.status(i).LastExecuted >= target })
}

// established returns how often the session was established through
// each server.
func (s *trackedSession) established() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.servers)
}

// TestFailoverLinearizable runs four durable replicas (f=1) and two
// gateways, each with its own share of the client identities, and
// ZooKeeper sessions of 4s, each given both gateways' addresses: five
// clients do what TestLinearizable's do, and one is idle, holding an
// ephemeral node. A nemesis, with never more than one replica faulty at
// a time:
//
//   - crashes the primary and kills gateway 0 with it, whose clients
//     fail over to gateway 1; restarts the replica from its data
//     directory, and the gateway once its claim lapsed;
//   - pauses the next primary for 2s (a view change);
//   - has a backup lie in every answer (coordtest.Liar), and kills
//     gateway 1 meanwhile: every client then fails over to gateway 0,
//     and gateway 1 restarts;
//   - gives the primary a clock that swings 1.9s either side of the real
//     time for 6s, which the agreed time follows.
//
// The history must be linearizable; no session may expire or change,
// each must have been established through both gateways, and the idle
// one's ephemeral node must stay; the watch every session left on
// /truth, which never exists, must not fire (the Liar invents its
// deletion).
func TestFailoverLinearizable(t *testing.T) {
	const (
		clients = 5
		timeout = 4 * time.Second
		swing   = 1900 * time.Millisecond
	)
	faults := make([]*replicaFaults, 4)
	clocks := make([]func() time.Time, len(faults))
	for i := range faults {
		faults[i] = &replicaFaults{}
		clocks[i] = faults[i].clock
	}
	tc := newClusterOver(t, "tcp", "127.0.0.1", func(i int, app *coord.App) bft.App { return faults[i].app(app) },
		tempDirs(t, len(faults)), func(tc *testCluster) {
			tc.gateways, tc.clocks = 2, clocks
		})
	t.Cleanup(func() { // before the cluster stops
		for _, f := range faults {
			f.resume()
		}
	})
	servers := []string{tc.gws[0].addr, tc.gws[1].addr}
	// The last session is idle: only its gateway's renewals keep it, and
	// its ephemeral node, which a lying clock could expire.
	sessions := make([]*trackedSession, clients+1)
	truth := make([]<-chan zk.Event, len(sessions))
	for i := range sessions {
		sessions[i] = tc.trackSession(servers, timeout)
		_, _, truth[i] = must3(sessions[i].ExistsW("/truth"))
	}
	idle := sessions[clients]
	must(idle.Create("/idle", nil, zk.FlagEphemeral, open))
	h := newZnodeHistory(sessions[0].Conn)

	var stop atomic.Bool
	var wg sync.WaitGroup
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	for i, s := range sessions[:clients] {
		// Each client waits 5ms between operations, which keeps the
		// history small enough to check in a second or two; together
		// they still have an op ordered every few milliseconds.
		wg.Go(func() {
			h.client(i, s.Conn, func(int) bool {
				time.Sleep(5 * time.Millisecond)
				return !stop.Load()
			})
		})
	}
	log := func(format string, args ...any) {
		t.Helper()
		t.Logf("%5.1fs %s", time.Since(h.start).Seconds(), fmt.Sprintf(format, args...))
	}
	// hold keeps the faults as they are for d, and longer while more (if
	// set; it is called every 20ms) says so, up to 20s; then until the
	// clients completed some operations since it was called.
	hold := func(d time.Duration, during string, more func() bool) {
		t.Helper()
		target := h.done.Load() + 20
		for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			keep := more != nil && more()
			if held := time.Since(start); held >= d && (!keep || held >= 20*time.Second) {
				break
			}
		}
		waitFor(t, 20*time.Second, "operations "+during, func() bool { return h.done.Load() >= target })
	}
	restarted := make([]chan error, len(tc.gws))
	restartGateway := func(g int) {
		restarted[g] = make(chan error, 1)
		wg.Go(func() { restarted[g] <- tc.startGateway(g, 15*time.Second) })
	}
	awaitGateway := func(g int) {
		t.Helper()
		if err := <-restarted[g]; err != nil {
			t.Fatalf("gateway %d restarted: %v", g, err)
		}
		log("gateway %d serves again", g)
	}

	hold(500*time.Millisecond, "at the start", nil)
	p := tc.primary()
	log("crash replica %d, the primary, and kill gateway 0", p)
	tc.crash(p)
	tc.killGateway(0)
	restartGateway(0)
	hold(2*time.Second, "with a replica crashed and a gateway killed", nil)
	log("restart replica %d from its data directory", p)
	tc.restart(p)
	tc.catchUp(p)

	p = tc.primary()
	view := tc.latest(p).View
	log("pause replica %d, the primary of view %d", p, view)
	faults[p].pause()
	hold(2*time.Second, "with the primary paused", nil)
	faults[p].resume()
	log("resume replica %d", p)
	if v := tc.latest(p).View; v == view {
		t.Fatalf("still in view %d with its primary paused", v)
	}
	tc.catchUp(p)
	awaitGateway(0)

	liar := (tc.primary() + 1) % 4
	log("replica %d lies", liar)
	faults[liar].lying.Store(true)
	hold(time.Second, "with a liar", nil)
	log("kill gateway 1")
	tc.killGateway(1)
	restartGateway(1)
	hold(2*time.Second, "with a liar and a gateway killed", nil)
	faults[liar].lying.Store(false)
	log("replica %d stops lying, having falsified %d answers", liar, faults[liar].lies.Load())
	if faults[liar].lies.Load() == 0 {
		t.Fatal("the liar told no lie")
	}

	// The primary's clock swings, whichever replica is the primary (a
	// view change moves the fault to the new one), for 6s and until the
	// agreed time was seen to swing both ways: a view change, which a
	// stall of the primary under load may cause, holds it still.
	swinging := swingingClock(time.Now(), swing, 500*time.Millisecond, 5*time.Second)
	p = tc.primary()
	log("replica %d, the primary, swings its clock %v either side", p, swing)
	faults[p].setClock(swinging)
	var ahead, behind time.Duration
	hold(6*time.Second, "with the clock swinging", func() bool {
		if q := tc.primary(); q != p {
			faults[p].setClock(nil)
			log("replica %d, the primary now, swings its clock instead of %d", q, p)
			p = q
			faults[p].setClock(swinging)
		}
		if at := tc.latest(p).Time; !at.IsZero() {
			d := time.Until(at)
			ahead, behind = max(ahead, d), min(behind, d)
		}
		return ahead < swing*3/4 || -behind < swing*3/4
	})
	faults[p].setClock(nil)
	log("replica %d's clock is right again; the agreed time was seen %v ahead and %v behind", p, ahead, -behind)
	if ahead < swing*3/4 || -behind < swing*3/4 {
		t.Fatal("the clock did not swing the agreed time")
	}
	awaitGateway(1)
	hold(500*time.Millisecond, "at the end", nil)
	stop.Store(true)
	wg.Wait()

	for i, s := range sessions {
		if s.expired.Load() {
			t.Errorf("session %d: %#x expired", i, s.id)
		}
		if id := s.SessionID(); id != s.id {
			t.Errorf("session %d: %#x, was %#x", i, id, s.id)
		}
		est := s.established()
		if est[servers[0]] == 0 || est[servers[1]] == 0 {
			t.Errorf("session %d: established %v times through each gateway: it did not fail over", i, est)
		}
		t.Logf("session %d: %#x established %v", i, s.id, est)
		select {
		case ev := <-truth[i]:
			t.Errorf("session %d: watch on /truth, which never existed, fired: %+v", i, ev)
		default:
		}
	}
	if ok, st := must2(sessions[0].Exists("/idle")); !ok || st.EphemeralOwner != idle.id {
		t.Errorf("the idle session's ephemeral node: %v %+v", ok, st)
	}
	log("view %d", tc.latest(-1).View)
	h.check(t)
}
