//go:build linux

package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/leakcheck"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// patience bounds every wait; a test that needs longer has found a hang.
const patience = 10 * time.Second

func newTransport(t testing.TB, cfg Config) *Transport {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := tr.Pool().Stats().InUse; n != 0 {
			t.Errorf("%d pool buffers still in use at the end", n)
		}
		tr.Close()
	})
	return tr
}

// rawPeer returns a Conn in blocking mode connected to a plain net.Conn,
// the adversary.
func rawPeer(t testing.TB, tr *Transport) (*Conn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := tr.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return c, p.(*net.TCPConn)
}

// pair returns two Conns in blocking mode connected to each other.
func pair(t testing.TB, tr *Transport) (*Conn, *Conn) {
	t.Helper()
	l, err := tr.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := tr.Dial(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := l.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b
}

func newSelector(t testing.TB) *selector.Selector {
	t.Helper()
	s, err := selector.New(selector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// frames encodes payloads as the transport does.
func frames(payloads ...[]byte) []byte {
	var out []byte
	for _, p := range payloads {
		out = append(append(out, header(uint32(len(p)))...), p...)
	}
	return out
}

func header(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }

func msg(t testing.TB, p *bufpool.Pool, payload []byte) *bufpool.Buffer {
	t.Helper()
	b, err := p.TryGet()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(payload); err != nil {
		t.Fatal(err)
	}
	return b
}

// receive calls Receive on another goroutine and fails the test if it
// does not return within patience: the operations tested here must never
// hang. The channel is closed on a hang, to let the goroutine go.
func receive(t testing.TB, c *Conn) (*bufpool.Buffer, error) {
	t.Helper()
	type result struct {
		b   *bufpool.Buffer
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := c.Receive()
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-time.After(patience):
		c.Close()
		<-done
		t.Fatalf("Receive did not return within %v", patience)
		return nil, nil
	}
}

func expectMessage(t testing.TB, c *Conn, want []byte) {
	t.Helper()
	b, err := receive(t, c)
	if err != nil {
		t.Fatalf("Receive: %v; want a %d-byte message", err, len(want))
	}
	defer b.Release()
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatalf("Receive = %q; want %q", b.Bytes(), want)
	}
}

// TestTruncatedFrame has the peer close in the middle of a frame: the
// messages before it arrive, then an error that says so, never io.EOF.
func TestTruncatedFrame(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream []byte
		whole  [][]byte // messages that arrive before the error
	}{
		{"mid-header", []byte{0, 0}, nil},
		{"header-only", header(10), nil},
		{"mid-payload", append(header(100), make([]byte, 50)...), nil},
		{"after-messages", append(frames([]byte("one"), nil, []byte("three")), 0, 0, 0), [][]byte{[]byte("one"), {}, []byte("three")}},
		{"large-mid-payload", append(header(200<<10), make([]byte, 150<<10)...), nil},
	} {
		for _, blocking := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/blocking=%v", tc.name, blocking), func(t *testing.T) {
				leakcheck.Check(t)
				tr := newTransport(t, Config{})
				c, peer := rawPeer(t, tr)
				var s *selector.Selector
				if !blocking {
					s = newSelector(t)
					c.SetBlocking(false)
					if _, err := s.Register(c, selectionkey.OpRead, nil); err != nil {
						t.Fatal(err)
					}
				}
				go func() {
					peer.Write(tc.stream)
					peer.Close()
				}()
				var got [][]byte
				var end error
				deadline := time.Now().Add(patience)
				for end == nil {
					var b *bufpool.Buffer
					var err error
					if blocking {
						b, err = receive(t, c)
					} else {
						b, err = c.Receive()
						if errors.Is(err, channel.ErrWouldBlock) {
							if time.Now().After(deadline) {
								t.Fatal("no error after the peer closed mid-frame")
							}
							if _, err := s.SelectTimeout(patience); err != nil {
								t.Fatal(err)
							}
							continue
						}
					}
					if err != nil {
						end = err
						break
					}
					got = append(got, bytes.Clone(b.Bytes()))
					b.Release()
				}
				if len(got) != len(tc.whole) {
					t.Fatalf("got %d messages before the error; want %d", len(got), len(tc.whole))
				}
				for i := range got {
					if !bytes.Equal(got[i], tc.whole[i]) {
						t.Errorf("message %d = %q; want %q", i, got[i], tc.whole[i])
					}
				}
				if end == io.EOF || !errors.Is(end, io.ErrUnexpectedEOF) {
					t.Errorf("Receive after a truncated frame = %v; want an error wrapping io.ErrUnexpectedEOF", end)
				}
				var op *net.OpError
				if !errors.As(end, &op) {
					t.Errorf("error %v is not a *net.OpError", end)
				}
				c.Close()
			})
		}
	}
}

// TestOversizedLength announces messages above the maximum: the Conn
// fails with ErrMessageTooLarge and closes, without taking a buffer or
// allocating anything of that size.
func TestOversizedLength(t *testing.T) {
	const max = 1000
	for _, n := range []uint32{max + 1, 1 << 20, 1 << 31, 0xffffffff} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			leakcheck.Check(t)
			tr := newTransport(t, Config{MaxMessageSize: max})
			c, peer := rawPeer(t, tr)
			good := bytes.Repeat([]byte{7}, max)
			if _, err := peer.Write(append(frames(good), header(n)...)); err != nil {
				t.Fatal(err)
			}
			// Padding the peer may send after the bad header must not be
			// read into anything.
			go peer.Write(make([]byte, 64<<10))
			expectMessage(t, c, good)
			gets := tr.Pool().Stats().Gets
			protoErrs := tr.Stats().ProtocolErrors
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b, err := receive(t, c)
			runtime.ReadMemStats(&after)
			if err == nil {
				b.Release()
				t.Fatalf("Receive of a %d-byte message with a maximum of %d succeeded", n, max)
			}
			if !errors.Is(err, channel.ErrMessageTooLarge) {
				t.Errorf("Receive = %v; want ErrMessageTooLarge", err)
			}
			if got := tr.Pool().Stats().Gets - gets; got != 0 {
				t.Errorf("%d buffers taken from the pool for an oversized message", got)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<10 {
				t.Errorf("Receive allocated %d bytes for a %d-byte announcement", grew, n)
			}
			if got := tr.Stats().ProtocolErrors - protoErrs; got != 1 {
				t.Errorf("ProtocolErrors grew by %d; want 1", got)
			}
			if _, err := c.Receive(); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Receive after the protocol error = %v; want net.ErrClosed (the Conn closed)", err)
			}
			// The peer sees the connection go.
			peer.SetReadDeadline(time.Now().Add(patience))
			if _, err := peer.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("peer Read after the Conn closed = %v; want EOF or reset", err)
			}
		})
	}
}

// TestPeerResetMidFrame has the peer reset the connection (SO_LINGER 0) in
// the middle of a frame: an error, not io.EOF, and the partial message's
// buffer goes back to the pool.
func TestPeerResetMidFrame(t *testing.T) {
	for _, stream := range [][]byte{
		append(header(1000), make([]byte, 500)...),
		append(header(200<<10), make([]byte, 100<<10)...), // read straight into the pool buffer
	} {
		t.Run(fmt.Sprint(len(stream)), func(t *testing.T) {
			leakcheck.Check(t)
			tr := newTransport(t, Config{})
			c, peer := rawPeer(t, tr)
			if _, err := peer.Write(stream); err != nil {
				t.Fatal(err)
			}
			// Let the Conn take part of the frame before the reset.
			done := make(chan struct{})
			var b *bufpool.Buffer
			var err error
			go func() {
				b, err = c.Receive()
				close(done)
			}()
			waitFor(t, "the partial frame to be read", func() bool {
				v, _ := unix.IoctlGetInt(c.fd.fd, unix.SIOCINQ)
				return v == 0 && tr.Pool().Stats().InUse == 1
			})
			peer.SetLinger(0)
			peer.Close()
			select {
			case <-done:
			case <-time.After(patience):
				c.Close()
				<-done
				t.Fatal("Receive hung after the peer reset the connection")
			}
			if err == nil {
				b.Release()
				t.Fatal("Receive after a reset mid-frame succeeded")
			}
			if err == io.EOF || !(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)) {
				t.Errorf("Receive after a reset mid-frame = %v; want ECONNRESET or io.ErrUnexpectedEOF", err)
			}
			if n := tr.Pool().Stats().InUse; n != 1 {
				t.Errorf("%d buffers in use while the partial message waits; want 1", n)
			}
			c.Close()
			if n := tr.Pool().Stats().InUse; n != 0 {
				t.Errorf("%d buffers in use after Close; want the partial message's back", n)
			}
		})
	}
}

// TestPeerNeverReads sends to a peer that does not read: non-blocking
// Sends end in ErrWouldBlock, with the queue held to Config.SendQueue and
// memory bounded.
func TestPeerNeverReads(t *testing.T) {
	leakcheck.Check(t)
	const sendQueue, size = 64 << 10, 16 << 10
	tr := newTransport(t, Config{SendQueue: sendQueue})
	c, _ := rawPeer(t, tr)
	c.SetBlocking(false)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	sent := 0
	for {
		if sent > 10000 {
			t.Fatalf("%d messages of %d bytes accepted by a peer that does not read", sent, size)
		}
		b := msg(t, tr.Pool(), make([]byte, size))
		err := c.Send(b)
		if errors.Is(err, channel.ErrWouldBlock) {
			b.Release()
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sent++
	}
	// More attempts change nothing.
	for range 100 {
		b := msg(t, tr.Pool(), make([]byte, size))
		if err := c.Send(b); !errors.Is(err, channel.ErrWouldBlock) {
			t.Fatalf("Send on a full queue = %v; want ErrWouldBlock", err)
		}
		b.Release()
	}
	c.wmu.Lock()
	queued := c.queued
	c.wmu.Unlock()
	if limit := sendQueue + headerLen + size; queued > limit {
		t.Errorf("%d bytes queued; want at most SendQueue plus one message, %d", queued, limit)
	}
	if queued < sendQueue {
		t.Errorf("%d bytes queued when Send reported ErrWouldBlock; want at least SendQueue (%d)", queued, sendQueue)
	}
	if inUse, limit := tr.Pool().Stats().InUse, sendQueue/size+2; inUse > limit {
		t.Errorf("%d pool buffers held by the queue; want at most %d", inUse, limit)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Errorf("heap grew by %d bytes while sending to a peer that does not read", grew)
	}
	if err := c.Flush(); !errors.Is(err, channel.ErrWouldBlock) {
		t.Errorf("Flush = %v; want ErrWouldBlock", err)
	}
}

// TestPoolExhaustedOnReceive receives with every pool buffer taken: a
// clear error, and the connection works once buffers come back.
func TestPoolExhaustedOnReceive(t *testing.T) {
	leakcheck.Check(t)
	pool, err := bufpool.New(bufpool.Config{BufferSize: 1024, MaxBuffers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tr := newTransport(t, Config{Pool: pool})
	c, peer := rawPeer(t, tr)
	var held []*bufpool.Buffer
	for range 2 {
		b, err := pool.TryGet()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
	}
	if _, err := peer.Write(frames([]byte("first"), []byte("second"))); err != nil {
		t.Fatal(err)
	}
	for _, blocking := range []bool{true, false} {
		c.SetBlocking(blocking)
		b, err := receive(t, c)
		if err == nil {
			b.Release()
			t.Fatal("Receive with the pool exhausted succeeded")
		}
		if !errors.Is(err, bufpool.ErrExhausted) {
			t.Errorf("Receive with the pool exhausted (blocking=%v) = %v; want bufpool.ErrExhausted", blocking, err)
		}
	}
	c.SetBlocking(true)
	held[0].Release()
	expectMessage(t, c, []byte("first"))
	held[1].Release()
	expectMessage(t, c, []byte("second"))
	if _, err := peer.Write(frames([]byte("third"))); err != nil {
		t.Fatal(err)
	}
	expectMessage(t, c, []byte("third"))
}

// TestBadPeersDoNotHarmOthers runs a selector echo server and has good
// clients echo through it while bad peers misbehave on the same selector.
func TestBadPeersDoNotHarmOthers(t *testing.T) {
	leakcheck.Check(t)
	tr := newTransport(t, Config{MaxMessageSize: 4096})
	l, err := tr.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := newSelector(t)
	l.SetBlocking(false)
	if _, err := s.Register(l, selectionkey.OpAccept, nil); err != nil {
		t.Fatal(err)
	}
	serverDone := make(chan struct{})
	var serverConns []*Conn
	go func() {
		defer close(serverDone)
		for {
			if _, err := s.Select(); err != nil {
				return // closed
			}
			for _, k := range s.SelectedKeys() {
				if k.Channel() == l {
					for {
						c, err := l.AcceptTCP()
						if err != nil {
							break
						}
						serverConns = append(serverConns, c)
						c.SetBlocking(false)
						s.Register(c, selectionkey.OpRead, nil)
					}
					continue
				}
				c := k.Channel().(*Conn)
				for {
					b, err := c.Receive()
					if errors.Is(err, channel.ErrWouldBlock) {
						break
					}
					if err != nil {
						c.Close()
						break
					}
					if err := c.Send(b); err != nil && !errors.Is(err, channel.ErrWouldBlock) {
						c.Close()
						break
					} else if err != nil {
						b.Release() // a good client reads its echoes: does not happen
					}
				}
			}
		}
	}()
	defer func() {
		s.Close()
		<-serverDone
		for _, c := range serverConns {
			c.Close()
		}
	}()

	var good []*Conn
	for range 3 {
		c, err := tr.Dial(context.Background(), l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		good = append(good, c)
	}
	round := 0
	echo := func() {
		t.Helper()
		for i, c := range good {
			want := []byte(fmt.Sprintf("round %d client %d", round, i))
			if err := c.Send(msg(t, tr.Pool(), want)); err != nil {
				t.Fatal(err)
			}
			expectMessage(t, c, want)
		}
		round++
	}
	echo()
	bad := []struct {
		name string
		act  func(p *net.TCPConn)
	}{
		{"oversized", func(p *net.TCPConn) { p.Write(header(1 << 30)) }},
		{"truncated", func(p *net.TCPConn) { p.Write(header(100)); p.Close() }},
		{"reset", func(p *net.TCPConn) { p.Write(append(header(100), 1, 2, 3)); p.SetLinger(0); p.Close() }},
		{"garbage", func(p *net.TCPConn) { p.Write(bytes.Repeat([]byte{0xff}, 1000)) }},
		{"idle-mid-frame", func(p *net.TCPConn) { p.Write(header(10)) }},
		{"never-reads", func(p *net.TCPConn) {
			for range 2000 {
				p.Write(frames(make([]byte, 4096)))
			}
		}},
	}
	var wg sync.WaitGroup
	for _, b := range bad {
		p, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.(*net.TCPConn).SetWriteDeadline(time.Now().Add(patience))
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.act(p.(*net.TCPConn))
		}()
		echo()
	}
	wg.Wait()
	for range 10 {
		echo()
	}
	waitFor(t, "the bad peers' protocol errors", func() bool { return tr.Stats().ProtocolErrors >= 2 })
}

// TestUserSpaceReadinessAfterReceive receives one message of a burst
// outside any select, with the whole burst in the socket so that the read
// drains it: the rest is staged in user space only, and a select must
// still report the key readable.
func TestUserSpaceReadinessAfterReceive(t *testing.T) {
	leakcheck.Check(t)
	tr := newTransport(t, Config{})
	a, b := pair(t, tr)
	s := newSelector(t)
	b.SetBlocking(false)
	k, err := s.Register(b, selectionkey.OpRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 50, 10
	for range n {
		if err := a.Send(msg(t, tr.Pool(), make([]byte, size))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the burst to reach the socket", func() bool {
		v, _ := unix.IoctlGetInt(b.fd.fd, unix.SIOCINQ)
		return v == n*(headerLen+size)
	})
	m, err := b.Receive()
	if err != nil {
		t.Fatal(err)
	}
	m.Release()
	if v, _ := unix.IoctlGetInt(b.fd.fd, unix.SIOCINQ); v != 0 || !b.frameReady() {
		t.Fatalf("setup: %d bytes left in the socket, frame staged %v; want 0 and true", v, b.frameReady())
	}
	got, err := s.SelectTimeout(patience / 2)
	if err != nil {
		t.Fatal(err)
	}
	if got != 1 || s.SelectedKeys()[0] != k || !k.IsReadable() {
		t.Fatalf("select with %d messages staged = %d keys; want the key readable", n-1, got)
	}
}

// TestZeroAllocEcho checks that a steady-state Send and Receive allocate
// nothing, in blocking mode and through a selector.
func TestZeroAllocEcho(t *testing.T) {
	for _, size := range []int{0, 64, 16 << 10, 100 << 10} {
		t.Run(fmt.Sprintf("blocking/%d", size), func(t *testing.T) {
			tr := newTransport(t, Config{})
			a, b := pair(t, tr)
			payload := make([]byte, size)
			echo := func() {
				m, err := tr.Pool().TryGet()
				if err != nil {
					t.Fatal(err)
				}
				m.SetLen(size)
				if err := a.Send(m); err != nil {
					t.Fatal(err)
				}
				m, err = b.Receive()
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Send(m); err != nil {
					t.Fatal(err)
				}
				m, err = a.Receive()
				if err != nil {
					t.Fatal(err)
				}
				if m.Len() != len(payload) {
					t.Fatalf("echo of %d bytes came back with %d", size, m.Len())
				}
				m.Release()
			}
			echo() // warm up
			if allocs := testing.AllocsPerRun(500, echo); allocs != 0 {
				t.Errorf("%v allocations per echo of %d bytes; want 0", allocs, size)
			}
		})
		t.Run(fmt.Sprintf("selector/%d", size), func(t *testing.T) {
			tr := newTransport(t, Config{})
			a, b := pair(t, tr)
			s := newSelector(t)
			a.SetBlocking(false)
			b.SetBlocking(false)
			ka, err := s.Register(a, selectionkey.OpRead, nil)
			if err != nil {
				t.Fatal(err)
			}
			kb, err := s.Register(b, selectionkey.OpRead, nil)
			if err != nil {
				t.Fatal(err)
			}
			// await selects until k is readable and receives from c.
			await := func(k *selectionkey.Key, c *Conn) *bufpool.Buffer {
				for {
					if m, err := c.Receive(); err == nil {
						return m
					} else if !errors.Is(err, channel.ErrWouldBlock) {
						t.Fatal(err)
					}
					if _, err := s.SelectTimeout(patience); err != nil {
						t.Fatal(err)
					}
				}
			}
			echo := func() {
				m, err := tr.Pool().TryGet()
				if err != nil {
					t.Fatal(err)
				}
				m.SetLen(size)
				if err := a.Send(m); err != nil {
					t.Fatal(err)
				}
				if err := b.Send(await(kb, b)); err != nil {
					t.Fatal(err)
				}
				await(ka, a).Release()
			}
			echo()
			if allocs := testing.AllocsPerRun(500, echo); allocs != 0 {
				t.Errorf("%v allocations per echo of %d bytes through a selector; want 0", allocs, size)
			}
		})
	}
}

// TestStats checks the transport's counters after a known exchange.
func TestStats(t *testing.T) {
	tr := newTransport(t, Config{})
	a, b := pair(t, tr)
	for _, n := range []int{0, 10, 1000} {
		if err := a.Send(msg(t, tr.Pool(), make([]byte, n))); err != nil {
			t.Fatal(err)
		}
		m, err := b.Receive()
		if err != nil {
			t.Fatal(err)
		}
		m.Release()
	}
	a.Close()
	b.Close()
	got := tr.Stats()
	want := Stats{MessagesIn: 3, MessagesOut: 3, BytesIn: 1010, BytesOut: 1010, ConnsOpened: 2, ConnsClosed: 2}
	if got != want {
		t.Errorf("Stats() = %+v; want %+v", got, want)
	}
}

// TestDialGivesUp dials, with a short context, a loopback listener that
// never accepts and whose accept queue is full: the kernel drops the SYNs
// and the connect cannot finish. Dial must give up with the context's
// error, promptly.
func TestDialGivesUp(t *testing.T) {
	leakcheck.Check(t)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	tr := newTransport(t, Config{})
	var queued []*Conn // connections that filled the accept queue
	defer func() {
		for _, c := range queued {
			c.Close()
		}
	}()
	for range 16 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		c, err := tr.Dial(ctx, addr)
		cancel()
		if err == nil {
			queued = append(queued, c)
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Dial to a full listener: %v, want the context's deadline error", err)
		}
		if d := time.Since(start); d > patience/2 {
			t.Errorf("Dial took %v to give up with a 200ms context", d)
		}
		return
	}
	t.Fatalf("%d dials to a listener that never accepts all succeeded", len(queued))
}

func TestNewRejectsBadConfig(t *testing.T) {
	pool, err := bufpool.New(bufpool.Config{BufferSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, cfg := range []Config{
		{MaxMessageSize: -1},
		{ReadBuffer: -1},
		{SendQueue: -1},
		{Pool: pool, MaxMessageSize: 2048},
	} {
		if tr, err := New(cfg); err == nil {
			tr.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCloseRacesWithSelector closes Conns at arbitrary moments while a
// selector serves them, sends are queued and the peer reads: under -race,
// this checks the locking between Close, Send, Receive and Handle, and
// that no buffer is lost.
func TestCloseRacesWithSelector(t *testing.T) {
	leakcheck.Check(t)
	tr := newTransport(t, Config{SendQueue: 32 << 10})
	s := newSelector(t)
	stop := make(chan struct{})
	selectDone := make(chan struct{})
	go func() {
		defer close(selectDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.SelectTimeout(time.Millisecond); err != nil {
				return
			}
			for _, k := range s.SelectedKeys() {
				c := k.Channel().(*Conn)
				if k.IsReadable() {
					for {
						b, err := c.Receive()
						if err != nil {
							break
						}
						b.Release()
					}
				}
			}
		}
	}()
	for i := range 30 {
		a, b := pair(t, tr)
		a.SetBlocking(false)
		if _, err := s.Register(a, selectionkey.OpRead|selectionkey.OpWrite, nil); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { // sender
			defer wg.Done()
			for range 200 {
				m, err := tr.Pool().TryGet()
				if err != nil {
					return
				}
				m.SetLen(4 << 10)
				if err := a.Send(m); err != nil {
					if errors.Is(err, channel.ErrWouldBlock) {
						m.Release() // still ours
					} else if !errors.Is(err, net.ErrClosed) {
						t.Errorf("Send on a Conn being closed = %v; want net.ErrClosed", err)
					}
					return
				}
			}
		}()
		progress := make(chan struct{}, 50)
		go func() { // the peer echoes a little, then reads
			defer wg.Done()
			defer close(progress)
			for j := range 50 {
				m, err := b.Receive()
				if err != nil {
					return
				}
				if j < 5 {
					b.Send(m)
				} else {
					m.Release()
				}
				progress <- struct{}{}
			}
		}()
		go func() { // closer: after a number of messages that varies
			defer wg.Done()
			for range i % 10 {
				if _, ok := <-progress; !ok {
					break
				}
			}
			a.Close()
			b.Close()
		}()
		wg.Wait()
	}
	close(stop)
	<-selectDone
	waitFor(t, "every buffer back", func() bool { return tr.Pool().Stats().InUse == 0 })
}
