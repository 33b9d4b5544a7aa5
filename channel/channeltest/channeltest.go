// Package channeltest is the conformance suite of rubin's transports: Run
// checks that a transport's channels keep the contract of package channel,
// in blocking mode and in non-blocking mode under a selector.
//
// The suite knows nothing of any particular transport. A transport's tests
// describe it with a Factory and call Run:
//
//	func TestConformance(t *testing.T) {
//		tr := ... // a transport with its own pool
//		channeltest.Run(t, channeltest.Factory{Name: "tcp", ...})
//	}
//
// Every test of the suite closes all the channels it made and then checks
// that the pool has no buffer in use and that goroutines and file
// descriptors are back to what they were when it started; the suite must
// therefore not run in parallel with other tests.
package channeltest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/leakcheck"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// A Factory describes the transport under test. All fields are required.
//
// The channels the functions return must also implement
// selector.Selectable, so that the suite can drive them with a selector.
type Factory struct {
	// Name names the transport in failure messages.
	Name string
	// MaxMessageSize is the largest message the transport's Conns carry
	// in either direction; at least 64.
	MaxMessageSize int
	// Pool is the pool that received messages come from. Once a test has
	// closed its channels, none of its buffers may be in use.
	Pool *bufpool.Pool
	// Listen returns a Listener in blocking mode on a fresh loopback
	// address that the system chose.
	Listen func() (channel.Listener, error)
	// Dial connects to the address of a Listener and returns the Conn in
	// blocking mode. It gives up when ctx is done. It may wait for the
	// listener to accept.
	Dial func(ctx context.Context, addr net.Addr) (channel.Conn, error)
	// Connect starts connecting to addr and returns a Conn in
	// non-blocking mode whose connect FinishConnect completes. A connect
	// that fails at once may fail here instead.
	Connect func(ctx context.Context, addr net.Addr) (channel.Conn, error)
}

// patience bounds every wait of the suite: an operation that should
// complete but takes longer is reported as a hang.
const patience = 10 * time.Second

// testTimeout bounds one test; after it the test's channels are closed so
// that blocked operations return and the test fails instead of hanging.
const testTimeout = 60 * time.Second

// Run runs the conformance suite against the transport f describes.
func Run(t *testing.T, f Factory) {
	if f.Name == "" || f.MaxMessageSize < 64 || f.Pool == nil || f.Listen == nil || f.Dial == nil || f.Connect == nil {
		t.Fatalf("channeltest: incomplete Factory %+v", f)
	}
	for _, tc := range []struct {
		name string
		fn   func(*env)
	}{
		{"MessageBoundaries", testMessageBoundaries},
		{"PipelinedBlocking", testPipelinedBlocking},
		{"PipelinedNonBlocking", testPipelinedNonBlocking},
		{"ConcurrentSendReceive", testConcurrentSendReceive},
		{"WouldBlock", testWouldBlock},
		{"SendRetryWithoutSelector", testSendRetryWithoutSelector},
		{"ConnectAndAcceptWithSelector", testConnectAndAccept},
		{"ConnectRefused", testConnectRefused},
		{"Addresses", testAddresses},
		{"MessageTooLarge", testMessageTooLarge},
		{"EOF", testEOF},
		{"EOFNonBlocking", testEOFNonBlocking},
		{"CloseWrite", testCloseWrite},
		{"CloseWriteNonBlocking", testCloseWriteNonBlocking},
		{"ClosedErrors", testClosedErrors},
		{"CloseWakesReceive", testCloseWakesReceive},
		{"CloseWakesSend", testCloseWakesSend},
		{"CloseWakesAccept", testCloseWakesAccept},
		{"CloseRegistered", testCloseRegistered},
		{"SelectorCloseUnbinds", testSelectorCloseUnbinds},
		{"RegisterRules", testRegisterRules},
		{"UserSpaceReadiness", testUserSpaceReadiness},
		{"WritableAfterFlush", testWritableAfterFlush},
		{"Broadcast", testBroadcast},
		{"ConcurrentNonBlocking", testConcurrentNonBlocking},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(newEnv(t, f)) })
	}
}

// env is one test's view of the transport: it tracks the channels and
// selectors the test makes and closes them when the test ends.
type env struct {
	*testing.T
	f Factory

	mu      sync.Mutex
	closers []io.Closer

	// base is how many of the pool's buffers were in use when the test
	// started.
	base int

	// state, if set, describes the test's progress when a select loop
	// times out.
	state func() string
}

func newEnv(t *testing.T, f Factory) *env {
	leakcheck.Check(t) // first, so that it runs after everything is closed
	e := &env{T: t, f: f, base: f.Pool.Stats().InUse}
	t.Cleanup(func() {
		e.closeAll()
		e.awaitPoolBack()
	})
	watchdog := time.AfterFunc(testTimeout, func() {
		t.Errorf("%s: test still running after %v; closing its channels", f.Name, testTimeout)
		e.closeAll()
	})
	t.Cleanup(func() { watchdog.Stop() })
	return e
}

func (e *env) track(c io.Closer) {
	e.mu.Lock()
	e.closers = append(e.closers, c)
	e.mu.Unlock()
}

// closeAll closes everything tracked, the newest first.
func (e *env) closeAll() {
	e.mu.Lock()
	cs := e.closers
	e.closers = nil
	e.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i].Close()
	}
}

// waitFor polls cond until it holds; after patience it fails the test
// with what state reports.
// awaitPoolBack waits until the channels the test closed have given the
// pool back every buffer they held; a transport may release them after
// Close returns, as the RDMA transport does once its receives are flushed.
func (e *env) awaitPoolBack() {
	pool := e.f.Pool
	e.waitFor("the pool to get its buffers back", func() bool { return pool.Stats().InUse <= e.base },
		func() string { return fmt.Sprintf("%d buffers in use, %d at start", pool.Stats().InUse, e.base) })
}

func (e *env) waitFor(what string, cond func() bool, state func() string) {
	e.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			e.Fatalf("%s: timed out waiting for %s: %s", e.f.Name, what, state())
		}
		time.Sleep(time.Millisecond)
	}
}

func (e *env) listen() channel.Listener {
	e.Helper()
	l, err := e.f.Listen()
	if err != nil {
		e.Fatalf("%s: Listen: %v", e.f.Name, err)
	}
	e.track(l)
	if !l.IsBlocking() {
		e.Errorf("%s: a new Listener is not in blocking mode", e.f.Name)
	}
	if l.LocalAddr() == nil {
		e.Fatalf("%s: Listener.LocalAddr() = nil", e.f.Name)
	}
	return l
}

// pair returns two connected Conns in blocking mode: the dialer's and the
// acceptor's.
func (e *env) pair() (client, server channel.Conn) {
	e.Helper()
	return e.pairOn(e.listen())
}

// pairOn is pair through l, which it closes.
func (e *env) pairOn(l channel.Listener) (client, server channel.Conn) {
	e.Helper()
	type result struct {
		c   channel.Conn
		err error
	}
	dialed := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	go func() {
		c, err := e.f.Dial(ctx, l.LocalAddr())
		dialed <- result{c, err}
	}()
	s, aerr := l.Accept()
	if aerr == nil {
		e.track(s)
	}
	r := <-dialed
	if r.err == nil {
		e.track(r.c)
	}
	if aerr != nil || r.err != nil {
		e.Fatalf("%s: connecting a pair: Accept: %v; Dial: %v", e.f.Name, aerr, r.err)
	}
	l.Close()
	if !r.c.IsBlocking() || !s.IsBlocking() {
		e.Fatalf("%s: dialed or accepted Conn not in blocking mode (dialed %v, accepted %v)", e.f.Name, r.c.IsBlocking(), s.IsBlocking())
	}
	return r.c, s
}

func (e *env) selector() *selector.Selector {
	e.Helper()
	s, err := selector.New(selector.Config{})
	if err != nil {
		e.Fatalf("selector.New: %v", err)
	}
	e.track(s)
	return s
}

func (e *env) register(s *selector.Selector, ch channel.Channel, ops selectionkey.Ops, att any) *selectionkey.Key {
	e.Helper()
	sc, ok := ch.(selector.Selectable)
	if !ok {
		e.Fatalf("%s: %T does not implement selector.Selectable", e.f.Name, ch)
	}
	if err := ch.SetBlocking(false); err != nil {
		e.Fatalf("%s: SetBlocking(false): %v", e.f.Name, err)
	}
	k, err := s.Register(sc, ops, att)
	if err != nil {
		e.Fatalf("%s: Register for %v: %v", e.f.Name, ops, err)
	}
	return k
}

// msg returns a buffer from c's pool holding message id of the given size.
func (e *env) msg(c channel.Conn, size int, id uint64) *bufpool.Buffer {
	e.Helper()
	return e.msgFrom(c.Pool(), size, id)
}

func (e *env) msgFrom(p *bufpool.Pool, size int, id uint64) *bufpool.Buffer {
	e.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	b, err := p.Get(ctx)
	if err != nil {
		e.Fatalf("getting a buffer (pool %+v): %v", p.Stats(), err)
	}
	b.SetLen(size)
	fill(b.Bytes(), id)
	return b
}

// fill writes message id into p: the id in the first 8 bytes, if there is
// room, and a pattern that depends on it after.
func fill(p []byte, id uint64) {
	i := 0
	if len(p) >= 8 {
		binary.BigEndian.PutUint64(p, id)
		i = 8
	}
	for ; i < len(p); i++ {
		p[i] = pattern(id, i)
	}
}

func pattern(id uint64, i int) byte { return byte(id*131 + uint64(i)*7 + uint64(i>>9)) }

// check reports how p differs from message id of the given size.
func check(p []byte, size int, id uint64) error {
	if len(p) != size {
		return fmt.Errorf("message %#x: got %d bytes, want %d", id, len(p), size)
	}
	i := 0
	if len(p) >= 8 {
		if got := binary.BigEndian.Uint64(p); got != id {
			return fmt.Errorf("got message %#x (%d bytes), want %#x", got, len(p), id)
		}
		i = 8
	}
	for ; i < len(p); i++ {
		if p[i] != pattern(id, i) {
			return fmt.Errorf("message %#x (%d bytes): byte %d is %#x, want %#x", id, size, i, p[i], pattern(id, i))
		}
	}
	return nil
}

// idOf returns the id of a message of at least 8 bytes.
func idOf(p []byte) uint64 { return binary.BigEndian.Uint64(p) }

func (e *env) send(c channel.Conn, size int, id uint64) {
	e.Helper()
	if err := c.Send(e.msg(c, size, id)); err != nil {
		e.Fatalf("%s: Send of %d bytes: %v", e.f.Name, size, err)
	}
}

// recv receives in blocking mode and checks the message.
func (e *env) recv(c channel.Conn, size int, id uint64) {
	e.Helper()
	b, err := c.Receive()
	if err != nil {
		e.Fatalf("%s: Receive (expecting %d bytes): %v", e.f.Name, size, err)
	}
	defer b.Release()
	if err := check(b.Bytes(), size, id); err != nil {
		e.Fatalf("%s: %v", e.f.Name, err)
	}
}

// mustRelease releases b, which the test should still own.
func (e *env) mustRelease(b *bufpool.Buffer, why string) {
	e.Helper()
	defer func() {
		if r := recover(); r != nil {
			e.Errorf("%s: %s: the buffer was no longer the caller's: %v", e.f.Name, why, r)
		}
	}()
	b.Release()
}

// selectLoop selects until done reports true, handing every selected key
// to handle.
func (e *env) selectLoop(s *selector.Selector, what string, done func() bool, handle func(*selectionkey.Key)) {
	e.Helper()
	deadline := time.Now().Add(patience)
	for !done() {
		if time.Now().After(deadline) {
			progress := ""
			if e.state != nil {
				progress = ": " + e.state()
			}
			e.Fatalf("%s: timed out selecting until %s%s", e.f.Name, what, progress)
		}
		if _, err := s.SelectTimeout(100 * time.Millisecond); err != nil {
			e.Fatalf("%s: select: %v", e.f.Name, err)
		}
		for _, k := range s.SelectedKeys() {
			handle(k)
			if e.Failed() {
				e.FailNow()
			}
		}
	}
}

// awaitKey selects until k is selected with all of ops ready.
func (e *env) awaitKey(s *selector.Selector, k *selectionkey.Key, ops selectionkey.Ops) {
	e.Helper()
	found := false
	e.selectLoop(s, fmt.Sprintf("the key is ready for %v", ops), func() bool { return found }, func(sk *selectionkey.Key) {
		if sk == k && sk.Ready()&ops == ops {
			found = true
		}
	})
}

// sizes returns the message sizes of the suite up to max, ascending.
func sizes(max int, extra ...int) []int {
	var out []int
	for _, n := range append([]int{0, 1, 7, 8, 64, 1 << 10, 16 << 10, 100 << 10}, extra...) {
		if n < max {
			out = append(out, n)
		}
	}
	return append(out, max)
}

// waitBlocked waits, for a short while, until a goroutine running fn is
// parked (blocked in a system call, a lock or a channel), so that a test
// that closes a channel under it exercises the wake-up. The test is
// correct either way; this only makes it likely to test what it means to.
func waitBlocked(fn string) {
	deadline := time.Now().Add(2 * time.Second)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			head, _, _ := strings.Cut(g, "\n")
			if strings.Contains(g, fn) && !strings.Contains(head, "[running]") && !strings.Contains(head, "[runnable]") {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func isWouldBlock(err error) bool { return errors.Is(err, channel.ErrWouldBlock) }
