package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rubin-go/rubin"
)

var (
	replica0 = Replica(0)
	replica2 = Replica(2)
	client7  = ClientPeer(7)
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, KeySize) }

// network is a way to get a listener and to dial it: plain TCP, or rubin's
// net.Conn face over its TCP transport.
type network struct {
	name   string
	listen func() (net.Listener, error)
	dial   func(addr string) (net.Conn, error)
}

var networks = []network{
	{"tcp",
		func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") },
		func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }},
	{"rubin",
		func() (net.Listener, error) { return rubin.Listen("tcp", "127.0.0.1:0") },
		func(addr string) (net.Conn, error) { return rubin.Dial("tcp", addr) }},
}

// result is one side's handshake outcome.
type result struct {
	l   *Link
	err error
}

// handshake runs Client against Server over a fresh connection of nw:
// dialer self with key, wanting replica2; the server is replica2 and finds
// keys in keys.
func handshake(t testing.TB, nw network, self Peer, key []byte, keys map[Peer][]byte, opts Options) (cl, sv result) {
	t.Helper()
	ln, err := nw.listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		l, err := Server(c, replica2, func(p Peer) ([]byte, bool) { k, ok := keys[p]; return k, ok }, opts)
		done <- result{l, err}
	}()
	c, err := nw.dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	l, err := Client(c, self, replica2, key, opts)
	cl = result{l, err}
	sv = <-done
	t.Cleanup(func() {
		for _, r := range []result{cl, sv} {
			if r.l != nil {
				r.l.Close()
			}
		}
	})
	return cl, sv
}

// pair returns two linked ends over nw, failing the test on any error.
func pair(t testing.TB, nw network, opts Options) (dialer, server *Link) {
	t.Helper()
	cl, sv := handshake(t, nw, replica0, testKey(1), map[Peer][]byte{replica0: testKey(1)}, opts)
	if cl.err != nil || sv.err != nil {
		t.Fatalf("handshake: dialer: %v; server: %v", cl.err, sv.err)
	}
	return cl.l, sv.l
}

func TestHandshakeAndFrames(t *testing.T) {
	for _, nw := range networks {
		t.Run(nw.name, func(t *testing.T) {
			keys := map[Peer][]byte{replica0: testKey(1), client7: testKey(2)}
			for _, self := range []Peer{replica0, client7} {
				cl, sv := handshake(t, nw, self, keys[self], keys, Options{})
				if cl.err != nil || sv.err != nil {
					t.Fatalf("handshake as %s: dialer: %v; server: %v", self, cl.err, sv.err)
				}
				if cl.l.Remote() != replica2 || sv.l.Remote() != self {
					t.Fatalf("Remote: dialer sees %s, server sees %s", cl.l.Remote(), sv.l.Remote())
				}
				// Larger than rubin's message size, so it spans messages.
				big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
				payloads := [][]byte{[]byte("hello"), {}, big, []byte("last")}
				for _, dir := range [][2]*Link{{cl.l, sv.l}, {sv.l, cl.l}} {
					go func() {
						for _, p := range payloads {
							if err := dir[0].Send(p); err != nil {
								t.Error(err)
								return
							}
						}
					}()
					for i, want := range payloads {
						got, err := dir[1].Recv()
						if err != nil {
							t.Fatalf("frame %d: %v", i, err)
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("frame %d: got %d bytes, want %d", i, len(got), len(want))
						}
					}
				}
			}
		})
	}
}

func TestHandshakeRejects(t *testing.T) {
	nw := networks[0]
	t.Run("wrong key", func(t *testing.T) {
		cl, sv := handshake(t, nw, replica0, testKey(9), map[Peer][]byte{replica0: testKey(1)}, Options{})
		if !errors.Is(cl.err, ErrBadMAC) || !strings.Contains(cl.err.Error(), "link: handshake with replica 2: bad MAC") {
			t.Errorf("dialer: %v, want bad MAC", cl.err)
		}
		if sv.err == nil || !strings.Contains(sv.err.Error(), "link: handshake with replica 0: reading confirmation") {
			t.Errorf("server: %v, want a failed confirmation", sv.err)
		}
	})
	t.Run("forged confirmation", func(t *testing.T) {
		// A dialer that knows the server's reply but not the key cannot
		// produce macC: the server catches it itself.
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		done := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, err = Server(c, replica2, func(Peer) ([]byte, bool) { return testKey(1), true }, Options{})
			}
			done <- err
		}()
		c, _ := net.Dial("tcp", ln.Addr().String())
		defer c.Close()
		hello := appendPeer(appendPeer(append([]byte(magic), version), replica0), replica2)
		hello = append(hello, make([]byte, nonceSize)...)
		c.Write(hello)
		io.ReadFull(c, make([]byte, replySize))
		c.Write(make([]byte, confirmSz))
		if err := <-done; !errors.Is(err, ErrBadMAC) || !strings.Contains(err.Error(), "bad MAC from dialer") {
			t.Fatalf("server: %v, want bad MAC", err)
		}
	})
	t.Run("unknown peer", func(t *testing.T) {
		cl, sv := handshake(t, nw, client7, testKey(1), map[Peer][]byte{replica0: testKey(1)}, Options{})
		if !errors.Is(sv.err, ErrUnknownPeer) || !strings.Contains(sv.err.Error(), "client 7") {
			t.Errorf("server: %v, want unknown peer client 7", sv.err)
		}
		if cl.err == nil || !strings.Contains(cl.err.Error(), "server closed") {
			t.Errorf("dialer: %v, want server closed", cl.err)
		}
	})
	t.Run("client id is not a replica id", func(t *testing.T) {
		// Replica 0 and client 0 are different peers with different keys.
		cl, sv := handshake(t, nw, ClientPeer(0), testKey(1), map[Peer][]byte{replica0: testKey(1)}, Options{})
		if !errors.Is(sv.err, ErrUnknownPeer) || cl.err == nil {
			t.Errorf("server: %v; dialer: %v", sv.err, cl.err)
		}
	})
	t.Run("bad key length", func(t *testing.T) {
		c1, c2 := net.Pipe()
		defer c2.Close()
		if _, err := Client(c1, replica0, replica2, []byte("short"), Options{}); err == nil || !strings.Contains(err.Error(), "key is 5 bytes") {
			t.Fatalf("Client with short key: %v", err)
		}
	})
	t.Run("not the protocol", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		done := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, err = Server(c, replica2, func(Peer) ([]byte, bool) { return testKey(1), true }, Options{})
			}
			done <- err
		}()
		c, _ := net.Dial("tcp", ln.Addr().String())
		defer c.Close()
		c.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 4))
		if err := <-done; !errors.Is(err, ErrProtocol) {
			t.Fatalf("server: %v, want protocol mismatch", err)
		}
	})
}

func TestWrongPeer(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, err = Server(c, replica2, func(Peer) ([]byte, bool) { return testKey(1), true }, Options{})
		}
		done <- err
	}()
	c, _ := net.Dial("tcp", ln.Addr().String())
	_, cerr := Client(c, replica0, Replica(5), testKey(1), Options{})
	if err := <-done; !errors.Is(err, ErrWrongPeer) || !strings.Contains(err.Error(), "wants replica 5, this is replica 2") {
		t.Fatalf("server: %v, want wrong peer", err)
	}
	if cerr == nil {
		t.Fatal("dialer succeeded against the wrong server")
	}
}

func TestHandshakeTimeout(t *testing.T) {
	for _, nw := range networks {
		t.Run(nw.name, func(t *testing.T) {
			opts := Options{HandshakeTimeout: 200 * time.Millisecond}
			ln, err := nw.listen()
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				c, err := ln.Accept()
				if err == nil {
					accepted <- c
				}
			}()

			// A silent server: accepts and never answers.
			c, err := nw.dial(ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = Client(c, replica0, replica2, testKey(1), opts)
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Client against a silent server: %v, want deadline exceeded", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("Client took %v", d)
			}

			// A silent dialer: connects and never says hello.
			sc := <-accepted
			silent, err := nw.dial(ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			sc.Close()
			go func() {
				c, err := ln.Accept()
				if err == nil {
					accepted <- c
				}
			}()
			sc = <-accepted
			start = time.Now()
			_, err = Server(sc, replica2, func(Peer) ([]byte, bool) { return testKey(1), true }, opts)
			if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "reading hello") {
				t.Fatalf("Server against a silent dialer: %v, want deadline exceeded", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("Server took %v", d)
			}
		})
	}
}

// proxy is a man in the middle between a dialer and a server: it forwards
// bytes both ways, records them, can rewrite the dialer's stream, and can
// inject bytes towards the server.
type proxy struct {
	ln     net.Listener
	target string
	// mutate, if set, may change a chunk of the dialer's stream in place;
	// off is the chunk's offset in that stream.
	mutate func(off int, b []byte)

	mu       sync.Mutex
	c2s, s2c []byte   // everything forwarded
	toServer net.Conn // for inject
	wmu      sync.Mutex
	ready    chan bool // closed when toServer is set
}

func newProxy(t *testing.T, target string, mutate func(off int, b []byte)) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, mutate: mutate, ready: make(chan bool)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			return
		}
		t.Cleanup(func() { in.Close(); out.Close() })
		p.toServer = out
		close(p.ready)
		go p.pump(in, out, &p.c2s, p.mutate)
		go p.pump(out, in, &p.s2c, nil)
	}()
	return p
}

func (p *proxy) pump(src, dst net.Conn, record *[]byte, mutate func(int, []byte)) {
	buf := make([]byte, 4096)
	off := 0
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if mutate != nil {
				mutate(off, buf[:n])
			}
			off += n
			p.mu.Lock()
			*record = append(*record, buf[:n]...)
			p.mu.Unlock()
			p.wmu.Lock()
			_, werr := dst.Write(buf[:n])
			p.wmu.Unlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *proxy) inject(b []byte) {
	<-p.ready
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.toServer.Write(b)
}

func (p *proxy) recorded() (c2s, s2c []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.c2s), bytes.Clone(p.s2c)
}

// viaProxy makes a dialer-server pair whose connection goes through a
// proxy.
func viaProxy(t *testing.T, mutate func(off int, b []byte)) (dialer, server *Link, p *proxy) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p = newProxy(t, ln.Addr().String(), mutate)
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		l, err := Server(c, replica2, func(Peer) ([]byte, bool) { return testKey(1), true }, Options{})
		done <- result{l, err}
	}()
	c, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	dl, err := Client(c, replica0, replica2, testKey(1), Options{})
	sv := <-done
	if err != nil || sv.err != nil {
		t.Fatalf("handshake via proxy: dialer: %v; server: %v", err, sv.err)
	}
	t.Cleanup(func() { dl.Close(); sv.l.Close() })
	return dl, sv.l, p
}

// The dialer's stream: hello, confirmation, then frames.
const dialerHandshakeBytes = helloSize + confirmSz

func frameSize(payload int) int { return HeaderSize + payload + TagSize }

func TestTamperDetected(t *testing.T) {
	payload := []byte("pre-prepare v=1 n=7")
	first := dialerHandshakeBytes
	for _, tc := range []struct {
		name string
		at   int  // offset in the dialer's stream
		bit  byte // bit to flip
	}{
		{"payload", first + HeaderSize + 3, 0x01},
		{"tag", first + HeaderSize + len(payload) + 5, 0x80},
		{"length grows", first + HeaderSize - 1, 0x01}, // 19 -> 18: misaligned
		{"length huge", first, 0x80},
		{"second frame", first + frameSize(len(payload)) + HeaderSize, 0x40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dl, sv, _ := viaProxy(t, func(off int, b []byte) {
				if i := tc.at - off; i >= 0 && i < len(b) {
					b[i] ^= tc.bit
				}
			})
			// Two frames, so a misaligned stream has bytes to misread.
			for range 2 {
				if err := dl.Send(payload); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			for range 2 {
				var got []byte
				got, err = sv.Recv()
				if err != nil {
					break
				}
				if !bytes.Equal(got, payload) {
					t.Fatalf("accepted a tampered frame: %q", got)
				}
			}
			if !errors.Is(err, ErrBadMAC) && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("Recv: %v, want bad MAC or frame too large", err)
			}
			if !strings.HasPrefix(err.Error(), "link: recv from replica 0: frame ") {
				t.Fatalf("error lacks context: %v", err)
			}
			// Final: the link is closed and keeps failing.
			if _, err2 := sv.Recv(); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("Recv after failure: %v", err2)
			}
		})
	}
}

func TestReplayDetected(t *testing.T) {
	t.Run("within connection", func(t *testing.T) {
		dl, sv, p := viaProxy(t, nil)
		if err := dl.Send([]byte("commit n=1")); err != nil {
			t.Fatal(err)
		}
		if _, err := sv.Recv(); err != nil {
			t.Fatal(err)
		}
		c2s, _ := p.recorded()
		p.inject(c2s[dialerHandshakeBytes:]) // the same frame again
		if _, err := sv.Recv(); !errors.Is(err, ErrBadMAC) || !strings.Contains(err.Error(), "frame 1") {
			t.Fatalf("replayed frame: %v, want bad MAC at frame 1", err)
		}
	})
	t.Run("deleted frame", func(t *testing.T) {
		// Drop the first frame: the second then fails, being checked as
		// frame 0.
		msg := []byte("frame")
		// A sender that skips a sequence number acts like a proxy that
		// deleted a frame.
		c1, c2 := net.Pipe()
		defer c1.Close()
		defer c2.Close()
		snd := newLink(c1, replica0, replica2, testKey(3), testKey(4), Options{})
		rcv := newLink(c2, replica2, replica0, testKey(4), testKey(3), Options{})
		snd.wseq++ // as if frame 0 was sent and lost
		go snd.Send(msg)
		if _, err := rcv.Recv(); !errors.Is(err, ErrBadMAC) {
			t.Fatalf("frame after a gap: %v, want bad MAC", err)
		}
	})
	t.Run("across connections", func(t *testing.T) {
		dl1, sv1, p1 := viaProxy(t, nil)
		dl1.Send([]byte("from the first connection"))
		if _, err := sv1.Recv(); err != nil {
			t.Fatal(err)
		}
		old, _ := p1.recorded()
		_, sv2, p2 := viaProxy(t, nil)
		p2.inject(old[dialerHandshakeBytes:])
		if _, err := sv2.Recv(); !errors.Is(err, ErrBadMAC) {
			t.Fatalf("frame from an old connection: %v, want bad MAC", err)
		}
	})
	t.Run("reflected", func(t *testing.T) {
		// The server's own frame sent back to it: same sequence number,
		// other direction's key.
		dl, sv, p := viaProxy(t, nil)
		sv.Send([]byte("reply"))
		if _, err := dl.Recv(); err != nil {
			t.Fatal(err)
		}
		_, s2c := p.recorded()
		p.inject(s2c[replySize:])
		if _, err := sv.Recv(); !errors.Is(err, ErrBadMAC) {
			t.Fatalf("reflected frame: %v, want bad MAC", err)
		}
	})
}

func TestOversize(t *testing.T) {
	// Over a socket: the length alone is rejected.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	done := make(chan result, 1)
	go func() {
		c, _ := ln.Accept()
		l, err := Server(c, replica2, func(Peer) ([]byte, bool) { return testKey(1), true }, Options{MaxFrame: 1 << 10})
		done <- result{l, err}
	}()
	raw, _ := net.Dial("tcp", ln.Addr().String())
	dl, err := Client(raw, replica0, replica2, testKey(1), Options{MaxFrame: 1 << 20})
	sv := <-done
	if err != nil || sv.err != nil {
		t.Fatal(err, sv.err)
	}
	defer dl.Close()
	defer sv.l.Close()
	raw.Write([]byte{0, 0, 0x04, 0x01}) // 1025 bytes, and nothing after
	if _, err := sv.l.Recv(); !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "length 1025, limit 1024") {
		t.Fatalf("Recv: %v, want frame too large", err)
	}

	// Send refuses too, without breaking the link.
	small := newLink(nopConn{Reader: bytes.NewReader(nil)}, replica0, replica2, testKey(1), testKey(1), Options{MaxFrame: 8})
	if err := small.Send(make([]byte, 9)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Send of 9 bytes with MaxFrame 8: %v", err)
	}
	if err := small.Send(make([]byte, 8)); err != nil {
		t.Fatalf("Send after a refused frame: %v", err)
	}
}

func TestOversizeDoesNotAllocate(t *testing.T) {
	measure := func(stream []byte, maxFrame int) (alloc uint64, err error) {
		l := newLink(nopConn{Reader: bytes.NewReader(stream)}, replica2, replica0, testKey(1), testKey(1), Options{MaxFrame: maxFrame})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err = l.Recv()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc, err
	}
	// A length past the limit: rejected before any payload buffer.
	alloc, err := measure([]byte{0xff, 0xff, 0xff, 0xff}, DefaultMaxFrame)
	if !errors.Is(err, ErrFrameTooLarge) || alloc > 16<<10 {
		t.Fatalf("4 GiB length: err %v, allocated %d bytes", err, alloc)
	}
	// A length within the limit, but the peer stalls: memory follows the
	// bytes that arrived, not the announced length.
	stream := binary.BigEndian.AppendUint32(nil, DefaultMaxFrame)
	stream = append(stream, make([]byte, 100)...)
	alloc, err = measure(stream, DefaultMaxFrame)
	if !errors.Is(err, io.ErrUnexpectedEOF) || alloc > 1<<20 {
		t.Fatalf("16 MiB length, 100 bytes: err %v, allocated %d bytes", err, alloc)
	}
}

func TestConcurrent(t *testing.T) {
	for _, nw := range networks {
		t.Run(nw.name, func(t *testing.T) {
			dl, sv := pair(t, nw, Options{})
			const senders, frames = 4, 500
			var wg sync.WaitGroup
			for _, ends := range [][2]*Link{{dl, sv}, {sv, dl}} {
				src, dst := ends[0], ends[1]
				for s := range senders {
					wg.Go(func() {
						for i := range frames {
							p := fmt.Appendf(nil, "%d:%d:%s", s, i, bytes.Repeat([]byte{'x'}, i%300))
							var err error
							if i%3 == 0 {
								// Mix batched frames with single ones.
								if err = src.Queue(p); err == nil {
									err = src.Flush()
								}
							} else {
								err = src.Send(p)
							}
							if err != nil {
								t.Errorf("sender %d frame %d: %v", s, i, err)
								return
							}
						}
					})
				}
				wg.Go(func() {
					next := make([]int, senders)
					var buf []byte
					for range senders * frames {
						var err error
						buf, err = dst.RecvAppend(buf[:0])
						if err != nil {
							t.Errorf("recv: %v", err)
							return
						}
						var s, i int
						if _, err := fmt.Sscanf(string(buf), "%d:%d:", &s, &i); err != nil || i != next[s] {
							t.Errorf("frame %q out of order (want %d:%d)", buf, s, next[s])
							return
						}
						next[s]++
					}
				})
			}
			wg.Wait()
		})
	}
}

// countConn counts the writes that reach the connection.
type countConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

func TestQueueFlush(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	done := make(chan result, 1)
	go func() {
		c, _ := ln.Accept()
		l, err := Server(c, replica2, func(Peer) ([]byte, bool) { return testKey(1), true }, Options{})
		done <- result{l, err}
	}()
	raw, _ := net.Dial("tcp", ln.Addr().String())
	cc := &countConn{Conn: raw}
	dl, err := Client(cc, replica0, replica2, testKey(1), Options{})
	sv := <-done
	if err != nil || sv.err != nil {
		t.Fatal(err, sv.err)
	}
	defer dl.Close()
	defer sv.l.Close()

	const n = 100
	before := cc.writes.Load()
	for i := range n {
		if err := dl.Queue(fmt.Appendf(nil, "request %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if w := cc.writes.Load() - before; w != 0 {
		t.Fatalf("Queue wrote %d times before Flush", w)
	}
	if err := dl.Flush(); err != nil {
		t.Fatal(err)
	}
	if w := cc.writes.Load() - before; w != 1 {
		t.Fatalf("%d frames took %d writes, want 1", n, w)
	}
	if err := dl.Flush(); err != nil || cc.writes.Load()-before != 1 {
		t.Fatalf("empty Flush: %v, writes %d", err, cc.writes.Load()-before)
	}
	for i := range n {
		got, err := sv.l.Recv()
		if err != nil || string(got) != fmt.Sprintf("request %d", i) {
			t.Fatalf("frame %d: %q, %v", i, got, err)
		}
	}
}

func TestCloseAndEOF(t *testing.T) {
	dl, sv := pair(t, networks[0], Options{})
	errc := make(chan error, 1)
	go func() {
		_, err := sv.Recv()
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	sv.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Recv unblocked by Close: %v, want net.ErrClosed", err)
	}
	if _, err := dl.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after the peer closed: %v, want EOF", err)
	}
	if err := sv.Send([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Send after Close: %v, want net.ErrClosed", err)
	}
}

func TestWriteTimeout(t *testing.T) {
	// The server never reads: once the socket buffers fill, Send must
	// fail instead of blocking forever.
	dl, _ := pair(t, networks[0], Options{WriteTimeout: 100 * time.Millisecond})
	big := make([]byte, 1<<20)
	start := time.Now()
	var err error
	for i := 0; i < 256 && err == nil; i++ {
		err = dl.Send(big)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Send to a peer that does not read: %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v", d)
	}
	if err2 := dl.Send([]byte("x")); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("Send after a failed Send: %v", err2)
	}
}

// nopConn is a net.Conn that reads from a Reader and discards writes.
type nopConn struct{ io.Reader }

func (nopConn) Write(b []byte) (int, error)      { return len(b), nil }
func (nopConn) Close() error                     { return nil }
func (nopConn) LocalAddr() net.Addr              { return nil }
func (nopConn) RemoteAddr() net.Addr             { return nil }
func (nopConn) SetDeadline(time.Time) error      { return nil }
func (nopConn) SetReadDeadline(time.Time) error  { return nil }
func (nopConn) SetWriteDeadline(time.Time) error { return nil }

// writeConn collects writes.
type writeConn struct {
	nopConn
	buf *bytes.Buffer
}

func (c writeConn) Write(b []byte) (int, error) { return c.buf.Write(b) }

// encodeFrames returns the wire bytes of payloads sent with key.
func encodeFrames(key []byte, payloads ...[]byte) []byte {
	var buf bytes.Buffer
	l := newLink(writeConn{buf: &buf}, replica0, replica2, key, key, Options{})
	for _, p := range payloads {
		l.Send(p)
	}
	return buf.Bytes()
}

func FuzzRecv(f *testing.F) {
	key := testKey(5)
	f.Add(encodeFrames(key, []byte("one"), []byte{}, []byte("three")))
	f.Add(encodeFrames(key, bytes.Repeat([]byte("z"), 70000)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 1, 'x'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, stream []byte) {
		const maxFrame = 1 << 20
		l := newLink(nopConn{Reader: bytes.NewReader(stream)}, replica2, replica0, key, key, Options{MaxFrame: maxFrame})
		total := 0
		var buf []byte
		for i := 0; ; i++ {
			var p []byte
			var err error
			if i%2 == 0 {
				p, err = l.Recv()
			} else {
				buf, err = l.RecvAppend(buf[:0])
				p = buf
			}
			if err != nil {
				if _, err2 := l.Recv(); err2 == nil {
					t.Fatal("Recv succeeded after a failure")
				}
				break
			}
			total += frameSize(len(p))
			if total > len(stream) {
				t.Fatalf("received %d frame bytes from a %d-byte stream", total, len(stream))
			}
			if cap(p) > 2*len(stream)+readChunk {
				t.Fatalf("payload buffer of %d bytes for a %d-byte stream", cap(p), len(stream))
			}
		}
	})
}

func FuzzServerHandshake(f *testing.F) {
	hello := appendPeer(appendPeer(append([]byte(magic), version), replica0), replica2)
	hello = append(hello, make([]byte, nonceSize+confirmSz)...)
	f.Add(hello)
	f.Add([]byte("RBFL"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		_, err := Server(nopConn{Reader: bytes.NewReader(stream)}, replica2,
			func(Peer) ([]byte, bool) { return testKey(1), true }, Options{})
		if err == nil {
			t.Fatal("handshake succeeded without the key")
		}
	})
}

func BenchmarkRoundTrip64(b *testing.B) {
	for _, nw := range networks {
		b.Run(nw.name, func(b *testing.B) {
			dl, sv := pair(b, nw, Options{})
			go func() {
				var buf []byte
				for {
					var err error
					if buf, err = sv.RecvAppend(buf[:0]); err != nil {
						return
					}
					if sv.Send(buf) != nil {
						return
					}
				}
			}()
			msg := make([]byte, 64)
			b.ReportAllocs()
			b.SetBytes(64)
			var buf []byte
			for b.Loop() {
				if err := dl.Send(msg); err != nil {
					b.Fatal(err)
				}
				var err error
				if buf, err = dl.RecvAppend(buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSend(b *testing.B) {
	for _, nw := range networks {
		for _, size := range []int{64, 1 << 10, 64 << 10} {
			for _, batch := range []int{1, 32} {
				if batch > 1 && size > 1<<10 {
					continue
				}
				b.Run(fmt.Sprintf("%s/%dB/batch%d", nw.name, size, batch), func(b *testing.B) {
					dl, sv := pair(b, nw, Options{})
					drained := make(chan struct{})
					go func() {
						defer close(drained)
						var buf []byte
						for {
							var err error
							if buf, err = sv.RecvAppend(buf[:0]); err != nil {
								return
							}
						}
					}()
					msg := make([]byte, size)
					b.ReportAllocs()
					b.SetBytes(int64(size))
					i := 0
					for b.Loop() {
						var err error
						if batch == 1 {
							err = dl.Send(msg)
						} else if err = dl.Queue(msg); err == nil && i%batch == batch-1 {
							err = dl.Flush()
						}
						if err != nil {
							b.Fatal(err)
						}
						i++
					}
					dl.Flush()
					dl.Close()
					<-drained
				})
			}
		}
	}
}

// FrameBuffered tells whether Recv can return a frame without reading:
// true while frames written together remain, false once nothing is
// buffered.
func TestFrameBuffered(t *testing.T) {
	a, b := net.Pipe()
	k1, k2 := testKey(1), testKey(2)
	w := newLink(a, replica0, replica2, k1, k2, Options{})
	r := newLink(b, replica2, replica0, k2, k1, Options{})
	defer w.Close()
	defer r.Close()
	if r.FrameBuffered() {
		t.Fatal("FrameBuffered before anything arrived")
	}
	const n = 5
	errc := make(chan error, 1)
	go func() {
		for i := range n {
			if err := w.Queue(fmt.Appendf(nil, "frame %d", i)); err != nil {
				errc <- err
				return
			}
		}
		errc <- w.Flush() // one Write: the pipe hands it over whole
	}()
	for i := range n {
		got, err := r.Recv()
		if err != nil || string(got) != fmt.Sprintf("frame %d", i) {
			t.Fatalf("frame %d: %q, %v", i, got, err)
		}
		if want := i < n-1; r.FrameBuffered() != want {
			t.Fatalf("after frame %d: FrameBuffered = %v, want %v", i, !want, want)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
