package gateway_test

import (
	"encoding/binary"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/coord/gateway"
	"github.com/rubin-go/rubin/coord/proto"
)

// dialFrom dials the gateway at addr from the loopback address from
// (127.0.0.x: Linux takes any of them), as a client on another host.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// isOpen reports whether the gateway holds nc open: a read neither gets
// bytes nor fails before a short deadline.
func isOpen(nc net.Conn) bool {
	nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := nc.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// openFrame sends the 4-byte length of an n-byte frame and its first
// byte, and no more: a client that holds the gateway's buffer for it.
func openFrame(nc net.Conn, n int) {
	var b [5]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	nc.Write(b[:])
}

func heapNow() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// countOpen waits for the gateway to close what it refuses, then counts
// the connections it holds.
func countOpen(conns []net.Conn) int {
	time.Sleep(300 * time.Millisecond)
	open := 0
	for _, nc := range conns {
		if isOpen(nc) {
			open++
		}
	}
	return open
}

// TestMaxClientCnxnsDefault: with the defaults, a client at one address
// that opens 100 connections, each announcing a connect request and
// sending one byte of it, has 60 held open (ZooKeeper's maxClientCnxns),
// and they hold a few KiB each, not the frame they announced.
func TestMaxClientCnxnsDefault(t *testing.T) {
	tc := newTestCluster(t)
	before := heapNow()
	var conns []net.Conn
	for range 100 {
		nc := dialFrom(t, "127.0.0.1", tc.addr)
		openFrame(nc, 4<<10)
		conns = append(conns, nc)
	}
	held := countOpen(conns)
	grew := heapNow() - before
	t.Logf("%d of 100 connections held open; heap grew by %d KiB", held, grew>>10)
	if held != gateway.DefaultMaxConnsPerHost {
		t.Errorf("%d connections from one address held open, want %d", held, gateway.DefaultMaxConnsPerHost)
	}
	if grew > 4<<20 {
		t.Errorf("heap grew by %d KiB for connections that sent 5 bytes each", grew>>10)
	}
	if st := tc.gw.Stats(); st.RefusedPerHost != 40 || st.Conns != 60 {
		t.Errorf("stats %+v, want 40 refused per host and 60 open", st)
	}
	// A client elsewhere is served.
	c := tc.session(zk.Connect([]string{tc.addr}, 10*time.Second, zk.WithLogger(quietLogger{}), zk.WithDialer(func(network, addr string, timeout time.Duration) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: timeout}
		return d.Dial(network, addr)
	})))
	must(c.Create("/served", nil, 0, open))
}

// TestConnectionLimits runs a gateway with small bounds against clients
// that push them: one address opening many connections, another filling
// the gateway, sessions announcing huge requests, and a client that
// dribbles its handshake. The bounds hold, the memory each connection
// holds is what it sent, and other clients are served.
func TestConnectionLimits(t *testing.T) {
	tc := newTestCluster(t)
	gw, addr := tc.serveGateway(gateway.Config{MaxConnsPerHost: 8, MaxConns: 16, HandshakeTimeout: 2 * time.Second})
	from := func(ip string) *zk.Conn {
		return tc.session(zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quietLogger{}), zk.WithDialer(func(network, a string, timeout time.Duration) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: timeout}
			return d.Dial(network, a)
		})))
	}
	good := from("127.0.0.2")

	// One address: 8 of 40 held.
	var flood []net.Conn
	for range 40 {
		nc := dialFrom(t, "127.0.0.3", addr)
		openFrame(nc, 100)
		flood = append(flood, nc)
	}
	if n := countOpen(flood); n != 8 {
		t.Fatalf("%d connections of one address held, want 8", n)
	}
	must(good.Create("/a", nil, 0, open))

	// Sessions that announce a 1 MiB request each and send one byte of
	// it hold what they sent, not the megabyte.
	before := heapNow()
	for range 6 { // each kept open by dialFrom's cleanup
		nc := dialFrom(t, "127.0.0.4", addr)
		if err := proto.WriteFrame(nc, &proto.ConnectRequest{TimeOut: 10000, Passwd: make([]byte, 16)}); err != nil {
			t.Fatal(err)
		}
		if _, err := proto.ReadFrame(nc, nil); err != nil {
			t.Fatal(err)
		}
		openFrame(nc, proto.MaxPacket)
	}
	time.Sleep(200 * time.Millisecond)
	if grew := heapNow() - before; grew > 2<<20 {
		t.Errorf("6 sessions that sent a byte of a 1 MiB request: the heap grew by %d KiB", grew>>10)
	}
	// The gateway now holds 1 + 8 + 6 = 15; one more fills it.
	last := dialFrom(t, "127.0.0.5", addr)
	openFrame(last, 100)
	refused := dialFrom(t, "127.0.0.6", addr)
	if !isOpen(last) || countOpen([]net.Conn{refused}) != 0 {
		t.Fatalf("the 16th connection should stay, the 17th go")
	}
	st := gw.Stats()
	if st.Conns != 16 || st.RefusedPerHost != 32 || st.RefusedTotal != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The clients connected go on.
	must(good.Create("/b", nil, 0, open))

	// Closing connections makes room for another client.
	for _, nc := range flood {
		nc.Close()
	}
	waitFor(t, 5*time.Second, "the flood's connections to go", func() bool { return gw.Stats().Conns <= 8 })
	must(from("127.0.0.7").Create("/c", nil, 0, open))

	// A client that dribbles its handshake is dropped at HandshakeTimeout.
	dribble := dialFrom(t, "127.0.0.8", addr)
	start := time.Now()
	openFrame(dribble, maxConnectFrameForTest)
	closed := make(chan time.Duration, 1)
	go func() {
		for {
			time.Sleep(100 * time.Millisecond)
			if _, err := dribble.Write([]byte{0}); err != nil {
				closed <- time.Since(start)
				return
			}
		}
	}()
	select {
	case d := <-closed:
		if d < 1500*time.Millisecond {
			t.Fatalf("the dribbling client was dropped after %v, before the 2s handshake timeout", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a client dribbling its handshake is still connected after 10s")
	}
	must(good.Create("/d", nil, 0, open))
}

// maxConnectFrameForTest is a connect frame as long as the gateway takes.
const maxConnectFrameForTest = 4 << 10
