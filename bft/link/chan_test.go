package link

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// A hub serves Chans on one selector, as a driver does: it accepts,
// connects, runs handshakes, collects every payload each Chan receives
// and flushes what they queued.
type hub struct {
	t   *testing.T
	tr  anytransport.Transport
	sel *selector.Selector
	ln  anytransport.Listener
	// accept makes the Chan of an accepted channel; nil: accept nothing.
	accept func(channel.Conn) *Chan
	ends   []*end
}

// An end is one Chan of a hub and what it received.
type end struct {
	c    *Chan
	k    *selectionkey.Key
	up   bool
	got  [][]byte
	err  error // final: handshake or receive
	werr error
}

func newHub(t *testing.T) *hub {
	t.Helper()
	tr, err := anytransport.Open("tcp", anytransport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sel, err := selector.New(selector.Config{})
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	h := &hub{t: t, tr: tr, sel: sel}
	t.Cleanup(func() {
		for _, e := range h.ends {
			e.c.Close()
		}
		if h.ln != nil {
			h.ln.Close()
		}
		sel.Close()
		if n := tr.Pool().Stats().InUse; n != 0 {
			t.Errorf("%d pool buffers still in use after every Chan closed", n)
		}
		tr.Close()
	})
	return h
}

// listen starts accepting on a port of its own and returns the address.
func (h *hub) listen(accept func(channel.Conn) *Chan) string {
	h.t.Helper()
	ln, err := h.tr.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	if err := ln.SetBlocking(false); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.sel.Register(ln, selectionkey.OpAccept, nil); err != nil {
		h.t.Fatal(err)
	}
	h.ln, h.accept = ln, accept
	return ln.LocalAddr().String()
}

// dial starts a Chan to addr.
func (h *hub) dial(addr string, self, remote Peer, key []byte) *end {
	h.t.Helper()
	conn, err := h.tr.Connect(context.Background(), addr)
	if err != nil {
		h.t.Fatal(err)
	}
	c, err := DialChan(conn, self, remote, key, Options{HandshakeTimeout: 2 * time.Second})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.add(c, selectionkey.OpConnect)
}

func (h *hub) add(c *Chan, ops selectionkey.Ops) *end {
	e := &end{c: c}
	k, err := h.sel.Register(c.Conn().(selector.Selectable), ops, e)
	if err != nil {
		h.t.Fatal(err)
	}
	e.k = k
	h.ends = append(h.ends, e)
	return e
}

// run serves the hub until cond holds, for at most 10 seconds.
func (h *hub) run(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		if _, err := h.sel.SelectTimeout(5 * time.Millisecond); err != nil {
			h.t.Fatal(err)
		}
		for _, k := range h.sel.SelectedKeys() {
			if k.IsAcceptable() {
				h.acceptAll()
				continue
			}
			h.serve(k.Attachment().(*end))
		}
		for _, e := range h.ends {
			h.serve(e) // handshake timeouts, and input the Chan buffers
		}
	}
}

func (h *hub) acceptAll() {
	for {
		conn, err := h.ln.AcceptConn()
		if errors.Is(err, channel.ErrWouldBlock) {
			return
		}
		if err != nil {
			h.t.Fatal(err)
		}
		if err := conn.SetBlocking(false); err != nil {
			h.t.Fatal(err)
		}
		if h.accept == nil {
			conn.Close()
			continue
		}
		h.add(h.accept(conn), selectionkey.OpRead)
	}
}

func (h *hub) serve(e *end) {
	if e.err != nil {
		return
	}
	if e.k.Valid() && e.k.Interest()&selectionkey.OpConnect != 0 {
		ok, err := e.c.Conn().FinishConnect()
		if err != nil {
			e.err = err
			return
		}
		if !ok {
			return
		}
		if err := e.k.SetInterest(selectionkey.OpRead); err != nil {
			h.t.Fatal(err)
		}
	}
	if !e.up {
		done, err := e.c.Handshake()
		if err != nil {
			e.err = err
			e.c.Close() // as a driver does: the peer sees the end
			return
		}
		if !done {
			e.flush()
			return
		}
		e.up = true
	}
	for {
		p, err := e.c.Next()
		if errors.Is(err, channel.ErrWouldBlock) {
			break
		}
		if err != nil {
			e.err = err
			return
		}
		e.got = append(e.got, bytes.Clone(p))
	}
	e.flush()
}

func (e *end) flush() {
	if e.werr != nil {
		return
	}
	err := e.c.Flush()
	ops := selectionkey.OpRead
	if errors.Is(err, channel.ErrWouldBlock) {
		ops |= selectionkey.OpWrite
	} else if err != nil {
		e.werr = err
		return
	}
	if e.k.Valid() {
		e.k.SetInterest(ops)
	}
}

// chanPair connects a dialing Chan to an accepting one on h.
func chanPair(t *testing.T, h *hub) (dialer, server *end) {
	t.Helper()
	key := testKey(1)
	var srv *end
	addr := h.listen(func(conn channel.Conn) *Chan {
		return AcceptChan(conn, Replica(1), func(p Peer) ([]byte, bool) { return key, p == Replica(0) }, Options{})
	})
	d := h.dial(addr, Replica(0), Replica(1), key)
	h.run("handshake", func() bool {
		if len(h.ends) == 2 {
			srv = h.ends[1]
		}
		if d.err != nil || (srv != nil && srv.err != nil) {
			t.Fatalf("handshake: dialer %v, server %v", d.err, srv.err)
		}
		return d.up && srv != nil && srv.up
	})
	if srv.c.Remote() != Replica(0) || d.c.Remote() != Replica(1) {
		t.Fatalf("remotes %v and %v", srv.c.Remote(), d.c.Remote())
	}
	return d, srv
}

// payloads are frames of the sizes that matter: empty, small, a buffer's
// worth and more (spanning messages, copied), and many small ones that
// share buffers.
func payloads(bufSize int) [][]byte {
	var ps [][]byte
	for i, n := range []int{0, 1, 100, 1000, bufSize - 100, bufSize, 3*bufSize + 7} {
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(i + j)
		}
		ps = append(ps, p)
	}
	for i := range 500 {
		ps = append(ps, fmt.Appendf(nil, "small frame %d", i))
	}
	return ps
}

func TestChanFrames(t *testing.T) {
	h := newHub(t)
	d, s := chanPair(t, h)
	ps := payloads(h.tr.Pool().BufferSize())
	for i, p := range ps {
		var err error
		if i%2 == 0 {
			_, err = d.c.Encode(0, func(dst []byte) []byte { return append(dst, p...) })
		} else {
			_, err = d.c.Append(p)
		}
		if err != nil {
			t.Fatal(err)
		}
		// And back, the other way.
		if _, err := s.c.Append(p); err != nil {
			t.Fatal(err)
		}
	}
	d.flush()
	s.flush()
	h.run("frames", func() bool { return len(s.got) == len(ps) && len(d.got) == len(ps) || d.err != nil || s.err != nil })
	if d.err != nil || s.err != nil {
		t.Fatalf("receive: %v, %v", d.err, s.err)
	}
	for i, p := range ps {
		if !bytes.Equal(s.got[i], p) || !bytes.Equal(d.got[i], p) {
			t.Fatalf("frame %d (%d bytes) arrived changed", i, len(p))
		}
	}
	// A frame over MaxFrame is refused, and the link stays usable.
	d.c.opts.MaxFrame = 10
	if _, err := d.c.Append(make([]byte, 11)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("an 11-byte frame over a limit of 10: %v", err)
	}
	if _, err := d.c.Encode(0, func(dst []byte) []byte { return append(dst, make([]byte, 11)...) }); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("an 11-byte frame over a limit of 10: %v", err)
	}
	if _, err := d.c.Encode(HeaderSize+3+TagSize, func(dst []byte) []byte { return append(dst, "four"...) }); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("a 4-byte payload in room for 3: %v", err)
	}
	if _, err := d.c.Append([]byte("fits")); err != nil {
		t.Fatal(err)
	}
	d.flush()
	n := len(s.got)
	h.run("a frame after a refused one", func() bool { return len(s.got) > n || s.err != nil })
	if s.err != nil || string(s.got[n]) != "fits" {
		t.Fatalf("after a refused frame: %v, %q", s.err, s.got[n:])
	}
	// Orderly close: io.EOF between frames.
	d.c.Close()
	h.ends = h.ends[1:]
	h.run("EOF", func() bool { return s.err != nil })
	if s.err != io.EOF {
		t.Fatalf("receive after the peer closed: %v, want io.EOF", s.err)
	}
}

// TestChanShared sends one buffer to three Chans, between frames of their
// own: each gets it once, in order, and the pool gets it back.
func TestChanShared(t *testing.T) {
	h := newHub(t)
	key := testKey(2)
	addr := h.listen(func(conn channel.Conn) *Chan {
		return AcceptChan(conn, Replica(9), func(p Peer) ([]byte, bool) { return key, !p.Client }, Options{})
	})
	var ds []*end
	for i := range 3 {
		ds = append(ds, h.dial(addr, Replica(uint64(i)), Replica(9), key))
	}
	h.run("handshakes", func() bool {
		up := 0
		for _, e := range h.ends {
			if e.err != nil {
				t.Fatal(e.err)
			}
			if e.up {
				up++
			}
		}
		return up == 6
	})
	pool := h.tr.Pool()
	shared := func(p []byte) *bufpool.Buffer {
		b, err := pool.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		b.SetLen(HeaderSize)
		b.Write(p)
		PutHeader(b.Bytes())
		return b
	}
	big := bytes.Repeat([]byte("pre-prepare "), 8000)
	for round := range 20 {
		b := shared(append(big, byte(round)))
		for _, e := range ds {
			if _, err := e.c.Append(fmt.Appendf(nil, "before %d", round)); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.SendShared(b); err != nil {
				t.Fatal(err)
			}
			if _, err := e.c.Encode(0, func(dst []byte) []byte { return fmt.Appendf(dst, "after %d", round) }); err != nil {
				t.Fatal(err)
			}
		}
		b.Release()
		for _, e := range ds {
			e.flush()
		}
	}
	srvs := h.ends[3:]
	h.run("shared frames", func() bool {
		for _, e := range srvs {
			if e.err != nil {
				t.Fatal(e.err)
			}
			if len(e.got) < 60 {
				return false
			}
		}
		return true
	})
	for _, e := range srvs {
		for round := range 20 {
			g := e.got[3*round : 3*round+3]
			if string(g[0]) != fmt.Sprintf("before %d", round) || !bytes.Equal(g[1], append(big, byte(round))) || string(g[2]) != fmt.Sprintf("after %d", round) {
				t.Fatalf("%v: round %d arrived as %q, %d bytes, %q", e.c.Remote(), round, g[0], len(g[1]), g[2])
			}
		}
	}
	// A buffer that is not one untagged frame is refused.
	b := shared([]byte("x"))
	b.SetLen(b.Len() + 1)
	if _, err := ds[0].c.SendShared(b); err == nil {
		t.Error("SendShared took a buffer whose header does not match its length")
	}
	b.Release()
}

// TestChanInterop: a Chan speaks to a Link on a net.Conn (package rubin's
// face) either way round.
func TestChanInterop(t *testing.T) {
	key := testKey(3)
	t.Run("chan dials link", func(t *testing.T) {
		h := newHub(t)
		ln, err := rubin.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		errc := make(chan error, 1)
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			l, err := Server(nc, Replica(5), func(p Peer) ([]byte, bool) { return key, true }, Options{})
			if err != nil {
				errc <- err
				return
			}
			defer l.Close()
			for range 100 {
				p, err := l.Recv()
				if err != nil {
					errc <- err
					return
				}
				if err := l.Queue(p); err != nil { // echo
					errc <- err
					return
				}
			}
			errc <- l.Flush()
			l.Recv() // until the Chan closes
		}()
		d := h.dial(ln.Addr().String(), ClientPeer(4), Replica(5), key)
		h.run("handshake", func() bool {
			if d.err != nil {
				t.Fatal(d.err)
			}
			return d.up
		})
		var want [][]byte
		for i := range 100 {
			p := bytes.Repeat([]byte{byte(i)}, i*997)
			want = append(want, p)
			if _, err := d.c.Append(p); err != nil {
				t.Fatal(err)
			}
		}
		d.flush()
		h.run("echoes", func() bool { return len(d.got) == 100 || d.err != nil })
		if d.err != nil {
			t.Fatal(d.err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if !bytes.Equal(d.got[i], want[i]) {
				t.Fatalf("echo %d differs", i)
			}
		}
	})
	t.Run("link dials chan", func(t *testing.T) {
		h := newHub(t)
		addr := h.listen(func(conn channel.Conn) *Chan {
			return AcceptChan(conn, Replica(5), func(p Peer) ([]byte, bool) { return key, true }, Options{})
		})
		l, _ := h.dialLink(addr, ClientPeer(4), Replica(5), key)
		defer l.Close()
		// Frames right behind the confirmation may share its message.
		for i := range 50 {
			if err := l.Queue(fmt.Appendf(nil, "frame %d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		h.run("frames", func() bool { return len(h.ends) == 1 && (len(h.ends[0].got) == 50 || h.ends[0].err != nil) })
		s := h.ends[0]
		if s.err != nil || s.c.Remote() != ClientPeer(4) {
			t.Fatalf("server: %v, remote %v", s.err, s.c.Remote())
		}
		for i, p := range s.got {
			if string(p) != fmt.Sprintf("frame %d", i) {
				t.Fatalf("frame %d is %q", i, p)
			}
		}
		if _, err := s.c.Append([]byte("reply")); err != nil {
			t.Fatal(err)
		}
		s.flush()
		if p, err := l.Recv(); err != nil || string(p) != "reply" {
			t.Fatalf("Recv: %q, %v", p, err)
		}
	})
}

// TestChanRejects: the handshake's failures, on a Chan's side.
func TestChanRejects(t *testing.T) {
	key := testKey(4)
	lookup := func(p Peer) ([]byte, bool) { return key, p == Replica(0) }
	cases := []struct {
		name         string
		self, remote Peer
		key          []byte
		dialErr      error // what the dialing Chan reports
		srvErr       error // and the accepting one
	}{
		{"wrong key", Replica(0), Replica(1), testKey(5), ErrBadMAC, io.EOF},
		{"unknown peer", Replica(2), Replica(1), key, io.EOF, ErrUnknownPeer},
		{"wrong peer", Replica(0), Replica(3), key, io.EOF, ErrWrongPeer},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(t)
			addr := h.listen(func(conn channel.Conn) *Chan { return AcceptChan(conn, Replica(1), lookup, Options{}) })
			d := h.dial(addr, tc.self, tc.remote, tc.key)
			h.run("both failures", func() bool { return len(h.ends) == 2 && h.ends[1].err != nil && d.err != nil })
			if !errors.Is(d.err, tc.dialErr) {
				t.Errorf("dialer: %v, want %v", d.err, tc.dialErr)
			}
			if !errors.Is(h.ends[1].err, tc.srvErr) {
				t.Errorf("server: %v, want %v", h.ends[1].err, tc.srvErr)
			}
			if d.up || h.ends[1].up {
				t.Error("a side thinks it is up")
			}
		})
	}
	t.Run("silent dialer", func(t *testing.T) {
		h := newHub(t)
		addr := h.listen(func(conn channel.Conn) *Chan {
			return AcceptChan(conn, Replica(1), lookup, Options{HandshakeTimeout: 50 * time.Millisecond})
		})
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		h.run("timeout", func() bool { return len(h.ends) == 1 && h.ends[0].err != nil })
		if !errors.Is(h.ends[0].err, ErrHandshakeTimeout) {
			t.Errorf("server: %v, want %v", h.ends[0].err, ErrHandshakeTimeout)
		}
	})
}

// TestChanTampering: a frame modified, replayed or dropped on the way
// fails verification at the accepting Chan, which reports ErrBadMAC.
func TestChanTampering(t *testing.T) {
	key := testKey(6)
	for _, tc := range []struct {
		name string
		// frames returns the raw bytes sent after the handshake, given
		// the link's encoding of three frames.
		frames func(f [3][]byte) []byte
	}{
		{"modified", func(f [3][]byte) []byte { g := bytes.Clone(f[0]); g[HeaderSize] ^= 1; return g }},
		{"replayed", func(f [3][]byte) []byte { return slicesConcat(f[0], f[0]) }},
		{"reordered", func(f [3][]byte) []byte { return slicesConcat(f[1], f[0]) }},
		{"dropped", func(f [3][]byte) []byte { return slicesConcat(f[0], f[2]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub(t)
			addr := h.listen(func(conn channel.Conn) *Chan {
				return AcceptChan(conn, Replica(1), func(p Peer) ([]byte, bool) { return key, true }, Options{})
			})
			l, nc := h.dialLink(addr, Replica(0), Replica(1), key)
			defer l.Close()
			// The three frames as the link encodes them, then the
			// tampered stream on the raw connection.
			var rec bytes.Buffer
			wl := newLink(&recordConn{Conn: nc, w: &rec}, l.self, l.remote, nil, nil, Options{})
			wl.wmac = l.wmac
			var f [3][]byte
			for i := range f {
				rec.Reset()
				if err := wl.Send(fmt.Appendf(nil, "frame %d", i)); err != nil {
					t.Fatal(err)
				}
				f[i] = bytes.Clone(rec.Bytes())
			}
			if _, err := nc.Write(tc.frames(f)); err != nil {
				t.Fatal(err)
			}
			h.run("the verdict", func() bool { return len(h.ends) == 1 && h.ends[0].err != nil })
			if !errors.Is(h.ends[0].err, ErrBadMAC) {
				t.Errorf("got %v, want %v", h.ends[0].err, ErrBadMAC)
			}
		})
	}
}

// dialLink dials addr with a Link over package rubin's net.Conn face,
// serving the hub while the handshake runs.
func (h *hub) dialLink(addr string, self, remote Peer, key []byte) (*Link, net.Conn) {
	h.t.Helper()
	nc, err := rubin.Dial("tcp", addr)
	if err != nil {
		h.t.Fatal(err)
	}
	var l *Link
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err = Client(nc, self, remote, key, Options{})
	}()
	h.run("the Link's handshake", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return l, nc
}

// recordConn records what is written instead of sending it.
type recordConn struct {
	net.Conn
	w io.Writer
}

func (c *recordConn) Write(p []byte) (int, error) { return c.w.Write(p) }

func slicesConcat(a, b []byte) []byte { return append(bytes.Clone(a), b...) }

// TestChanSplitFrame: a frame whose payload arrives in one message and
// whose tag comes in a later one, after the receiver found nothing more
// to read: the payload's buffer stays the Chan's until the tag verifies
// it (the pool hands a released buffer out again at once, so a buffer
// given back too early holds the tag by then).
func TestChanSplitFrame(t *testing.T) {
	key := testKey(7)
	h := newHub(t)
	addr := h.listen(func(conn channel.Conn) *Chan {
		return AcceptChan(conn, Replica(1), func(p Peer) ([]byte, bool) { return key, true }, Options{})
	})
	l, nc := h.dialLink(addr, Replica(0), Replica(1), key)
	defer l.Close()
	var rec bytes.Buffer
	wl := newLink(&recordConn{Conn: nc, w: &rec}, l.self, l.remote, nil, nil, Options{})
	wl.wmac = l.wmac
	for i := range 3 {
		rec.Reset()
		payload := bytes.Repeat([]byte{byte('a' + i)}, 5000)
		if err := wl.Send(payload); err != nil {
			t.Fatal(err)
		}
		f := rec.Bytes()
		if _, err := nc.Write(f[:len(f)-TagSize]); err != nil {
			t.Fatal(err)
		}
		wait := time.Now().Add(20 * time.Millisecond)
		h.run("the payload to be read", func() bool { return time.Now().After(wait) })
		if _, err := nc.Write(f[len(f)-TagSize:]); err != nil {
			t.Fatal(err)
		}
		h.run("the frame", func() bool { return len(h.ends) == 1 && (len(h.ends[0].got) > i || h.ends[0].err != nil) })
		if err := h.ends[0].err; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(h.ends[0].got[i], payload) {
			t.Fatalf("frame %d arrived changed", i)
		}
	}
}
