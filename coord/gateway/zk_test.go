package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/gateway"
	"github.com/rubin-go/rubin/coord/proto"
)

var open = zk.WorldACL(zk.PermAll)

// must, must2 and must3 return the values of a call that must succeed;
// they panic otherwise, which fails the test with the call's stack.
func must[A any](a A, err error) A {
	if err != nil {
		panic(err)
	}
	return a
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(err)
	}
	return a, b
}

func must3[A, B, C any](a A, b B, c C, err error) (A, B, C) {
	if err != nil {
		panic(err)
	}
	return a, b, c
}

func waitEvent(t *testing.T, ch <-chan zk.Event, want zk.EventType, path string) {
	t.Helper()
	select {
	case ev := <-ch:
		if ev.Type != want || ev.Path != path || ev.Err != nil {
			t.Fatalf("event %+v, want %v on %s", ev, want, path)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no %v event on %s", want, path)
	}
}

// TestZooKeeperClient runs go-zookeeper/zk, unmodified, against four
// replicas through a gateway: the operations, their errors, watches and
// ephemeral nodes.
func TestZooKeeperClient(t *testing.T) {
	tc := newTestCluster(t)
	a := tc.connect(10 * time.Second)
	b := tc.connect(10 * time.Second)

	t.Run("crud", func(t *testing.T) {
		if p := must(a.Create("/crud", []byte("v0"), 0, open)); p != "/crud" {
			t.Fatalf("create: %q", p)
		}
		if _, err := a.Create("/crud", nil, 0, open); !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("second create: %v", err)
		}
		data, st, err := b.Get("/crud")
		if err != nil || string(data) != "v0" || st.Version != 0 {
			t.Fatalf("get: %q %+v %v", data, st, err)
		}
		st = must(a.Set("/crud", []byte("v1"), 0))
		if st.Version != 1 || st.Mzxid <= st.Czxid || st.Mtime < st.Ctime {
			t.Fatalf("set stat %+v", st)
		}
		if _, err := b.Set("/crud", []byte("v2"), 0); !errors.Is(err, zk.ErrBadVersion) {
			t.Fatalf("stale set: %v", err)
		}
		for _, kid := range []string{"x", "y", "z"} {
			must(a.Create("/crud/"+kid, nil, 0, open))
		}
		kids, st := must2(b.Children("/crud"))
		slices.Sort(kids)
		if !slices.Equal(kids, []string{"x", "y", "z"}) || st.NumChildren != 3 {
			t.Fatalf("children %v %+v", kids, st)
		}
		if err := a.Delete("/crud", -1); !errors.Is(err, zk.ErrNotEmpty) {
			t.Fatalf("delete of a parent: %v", err)
		}
		if err := a.Delete("/crud/x", 5); !errors.Is(err, zk.ErrBadVersion) {
			t.Fatalf("delete with a wrong version: %v", err)
		}
		if _, err := b.Create("/nosuch/kid", nil, 0, open); !errors.Is(err, zk.ErrNoNode) {
			t.Fatalf("create under nothing: %v", err)
		}
		if ok, _, err := b.Exists("/crud/x"); !ok || err != nil {
			t.Fatalf("exists: %v %v", ok, err)
		}
		if p := must(b.Sync("/crud")); p != "/crud" {
			t.Fatalf("sync: %q", p)
		}
	})

	t.Run("multi", func(t *testing.T) {
		_, err := a.Multi(
			&zk.CreateRequest{Path: "/multi", Acl: open},
			&zk.CheckVersionRequest{Path: "/crud", Version: 99},
		)
		if !errors.Is(err, zk.ErrBadVersion) {
			t.Fatalf("failing multi: %v", err)
		}
		if ok, _, _ := a.Exists("/multi"); ok {
			t.Fatal("a failed multi left its create")
		}
		res, err := a.Multi(
			&zk.CreateRequest{Path: "/multi", Data: []byte("m"), Acl: open},
			&zk.SetDataRequest{Path: "/crud", Data: []byte("m"), Version: -1},
			&zk.DeleteRequest{Path: "/crud/y", Version: -1},
		)
		if err != nil || len(res) != 3 || res[0].String != "/multi" || res[1].Stat == nil {
			t.Fatalf("multi: %+v %v", res, err)
		}
	})

	t.Run("sequential", func(t *testing.T) {
		must(a.Create("/seq", nil, 0, open))
		var names []string
		for i := range 6 {
			c := a
			if i%2 == 1 {
				c = b
			}
			names = append(names, must(c.Create("/seq/n-", nil, zk.FlagSequence, open)))
		}
		for i, n := range names {
			if want := fmt.Sprintf("/seq/n-%010d", i); n != want {
				t.Fatalf("sequential name %d: %q, want %q", i, n, want)
			}
		}
	})

	t.Run("watches", func(t *testing.T) {
		must(a.Create("/w", []byte("0"), 0, open))
		_, _, data := must3(b.GetW("/w"))
		_, _, kids := must3(b.ChildrenW("/w"))
		_, _, exist := must3(b.ExistsW("/w/new"))
		must(a.Set("/w", []byte("1"), -1))
		waitEvent(t, data, zk.EventNodeDataChanged, "/w")
		must(a.Create("/w/new", nil, 0, open))
		waitEvent(t, exist, zk.EventNodeCreated, "/w/new")
		waitEvent(t, kids, zk.EventNodeChildrenChanged, "/w")
		// One-shot: a second change fires nothing on the used watch, and a
		// new watch fires once.
		_, _, data = must3(b.GetW("/w"))
		must(a.Set("/w", []byte("2"), -1))
		must(a.Set("/w", []byte("3"), -1))
		waitEvent(t, data, zk.EventNodeDataChanged, "/w")
		select {
		case ev, ok := <-data:
			if ok {
				t.Fatalf("a one-shot watch fired again: %+v", ev)
			}
		case <-time.After(100 * time.Millisecond):
		}
		// A client's own change fires its watch before it gets the reply.
		_, _, own := must3(a.GetW("/w"))
		must(a.Set("/w", []byte("4"), -1))
		select {
		case ev := <-own:
			if ev.Type != zk.EventNodeDataChanged {
				t.Fatalf("own watch: %+v", ev)
			}
		default:
			t.Fatal("the reply came before the event of the client's own watch")
		}
	})

	t.Run("acl", func(t *testing.T) {
		if err := a.AddAuth("digest", []byte("alice:secret")); err != nil {
			t.Fatal(err)
		}
		must(a.Create("/private", []byte("p"), 0, zk.DigestACL(zk.PermAll, "alice", "secret")))
		if _, _, err := b.Get("/private"); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("get without auth: %v", err)
		}
		if _, err := b.Set("/private", nil, -1); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("set without auth: %v", err)
		}
		if data, _ := must2(a.Get("/private")); string(data) != "p" {
			t.Fatalf("get with auth: %q", data)
		}
		if _, _, err := b.GetACL("/private"); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("getACL without auth: %v", err)
		}
		acl, _ := must2(a.GetACL("/private"))
		if len(acl) != 1 || acl[0].Scheme != "digest" {
			t.Fatalf("acl %+v", acl)
		}
		c := tc.connect(10 * time.Second)
		if err := c.AddAuth("digest", []byte("alice:secret")); err != nil {
			t.Fatal(err)
		}
		must(c.Set("/private", []byte("q"), -1))

		// An ip identity is the address the client connects from, not
		// the one it claims.
		must(a.Create("/local", nil, 0, []zk.ACL{{Perms: zk.PermRead, Scheme: "ip", ID: "127.0.0.0/8"}}))
		must(a.Create("/remote", nil, 0, []zk.ACL{{Perms: zk.PermRead, Scheme: "ip", ID: "10.9.9.9"}}))
		d := tc.connect(10 * time.Second)
		if err := d.AddAuth("ip", []byte("10.9.9.9")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := d.Get("/local"); err != nil {
			t.Fatalf("get of an ip-ACL node from its address: %v", err)
		}
		if _, _, err := d.Get("/remote"); !errors.Is(err, zk.ErrNoAuth) {
			t.Fatalf("get of an ip-ACL node from another address: %v", err)
		}
	})

	t.Run("large", func(t *testing.T) {
		// The most a znode holds goes through the bft client and back, on
		// the ordered and the read-only path.
		big := bytes.Repeat([]byte{'x'}, coord.MaxDataSize(64<<10))
		must(a.Create("/large", big, 0, open))
		for _, c := range []*zk.Conn{a, b} {
			data, st := must2(c.Get("/large"))
			if !bytes.Equal(data, big) || st.DataLength != int32(len(big)) {
				t.Fatalf("read %d bytes back of %d", len(data), len(big))
			}
		}
		_, _, w := must3(a.GetW("/large"))
		data, _ := must2(a.Get("/large"))
		if !bytes.Equal(data, big) {
			t.Fatalf("read %d bytes back of %d with a watch", len(data), len(big))
		}
		// One byte more, and as much as ZooKeeper takes: refused, and the
		// session goes on.
		for _, n := range []int{len(big) + 1, 0xfffff} {
			if _, err := a.Set("/large", make([]byte, n), -1); err == nil || !strings.Contains(err.Error(), "-5") {
				t.Fatalf("set of %d bytes: %v, want the marshalling error", n, err)
			}
		}
		must(a.Set("/large", []byte("small"), -1))
		waitEvent(t, w, zk.EventNodeDataChanged, "/large")
	})

	t.Run("ephemeral", func(t *testing.T) {
		c := tc.connect(10 * time.Second)
		must(c.Create("/eph", nil, zk.FlagEphemeral, open))
		_, _, gone := must3(a.ExistsW("/eph"))
		if _, err := c.Create("/eph/kid", nil, 0, open); !errors.Is(err, zk.ErrNoChildrenForEphemerals) {
			t.Fatalf("child of an ephemeral: %v", err)
		}
		c.Close()
		waitEvent(t, gone, zk.EventNodeDeleted, "/eph")
		if ok, _, _ := a.Exists("/eph"); ok {
			t.Fatal("an ephemeral node outlived its session's close")
		}
	})
}

// TestLockRecipe runs go-zookeeper/zk's lock (ephemeral sequential nodes,
// each watching its predecessor) in several clients that each increment a
// counter under the lock without a version check: a lost update means two
// held the lock at once. The primary crashes midway; the clients carry on
// through the view change.
func TestLockRecipe(t *testing.T) {
	lockRecipe(t, newTestCluster(t))
}

func lockRecipe(t *testing.T, tc *testCluster) {
	setup := tc.connect(10 * time.Second)
	must(setup.Create("/counter", []byte("0"), 0, open))
	const clients, rounds = 4, 10
	var wg sync.WaitGroup
	var done sync.WaitGroup
	done.Add(clients * rounds / 2)
	errs := make(chan error, clients)
	for i := range clients {
		c := tc.connect(10 * time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock := zk.NewLock(c, "/lock", open)
			for r := range rounds {
				if err := increment(c, lock); err != nil {
					errs <- fmt.Errorf("client %d round %d: %w", i, r, err)
					return
				}
				if r < rounds/2 {
					done.Done()
				}
			}
		}()
	}
	done.Wait()
	tc.crash(0) // the primary of view 0
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	data, _ := must2(setup.Get("/counter"))
	if n, _ := strconv.Atoi(string(data)); n != clients*rounds {
		t.Fatalf("counter %s, want %d", data, clients*rounds)
	}
	if kids, _ := must2(setup.Children("/lock")); len(kids) != 0 {
		t.Fatalf("lock nodes left: %v", kids)
	}
	if v := tc.reps[1].Status().View; v == 0 {
		t.Fatal("no view change after the primary crashed")
	}
	// The lock's watches fired through notifications: the gateway polls
	// no more than once an hour.
	if tc.notes.Load() == 0 {
		t.Fatal("the gateway was never notified")
	}

	// The crashed replica comes back empty and catches up by state
	// transfer: the App's snapshot, restored.
	tc.restart(0)
	for i := range 40 {
		must(setup.Create(fmt.Sprintf("/after-%d", i), nil, 0, open))
	}
	waitFor(t, 20*time.Second, "replica 0 to catch up", func() bool {
		return tc.reps[0].Status().LastExecuted >= tc.reps[1].Status().LastExecuted
	})
	if tc.reps[0].Status().StateTransfers == 0 {
		t.Fatal("replica 0 caught up without a state transfer")
	}
	tc.stop()
	tc.checkSameState()
}

func increment(c *zk.Conn, lock *zk.Lock) error {
	if err := lock.Lock(); err != nil {
		return err
	}
	data, _, err := c.Get("/counter")
	if err == nil {
		n, _ := strconv.Atoi(string(data))
		_, err = c.Set("/counter", []byte(strconv.Itoa(n+1)), -1)
	}
	if uerr := lock.Unlock(); err == nil {
		err = uerr
	}
	return err
}

// TestBadClients checks that clients that break the protocol lose their
// connection and nobody else's, and that a session whose client vanishes
// expires with its ephemeral nodes.
func TestBadClients(t *testing.T) {
	tc := newTestCluster(t)
	good := tc.connect(10 * time.Second)

	for name, bytes := range map[string][]byte{
		"huge frame":     {0x7f, 0xff, 0xff, 0xff},
		"garbage":        {0, 0, 0, 3, 1, 2, 3},
		"negative frame": {0xff, 0xff, 0xff, 0xff},
	} {
		nc, err := net.Dial("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(bytes)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		var ne net.Error
		if _, err := nc.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: connection not closed: %v", name, err)
		}
		nc.Close()
	}

	// A session whose client vanishes without closing it expires with
	// its ephemeral nodes after its timeout and the grace for a lying
	// primary's clock (2*coord.Config.ClockSkew, 4s).
	nc, err := net.Dial("tcp", tc.addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteFrame(nc, &proto.ConnectRequest{TimeOut: 4000, Passwd: make([]byte, 16)}); err != nil {
		t.Fatal(err)
	}
	frame, err := proto.ReadFrame(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	var resp proto.ConnectResponse
	if err := proto.Unmarshal(frame, &resp); err != nil || resp.SessionID == 0 || resp.TimeOut != 4000 {
		t.Fatalf("handshake: %+v %v", resp, err)
	}
	// An ephemeral node, then the client vanishes.
	if err := proto.WriteFrame(nc, &proto.RequestHeader{Xid: 1, Type: proto.OpCreate},
		&proto.CreateRequest{Path: "/vanish", ACL: proto.OpenACL, Flags: proto.ModeEphemeral}); err != nil {
		t.Fatal(err)
	}
	if _, err := proto.ReadFrame(nc, nil); err != nil {
		t.Fatal(err)
	}
	_, _, gone := must3(good.ExistsW("/vanish"))
	start := time.Now()
	nc.Close()
	select {
	case ev := <-gone:
		if ev.Type != zk.EventNodeDeleted || ev.Path != "/vanish" {
			t.Fatalf("event %+v, want the deletion of /vanish", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the session of a vanished client still open after 20s")
	}
	if d := time.Since(start); d < 7*time.Second {
		t.Fatalf("the session expired after %v, before its 4s timeout and 4s grace", d)
	}
	must(good.Create("/still-working", nil, 0, open))
}

// TestResumeOnAnotherGateway moves a client's session from a gateway that
// closes to another: the session, its ephemeral node and its watch
// survive, and the watch fires once.
func TestResumeOnAnotherGateway(t *testing.T) {
	tc := newTestCluster(t)
	_, addr2 := tc.serveGateway(gateway.Config{})

	// The client's one server name leads to whichever gateway target says.
	var target atomic.Value
	target.Store(tc.addr)
	dial := func(network, _ string, timeout time.Duration) (net.Conn, error) {
		return net.DialTimeout(network, target.Load().(string), timeout)
	}
	c := tc.session(zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second, zk.WithDialer(dial), zk.WithLogger(quietLogger{})))
	must(c.Create("/moving", nil, zk.FlagEphemeral, open))
	must(c.Create("/watched", []byte("0"), 0, open))
	_, _, w := must3(c.GetW("/watched"))
	id := c.SessionID()

	target.Store(addr2)
	tc.gw.Close()
	tc.addr = addr2
	b := tc.connect(10 * time.Second)
	must(b.Set("/watched", []byte("1"), -1))
	waitEvent(t, w, zk.EventNodeDataChanged, "/watched")
	if c.SessionID() != id {
		t.Fatalf("session %#x after the move, was %#x", c.SessionID(), id)
	}
	if ok, st, err := b.Exists("/moving"); !ok || err != nil || st.EphemeralOwner != id {
		t.Fatalf("the ephemeral node after the move: %v %+v %v", ok, st, err)
	}
	must(c.Create("/after-move", nil, 0, open))
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestRestartAllDurable stops every replica and starts them again from
// their data directories: the znodes, the session and its ephemeral node
// are back, and the client, still connected to the gateway, carries on.
func TestRestartAllDurable(t *testing.T) {
	restartAllDurable(t, newClusterWith(t, nil, tempDirs(t, 4)))
}

// tempDirs returns n temporary directories.
func tempDirs(t *testing.T, n int) []string {
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	return dirs
}

func restartAllDurable(t *testing.T, tc *testCluster) {
	c := tc.connect(20 * time.Second)
	must(c.Create("/durable", nil, 0, open))
	must(c.Create("/durable/eph", nil, zk.FlagEphemeral, open))
	// Past a few checkpoints, so recovery starts from a snapshot.
	for i := range 40 {
		must(c.Create(fmt.Sprintf("/durable/n%02d", i), []byte{byte(i)}, 0, open))
	}
	for i := range tc.reps {
		tc.crash(i)
	}
	for i := range tc.reps {
		tc.restart(i)
	}
	kids, st := must2(c.Children("/durable"))
	if len(kids) != 41 || st.NumChildren != 41 {
		t.Fatalf("after the restart: %d children, stat %+v", len(kids), st)
	}
	if data, _ := must2(c.Get("/durable/n39")); !bytes.Equal(data, []byte{39}) {
		t.Fatalf("after the restart: data %v", data)
	}
	if ok, st, _ := c.Exists("/durable/eph"); !ok || st.EphemeralOwner != c.SessionID() {
		t.Fatalf("the session's ephemeral node after the restart: %v %+v", ok, st)
	}
}

// countingInvoker counts the read-only answers a gateway accepts.
type countingInvoker struct {
	gateway.Invoker
	reads atomic.Int64 // read-only requests answered without ordering
}

func (c *countingInvoker) InvokeRead(ctx context.Context, op []byte) ([]byte, error) {
	res, err := c.Invoker.InvokeRead(ctx, op)
	if r, perr := coord.ParseRequestResult(res); err == nil && perr == nil && r.Status == coord.StatusOK {
		c.reads.Add(1)
	}
	return res, err
}

// TestReadOnlyPath checks that reads without watches are answered on the
// read-only path, and that a session's watch event still comes before an
// answer that shows its change.
func TestReadOnlyPath(t *testing.T) {
	tc := newTestCluster(t)
	inv := &countingInvoker{Invoker: tc.client}
	gw, err := gateway.New(gateway.Config{Invoker: inv})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(ln)
	tc.addr = ln.Addr().String()
	a, b := tc.connect(10*time.Second), tc.connect(10*time.Second)

	must(a.Create("/ro", []byte("0"), 0, open))
	for i := range 20 {
		if data, _ := must2(b.Get("/ro")); string(data) != "0" {
			t.Fatalf("read %d: %q", i, data)
		}
	}
	if n := inv.reads.Load(); n < 10 {
		t.Fatalf("%d of 20 reads took the read-only path", n)
	}
	for i := range 20 {
		_, _, w := must3(b.GetW("/ro"))
		must(a.Set("/ro", []byte(strconv.Itoa(i+1)), -1))
		data, _ := must2(b.Get("/ro"))
		if string(data) != strconv.Itoa(i+1) {
			t.Fatalf("round %d: read %q after the set", i, data)
		}
		select {
		case ev := <-w:
			if ev.Type != zk.EventNodeDataChanged {
				t.Fatalf("round %d: event %+v", i, ev)
			}
		default:
			t.Fatalf("round %d: the new data came before the watch event", i)
		}
	}
}

// TestSessionsOutliveAnOutage stops half the replicas for three session
// timeouts while a client waits on a request. As in ZooKeeper, where a
// new leader gives every session a fresh timeout, time in which the
// service could order nothing does not count against sessions: the
// request then succeeds, and the session and its ephemeral node are
// still there.
func TestSessionsOutliveAnOutage(t *testing.T) {
	tc := newClusterWith(t, nil, tempDirs(t, 4))
	const timeout = 4 * time.Second // coord's shortest
	c := tc.connect(timeout)
	id := c.SessionID()
	must(c.Create("/eph", nil, zk.FlagEphemeral, open))
	must(c.Create("/n", []byte("0"), 0, open))

	tc.crash(2)
	tc.crash(3)
	done := make(chan error, 1)
	go func() {
		_, err := c.Set("/n", []byte("1"), -1)
		done <- err
	}()
	time.Sleep(3 * timeout)
	select {
	case err := <-done:
		t.Fatalf("setData answered without a quorum: %v", err)
	default:
	}
	tc.restart(2)
	tc.restart(3)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("setData in flight during the outage: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("setData did not finish 30s after the outage")
	}
	if c.SessionID() != id {
		t.Fatalf("session %#x after the outage, was %#x", c.SessionID(), id)
	}
	if ok, st := must2(c.Exists("/eph")); !ok || st.EphemeralOwner != id {
		t.Fatalf("the ephemeral node after the outage: %v %+v", ok, st)
	}
}
