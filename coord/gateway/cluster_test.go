package gateway_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/bft/wire"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/gateway"
)

const testTick = 2 * time.Millisecond

// testCluster is four replicas of the coordination service, a bft client
// with a pool of identities, and a gateway that serves ZooKeeper clients
// on loopback TCP. The replicas and the bft client talk over network
// (loopback TCP unless a test says otherwise).
type testCluster struct {
	t       *testing.T
	network string
	cl      *auth.Cluster
	mu      sync.Mutex
	reps    []*node.Replica
	apps    []*coord.App
	// wrap, if set, gives replica i's App a face of its own: a Byzantine
	// replica's.
	wrap func(i int, app *coord.App) bft.App
	// dirs, if set, are the replicas' data directories: durable replicas.
	dirs []string
	// clocks, if set, are the replicas' clocks (bft.Config.Clock); a nil
	// one is the real clock.
	clocks []func() time.Time
	// appConfig is the replicas' coord.Config, but for Clients, which
	// are the cluster's.
	appConfig coord.Config
	cancels   []context.CancelFunc
	errs      []chan error
	// gateways, if above 1, is how many gateways share the cluster's
	// client identities out, each a range of its own, as coord keygen
	// -gateways gives them; each runs on a bft client of its own.
	gateways int
	gws      []*testGateway
	// client, gw and addr are the first gateway's, as it started.
	client *node.Client
	notes  atomic.Int64 // notifications the gateways' identities got
	gw     *gateway.Server
	addr   string
}

// testGateway is one of the cluster's gateways: its identities, the
// address it serves, and while it runs its bft client and server.
type testGateway struct {
	ids    []bft.ClientID
	addr   string
	client *node.Client
	gw     *gateway.Server
}

func newTestCluster(t *testing.T) *testCluster {
	t.Helper()
	return newClusterWith(t, nil, nil)
}

// newClusterWith is newTestCluster with replicas' Apps wrapped by wrap
// and their data in dirs, if set.
func newClusterWith(t *testing.T, wrap func(i int, app *coord.App) bft.App, dirs []string) *testCluster {
	t.Helper()
	return newClusterOver(t, "tcp", "127.0.0.1", wrap, dirs)
}

// newClusterOver is newClusterWith with the replicas on host, reached over
// network ("tcp" or "rdma"), by each other and by the gateway's bft
// client.
func newClusterOver(t *testing.T, network, host string, wrap func(i int, app *coord.App) bft.App, dirs []string, opts ...func(*testCluster)) *testCluster {
	t.Helper()
	const n, identities = 4, 32
	cl, err := auth.Generate(n, identities, host, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testCluster{t: t, network: network, cl: cl, wrap: wrap, dirs: dirs, reps: make([]*node.Replica, n), apps: make([]*coord.App, n), cancels: make([]context.CancelFunc, n), errs: make([]chan error, n)}
	for _, o := range opts {
		o(tc)
	}
	lns := make([]net.Listener, n)
	for i := range lns {
		if lns[i], err = rubin.Listen(network, net.JoinHostPort(host, "0")); err != nil {
			t.Fatal(err)
		}
		cl.Replicas[i].Addr = lns[i].Addr().String()
	}
	for i := range n {
		tc.startReplica(i, lns[i])
	}
	t.Cleanup(tc.stop)

	ngw := max(tc.gateways, 1)
	for g := range ngw {
		tg := &testGateway{addr: "127.0.0.1:0"}
		for id := g * identities / ngw; id < (g+1)*identities/ngw; id++ {
			tg.ids = append(tg.ids, bft.ClientID(id))
		}
		tc.gws = append(tc.gws, tg)
		if err := tc.startGateway(g, 0); err != nil {
			t.Fatal(err)
		}
	}
	tc.client, tc.gw, tc.addr = tc.gws[0].client, tc.gws[0].gw, tc.gws[0].addr
	return tc
}

// startGateway starts gateway g on a new bft client, as coord gateway
// does: it claims its ID (its first identity, which the replicas notify)
// and its identities, waiting up to claimWait for the claim of a gateway
// that stopped to lapse, and serves on its address (a new loopback port
// the first time). It polls only as a safety net, so rarely that the
// tests see events only if the notifications work.
func (tc *testCluster) startGateway(g int, claimWait time.Duration) error {
	tg := tc.gws[g]
	var gw atomic.Pointer[gateway.Server]
	client, err := node.NewClient(context.Background(), node.ClientConfig{
		Cluster: tc.cl, IDs: tg.ids, Network: tc.network, Tick: testTick,
		RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond,
		OnNote: func(_ bft.ClientID, n bft.Note) {
			tc.notes.Add(1)
			if g := gw.Load(); g != nil {
				g.Note(n)
			}
		},
	})
	if err != nil {
		return err
	}
	s, err := gateway.New(gateway.Config{Invoker: client, ID: int64(tg.ids[0]), Notified: true, Identities: tg.ids,
		ClaimWait: claimWait, PollInterval: time.Hour})
	if err != nil {
		client.Close()
		return err
	}
	gw.Store(s)
	ln, err := net.Listen("tcp", tg.addr)
	if err != nil {
		s.Close()
		client.Close()
		return err
	}
	tc.mu.Lock()
	tg.addr, tg.client, tg.gw = ln.Addr().String(), client, s
	tc.mu.Unlock()
	go s.Serve(ln)
	return nil
}

// killGateway stops gateway g as its process dying would: its clients'
// connections and its links to the replicas close, and its claim stays
// on the replicas until it lapses.
func (tc *testCluster) killGateway(g int) {
	tc.mu.Lock()
	tg := tc.gws[g]
	s, client := tg.gw, tg.client
	tg.gw, tg.client = nil, nil
	tc.mu.Unlock()
	if s != nil {
		s.Close()
		client.Close()
	}
}

// serveGateway starts another gateway, with cfg and, unless cfg names
// one, the cluster's bft client as its Invoker, on a loopback port of its
// own; it returns the gateway, which the test's end closes, and its
// address.
func (tc *testCluster) serveGateway(cfg gateway.Config) (*gateway.Server, string) {
	tc.t.Helper()
	if cfg.Invoker == nil {
		cfg.Invoker = tc.client
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { gw.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tc.t.Fatal(err)
	}
	go gw.Serve(ln)
	return gw, ln.Addr().String()
}

func (tc *testCluster) startReplica(i int, ln net.Listener) {
	var clients []bft.ClientID
	for _, c := range tc.cl.Clients {
		clients = append(clients, c.ID)
	}
	cfg := tc.appConfig
	cfg.Clients = clients
	app := coord.New(cfg)
	var face bft.App = app
	if tc.wrap != nil {
		face = tc.wrap(i, app)
	}
	var clock func() time.Time
	if i < len(tc.clocks) {
		clock = tc.clocks[i]
	}
	r, err := node.NewReplica(node.ReplicaConfig{
		Cluster: tc.cl, ID: bft.ReplicaID(i), Network: tc.network, Listener: ln, Tick: testTick,
		App: face, DataDir: tc.dataDir(i),
		Core: bft.Config{Clock: clock, CheckpointInterval: 16, WatermarkWindow: 64, RequestTicks: 50, ViewChangeTicks: 50, FetchTicks: 10,
			MaxOpSize: coord.MaxOpSize, MaxBatchBytes: 2 * coord.MaxOpSize},
		RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond,
	})
	if err != nil {
		tc.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	<-r.Ready()
	tc.mu.Lock()
	tc.reps[i], tc.apps[i], tc.cancels[i], tc.errs[i] = r, app, cancel, errc
	tc.mu.Unlock()
}

// crash stops replica i.
func (tc *testCluster) crash(i int) {
	tc.mu.Lock()
	cancel, errc := tc.cancels[i], tc.errs[i]
	tc.cancels[i] = nil
	tc.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	if err := <-errc; err != nil {
		tc.t.Errorf("replica %d: %v", i, err)
	}
}

func (tc *testCluster) dataDir(i int) string {
	if tc.dirs == nil {
		return ""
	}
	return tc.dirs[i]
}

// restart starts crashed replica i again, with a new App: empty, or
// recovered from its data directory.
func (tc *testCluster) restart(i int) {
	tc.t.Helper()
	ln, err := rubin.Listen(tc.network, tc.cl.Replicas[i].Addr)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.startReplica(i, ln)
}

// checkSameState checks, once the replicas are stopped, that those that
// executed as far as the furthest hold the same state.
func (tc *testCluster) checkSameState() {
	tc.t.Helper()
	var last uint64
	for _, r := range tc.reps {
		last = max(last, r.Status().LastExecuted)
	}
	var want []byte
	same := 0
	for i, r := range tc.reps {
		if r.Status().LastExecuted != last {
			continue
		}
		snap := tc.apps[i].Snapshot()
		if want == nil {
			want = snap
		} else if !bytes.Equal(snap, want) {
			tc.t.Fatalf("replica %d's state differs from another's at sequence %d", i, last)
		}
		same++
	}
	if same < 3 {
		tc.t.Fatalf("only %d replicas executed up to %d", same, last)
	}
}

func (tc *testCluster) stop() {
	for g := range tc.gws {
		tc.killGateway(g)
	}
	for i := range tc.cancels {
		tc.crash(i)
	}
}

// quietLogger keeps the zk client's connection chatter out of the test
// output.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// connect opens a ZooKeeper session through the gateway and waits for it.
func (tc *testCluster) connect(timeout time.Duration) *zk.Conn {
	tc.t.Helper()
	return tc.session(zk.Connect([]string{tc.addr}, timeout, zk.WithLogger(quietLogger{})))
}

// session waits for the session of a zk.Connect.
func (tc *testCluster) session(c *zk.Conn, events <-chan zk.Event, err error) *zk.Conn {
	tc.t.Helper()
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(c.Close)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() {
					for range events {
					}
				}()
				return c
			}
		case <-deadline:
			tc.t.Fatal("no session after 10s")
		}
	}
}

// trackedSession is a ZooKeeper session and what its session events
// told: through which servers it was established, and whether it was
// told that it expired.
type trackedSession struct {
	*zk.Conn
	id      int64 // the session's, once it opened
	expired atomic.Bool
	mu      sync.Mutex
	servers map[string]int // how often the session was established through each server
}

// trackSession opens a ZooKeeper session with the servers listed, as
// its client would, and waits for it.
func (tc *testCluster) trackSession(servers []string, timeout time.Duration) *trackedSession {
	tc.t.Helper()
	s := &trackedSession{servers: map[string]int{}}
	connected := make(chan struct{})
	c, _, err := zk.Connect(servers, timeout, zk.WithLogger(quietLogger{}), zk.WithEventCallback(func(ev zk.Event) {
		switch ev.State {
		case zk.StateHasSession:
			s.mu.Lock()
			if len(s.servers) == 0 {
				close(connected)
			}
			s.servers[ev.Server]++
			s.mu.Unlock()
		case zk.StateExpired:
			s.expired.Store(true)
		}
	}))
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(c.Close)
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		tc.t.Fatal("no session after 10s")
	}
	s.Conn, s.id = c, c.SessionID()
	return s
}

// TestOpSizeFitsTheWire holds coord.MaxOpSize to the bft wire format's
// bound, which the driver decodes requests and replies with: an op or
// result beyond it would be dropped and its client wait for ever.
func TestOpSizeFitsTheWire(t *testing.T) {
	if lim := wire.DefaultLimits().MaxOp; coord.MaxOpSize > lim {
		t.Fatalf("coord.MaxOpSize %d exceeds the wire's %d", coord.MaxOpSize, lim)
	}
}
