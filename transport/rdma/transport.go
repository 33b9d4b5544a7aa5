//go:build linux && cgo

package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/internal/addr"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/rdma/internal/verbs"
)

// A device is an RDMA device with the transport's protection domain on it.
type device struct {
	index int
	ctx   verbs.Context
	pd    verbs.PD
}

// A Transport makes RDMA channels that share a configuration, a registered
// buffer pool, completion queues and counters. Its methods are safe for
// concurrent use.
type Transport struct {
	cfg     Config
	devices []*device
	pool    *bufpool.Pool

	// mrs[slab][device] is a slab's registration on each device.
	mrMu sync.RWMutex
	mrs  [][]verbs.MR

	// home is the transport's own selector, selected by a goroutine of its
	// own, for completion queues and event channels of channels that no
	// selector of the application serves.
	home     *selector.Selector
	homeDone chan struct{}

	mu      sync.Mutex // guards the fields below
	engines map[engineKey]*engine
	chans   map[closer]struct{} // open channels, closed by Close
	closed  bool
	gone    traffic // what the connections no longer tracked carried

	opened, closedConns, protoErrs atomic.Uint64
	widenings                      atomic.Uint64 // receive windows widened, for tests
	asyncEvents                    atomic.Uint64 // devices' asynchronous events read
	rejects                        atomic.Uint64 // connect requests our listeners turned down
	lastReject                     atomic.Pointer[error]
	penalties                      penalties // addresses whose connect requests are refused
}

// Rejects returns how many connect requests the transport's listeners
// turned down, and why the last one was.
func (t *Transport) Rejects() (n uint64, last error) {
	if p := t.lastReject.Load(); p != nil {
		last = *p
	}
	return t.rejects.Load(), last
}

type engineKey struct {
	sel *selector.Selector
	dev *device
	n   int // a selector gets another queue when one is full
}

// closer is a channel the transport closes when it closes.
type closer interface{ Close() error }

// New opens the RDMA devices and returns a transport configured by cfg. It
// fails with ErrNoDevice if there is none.
func New(cfg Config) (*Transport, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctxs, err := verbs.Devices()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	if len(ctxs) == 0 {
		return nil, ErrNoDevice
	}
	t := &Transport{cfg: cfg, engines: make(map[engineKey]*engine), chans: make(map[closer]struct{})}
	for i, ctx := range ctxs {
		pd, err := verbs.AllocPD(ctx)
		if err != nil {
			t.releaseDevices()
			return nil, fmt.Errorf("rdma: device %s: %w", ctx.Name(), err)
		}
		t.devices = append(t.devices, &device{index: i, ctx: ctx, pd: pd})
	}
	t.pool, err = bufpool.New(bufpool.Config{BufferSize: cfg.MaxMessageSize, MaxBuffers: cfg.MaxBuffers, Registrar: registrar{t}})
	if err != nil {
		t.releaseDevices()
		return nil, err
	}
	t.home, err = selector.New(selector.Config{SpinBudget: cfg.SpinBudget})
	if err != nil {
		t.pool.Close()
		t.releaseDevices()
		return nil, err
	}
	if err := t.watchAsyncEvents(); err != nil {
		t.home.Close()
		t.pool.Close()
		t.releaseDevices()
		return nil, err
	}
	t.homeDone = make(chan struct{})
	go t.runHome()
	return t, nil
}

func (t *Transport) runHome() {
	defer close(t.homeDone)
	for {
		if _, err := t.home.Select(); err != nil {
			return
		}
	}
}

func (t *Transport) releaseDevices() {
	for _, d := range t.devices {
		_ = d.pd.Dealloc()
	}
	t.devices = nil
}

// registrar registers every slab of the pool on every device, for local
// access only.
type registrar struct{ t *Transport }

func (r registrar) Register(slab []byte) (uint64, error) {
	t := r.t
	mrs := make([]verbs.MR, 0, len(t.devices))
	for _, d := range t.devices {
		mr, err := verbs.RegMR(d.pd, slab)
		if err != nil {
			for _, m := range mrs {
				_ = m.Dereg()
			}
			return 0, fmt.Errorf("rdma: registering %d bytes on %s: %w", len(slab), d.ctx.Name(), err)
		}
		mrs = append(mrs, mr)
	}
	t.mrMu.Lock()
	defer t.mrMu.Unlock()
	t.mrs = append(t.mrs, mrs)
	// The handle carries the slab's index and, for the speed of the
	// common single-device case, its local key on the first device.
	return uint64(len(t.mrs)-1)<<32 | uint64(mrs[0].LKey()), nil
}

func (r registrar) Deregister(handle uint64) {
	t := r.t
	t.mrMu.Lock()
	mrs := t.mrs[handle>>32]
	t.mrs[handle>>32] = nil
	t.mrMu.Unlock()
	for _, m := range mrs {
		_ = m.Dereg()
	}
}

// lkey is the local key of buf's memory on dev.
func (t *Transport) lkey(buf *bufpool.Buffer, dev *device) uint32 {
	h := buf.Handle()
	if dev.index == 0 {
		return uint32(h)
	}
	t.mrMu.RLock()
	defer t.mrMu.RUnlock()
	return t.mrs[h>>32][dev.index].LKey()
}

// deviceOf finds the device an ID resolved to.
func (t *Transport) deviceOf(id verbs.ID) (*device, error) {
	ctx := id.Context()
	for _, d := range t.devices {
		if d.ctx == ctx {
			return d, nil
		}
	}
	return nil, fmt.Errorf("rdma: address resolved to device %s, which the transport did not open", ctx.Name())
}

// engineFor returns a completion queue of sel (the home selector if nil)
// on dev with cqes entries to spare, which it promises to a queue pair,
// with one reference taken for it. When every queue of sel is full it
// creates another: Config.CQSize bounds the queue pairs of one queue,
// not of a selector.
func (t *Transport) engineFor(sel *selector.Selector, dev *device, cqes int) (*engine, error) {
	if sel == nil || !sel.IsOpen() {
		sel = t.home
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errTransportClosed
	}
	if spare := t.cfg.CQSize - t.cfg.srqEntries(); cqes > spare {
		return nil, fmt.Errorf("rdma: a queue pair needs %d completion entries, more than a queue has to spare (%d): raise Config.CQSize", cqes, spare)
	}
	for n := 0; ; n++ {
		key := engineKey{sel, dev, n}
		e := t.engines[key]
		if e == nil {
			var err error
			if e, err = newEngine(t, dev, sel); err != nil {
				return nil, err
			}
			t.engines[key] = e
		}
		if e.reserve(cqes) {
			e.refs++
			return e, nil
		}
	}
}

// engineMoved re-keys e after it moved to the home selector.
func (t *Transport) engineMoved(e *engine, from *selector.Selector) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, v := range t.engines {
		if v == e {
			delete(t.engines, k)
		}
	}
	for n := 0; ; n++ {
		if key := (engineKey{t.home, e.dev, n}); t.engines[key] == nil {
			t.engines[key] = e
			return
		}
	}
}

// engineDone drops a queue pair's reference to e and destroys e when no
// queue pair uses it and its selector is gone.
func (t *Transport) engineDone(e *engine) {
	t.mu.Lock()
	e.refs--
	destroy := e.refs == 0 && e.home.Load()
	if destroy {
		for k, v := range t.engines {
			if v == e {
				delete(t.engines, k)
			}
		}
	}
	t.mu.Unlock()
	if destroy {
		e.kill() // its selecting goroutine destroys it, maybe after this dispatch
	}
}

var errTransportClosed = fmt.Errorf("rdma: transport %w", net.ErrClosed)

func (t *Transport) track(c closer) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errTransportClosed
	}
	t.chans[c] = struct{}{}
	return nil
}

func (t *Transport) untrack(c closer) {
	t.mu.Lock()
	if _, ok := t.chans[c]; ok {
		if c, ok := c.(*Conn); ok {
			t.gone.addAll(&c.traffic)
		}
		delete(t.chans, c)
	}
	t.mu.Unlock()
}

// traffic is what connections carried. Each connection counts its own,
// under its mutex, so that the connections of different selectors write
// no shared cache line per message; Stats adds them up.
type traffic struct {
	msgsIn, msgsOut, bytesIn, bytesOut counter
	controlOut                         counter // credit updates, FINs and drain markers sent
}

func (tr *traffic) addAll(o *traffic) {
	tr.msgsIn.add(o.msgsIn.load())
	tr.msgsOut.add(o.msgsOut.load())
	tr.bytesIn.add(o.bytesIn.load())
	tr.bytesOut.add(o.bytesOut.load())
	tr.controlOut.add(o.controlOut.load())
}

// A counter has one writer at a time, which holds a lock, and readers
// that may not: a plain store after a load, where a shared counter would
// take a locked read-modify-write.
type counter struct{ v atomic.Uint64 }

func (n *counter) add(d uint64) { n.v.Store(n.v.Load() + d) }
func (n *counter) load() uint64 { return n.v.Load() }

// Pool returns the transport's registered buffer pool: buffers taken from
// it are sent without a copy.
func (t *Transport) Pool() *bufpool.Pool { return t.pool }

// MaxMessageSize returns the largest message the transport's channels carry.
func (t *Transport) MaxMessageSize() int { return t.cfg.MaxMessageSize }

// Devices names the RDMA devices the transport uses.
func (t *Transport) Devices() []string {
	names := make([]string, len(t.devices))
	for i, d := range t.devices {
		names[i] = d.ctx.Name()
	}
	return names
}

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	var sum traffic
	t.mu.Lock()
	sum.addAll(&t.gone)
	for c := range t.chans {
		if c, ok := c.(*Conn); ok {
			sum.addAll(&c.traffic)
		}
	}
	t.mu.Unlock()
	return Stats{
		MessagesIn:     sum.msgsIn.load(),
		MessagesOut:    sum.msgsOut.load(),
		BytesIn:        sum.bytesIn.load(),
		BytesOut:       sum.bytesOut.load(),
		ConnsOpened:    t.opened.Load(),
		ConnsClosed:    t.closedConns.Load(),
		ProtocolErrors: t.protoErrs.Load(),
		ControlOut:     sum.controlOut.load(),
	}
}

// Resources counts the verbs and connection-manager objects the transport
// holds now, for tests that check they are all released.
type Resources struct {
	QueuePairs       int // connections with a queue pair
	CompletionQueues int
	EventChannels    int // one per listener and connection
}

var liveQPs, liveCQs, liveEventChannels atomic.Int64

// LiveResources reports the objects held now by every transport of the
// process.
func LiveResources() Resources {
	return Resources{
		QueuePairs:       int(liveQPs.Load()),
		CompletionQueues: int(liveCQs.Load()),
		EventChannels:    int(liveEventChannels.Load()),
	}
}

// Close closes every channel the transport made, waits up to Linger for
// them to release their queue pairs, and releases the transport's
// completion queues, its poller and, once every buffer is back, its pool
// and memory registrations.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	chans := make([]closer, 0, len(t.chans))
	for c := range t.chans {
		chans = append(chans, c)
	}
	t.mu.Unlock()
	for _, c := range chans {
		c.Close()
	}
	deadline := time.Now().Add(t.cfg.Linger + time.Second)
	for {
		t.mu.Lock()
		n := len(t.chans)
		t.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	t.home.Close()
	<-t.homeDone
	t.mu.Lock()
	engines := make([]*engine, 0, len(t.engines))
	for _, e := range t.engines {
		engines = append(engines, e)
	}
	clear(t.engines)
	t.mu.Unlock()
	for _, e := range engines {
		e.destroy()
	}
	err := t.pool.Close()
	t.releaseDevices()
	return err
}

// Dial connects to address in blocking mode, giving up when ctx is done or
// after ConnectTimeout.
func (t *Transport) Dial(ctx context.Context, address string) (*Conn, error) {
	c, err := t.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	if err := c.awaitConnect(ctx); err != nil {
		c.Close()
		return nil, err
	}
	c.blocking.Store(true)
	return c, nil
}

// Connect starts connecting to address and returns a Conn in non-blocking
// mode whose connect is pending: register it for OpConnect and call
// FinishConnect. Its queue pair uses the completion queue of the selector
// it is registered with: once its route is resolved the connect waits
// until it is registered, or until FinishConnect is called on it
// unregistered, which makes it use the transport's own poller. ctx bounds
// only the name resolution.
func (t *Transport) Connect(ctx context.Context, address string) (*Conn, error) {
	raddr, err := addr.Resolve(ctx, "rdma", "dial", address)
	if err != nil {
		return nil, err
	}
	return t.connect(rdmaAddr(raddr))
}

// Listen listens on address, in blocking mode. The address must be one of
// an RDMA device (or unspecified: every device).
func (t *Transport) Listen(ctx context.Context, address string) (*Listener, error) {
	laddr, err := addr.Resolve(ctx, "rdma", "listen", address)
	if err != nil {
		return nil, err
	}
	return t.listen(rdmaAddr(laddr))
}

// opError wraps an error the way package net does.
func opError(op string, addr net.Addr, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return err
	}
	if addr == nil {
		return &net.OpError{Op: op, Net: "rdma", Err: err}
	}
	return &net.OpError{Op: op, Net: "rdma", Addr: addr, Err: err}
}
