package channeltest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// Message ids carry their direction, so that a message delivered to the
// wrong end is caught.
const (
	toServer uint64 = 1 << 40
	toClient uint64 = 2 << 40
)

// testMessageBoundaries sends every size one at a time and then all of them
// back to back, both ways, in blocking mode; each Send must arrive as one
// Receive of the same bytes.
func testMessageBoundaries(e *env) {
	a, b := e.pair()
	all := sizes(e.f.MaxMessageSize)
	for i, n := range all {
		e.send(a, n, toServer|uint64(i))
		e.recv(b, n, toServer|uint64(i))
		e.send(b, n, toClient|uint64(i))
		e.recv(a, n, toClient|uint64(i))
	}
	for _, dir := range []struct {
		from, to channel.Conn
		tag      uint64
	}{{a, b, toServer}, {b, a, toClient}} {
		errc := make(chan error, 1)
		go func() {
			for i, n := range all {
				buf, err := dir.from.Pool().Get(context.Background())
				if err != nil {
					errc <- err
					return
				}
				buf.SetLen(n)
				fill(buf.Bytes(), dir.tag|uint64(100+i))
				if err := dir.from.Send(buf); err != nil {
					errc <- err
					return
				}
			}
			errc <- dir.from.Flush()
		}()
		for i, n := range all {
			e.recv(dir.to, n, dir.tag|uint64(100+i))
		}
		if err := <-errc; err != nil {
			e.Fatalf("%s: sending back to back: %v", e.f.Name, err)
		}
	}
}

const pipelined = 300

// pipeSize is the size of message seq of a pipelined stream.
func pipeSize(all []int, seq int) int { return all[seq%len(all)] }

// testPipelinedBlocking streams messages both ways at once, one goroutine
// sending and one receiving at each end.
func testPipelinedBlocking(e *env) {
	a, b := e.pair()
	all := sizes(e.f.MaxMessageSize)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, dir := range []struct {
		from, to channel.Conn
		tag      uint64
	}{{a, b, toServer}, {b, a, toClient}} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for seq := range pipelined {
				buf, err := dir.from.Pool().Get(context.Background())
				if err != nil {
					errs <- err
					return
				}
				buf.SetLen(pipeSize(all, seq))
				fill(buf.Bytes(), dir.tag|uint64(seq))
				if err := dir.from.Send(buf); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for seq := range pipelined {
				buf, err := dir.to.Receive()
				if err != nil {
					errs <- err
					return
				}
				err = check(buf.Bytes(), pipeSize(all, seq), dir.tag|uint64(seq))
				buf.Release()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.Errorf("%s: %v", e.f.Name, err)
	}
}

// endpoint is one end of a non-blocking stream driven by a selector.
type endpoint struct {
	c        channel.Conn
	tag      uint64 // of the messages it sends
	peerTag  uint64 // of the messages it receives
	total    int    // messages to send and to receive
	sent     int
	received int
	pending  *bufpool.Buffer // refused by Send with ErrWouldBlock
	flushed  bool
}

func (p *endpoint) done() bool { return p.received == p.total && p.flushed }

func (p *endpoint) String() string {
	return fmt.Sprintf("{sent %d, received %d of %d; flushed %v; send refused %v}", p.sent, p.received, p.total, p.flushed, p.pending != nil)
}

// describe makes a select loop that times out report the endpoints
// attached to the keys of s.
func (e *env) describe(s *selector.Selector) {
	e.state = func() string {
		var b strings.Builder
		for _, k := range s.Keys() {
			if p, ok := k.Attachment().(*endpoint); ok {
				fmt.Fprintf(&b, "%v interest %v ", p, k.Interest())
			}
		}
		fmt.Fprintf(&b, "selector %+v", s.Stats())
		return b.String()
	}
}

// pump sends until the transport would block or everything is sent and
// flushed; then it drops OpWrite from the interest set.
func (e *env) pump(k *selectionkey.Key, p *endpoint, all []int) {
	e.Helper()
	for p.sent < p.total {
		if p.pending == nil {
			p.pending = e.msg(p.c, pipeSize(all, p.sent), p.tag|uint64(p.sent))
		}
		err := p.c.Send(p.pending)
		if isWouldBlock(err) {
			return
		}
		p.pending = nil
		if err != nil {
			e.Fatalf("%s: non-blocking Send of message %d: %v", e.f.Name, p.sent, err)
		}
		p.sent++
	}
	switch err := p.c.Flush(); {
	case err == nil:
		p.flushed = true
		if err := k.RemoveInterest(selectionkey.OpWrite); err != nil {
			e.Fatalf("RemoveInterest: %v", err)
		}
	case !isWouldBlock(err):
		e.Fatalf("%s: non-blocking Flush: %v", e.f.Name, err)
	}
}

// drain receives until the transport would block.
func (e *env) drain(p *endpoint, all []int) {
	e.Helper()
	for {
		buf, err := p.c.Receive()
		if isWouldBlock(err) {
			return
		}
		if err != nil {
			e.Fatalf("%s: non-blocking Receive after %d messages: %v", e.f.Name, p.received, err)
		}
		err = check(buf.Bytes(), pipeSize(all, p.received), p.peerTag|uint64(p.received))
		buf.Release()
		if err != nil {
			e.Fatalf("%s: %v", e.f.Name, err)
		}
		p.received++
	}
}

// testPipelinedNonBlocking streams messages both ways at once in
// non-blocking mode, both ends on one selector and one goroutine.
func testPipelinedNonBlocking(e *env) {
	a, b := e.pair()
	all := sizes(e.f.MaxMessageSize)
	s := e.selector()
	ends := []*endpoint{
		{c: a, tag: toServer, peerTag: toClient, total: pipelined},
		{c: b, tag: toClient, peerTag: toServer, total: pipelined},
	}
	for _, p := range ends {
		e.register(s, p.c, selectionkey.OpRead|selectionkey.OpWrite, p)
	}
	e.describe(s)
	e.selectLoop(s, "both ends sent and received everything", func() bool { return ends[0].done() && ends[1].done() },
		func(k *selectionkey.Key) {
			p := k.Attachment().(*endpoint)
			if k.Ready()&^k.Interest() != 0 {
				e.Errorf("ready set %v not within the interest set %v", k.Ready(), k.Interest())
			}
			if k.IsReadable() {
				e.drain(p, all)
			}
			if k.IsWritable() {
				e.pump(k, p, all)
			}
		})
	for _, p := range ends {
		if p.pending != nil {
			p.pending.Release()
		}
	}
}

// testConcurrentSendReceive has several goroutines send and several
// receive on each Conn at once; every message must arrive whole, once.
func testConcurrentSendReceive(e *env) {
	const senders, receivers, each = 4, 2, 150
	const total = 2 * senders * each
	a, b := e.pair()
	max := e.f.MaxMessageSize
	size := func(id uint64) int { return 8 + int(id*7919%uint64(min(max-8+1, 8192))) }
	var (
		mu     sync.Mutex
		seen   = make(map[uint64]bool)
		got    atomic.Int64
		errs   = make(chan error, 64)
		sendWG sync.WaitGroup
		recvWG sync.WaitGroup
	)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for _, dir := range []struct {
		from, to channel.Conn
		tag      uint64
	}{{a, b, toServer}, {b, a, toClient}} {
		for g := range senders {
			sendWG.Add(1)
			go func() {
				defer sendWG.Done()
				for i := range each {
					id := dir.tag | uint64(g)<<20 | uint64(i)
					buf, err := dir.from.Pool().Get(context.Background())
					if err != nil {
						report(err)
						return
					}
					buf.SetLen(size(id))
					fill(buf.Bytes(), id)
					if err := dir.from.Send(buf); err != nil {
						report(err)
						return
					}
				}
			}()
		}
		for range receivers {
			recvWG.Add(1)
			go func() {
				defer recvWG.Done()
				for {
					buf, err := dir.to.Receive()
					if err != nil {
						// Once everything has arrived, the ends are
						// closed to stop the receivers.
						if got.Load() != total || !(err == io.EOF || errors.Is(err, net.ErrClosed)) {
							report(err)
						}
						return
					}
					id := uint64(0)
					if buf.Len() >= 8 {
						id = idOf(buf.Bytes())
					}
					err = check(buf.Bytes(), size(id), id)
					buf.Release()
					if err == nil && id&(3<<40) != dir.tag {
						err = errors.New("message delivered to its sender's end")
					}
					if err != nil {
						report(err)
						return
					}
					mu.Lock()
					dup := seen[id]
					seen[id] = true
					mu.Unlock()
					if dup {
						report(errors.New("message delivered twice"))
					}
					got.Add(1)
				}
			}()
		}
	}
	sendWG.Wait()
	e.waitFor("every message to arrive", func() bool { return got.Load() == total || len(errs) > 0 },
		func() string { return fmt.Sprintf("%d of %d received", got.Load(), total) })
	// The receivers still waiting are woken by Close.
	a.Close()
	b.Close()
	recvWG.Wait()
	close(errs)
	for err := range errs {
		e.Errorf("%s: %v", e.f.Name, err)
	}
	if n := got.Load(); n != total {
		e.Errorf("%s: received %d messages, want %d", e.f.Name, n, total)
	}
}

// receiveChecked receives count messages of size on c in a goroutine,
// checking each against the pattern of tag|i, and reports the first
// failure, or nil, on the returned channel.
func receiveChecked(c channel.Conn, count, size int, tag uint64) <-chan error {
	done := make(chan error, 1)
	go func() {
		for i := range count {
			buf, err := c.Receive()
			if err != nil {
				done <- err
				return
			}
			err = check(buf.Bytes(), size, tag|uint64(i))
			buf.Release()
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return done
}

// flushWhilePeerReads retries Flush on non-blocking c, whose peer is
// reading, until it succeeds; ErrWouldBlock past deadline fails the test.
func (e *env) flushWhilePeerReads(c channel.Conn, deadline time.Time) {
	e.Helper()
	for {
		err := c.Flush()
		if err == nil {
			return
		}
		if !isWouldBlock(err) {
			e.Fatalf("%s: Flush: %v", e.f.Name, err)
		}
		if time.Now().After(deadline) {
			e.Fatalf("%s: Flush retried for %v while the peer reads still reports ErrWouldBlock", e.f.Name, patience)
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitReceived waits for a receiveChecked goroutine to get all count
// messages.
func (e *env) awaitReceived(done <-chan error, count int) {
	e.Helper()
	select {
	case err := <-done:
		if err != nil {
			e.Fatalf("%s: receiving: %v", e.f.Name, err)
		}
	case <-time.After(patience):
		e.Fatalf("%s: the peer did not get all %d messages", e.f.Name, count)
	}
}

// fillUp sends messages of the given size on non-blocking c, whose peer
// does not read, until Send reports ErrWouldBlock. It returns how many
// were sent and the refused buffer, still the caller's.
func (e *env) fillUp(c channel.Conn, size int, tag uint64) (int, *bufpool.Buffer) {
	e.Helper()
	const limit = 1 << 30 // bytes; no transport should queue that much
	for n := 0; ; n++ {
		if n*size > limit {
			e.Fatalf("%s: Send of %d messages of %d bytes to a peer that does not read never reported ErrWouldBlock", e.f.Name, n, size)
		}
		buf := e.msg(c, size, tag|uint64(n))
		err := c.Send(buf)
		if isWouldBlock(err) {
			return n, buf
		}
		if err != nil {
			e.Fatalf("%s: non-blocking Send %d: %v", e.f.Name, n, err)
		}
	}
}

// testWouldBlock checks ErrWouldBlock for Receive, Accept and Send, and
// that a selector tells when a refused Send can go.
func testWouldBlock(e *env) {
	a, b := e.pair()
	for _, c := range []channel.Conn{a, b} {
		if err := c.SetBlocking(false); err != nil {
			e.Fatal(err)
		}
		if c.IsBlocking() {
			e.Fatalf("%s: IsBlocking() after SetBlocking(false)", e.f.Name)
		}
	}
	if buf, err := b.Receive(); !isWouldBlock(err) {
		e.Errorf("%s: Receive with nothing sent = %v, %v; want ErrWouldBlock", e.f.Name, buf, err)
		if buf != nil {
			buf.Release()
		}
	}
	l := e.listen()
	l.SetBlocking(false)
	if c, err := l.Accept(); !isWouldBlock(err) {
		e.Errorf("%s: Accept with no connection pending = %v, %v; want ErrWouldBlock", e.f.Name, c, err)
		if c != nil {
			c.Close()
		}
	}

	size := min(16<<10, e.f.MaxMessageSize)
	sent, refused := e.fillUp(a, size, toServer)
	e.mustRelease(refused, "Send returned ErrWouldBlock")
	if err := a.Flush(); err != nil && !isWouldBlock(err) {
		e.Fatalf("%s: Flush behind a full peer = %v, want nil or ErrWouldBlock", e.f.Name, err)
	}

	// Now let a selector drive both ends until 100 more messages are in.
	s := e.selector()
	all := []int{size}
	pa := &endpoint{c: a, tag: toServer, total: sent + 100}
	pa.sent = sent
	pb := &endpoint{c: b, peerTag: toServer, total: sent + 100, flushed: true}
	pa.received = pa.total // a receives nothing
	e.register(s, a, selectionkey.OpWrite, pa)
	e.register(s, b, selectionkey.OpRead, pb)
	e.describe(s)
	e.selectLoop(s, "every message is delivered", func() bool { return pa.done() && pb.done() }, func(k *selectionkey.Key) {
		p := k.Attachment().(*endpoint)
		if k.IsReadable() {
			e.drain(p, all)
		}
		if k.IsWritable() {
			e.pump(k, p, all)
		}
	})
	if pa.pending != nil {
		pa.pending.Release()
	}
}

// testSendRetryWithoutSelector checks that a Send refused with
// ErrWouldBlock goes through, once the peer reads, by retrying it alone:
// no selector and no Flush in between.
func testSendRetryWithoutSelector(e *env) {
	a, b := e.pair()
	if err := a.SetBlocking(false); err != nil {
		e.Fatal(err)
	}
	size := min(16<<10, e.f.MaxMessageSize)
	sent, refused := e.fillUp(a, size, toServer)
	total := sent + 1
	done := receiveChecked(b, total, size, toServer)
	deadline := time.Now().Add(patience)
	for {
		err := a.Send(refused)
		if err == nil {
			break
		}
		if !isWouldBlock(err) {
			e.Fatalf("%s: retried Send: %v", e.f.Name, err)
		}
		if time.Now().After(deadline) {
			refused.Release()
			e.Fatalf("%s: a Send retried for %v while the peer reads still reports ErrWouldBlock", e.f.Name, patience)
		}
		time.Sleep(time.Millisecond)
	}
	e.flushWhilePeerReads(a, deadline)
	e.awaitReceived(done, total)
}

// testConnectAndAccept connects with OpConnect and FinishConnect, and
// accepts with OpAccept, on one selector; then the two Conns talk.
func testConnectAndAccept(e *env) {
	s := e.selector()
	l := e.listen()
	kl := e.register(s, l, selectionkey.OpAccept, nil)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c, err := e.f.Connect(ctx, l.LocalAddr())
	if err != nil {
		e.Fatalf("%s: Connect: %v", e.f.Name, err)
	}
	e.track(c)
	if c.IsBlocking() {
		e.Fatalf("%s: Connect returned a Conn in blocking mode", e.f.Name)
	}
	kc := e.register(s, c, selectionkey.OpConnect, nil)
	connected, err := c.FinishConnect()
	if err != nil {
		e.Fatalf("%s: FinishConnect right after Connect: %v", e.f.Name, err)
	}
	if !connected {
		if buf, err := c.Receive(); err == nil || !(errors.Is(err, channel.ErrNotConnected) || isWouldBlock(err)) {
			e.Errorf("%s: Receive on a pending connect = %v, %v; want ErrNotConnected or ErrWouldBlock", e.f.Name, buf, err)
			if buf != nil {
				buf.Release()
			}
		}
	}
	var server channel.Conn
	e.selectLoop(s, "connected and accepted", func() bool { return connected && server != nil }, func(k *selectionkey.Key) {
		switch k {
		case kl:
			if !k.IsAcceptable() {
				e.Fatalf("listener selected for %v", k.Ready())
			}
			sc, err := l.Accept()
			if isWouldBlock(err) {
				return
			}
			if err != nil {
				e.Fatalf("%s: Accept after OpAccept: %v", e.f.Name, err)
			}
			e.track(sc)
			server = sc
		case kc:
			if !k.IsConnectable() {
				e.Fatalf("connecting Conn selected for %v", k.Ready())
			}
			ok, err := c.FinishConnect()
			if err != nil {
				e.Fatalf("%s: FinishConnect after OpConnect: %v", e.f.Name, err)
			}
			connected = connected || ok
		}
	})
	if ok, err := c.FinishConnect(); !ok || err != nil {
		e.Errorf("%s: FinishConnect on a connected Conn = %v, %v; want true, nil", e.f.Name, ok, err)
	}
	if sc, err := l.Accept(); !isWouldBlock(err) {
		e.Errorf("%s: second Accept = %v, %v; want ErrWouldBlock", e.f.Name, sc, err)
	}
	if !server.IsBlocking() {
		e.Errorf("%s: accepted Conn is not in blocking mode", e.f.Name)
	}
	if err := kc.SetInterest(selectionkey.OpRead); err != nil {
		e.Fatal(err)
	}
	e.send(c, 100, toServer)
	e.recv(server, 100, toServer)
	e.send(server, 200, toClient)
	e.awaitKey(s, kc, selectionkey.OpRead)
	buf, err := c.Receive()
	if err != nil {
		e.Fatalf("%s: Receive after OpRead: %v", e.f.Name, err)
	}
	defer buf.Release()
	if err := check(buf.Bytes(), 200, toClient); err != nil {
		e.Fatal(err)
	}
}

// testConnectRefused connects, blocking and not, to an address nobody
// listens on: both must fail, promptly.
func testConnectRefused(e *env) {
	l := e.listen()
	addr := l.LocalAddr()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c, err := e.f.Dial(ctx, addr)
	if err == nil {
		e.track(c)
		e.Fatalf("%s: Dial of a closed listener's address succeeded", e.f.Name)
	}
	if ctx.Err() != nil {
		e.Fatalf("%s: Dial of a closed listener's address hung until its context ended: %v", e.f.Name, err)
	}

	c, err = e.f.Connect(ctx, addr)
	if err != nil {
		return // failed at once: fine
	}
	e.track(c)
	s := e.selector()
	k := e.register(s, c, selectionkey.OpConnect, nil)
	var ferr error
	e.selectLoop(s, "the connect fails", func() bool { return ferr != nil }, func(sk *selectionkey.Key) {
		if sk != k {
			return
		}
		ok, err := c.FinishConnect()
		if ok {
			e.Fatalf("%s: FinishConnect to a closed listener's address reported success", e.f.Name)
		}
		ferr = err
	})
	if ok, err := c.FinishConnect(); ok || err == nil {
		e.Errorf("%s: FinishConnect after a failed connect = %v, %v; want the error again", e.f.Name, ok, err)
	}
	if buf, err := c.Receive(); err == nil {
		buf.Release()
		e.Errorf("%s: Receive on a failed connect succeeded", e.f.Name)
	}
	// The pool is shared with channels of earlier cases, which a
	// transport may still be tearing down (RDMA does it on goroutines of
	// its own): they only give buffers back, so a kept buffer shows as
	// more in use, never fewer.
	before := c.Pool().Stats().InUse
	if err := c.Send(e.msg(c, 10, toServer)); err == nil {
		e.Errorf("%s: Send on a failed connect succeeded", e.f.Name)
	}
	if after := c.Pool().Stats().InUse; after > before {
		e.Errorf("%s: Send on a failed connect kept the buffer (pool in use %d, before %d)", e.f.Name, after, before)
	}
}

// testAddresses checks that the two ends agree on each other's address,
// and that the dialer's RemoteAddr is the listener's.
func testAddresses(e *env) {
	l := e.listen()
	addr := l.LocalAddr()
	a, b := e.pairOn(l)
	for _, c := range []struct {
		what      string
		got, want net.Addr
	}{
		{"dialer's RemoteAddr vs acceptor's LocalAddr", a.RemoteAddr(), b.LocalAddr()},
		{"acceptor's RemoteAddr vs dialer's LocalAddr", b.RemoteAddr(), a.LocalAddr()},
		{"dialer's RemoteAddr vs listener's LocalAddr", a.RemoteAddr(), addr},
	} {
		if c.got == nil || c.want == nil {
			e.Errorf("%s: %s: %v, %v; want non-nil addresses", e.f.Name, c.what, c.got, c.want)
			continue
		}
		if c.got.Network() != c.want.Network() || c.got.String() != c.want.String() {
			e.Errorf("%s: %s: %s/%s != %s/%s", e.f.Name, c.what, c.got.Network(), c.got, c.want.Network(), c.want)
		}
	}
}

// testMessageTooLarge sends a message above the maximum, from a foreign
// pool with bigger buffers: it must fail with ErrMessageTooLarge, release
// the buffer and leave the Conn working. A foreign buffer of a legal size
// must go through.
func testMessageTooLarge(e *env) {
	a, b := e.pair()
	max := e.f.MaxMessageSize
	foreign, err := bufpool.New(bufpool.Config{BufferSize: max + 1, MaxBuffers: 4})
	if err != nil {
		e.Fatal(err)
	}
	defer foreign.Close()
	for _, blocking := range []bool{true, false} {
		if err := a.SetBlocking(blocking); err != nil {
			e.Fatal(err)
		}
		err := a.Send(e.msgFrom(foreign, max+1, toServer))
		if !errors.Is(err, channel.ErrMessageTooLarge) {
			e.Errorf("%s: Send of %d bytes (maximum %d), blocking=%v = %v; want ErrMessageTooLarge", e.f.Name, max+1, max, blocking, err)
		}
		if n := foreign.Stats().InUse; n != 0 {
			e.Errorf("%s: Send of a message too large kept its buffer (%d in use)", e.f.Name, n)
		}
	}
	if err := a.SetBlocking(true); err != nil {
		e.Fatal(err)
	}
	if err := a.Send(e.msgFrom(foreign, max, toServer|1)); err != nil {
		e.Fatalf("%s: Send of a foreign buffer of %d bytes: %v", e.f.Name, max, err)
	}
	e.recv(b, max, toServer|1)
	e.send(a, 10, toServer|2)
	e.recv(b, 10, toServer|2)
	e.waitFor("the foreign buffer to be released", func() bool { return foreign.Stats().InUse == 0 },
		func() string { return fmt.Sprint(foreign.Stats().InUse, " in use") })
}

// testEOF closes a Conn after sending: the peer receives every message and
// then io.EOF itself, not wrapped.
func testEOF(e *env) {
	a, b := e.pair()
	all := sizes(e.f.MaxMessageSize)
	go func() {
		for i, n := range all {
			buf, err := a.Pool().Get(context.Background())
			if err != nil {
				return
			}
			buf.SetLen(n)
			fill(buf.Bytes(), toServer|uint64(i))
			if a.Send(buf) != nil {
				return
			}
		}
		a.Flush()
		a.Close()
	}()
	for i, n := range all {
		e.recv(b, n, toServer|uint64(i))
	}
	for range 2 {
		buf, err := b.Receive()
		if err != io.EOF {
			if buf != nil {
				buf.Release()
			}
			e.Fatalf("%s: Receive after the peer closed = %v, %v; want io.EOF", e.f.Name, buf, err)
		}
	}
}

// testEOFNonBlocking is testEOF with the receiver under a selector.
func testEOFNonBlocking(e *env) {
	a, b := e.pair()
	s := e.selector()
	k := e.register(s, b, selectionkey.OpRead, nil)
	const n = 50
	for i := range n {
		e.send(a, 1000, toServer|uint64(i))
	}
	if err := a.Close(); err != nil {
		e.Fatal(err)
	}
	if got := e.receiveToEOF(s, k, 1000, toServer); got != n {
		e.Fatalf("%s: got %d messages and then io.EOF; want %d", e.f.Name, got, n)
	}
}

// testClosedErrors checks the errors of operations on closed channels and
// that Close is idempotent.
func testClosedErrors(e *env) {
	a, b := e.pair()
	if err := a.Close(); err != nil {
		e.Fatalf("%s: Close: %v", e.f.Name, err)
	}
	// With both ends closed and their buffers back, the pool is quiet:
	// what Send does to it below is all that changes it.
	b.Close()
	e.awaitPoolBack()
	for range 2 {
		if err := a.Close(); err != nil {
			e.Errorf("%s: Close of a closed Conn = %v; want nil (Close is idempotent)", e.f.Name, err)
		}
	}
	if buf, err := a.Receive(); !errors.Is(err, net.ErrClosed) {
		e.Errorf("%s: Receive after Close = %v, %v; want net.ErrClosed", e.f.Name, buf, err)
	}
	before := a.Pool().Stats().InUse
	if err := a.Send(e.msg(a, 10, toServer)); !errors.Is(err, net.ErrClosed) {
		e.Errorf("%s: Send after Close = %v; want net.ErrClosed", e.f.Name, err)
	}
	if after := a.Pool().Stats().InUse; after != before {
		e.Errorf("%s: Send after Close kept its buffer (pool in use %d, before %d)", e.f.Name, after, before)
	}
	if err := a.Flush(); !errors.Is(err, net.ErrClosed) {
		e.Errorf("%s: Flush after Close = %v; want net.ErrClosed", e.f.Name, err)
	}
	if err := a.CloseWrite(); !errors.Is(err, net.ErrClosed) {
		e.Errorf("%s: CloseWrite after Close = %v; want net.ErrClosed", e.f.Name, err)
	}
	s := e.selector()
	a.SetBlocking(false)
	if k, err := s.Register(a.(selector.Selectable), selectionkey.OpRead, nil); !errors.Is(err, net.ErrClosed) {
		e.Errorf("%s: Register after Close = %v, %v; want net.ErrClosed", e.f.Name, k, err)
	}

	l := e.listen()
	if err := l.Close(); err != nil {
		e.Fatalf("%s: Listener.Close: %v", e.f.Name, err)
	}
	if err := l.Close(); err != nil {
		e.Errorf("%s: Close of a closed Listener = %v; want nil", e.f.Name, err)
	}
	if c, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		e.Errorf("%s: Accept after Close = %v, %v; want net.ErrClosed", e.f.Name, c, err)
	}
}

// blockedReceive is what waitBlocked looks for.
//
//go:noinline
func blockedReceive(c channel.Conn, result chan<- error) {
	buf, err := c.Receive()
	if buf != nil {
		buf.Release()
	}
	result <- err
}

// testCloseWakesReceive closes a Conn under a goroutine blocked in Receive.
func testCloseWakesReceive(e *env) {
	_, b := e.pair()
	result := make(chan error, 1)
	go blockedReceive(b, result)
	waitBlocked("channeltest.blockedReceive")
	b.Close()
	select {
	case err := <-result:
		if !errors.Is(err, net.ErrClosed) {
			e.Errorf("%s: Receive blocked during Close = %v; want net.ErrClosed", e.f.Name, err)
		}
	case <-time.After(patience):
		e.Fatalf("%s: Close did not wake a goroutine blocked in Receive", e.f.Name)
	}
}

// blockedSend sends until an error, to a peer that does not read.
//
//go:noinline
func blockedSend(c channel.Conn, size int, result chan<- error) {
	for range 1 << 30 / max(size, 1) {
		buf, err := c.Pool().Get(context.Background())
		if err != nil {
			result <- err
			return
		}
		buf.SetLen(size)
		if err := c.Send(buf); err != nil {
			result <- err
			return
		}
	}
	result <- errors.New("1 GiB sent to a peer that does not read")
}

// testCloseWakesSend closes a Conn under a goroutine blocked in Send
// behind a peer that does not read.
func testCloseWakesSend(e *env) {
	a, _ := e.pair()
	result := make(chan error, 1)
	go blockedSend(a, min(64<<10, e.f.MaxMessageSize), result)
	waitBlocked("channeltest.blockedSend")
	a.Close()
	select {
	case err := <-result:
		if !errors.Is(err, net.ErrClosed) {
			e.Errorf("%s: Send blocked during Close = %v; want net.ErrClosed", e.f.Name, err)
		}
	case <-time.After(patience):
		e.Fatalf("%s: Close did not wake a goroutine blocked in Send", e.f.Name)
	}
}

//go:noinline
func blockedAccept(l channel.Listener, result chan<- error) {
	c, err := l.Accept()
	if c != nil {
		c.Close()
	}
	result <- err
}

// testCloseWakesAccept closes a Listener under a goroutine blocked in
// Accept.
func testCloseWakesAccept(e *env) {
	l := e.listen()
	result := make(chan error, 1)
	go blockedAccept(l, result)
	waitBlocked("channeltest.blockedAccept")
	l.Close()
	select {
	case err := <-result:
		if !errors.Is(err, net.ErrClosed) {
			e.Errorf("%s: Accept blocked during Close = %v; want net.ErrClosed", e.f.Name, err)
		}
	case <-time.After(patience):
		e.Fatalf("%s: Close did not wake a goroutine blocked in Accept", e.f.Name)
	}
}

// testCloseRegistered closes channels that a selector holds, one while
// another goroutine sleeps in a select: their keys become invalid and the
// selector goes on serving the others.
func testCloseRegistered(e *env) {
	s := e.selector()
	a1, b1 := e.pair()
	a2, b2 := e.pair()
	a3, b3 := e.pair()
	k1 := e.register(s, b1, selectionkey.OpRead, nil)
	k2 := e.register(s, b2, selectionkey.OpRead, nil)
	k3 := e.register(s, b3, selectionkey.OpRead, nil)
	if err := b1.Close(); err != nil {
		e.Fatal(err)
	}
	if k1.Valid() {
		e.Errorf("%s: key still valid after its channel was closed", e.f.Name)
	}
	type result struct {
		keys []*selectionkey.Key
		err  error
	}
	selected := make(chan result, 1)
	sleeps := s.Stats().Sleeps
	go func() {
		_, err := s.SelectTimeout(patience)
		selected <- result{append([]*selectionkey.Key(nil), s.SelectedKeys()...), err}
	}()
	e.waitFor("the selector to sleep", func() bool { return s.Stats().Sleeps > sleeps }, func() string { return "" })
	if err := b3.Close(); err != nil {
		e.Fatal(err)
	}
	if k3.Valid() {
		e.Errorf("%s: key still valid after its channel was closed", e.f.Name)
	}
	e.send(a2, 10, toServer|2)
	var r result
	select {
	case r = <-selected:
	case <-time.After(patience):
		e.Fatalf("%s: a select in progress did not see a message after another channel was closed", e.f.Name)
	}
	if r.err != nil {
		e.Fatalf("select: %v", r.err)
	}
	for _, k := range r.keys {
		if k != k2 {
			e.Errorf("%s: select in progress selected the key of a closed channel", e.f.Name)
		}
	}
	for _, k := range s.Keys() {
		if k == k1 || k == k3 {
			e.Errorf("%s: Keys() still holds the key of a closed channel", e.f.Name)
		}
	}
	e.recvNonBlocking(s, k2, b2, 10, toServer|2)
	a1.Send(e.msg(a1, 10, toServer)) // to a closed peer: may or may not fail
	a3.Send(e.msg(a3, 10, toServer))
	e.send(a2, 10, toServer|3)
	found := false
	e.selectLoop(s, "the open channel's key is readable", func() bool { return found }, func(k *selectionkey.Key) {
		if k != k2 {
			e.Fatalf("%s: the key of a closed channel was selected", e.f.Name)
		}
		found = k.IsReadable()
	})
	e.recvNonBlocking(s, k2, b2, 10, toServer|3)
}

// recvNonBlocking receives one message on non-blocking c, selecting as
// needed.
func (e *env) recvNonBlocking(s *selector.Selector, k *selectionkey.Key, c channel.Conn, size int, id uint64) {
	e.Helper()
	var buf *bufpool.Buffer
	try := func() {
		b, err := c.Receive()
		if err != nil && !isWouldBlock(err) {
			e.Fatalf("%s: Receive: %v", e.f.Name, err)
		}
		buf = b
	}
	try()
	if buf == nil {
		e.selectLoop(s, "a message arrives", func() bool { return buf != nil }, func(sk *selectionkey.Key) {
			if sk == k && k.IsReadable() {
				try()
			}
		})
	}
	defer buf.Release()
	if err := check(buf.Bytes(), size, id); err != nil {
		e.Fatalf("%s: %v", e.f.Name, err)
	}
}

// testSelectorCloseUnbinds closes a selector that holds a channel: the key
// becomes invalid, and the channel can go back to blocking mode and work.
func testSelectorCloseUnbinds(e *env) {
	a, b := e.pair()
	s := e.selector()
	k := e.register(s, b, selectionkey.OpRead, nil)
	if err := s.Close(); err != nil {
		e.Fatal(err)
	}
	if k.Valid() {
		e.Errorf("key valid after its selector was closed")
	}
	if err := b.SetBlocking(true); err != nil {
		e.Fatalf("%s: SetBlocking(true) after the selector was closed: %v", e.f.Name, err)
	}
	e.send(a, 33, toServer)
	e.recv(b, 33, toServer)
	s2 := e.selector()
	k2 := e.register(s2, b, selectionkey.OpRead, nil)
	e.send(a, 44, toServer|1)
	e.recvNonBlocking(s2, k2, b, 44, toServer|1)
}

// testRegisterRules checks what Register and SetBlocking refuse.
func testRegisterRules(e *env) {
	_, b := e.pair()
	l := e.listen()
	s := e.selector()
	if _, err := s.Register(b.(selector.Selectable), selectionkey.OpRead, nil); !errors.Is(err, selector.ErrBlocking) {
		e.Errorf("%s: Register of a blocking Conn = %v; want selector.ErrBlocking", e.f.Name, err)
	}
	if _, err := s.Register(l.(selector.Selectable), selectionkey.OpAccept, nil); !errors.Is(err, selector.ErrBlocking) {
		e.Errorf("%s: Register of a blocking Listener = %v; want selector.ErrBlocking", e.f.Name, err)
	}
	b.SetBlocking(false)
	l.SetBlocking(false)
	var invalid *selectionkey.InvalidOpsError
	if _, err := s.Register(b.(selector.Selectable), selectionkey.OpAccept, nil); !errors.As(err, &invalid) {
		e.Errorf("%s: Register of a Conn for OpAccept = %v; want an InvalidOpsError", e.f.Name, err)
	}
	if _, err := s.Register(l.(selector.Selectable), selectionkey.OpRead, nil); !errors.As(err, &invalid) {
		e.Errorf("%s: Register of a Listener for OpRead = %v; want an InvalidOpsError", e.f.Name, err)
	}
	if got := l.(selector.Selectable).ValidOps(); got != selectionkey.OpAccept {
		e.Errorf("%s: Listener.ValidOps() = %v; want accept", e.f.Name, got)
	}
	if want, got := selectionkey.OpRead|selectionkey.OpWrite|selectionkey.OpConnect, b.(selector.Selectable).ValidOps(); got&want != want {
		e.Errorf("%s: Conn.ValidOps() = %v; want at least %v", e.f.Name, got, want)
	}
	k := e.register(s, b, selectionkey.OpRead, nil)
	kl := e.register(s, l, selectionkey.OpAccept, nil)
	if err := b.SetBlocking(true); !errors.Is(err, channel.ErrRegistered) {
		e.Errorf("%s: SetBlocking(true) on a registered Conn = %v; want ErrRegistered", e.f.Name, err)
	}
	if err := l.SetBlocking(true); !errors.Is(err, channel.ErrRegistered) {
		e.Errorf("%s: SetBlocking(true) on a registered Listener = %v; want ErrRegistered", e.f.Name, err)
	}
	if !k.Valid() || b.IsBlocking() {
		e.Errorf("%s: a refused SetBlocking(true) changed the channel (key valid %v, blocking %v)", e.f.Name, k.Valid(), b.IsBlocking())
	}
	s2 := e.selector()
	if _, err := s2.Register(b.(selector.Selectable), selectionkey.OpRead, nil); err == nil {
		e.Errorf("%s: Register of a Conn with a second selector succeeded", e.f.Name)
	}
	if got := len(s2.Keys()); got != 0 {
		e.Errorf("%s: a refused Register left %d keys", e.f.Name, got)
	}
	if err := k.SetInterest(selectionkey.OpAccept); err == nil {
		e.Errorf("%s: SetInterest(OpAccept) on a Conn's key succeeded", e.f.Name)
	}
	k.Cancel()
	kl.Cancel()
	if err := b.SetBlocking(true); err != nil {
		e.Errorf("%s: SetBlocking(true) after Cancel: %v", e.f.Name, err)
	}
	if err := l.SetBlocking(true); err != nil {
		e.Errorf("%s: Listener SetBlocking(true) after Cancel: %v", e.f.Name, err)
	}
	if got := len(s.Keys()); got != 0 {
		e.Errorf("%s: %d keys left after Cancel", e.f.Name, got)
	}
}

// testUserSpaceReadiness receives one message of a burst outside any
// select: the rest may now wait in user space, where no descriptor shows
// them, and a select must still report the key readable (readiness is
// level-triggered).
func testUserSpaceReadiness(e *env) {
	a, b := e.pair()
	s := e.selector()
	k := e.register(s, b, selectionkey.OpRead, nil)
	const n = 100
	for i := range n {
		e.send(a, 10, toServer|uint64(i))
	}
	deadline := time.Now().Add(patience)
	var first *bufpool.Buffer
	for first == nil {
		buf, err := b.Receive()
		switch {
		case err == nil:
			first = buf
		case !isWouldBlock(err):
			e.Fatalf("%s: Receive: %v", e.f.Name, err)
		case time.Now().After(deadline):
			e.Fatalf("%s: nothing received", e.f.Name)
		default:
			time.Sleep(time.Millisecond)
		}
	}
	err := check(first.Bytes(), 10, toServer)
	first.Release()
	if err != nil {
		e.Fatal(err)
	}
	got := 1
	for got < n {
		m, err := s.SelectTimeout(patience / 2)
		if err != nil {
			e.Fatal(err)
		}
		if m == 0 {
			e.Fatalf("%s: select found nothing while %d messages were pending", e.f.Name, n-got)
		}
		if sk := s.SelectedKeys()[0]; sk != k || !k.IsReadable() {
			e.Fatalf("%s: selected %v for %v, want the key readable", e.f.Name, sk.Channel(), sk.Ready())
		}
		// One message per select: the rest stays in user space again.
		buf, err := b.Receive()
		if isWouldBlock(err) {
			continue
		}
		if err != nil {
			e.Fatal(err)
		}
		err = check(buf.Bytes(), 10, toServer|uint64(got))
		buf.Release()
		if err != nil {
			e.Fatal(err)
		}
		got++
	}
}

// testWritableAfterFlush regains room with Flush, outside any select: the
// key, interested in OpWrite, must then be selected writable, although no
// select saw it full.
func testWritableAfterFlush(e *env) {
	a, b := e.pair()
	s := e.selector()
	k := e.register(s, a, 0, nil)
	size := min(16<<10, e.f.MaxMessageSize)
	sent, refused := e.fillUp(a, size, toServer)
	e.mustRelease(refused, "Send returned ErrWouldBlock")
	if err := k.SetInterest(selectionkey.OpWrite); err != nil {
		e.Fatal(err)
	}
	done := receiveChecked(b, sent, size, toServer)
	deadline := time.Now().Add(patience)
	e.flushWhilePeerReads(a, deadline)
	e.awaitKey(s, k, selectionkey.OpWrite)
	e.awaitReceived(done, sent)
}

// testBroadcast sends one buffer to several Conns, retained once per extra
// Conn, as a replica broadcasts a message: every peer gets it whole and the
// buffer goes back to the pool once, after the last Send is done with it.
func testBroadcast(e *env) {
	const fanout = 4
	var senders, receivers []channel.Conn
	for range fanout {
		a, b := e.pair()
		senders = append(senders, a)
		receivers = append(receivers, b)
	}
	size := min(10<<10, e.f.MaxMessageSize)
	pool := senders[0].Pool()
	before := pool.Stats().InUse
	buf := e.msg(senders[0], size, toServer)
	for range fanout - 1 {
		buf.Retain()
	}
	for i, a := range senders {
		if err := a.Send(buf); err != nil {
			e.Fatalf("%s: Send %d of a shared buffer: %v", e.f.Name, i, err)
		}
	}
	for _, b := range receivers {
		e.recv(b, size, toServer)
	}
	e.waitFor("the shared buffer to go back", func() bool { return pool.Stats().InUse <= before },
		func() string { return fmt.Sprintf("%d in use, %d before", pool.Stats().InUse, before) })
}

// testConcurrentNonBlocking has several goroutines Send on one
// non-blocking Conn, retrying on ErrWouldBlock, while a selector goroutine
// serves the Conn (flushing its queue when the transport does so there)
// and the peer reads in blocking mode.
func testConcurrentNonBlocking(e *env) {
	const senders, each = 4, 200
	a, b := e.pair()
	s := e.selector()
	e.register(s, a, selectionkey.OpRead, nil)
	stop := make(chan struct{})
	selecting := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				selecting <- nil
				return
			default:
			}
			if _, err := s.SelectTimeout(10 * time.Millisecond); err != nil {
				selecting <- err
				return
			}
		}
	}()
	max := e.f.MaxMessageSize
	size := func(id uint64) int { return 8 + int(id*7919%uint64(min(max-8+1, 16<<10))) }
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(patience)
			for i := range each {
				id := toServer | uint64(g)<<20 | uint64(i)
				buf, err := a.Pool().Get(context.Background())
				if err != nil {
					errs <- err
					return
				}
				buf.SetLen(size(id))
				fill(buf.Bytes(), id)
				for {
					err := a.Send(buf)
					if err == nil {
						break
					}
					if !isWouldBlock(err) {
						errs <- fmt.Errorf("non-blocking send: %w", err)
						return
					}
					if time.Now().After(deadline) {
						buf.Release() // refused: still ours
						errs <- fmt.Errorf("non-blocking send still refused after %v: %w", patience, err)
						return
					}
					runtime.Gosched()
				}
			}
		}()
	}
	next := make(map[uint64]uint64) // per sender, the next sequence number
	for n := 0; n < senders*each; n++ {
		buf, err := b.Receive()
		if err != nil {
			e.Fatalf("%s: Receive after %d messages: %v", e.f.Name, n, err)
		}
		id := idOf(buf.Bytes())
		err = check(buf.Bytes(), size(id), id)
		buf.Release()
		if err != nil {
			e.Fatalf("%s: %v", e.f.Name, err)
		}
		g, seq := id>>20&0xff, id&(1<<20-1)
		if seq != next[g] {
			e.Fatalf("%s: sender %d's message %d arrived when %d was due", e.f.Name, g, seq, next[g])
		}
		next[g]++
	}
	wg.Wait()
	close(stop)
	if err := <-selecting; err != nil {
		e.Fatal(err)
	}
	close(errs)
	for err := range errs {
		e.Errorf("%s: %v", e.f.Name, err)
	}
}

// testCloseWrite half-closes one end and then the other, in blocking mode,
// each time right after a run of messages that may still be queued: the
// peer receives them all and then io.EOF, and still sends to the end that
// closed for writing, which still receives. It runs with the dialer
// closing first and with the acceptor closing first.
func testCloseWrite(e *env) {
	for _, first := range []string{"dialer", "acceptor"} {
		a, b := e.pair()
		if first == "acceptor" {
			a, b = b, a
		}
		e.closeWriteAfterStream(first, a, b, toServer)
		e.checkWriteClosed(a, first)
		// b has seen the end of a's stream and still sends; a still
		// receives.
		e.closeWriteAfterStream("its peer", b, a, toClient)
		e.checkWriteClosed(b, "its peer")
		a.Close()
		b.Close()
	}
}

// closeWriteAfterStream sends every size from one end, closes it for
// writing at once, and checks that the other end receives the messages and
// then io.EOF, twice.
func (e *env) closeWriteAfterStream(who string, from, to channel.Conn, tag uint64) {
	e.Helper()
	all := sizes(e.f.MaxMessageSize)
	errc := make(chan error, 1)
	go func() {
		for i, n := range all {
			buf, err := from.Pool().Get(context.Background())
			if err != nil {
				errc <- err
				return
			}
			buf.SetLen(n)
			fill(buf.Bytes(), tag|uint64(i))
			if err := from.Send(buf); err != nil {
				errc <- fmt.Errorf("sending: %w", err)
				return
			}
		}
		if err := from.CloseWrite(); err != nil {
			errc <- fmt.Errorf("closing for writing: %w", err)
			return
		}
		errc <- nil
	}()
	for i, n := range all {
		e.recv(to, n, tag|uint64(i))
	}
	if err := <-errc; err != nil {
		e.Fatalf("%s: the %s sending and closing for writing: %v", e.f.Name, who, err)
	}
	for range 2 {
		buf, err := to.Receive()
		if err != io.EOF {
			if buf != nil {
				buf.Release()
			}
			e.Fatalf("%s: Receive after the %s's CloseWrite = %v, %v; want io.EOF", e.f.Name, who, buf, err)
		}
	}
}

// checkWriteClosed checks c's operations after its CloseWrite: Send fails
// with ErrWriteClosed and gives its buffer back, CloseWrite and Flush
// succeed.
func (e *env) checkWriteClosed(c channel.Conn, who string) {
	e.Helper()
	foreign, err := bufpool.New(bufpool.Config{BufferSize: 64, MaxBuffers: 1})
	if err != nil {
		e.Fatal(err)
	}
	defer foreign.Close()
	if err := c.Send(e.msgFrom(foreign, 10, 0)); !errors.Is(err, channel.ErrWriteClosed) {
		e.Errorf("%s: the %s's Send after its CloseWrite = %v; want ErrWriteClosed", e.f.Name, who, err)
	}
	if n := foreign.Stats().InUse; n != 0 {
		e.Errorf("%s: the %s's Send after its CloseWrite kept its buffer", e.f.Name, who)
	}
	if err := c.CloseWrite(); err != nil {
		e.Errorf("%s: the %s's second CloseWrite = %v; want nil", e.f.Name, who, err)
	}
	if err := c.Flush(); err != nil {
		e.Errorf("%s: the %s's Flush after its CloseWrite = %v; want nil", e.f.Name, who, err)
	}
}

// testCloseWriteNonBlocking closes a non-blocking Conn for writing while
// its send queue is full: under a selector, the queued messages still
// reach the peer and then io.EOF does; the peer's messages still come
// back, and its own CloseWrite ends them.
func testCloseWriteNonBlocking(e *env) {
	a, b := e.pair()
	s := e.selector()
	ka := e.register(s, a, 0, nil)
	size := min(16<<10, e.f.MaxMessageSize)
	sent, refused := e.fillUp(a, size, toServer)
	e.mustRelease(refused, "Send returned ErrWouldBlock")
	if err := a.CloseWrite(); err != nil {
		e.Fatalf("%s: CloseWrite with a full send queue: %v", e.f.Name, err)
	}
	e.checkWriteClosedSend(a)
	kb := e.register(s, b, selectionkey.OpRead, nil)
	got := e.receiveToEOF(s, kb, size, toServer)
	if got != sent {
		e.Fatalf("%s: got %d messages before io.EOF; %d were sent before CloseWrite", e.f.Name, got, sent)
	}

	const back = 3
	for i := range back {
		if err := b.Send(e.msg(b, 100, toClient|uint64(i))); err != nil {
			e.Fatalf("%s: non-blocking Send after the peer's CloseWrite: %v", e.f.Name, err)
		}
	}
	if err := b.CloseWrite(); err != nil {
		e.Fatalf("%s: CloseWrite after the peer's: %v", e.f.Name, err)
	}
	if err := ka.SetInterest(selectionkey.OpRead); err != nil {
		e.Fatal(err)
	}
	if got := e.receiveToEOF(s, ka, 100, toClient); got != back {
		e.Fatalf("%s: the end closed for writing got %d messages before io.EOF; want %d", e.f.Name, got, back)
	}
}

// checkWriteClosedSend checks that Send on c, closed for writing, fails
// with ErrWriteClosed.
func (e *env) checkWriteClosedSend(c channel.Conn) {
	e.Helper()
	if err := c.Send(e.msg(c, 10, 0)); !errors.Is(err, channel.ErrWriteClosed) {
		e.Errorf("%s: Send after CloseWrite = %v; want ErrWriteClosed", e.f.Name, err)
	}
}

// receiveToEOF receives messages of the given size on the Conn of k,
// under s, until io.EOF, and returns how many came.
func (e *env) receiveToEOF(s *selector.Selector, k *selectionkey.Key, size int, tag uint64) int {
	e.Helper()
	c := k.Channel().(channel.Conn)
	got := 0
	var end error
	e.selectLoop(s, "io.EOF", func() bool { return end != nil }, func(sk *selectionkey.Key) {
		if sk != k || !sk.IsReadable() {
			return
		}
		for end == nil {
			buf, err := c.Receive()
			if isWouldBlock(err) {
				return
			}
			if err != nil {
				end = err
				return
			}
			err = check(buf.Bytes(), size, tag|uint64(got))
			buf.Release()
			if err != nil {
				e.Fatalf("%s: %v", e.f.Name, err)
			}
			got++
		}
	})
	if end != io.EOF {
		e.Fatalf("%s: got %d messages and then %v; want io.EOF", e.f.Name, got, end)
	}
	return got
}
