package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/coord/gateway"
	"github.com/rubin-go/rubin/coord/proto"
)

// TestFullSessionTableIsNotExpiry fills the replicas' session table
// (tree.Config.MaxSessions, here 2) with a client's sessions: a client
// that connects then is refused as ZooKeeper refuses a connection it
// cannot take, by closing it, and keeps trying; it is not told that its
// session expired, which a client takes for the end of its session and
// its application for a reason to give up. Once a session closes, the
// client's next try gets one.
func TestFullSessionTableIsNotExpiry(t *testing.T) {
	tc := newClusterOver(t, "tcp", "127.0.0.1", nil, nil, func(tc *testCluster) {
		tc.appConfig.Tree.MaxSessions = 2
	})
	first, _ := rawConnect(t, tc.addr, 0, nil)
	rawConnect(t, tc.addr, 0, nil)

	c, events, err := zk.Connect([]string{tc.addr}, 10*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wait := func(d time.Duration) zk.State {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case ev := <-events:
				if ev.State == zk.StateExpired || ev.State == zk.StateHasSession {
					return ev.State
				}
			case <-deadline:
				return zk.StateUnknown
			}
		}
	}
	if st := wait(3 * time.Second); st != zk.StateUnknown {
		t.Fatalf("with the session table full, the client got %v", st)
	}
	if s := tc.gw.Stats(); s.RefusedSessions == 0 {
		t.Fatalf("refused sessions not counted: %+v", s)
	}

	if err := proto.WriteFrame(first, &proto.RequestHeader{Xid: 1, Type: proto.OpCloseSession}, &proto.Empty{}); err != nil {
		t.Fatal(err)
	}
	if st := wait(10 * time.Second); st != zk.StateHasSession {
		t.Fatalf("after a session closed, the client got %v", st)
	}
	must(c.Create("/in", nil, 0, open))
}

// TestMaxSessionsPerHost has a client address open sessions and drop
// their connections, as a client that fills the replicas' session table
// would, since sessions outlive their connections by their timeout: past
// gateway.Config.MaxSessionsPerHost (here 3) its connects for a new
// session are closed unanswered, and counted, while another address
// gets sessions. It may resume a session it holds; once it closes one,
// it may open one again.
func TestMaxSessionsPerHost(t *testing.T) {
	tc := newTestCluster(t)
	tc.gw.Close()
	gw, addr := tc.serveGateway(gateway.Config{MaxSessionsPerHost: 3})

	var held []proto.ConnectResponse
	for range 3 {
		nc := dialFrom(t, "127.0.0.2", addr)
		resp, err := handshake(nc, 0, nil)
		if err != nil || resp.SessionID == 0 {
			t.Fatalf("session %d: %+v %v", len(held), resp, err)
		}
		held = append(held, resp)
		if len(held) < 3 {
			nc.Close() // the session lingers on the replicas
		}
	}
	// The third session's connection stays open.
	refused := func(from string) bool {
		t.Helper()
		resp, err := handshake(dialFrom(t, from, addr), 0, nil)
		if err == nil && resp.SessionID == 0 {
			t.Fatalf("a connect from %s answered without a session", from)
		}
		return err != nil
	}
	if !refused("127.0.0.2") {
		t.Fatal("a fourth session from one address")
	}
	if refused("127.0.0.3") {
		t.Fatal("another address refused")
	}
	if s := gw.Stats(); s.RefusedSessions != 1 {
		t.Fatalf("refused sessions: %+v", s)
	}
	// Resuming a lingering session is no new session; closing it frees
	// its room.
	nc := dialFrom(t, "127.0.0.2", addr)
	if resp, err := handshake(nc, held[0].SessionID, held[0].Passwd); err != nil || resp.SessionID != held[0].SessionID {
		t.Fatalf("resume: %+v %v", resp, err)
	}
	if !refused("127.0.0.2") {
		t.Fatal("a fourth session from one address after a resume")
	}
	if err := proto.WriteFrame(nc, &proto.RequestHeader{Xid: 1, Type: proto.OpCloseSession}, &proto.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := proto.ReadFrame(nc, nil); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for refused("127.0.0.2") {
		if time.Now().After(deadline) {
			t.Fatal("no session for the address 5s after it closed one")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWatchesBoundedInAll has three clients set watches on absent paths,
// which cost no znode, as many as they may: each stops at its session's
// bound (tree.Config.MaxWatchBytes) or at the bound of all sessions'
// watches together (MaxWatchTotal), with an error, and the replicas
// hold no more than that. Once a session closes, its watches' room is
// free again.
func TestWatchesBoundedInAll(t *testing.T) {
	const perSession, total = 4 << 10, 10 << 10
	tc := newClusterOver(t, "tcp", "127.0.0.1", nil, nil, func(tc *testCluster) {
		tc.appConfig.Tree.MaxWatchBytes = perSession
		tc.appConfig.Tree.MaxWatchTotal = total
	})
	// Each watch counts its path and 32 bytes; the paths are 13 bytes.
	const size = 13 + 32
	fill := func(c *zk.Conn, name string) int {
		t.Helper()
		for n := 0; ; n++ {
			if n*size > total {
				t.Fatalf("%s set %d watches, %d bytes, past every bound", name, n, n*size)
			}
			_, _, _, err := c.ExistsW(fmt.Sprintf("/absent/%s%04d", name, n))
			if err != nil {
				return n
			}
		}
	}
	a, b, c := tc.connect(10*time.Second), tc.connect(10*time.Second), tc.connect(10*time.Second)
	na, nb, nc := fill(a, "a"), fill(b, "b"), fill(c, "c")
	if na != perSession/size || nb != perSession/size {
		t.Fatalf("a and b set %d and %d watches, want %d each", na, nb, perSession/size)
	}
	if want := total/size - na - nb; nc != want {
		t.Fatalf("c set %d watches, want %d: what is left of %d bytes", nc, want, total)
	}
	// The clients still read, without watches.
	if ok, _ := must2(c.Exists("/absent")); ok {
		t.Fatal("/absent exists")
	}
	a.Close()
	if n := fill(tc.connect(10*time.Second), "d"); n != na {
		t.Fatalf("after a closed, a new session set %d watches, want %d", n, na)
	}
}
