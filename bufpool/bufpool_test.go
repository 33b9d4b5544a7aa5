package bufpool_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rubin-go/rubin/bufpool"
)

const patience = 10 * time.Second

func newPool(t testing.TB, cfg bufpool.Config) *bufpool.Pool {
	t.Helper()
	p, err := bufpool.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func tryGet(t testing.TB, p *bufpool.Pool) *bufpool.Buffer {
	t.Helper()
	b, err := p.TryGet()
	if err != nil {
		t.Fatalf("TryGet: %v (stats %+v)", err, p.Stats())
	}
	return b
}

// mustPanic runs f and reports whether it panicked.
func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

func TestGetRelease(t *testing.T) {
	p := newPool(t, bufpool.Config{BufferSize: 1000, SlabSize: 8 << 10, MaxBuffers: 16})
	if got := p.BufferSize(); got != 1024 {
		t.Errorf("BufferSize() = %d; want 1000 rounded up to 1024", got)
	}
	if st := p.Stats(); st.Slabs != 0 || st.Allocated != 0 {
		t.Errorf("a new pool mapped memory: %+v", st)
	}
	b, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 || b.Cap() != 1024 || len(b.Full()) != 1024 || b.Pool() != p || b.Handle() != 0 {
		t.Errorf("new buffer: len %d cap %d full %d pool %p handle %d", b.Len(), b.Cap(), len(b.Full()), b.Pool(), b.Handle())
	}
	if uintptr(unsafe.Pointer(&b.Full()[0]))%64 != 0 {
		t.Errorf("buffer not aligned to a cache line")
	}
	n, err := b.Write([]byte("hello, "))
	if n != 7 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	b.Write([]byte("world"))
	if got := string(b.Bytes()); got != "hello, world" {
		t.Errorf("Bytes() = %q", got)
	}
	copy(b.Full(), "J")
	b.SetLen(5)
	if got := string(b.Bytes()); got != "Jello" {
		t.Errorf("after SetLen(5): %q", got)
	}
	mustPanic(t, "SetLen above capacity", func() { b.SetLen(1025) })
	mustPanic(t, "SetLen(-1)", func() { b.SetLen(-1) })
	b.SetLen(1020)
	if n, err := b.Write(make([]byte, 10)); n != 4 || err == nil {
		t.Errorf("Write past capacity = %d, %v; want 4 and an error", n, err)
	}
	st := p.Stats()
	if st.InUse != 1 || st.Gets != 1 || st.Slabs != 1 || st.Allocated != 8 || st.BufferSize != 1024 || st.MaxBuffers != 16 {
		t.Errorf("Stats() with one buffer out = %+v", st)
	}
	b.Release()
	if st := p.Stats(); st.InUse != 0 {
		t.Errorf("InUse = %d after Release", st.InUse)
	}
	// A buffer comes back empty.
	b = tryGet(t, p)
	if b.Len() != 0 {
		t.Errorf("reused buffer has length %d", b.Len())
	}
	b.Release()
}

func TestDistinctBuffers(t *testing.T) {
	p := newPool(t, bufpool.Config{BufferSize: 64, SlabSize: 256, MaxBuffers: 12})
	var bufs []*bufpool.Buffer
	seen := make(map[*byte]bool)
	for i := range 12 {
		b := tryGet(t, p)
		b.Write(bytes.Repeat([]byte{byte(i)}, 64))
		if seen[&b.Full()[0]] {
			t.Fatalf("buffer %d shares memory with another", i)
		}
		seen[&b.Full()[0]] = true
		bufs = append(bufs, b)
	}
	for i, b := range bufs {
		if !bytes.Equal(b.Bytes(), bytes.Repeat([]byte{byte(i)}, 64)) {
			t.Errorf("buffer %d was overwritten", i)
		}
		b.Release()
	}
	if st := p.Stats(); st.Slabs != 3 || st.Allocated != 12 {
		t.Errorf("12 buffers of 64 in slabs of 256: %+v; want 3 slabs", st)
	}
}

func TestBound(t *testing.T) {
	p := newPool(t, bufpool.Config{BufferSize: 64, SlabSize: 64 * 3, MaxBuffers: 5})
	var bufs []*bufpool.Buffer
	for range 5 {
		bufs = append(bufs, tryGet(t, p))
	}
	for range 3 {
		if b, err := p.TryGet(); !errors.Is(err, bufpool.ErrExhausted) {
			t.Fatalf("TryGet beyond MaxBuffers = %v, %v; want ErrExhausted", b, err)
		}
	}
	st := p.Stats()
	if st.Allocated != 5 || st.Slabs != 2 || st.Exhausted != 3 || st.InUse != 5 {
		t.Errorf("Stats() at the bound = %+v; want 5 allocated in 2 slabs, 3 exhausted", st)
	}
	bufs[0].Release()
	b := tryGet(t, p)
	if b != bufs[0] {
		t.Errorf("TryGet after a Release did not reuse the released buffer")
	}
	for _, b := range bufs {
		b.Release()
	}
	if st := p.Stats(); st.Allocated != 5 || st.InUse != 0 {
		t.Errorf("Stats() after releasing = %+v", st)
	}
}

func TestGetWaitsForRelease(t *testing.T) {
	p := newPool(t, bufpool.Config{BufferSize: 64, MaxBuffers: 1})
	held := tryGet(t, p)
	got := make(chan *bufpool.Buffer)
	go func() {
		b, err := p.Get(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	waitFor(t, "Get to wait", func() bool { return p.Stats().Waits == 1 })
	select {
	case b := <-got:
		t.Fatalf("Get returned %v with the pool exhausted", b)
	default:
	}
	held.Release()
	select {
	case b := <-got:
		if b != held || b.Len() != 0 {
			t.Errorf("Get returned %p (len %d); want the released buffer, empty", b, b.Len())
		}
		b.Release()
	case <-time.After(patience):
		t.Fatal("Get did not return after a Release")
	}
}

func TestGetHonoursContext(t *testing.T) {
	p := newPool(t, bufpool.Config{BufferSize: 64, MaxBuffers: 1})
	held := tryGet(t, p)
	defer held.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	b, err := p.Get(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || b != nil {
		t.Errorf("Get with an expiring context = %v, %v; want DeadlineExceeded", b, err)
	}
	if d := time.Since(start); d < 20*time.Millisecond || d > patience/2 {
		t.Errorf("Get gave up after %v", d)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := p.Get(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a canceled context = %v; want Canceled", err)
	}
	if st := p.Stats(); st.InUse != 1 {
		t.Errorf("InUse = %d; failed Gets took buffers", st.InUse)
	}
}

func TestDoubleReleasePanics(t *testing.T) {
	p := newPool(t, bufpool.Config{BufferSize: 64, MaxBuffers: 4})
	b := tryGet(t, p)
	b.Release()
	mustPanic(t, "a second Release", b.Release)
	mustPanic(t, "Retain of a released buffer", b.Retain)
}

func TestRetain(t *testing.T) {
	p := newPool(t, bufpool.Config{BufferSize: 64, MaxBuffers: 1})
	b := tryGet(t, p)
	b.Retain()
	b.Retain()
	b.Release()
	b.Release()
	if _, err := p.TryGet(); !errors.Is(err, bufpool.ErrExhausted) {
		t.Fatalf("buffer returned to the pool with an owner left (TryGet = %v)", err)
	}
	if st := p.Stats(); st.InUse != 1 {
		t.Errorf("InUse = %d with one owner left", st.InUse)
	}
	b.Release()
	if st := p.Stats(); st.InUse != 0 {
		t.Errorf("InUse = %d after the last Release", st.InUse)
	}
	c := tryGet(t, p)
	if c != b {
		t.Error("buffer not back in the pool after the last Release")
	}
	c.Release()
}

// registrar records registrations.
type registrar struct {
	mu           sync.Mutex
	next         uint64
	registered   map[uint64][]byte
	deregistered []uint64
	fail         bool
}

func (r *registrar) Register(slab []byte) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return 0, errors.New("no more memory regions")
	}
	r.next++
	if r.registered == nil {
		r.registered = make(map[uint64][]byte)
	}
	r.registered[r.next] = slab
	return r.next, nil
}

func (r *registrar) Deregister(h uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deregistered = append(r.deregistered, h)
}

func (r *registrar) counts() (int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.registered), len(r.deregistered)
}

func TestRegistrar(t *testing.T) {
	reg := &registrar{}
	p, err := bufpool.New(bufpool.Config{BufferSize: 64, SlabSize: 256, MaxBuffers: 10, Registrar: reg})
	if err != nil {
		t.Fatal(err)
	}
	var bufs []*bufpool.Buffer
	for range 10 {
		b := tryGet(t, p)
		bufs = append(bufs, b)
		reg.mu.Lock()
		slab, ok := reg.registered[b.Handle()]
		reg.mu.Unlock()
		if !ok {
			t.Fatalf("buffer handle %d is no registered slab's", b.Handle())
		}
		start := uintptr(unsafe.Pointer(&slab[0]))
		at := uintptr(unsafe.Pointer(&b.Full()[0]))
		if at < start || at+uintptr(b.Cap()) > start+uintptr(len(slab)) {
			t.Errorf("buffer lies outside the slab its handle names")
		}
	}
	if r, d := reg.counts(); r != 3 || d != 0 {
		t.Errorf("10 buffers in slabs of 4: %d slabs registered, %d deregistered; want 3 and 0", r, d)
	}
	p.Close()
	if _, d := reg.counts(); d != 0 {
		t.Errorf("slabs deregistered while buffers are out")
	}
	for _, b := range bufs[:9] {
		b.Release()
	}
	if _, d := reg.counts(); d != 0 {
		t.Errorf("slabs deregistered with a buffer still out")
	}
	bufs[9].Release()
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if len(reg.deregistered) != 3 {
		t.Fatalf("deregistered %v; want the 3 slabs once each", reg.deregistered)
	}
	seen := make(map[uint64]bool)
	for _, h := range reg.deregistered {
		if _, ok := reg.registered[h]; !ok || seen[h] {
			t.Errorf("Deregister(%d): not registered, or twice", h)
		}
		seen[h] = true
	}
}

func TestRegistrarFailure(t *testing.T) {
	reg := &registrar{fail: true}
	p := newPool(t, bufpool.Config{BufferSize: 64, Registrar: reg})
	if b, err := p.TryGet(); err == nil || errors.Is(err, bufpool.ErrExhausted) {
		t.Errorf("TryGet with a failing Registrar = %v, %v; want its error", b, err)
	}
	if st := p.Stats(); st.Slabs != 0 || st.Allocated != 0 {
		t.Errorf("a slab that failed registration was kept: %+v", st)
	}
	reg.mu.Lock()
	reg.fail = false
	reg.mu.Unlock()
	tryGet(t, p).Release()
}

func TestClose(t *testing.T) {
	reg := &registrar{}
	p, err := bufpool.New(bufpool.Config{BufferSize: 64, MaxBuffers: 2, Registrar: reg})
	if err != nil {
		t.Fatal(err)
	}
	a, b := tryGet(t, p), tryGet(t, p)
	waiter := make(chan error, 1)
	go func() {
		_, err := p.Get(context.Background())
		waiter <- err
	}()
	waitFor(t, "Get to wait", func() bool { return p.Stats().Waits == 1 })
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiter:
		if !errors.Is(err, bufpool.ErrClosed) {
			t.Errorf("Get woken by Close = %v; want ErrClosed", err)
		}
	case <-time.After(patience):
		t.Fatal("Close did not wake a waiting Get")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := p.TryGet(); !errors.Is(err, bufpool.ErrClosed) {
		t.Errorf("TryGet after Close = %v; want ErrClosed", err)
	}
	if _, err := p.Get(context.Background()); !errors.Is(err, bufpool.ErrClosed) {
		t.Errorf("Get after Close = %v; want ErrClosed", err)
	}
	// Outstanding buffers stay usable until released.
	copy(a.Full(), "still mine")
	a.SetLen(10)
	if string(a.Bytes()) != "still mine" {
		t.Error("buffer changed after Close")
	}
	a.Release()
	b.Retain()
	b.Release()
	b.Full()[0] = 1 // still mapped: one owner left
	if _, d := reg.counts(); d != 0 {
		t.Error("slab deregistered with a buffer out")
	}
	b.Release()
	if r, d := reg.counts(); d != r || d != 1 {
		t.Errorf("after the last Release: %d registered, %d deregistered; want 1 and 1", r, d)
	}
	// Close again after draining does not deregister twice.
	p.Close()
	if _, d := reg.counts(); d != 1 {
		t.Errorf("deregistered %d times", d)
	}
	if st := p.Stats(); st.InUse != 0 {
		t.Errorf("InUse = %d after everything was released", st.InUse)
	}
}

func TestCloseUnusedPool(t *testing.T) {
	reg := &registrar{}
	p, err := bufpool.New(bufpool.Config{Registrar: reg})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if r, d := reg.counts(); r != 0 || d != 0 {
		t.Errorf("a pool never used registered %d and deregistered %d slabs", r, d)
	}
}

func TestNewConfig(t *testing.T) {
	for _, cfg := range []bufpool.Config{{BufferSize: -1}, {SlabSize: -1}, {MaxBuffers: -1}} {
		if _, err := bufpool.New(cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
	p := newPool(t, bufpool.Config{})
	if st := p.Stats(); st.BufferSize != bufpool.DefaultBufferSize || st.MaxBuffers != bufpool.DefaultMaxBuffers {
		t.Errorf("zero Config: %+v; want the defaults", st)
	}
	// A slab smaller than a buffer still holds one.
	p = newPool(t, bufpool.Config{BufferSize: 4096, SlabSize: 100, MaxBuffers: 2})
	tryGet(t, p).Release()
	if st := p.Stats(); st.Slabs != 1 || st.Allocated != 1 {
		t.Errorf("slab smaller than a buffer: %+v; want one buffer per slab", st)
	}
}

func TestConcurrentUse(t *testing.T) {
	p := newPool(t, bufpool.Config{BufferSize: 64, SlabSize: 64 * 8, MaxBuffers: 32})
	var wg sync.WaitGroup
	var owners [32]atomic.Int32 // by first byte: no buffer has two owners
	var ids atomic.Int32
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				var b *bufpool.Buffer
				var err error
				if i%2 == 0 {
					b, err = p.Get(context.Background())
				} else if b, err = p.TryGet(); errors.Is(err, bufpool.ErrExhausted) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				// Tag the buffer with an id, at its end, on first use;
				// owners counts who holds it.
				full := b.Full()
				if full[62] == 0 {
					full[63] = byte(ids.Add(1) - 1)
					full[62] = 1
				}
				id := full[63]
				if owners[id].Add(1) != 1 {
					t.Errorf("buffer %d handed to two owners", id)
				}
				b.Write([]byte{byte(g)})
				if g%3 == 0 {
					b.Retain()
					go func() {
						owners[id].Add(-1)
						b.Release()
						b.Release()
					}()
					continue
				}
				owners[id].Add(-1)
				b.Release()
			}
		}()
	}
	wg.Wait()
	waitFor(t, "every buffer back", func() bool { return p.Stats().InUse == 0 })
	if st := p.Stats(); st.Allocated > 32 {
		t.Errorf("pool carved %d buffers, above its bound", st.Allocated)
	}
}

func BenchmarkGetRelease(b *testing.B) {
	p := newPool(b, bufpool.Config{BufferSize: 4096, MaxBuffers: 16})
	ctx := context.Background()
	tryGet(b, p).Release() // map the slab
	b.ReportAllocs()
	for b.Loop() {
		buf, err := p.Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		buf.Release()
	}
}

func BenchmarkGetReleaseParallel(b *testing.B) {
	p := newPool(b, bufpool.Config{BufferSize: 4096, MaxBuffers: 1024})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			buf, err := p.TryGet()
			if err != nil {
				b.Error(err)
				return
			}
			buf.Release()
		}
	})
}

// TestGetReleaseAllocs is the benchmark's 0 allocs/op as a test.
func TestGetReleaseAllocs(t *testing.T) {
	p := newPool(t, bufpool.Config{BufferSize: 4096, MaxBuffers: 16})
	tryGet(t, p).Release()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		b, err := p.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Retain()
		b.Release()
		b.Release()
	})
	if allocs != 0 {
		t.Errorf("Get, Retain and Release allocate %v times per run; want 0", allocs)
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}
