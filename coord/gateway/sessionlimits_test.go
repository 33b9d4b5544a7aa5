package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

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
