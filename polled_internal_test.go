package rubin

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// polledTransport is a transport whose connections are polledConns: what
// a Read over RDMA sees, where it polls the device itself, without a
// device. The rest (pool, listening) is TCP's.
type polledTransport struct {
	anytransport.Transport
	conns chan *polledConn // each connection Connect made
}

func (t *polledTransport) Connect(ctx context.Context, address string) (anytransport.Conn, error) {
	c := &polledConn{pool: t.Pool()}
	c.blocking.Store(true)
	t.conns <- c
	return c, nil
}

// polledConn is a connected channel whose messages and end of stream the
// test hands it. Like an RDMA channel's, its readiness lives in user
// space (ReadyOps), and an end of stream stays readable; unlike one, it
// tells its selector of nothing until the test says so.
type polledConn struct {
	pool     *bufpool.Pool
	blocking atomic.Bool
	reg      atomic.Pointer[selector.Registration]

	mu    sync.Mutex
	inbox []*bufpool.Buffer
	eof   bool
}

var (
	_ anytransport.Conn         = (*polledConn)(nil)
	_ anytransport.DevicePoller = (*polledConn)(nil)
)

// push queues a message and reports it to the selector.
func (c *polledConn) push(p []byte) {
	b, _ := c.pool.TryGet()
	b.Write(p)
	c.mu.Lock()
	c.inbox = append(c.inbox, b)
	c.mu.Unlock()
	c.reg.Load().Ready(selectionkey.OpRead)
}

// end makes Receive report the end of the stream, without telling the
// selector: a Read that polls finds it first.
func (c *polledConn) end() {
	c.mu.Lock()
	c.eof = true
	c.mu.Unlock()
}

func (c *polledConn) Receive() (*bufpool.Buffer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case len(c.inbox) > 0:
		b := c.inbox[0]
		c.inbox = c.inbox[1:]
		return b, nil
	case c.eof:
		return nil, io.EOF
	}
	return nil, errWouldBlock
}

func (c *polledConn) ReadyOps() selectionkey.Ops {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := selectionkey.OpWrite
	if len(c.inbox) > 0 || c.eof {
		ops |= selectionkey.OpRead
	}
	return ops
}

func (c *polledConn) PollDevice()                  {}
func (c *polledConn) Send(b *bufpool.Buffer) error { b.Release(); return nil }
func (c *polledConn) Flush() error                 { return nil }
func (c *polledConn) CloseWrite() error            { return nil }
func (c *polledConn) FinishConnect() (bool, error) { return true, nil }
func (c *polledConn) Pool() *bufpool.Pool          { return c.pool }
func (c *polledConn) MaxMessageSize() int          { return 1 << 10 }
func (c *polledConn) LocalAddr() net.Addr          { return &net.TCPAddr{} }
func (c *polledConn) RemoteAddr() net.Addr         { return &net.TCPAddr{} }
func (c *polledConn) SetBlocking(block bool) error { c.blocking.Store(block); return nil }
func (c *polledConn) IsBlocking() bool             { return c.blocking.Load() }
func (c *polledConn) ValidOps() selectionkey.Ops {
	return selectionkey.OpRead | selectionkey.OpWrite | selectionkey.OpConnect
}
func (c *polledConn) SelectorHooks() selector.Hooks { return (*polledHooks)(c) }
func (c *polledConn) Close() error {
	if r := c.reg.Load(); r != nil {
		r.Key().Cancel()
	}
	return nil
}

type polledHooks polledConn

func (h *polledHooks) Bind(r *selector.Registration) error { h.reg.Store(r); return nil }
func (h *polledHooks) Unbind(r *selector.Registration)     {}
func (h *polledHooks) InterestChanged(r *selector.Registration) {
	if ops := (*polledConn)(h).ReadyOps() & r.Key().Interest(); ops != 0 {
		r.Ready(ops)
	}
}

// TestReadEOFStopsPoller has a Read that polls the device itself find the
// end of the stream before the poller does. The poller, told of the
// connection once more, must stop watching it for reads: the end of the
// stream stays readable, and a poller still watching would select the
// connection on every pass, a CPU spent until the connection is closed.
func TestReadEOFStopsPoller(t *testing.T) {
	tcp, err := anytransport.Open("tcp", anytransport.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &polledTransport{Transport: tcp, conns: make(chan *polledConn, 1)}
	cfg := Config{Transport: "polled", Pollers: 1}.normalized()
	st, err := openStack(cfg, func(cfg Config, g *guard) (backend, error) { return newStackOn(cfg, g, tr) })
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	nc, err := st.Dial(context.Background(), "nowhere:1")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ch := <-tr.conns

	ch.push([]byte("hello"))
	buf := make([]byte, 16)
	if n, err := nc.Read(buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("Read = %q, %v; want hello", buf[:n], err)
	}
	ch.end()
	if _, err := nc.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("Read after the end = %v, want io.EOF", err)
	}
	ch.reg.Load().Ready(selectionkey.OpRead) // a late event from the device

	selects := func() uint64 { return st.Stats().Selectors[0].Selects }
	time.Sleep(20 * time.Millisecond) // the poller takes the event
	before := selects()
	time.Sleep(200 * time.Millisecond)
	if n := selects() - before; n > 10 {
		t.Errorf("the poller selected %d times in 200ms with nothing to do but an end of stream already read", n)
	}
}
