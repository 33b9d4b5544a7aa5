// Package bufpool provides fixed-size, reference-counted message buffers
// carved from large slabs that live off the Go heap.
//
// Slabs are anonymous memory mappings: they never move, the garbage collector
// never scans them, and a transport may hand their addresses to a NIC. A
// Registrar hook sees each slab once, before any of its buffers is handed
// out, so an RDMA transport registers memory once per slab rather than once
// per message. The pool is bounded: it grows slab by slab up to MaxBuffers
// and then makes callers wait (Get) or fail (TryGet); it never grows further.
//
// Ownership: a *Buffer obtained from Get or TryGet is owned by the caller,
// who must Release it exactly once (plus once per Retain). After the last
// Release the buffer's memory belongs to the pool again and must not be
// touched. Releasing more often than owned panics: a double release is a bug
// that would otherwise hand one buffer to two owners.
//
// Nothing in the package is Linux-only: slabs come from anonymous mmap, so
// it builds on Linux, macOS, FreeBSD and OpenBSD, though not on Windows.
package bufpool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Defaults for the zero Config fields.
const (
	DefaultBufferSize = 256 << 10
	DefaultSlabSize   = 4 << 20
	DefaultMaxBuffers = 4096
)

// alignment of every buffer: a cache line, so that two buffers never share one.
const alignment = 64

var (
	// ErrExhausted is returned by TryGet when every buffer is in use and the
	// pool is at its bound.
	ErrExhausted = errors.New("bufpool: all buffers in use")
	// ErrClosed is returned by Get and TryGet after Close.
	ErrClosed = errors.New("bufpool: pool closed")
)

// A Registrar registers slabs with whatever must know their memory, such as
// an RDMA protection domain. Its methods are called with the pool's growth
// lock held, never concurrently.
type Registrar interface {
	// Register is called once per slab, before any of its buffers is used.
	// The handle it returns is reported by Buffer.Handle for every buffer
	// of that slab (an RDMA transport returns the local key).
	Register(slab []byte) (handle uint64, err error)
	// Deregister is called once per registered slab when the pool has been
	// closed and all its buffers have come back.
	Deregister(handle uint64)
}

// Config configures a Pool. The zero value is usable.
type Config struct {
	// BufferSize is the capacity of every buffer, in bytes. It is rounded
	// up to a multiple of 64. Default DefaultBufferSize.
	BufferSize int
	// SlabSize is the size of one memory mapping. It is rounded up so that
	// it holds a whole number (at least one) of buffers. Default
	// DefaultSlabSize.
	SlabSize int
	// MaxBuffers bounds the number of buffers the pool will ever carve.
	// Default DefaultMaxBuffers.
	MaxBuffers int
	// Registrar, if not nil, registers each slab.
	Registrar Registrar
}

// Stats is a snapshot of a pool's usage.
type Stats struct {
	BufferSize int    // capacity of each buffer in bytes
	MaxBuffers int    // the bound
	Allocated  int    // buffers carved from slabs so far
	InUse      int    // buffers currently owned by callers
	Slabs      int    // memory mappings held now
	Gets       uint64 // successful Get and TryGet calls
	Waits      uint64 // Get calls that had to wait for a Release
	Exhausted  uint64 // TryGet calls that failed with ErrExhausted
}

// A Pool hands out fixed-size buffers. All its methods are safe for
// concurrent use.
//
// Free buffers form a stack: the buffer released last is handed out next,
// while its cache lines (and, on RDMA, its NIC translation entries) are
// still warm. A release while Gets wait goes straight to the oldest waiter.
type Pool struct {
	bufSize    int
	perSlab    int
	maxBuffers int
	registrar  Registrar

	mu      sync.Mutex // guards the fields below
	free    []*Buffer  // a stack; capacity maxBuffers
	waiters []chan *Buffer
	slabs   []*slab
	carved  int
	inUse   int
	closed  bool
	drained bool // slabs unmapped

	gets      atomic.Uint64
	waits     atomic.Uint64
	exhausted atomic.Uint64
}

type slab struct {
	mem    []byte
	handle uint64
	bufs   []Buffer // headers, allocated once with the slab
}

// New returns a pool configured by cfg. No memory is mapped until the first
// buffer is requested.
func New(cfg Config) (*Pool, error) {
	if cfg.BufferSize < 0 || cfg.SlabSize < 0 || cfg.MaxBuffers < 0 {
		return nil, fmt.Errorf("bufpool: negative size in config %+v", cfg)
	}
	if cfg.BufferSize == 0 {
		cfg.BufferSize = DefaultBufferSize
	}
	if cfg.SlabSize == 0 {
		cfg.SlabSize = DefaultSlabSize
	}
	if cfg.MaxBuffers == 0 {
		cfg.MaxBuffers = DefaultMaxBuffers
	}
	bufSize := (cfg.BufferSize + alignment - 1) &^ (alignment - 1)
	perSlab := max(cfg.SlabSize/bufSize, 1)
	perSlab = min(perSlab, cfg.MaxBuffers)
	return &Pool{
		bufSize:    bufSize,
		perSlab:    perSlab,
		maxBuffers: cfg.MaxBuffers,
		registrar:  cfg.Registrar,
	}, nil
}

// BufferSize reports the capacity of every buffer of the pool.
func (p *Pool) BufferSize() int { return p.bufSize }

// Get returns a buffer with length zero, waiting for one to be released
// when the pool is at its bound, until ctx is done or the pool is closed.
func (p *Pool) Get(ctx context.Context) (*Buffer, error) {
	p.mu.Lock()
	b, err := p.take()
	if !errors.Is(err, ErrExhausted) {
		p.mu.Unlock()
		return p.hand(b, err)
	}
	w := make(chan *Buffer, 1)
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	p.waits.Add(1)
	select {
	case b := <-w:
		if b == nil {
			return nil, ErrClosed
		}
		return p.hand(b, nil)
	case <-ctx.Done():
		p.mu.Lock()
		i := slices.Index(p.waiters, w)
		if i >= 0 {
			p.waiters = slices.Delete(p.waiters, i, i+1)
		}
		p.mu.Unlock()
		if i < 0 {
			// A Release or Close took w off the list and is handing
			// over a buffer (or nil): take it and pass it on.
			if b := <-w; b != nil {
				p.put(b)
			}
		}
		return nil, ctx.Err()
	}
}

// TryGet returns a buffer with length zero, or ErrExhausted if none is free
// and the pool is at its bound. It never waits.
func (p *Pool) TryGet() (*Buffer, error) {
	p.mu.Lock()
	b, err := p.take()
	p.mu.Unlock()
	if errors.Is(err, ErrExhausted) {
		p.exhausted.Add(1)
	}
	return p.hand(b, err)
}

// take pops a free buffer, mapping a slab if none is free; mu held.
func (p *Pool) take() (*Buffer, error) {
	if p.closed {
		return nil, ErrClosed
	}
	if len(p.free) == 0 {
		if err := p.grow(); err != nil {
			return nil, err
		}
	}
	b := p.free[len(p.free)-1]
	p.free[len(p.free)-1] = nil
	p.free = p.free[:len(p.free)-1]
	p.inUse++
	return b, nil
}

func (p *Pool) hand(b *Buffer, err error) (*Buffer, error) {
	if err != nil {
		return nil, err
	}
	b.n = 0
	b.refs.Store(1)
	p.gets.Add(1)
	return b, nil
}

// grow maps one more slab if the pool is below its bound; mu held.
func (p *Pool) grow() error {
	n := min(p.perSlab, p.maxBuffers-p.carved)
	if n <= 0 {
		return ErrExhausted
	}
	mem, err := unix.Mmap(-1, 0, n*p.bufSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("bufpool: mapping a slab of %d bytes: %w", n*p.bufSize, err)
	}
	s := &slab{mem: mem, bufs: make([]Buffer, n)}
	if p.registrar != nil {
		h, err := p.registrar.Register(mem)
		if err != nil {
			_ = unix.Munmap(mem)
			return fmt.Errorf("bufpool: registering a slab: %w", err)
		}
		s.handle = h
	}
	if p.free == nil {
		p.free = make([]*Buffer, 0, p.maxBuffers)
	}
	p.slabs = append(p.slabs, s)
	for i := n - 1; i >= 0; i-- { // the slab's first buffer on top
		b := &s.bufs[i]
		b.pool = p
		b.slab = s
		b.mem = mem[i*p.bufSize : (i+1)*p.bufSize : (i+1)*p.bufSize]
		p.free = append(p.free, b)
	}
	p.carved += n
	return nil
}

// put takes back a buffer whose last owner released it.
func (p *Pool) put(b *Buffer) {
	p.mu.Lock()
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = slices.Delete(p.waiters, 0, 1)
		p.mu.Unlock()
		w <- b // still in use: it changes owner
		return
	}
	p.free = append(p.free, b)
	p.inUse--
	drain := p.closed && p.inUse == 0
	p.mu.Unlock()
	if drain {
		p.drain()
	}
}

// Close stops the pool from handing out buffers: Get and TryGet fail with
// ErrClosed, and goroutines waiting in Get are woken with it. The slabs are
// unmapped (and deregistered) as soon as every outstanding buffer has been
// released, which may be during Close. Close is idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for _, w := range p.waiters {
		w <- nil
	}
	p.waiters = nil
	drain := p.inUse == 0
	p.mu.Unlock()
	if drain {
		p.drain()
	}
	return nil
}

// drain unmaps all slabs once; only after Close and with no buffer in use.
func (p *Pool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drained || p.inUse != 0 {
		return
	}
	p.drained = true
	for _, s := range p.slabs {
		if p.registrar != nil {
			p.registrar.Deregister(s.handle)
		}
		_ = unix.Munmap(s.mem)
	}
	p.slabs, p.free = nil, nil
}

// Stats returns a snapshot of the pool's usage.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		BufferSize: p.bufSize,
		MaxBuffers: p.maxBuffers,
		Allocated:  p.carved,
		InUse:      p.inUse,
		Slabs:      len(p.slabs),
		Gets:       p.gets.Load(),
		Waits:      p.waits.Load(),
		Exhausted:  p.exhausted.Load(),
	}
}

// A Buffer is a fixed-capacity byte buffer from a Pool. Its bytes are
// Bytes(); its capacity is Cap(). See the package documentation for who owns
// a buffer and when.
//
// A Buffer is not safe for concurrent mutation; Retain and Release are safe
// to call from any goroutine.
type Buffer struct {
	pool *Pool
	slab *slab
	mem  []byte // full capacity
	n    int
	refs atomic.Int32
}

// Bytes returns the buffer's contents: its first Len bytes. The slice is
// valid until the buffer is released.
func (b *Buffer) Bytes() []byte { return b.mem[:b.n] }

// Full returns the buffer's whole capacity, for filling it before SetLen.
func (b *Buffer) Full() []byte { return b.mem }

// Len returns the length of the contents.
func (b *Buffer) Len() int { return b.n }

// Cap returns the capacity of the buffer.
func (b *Buffer) Cap() int { return len(b.mem) }

// SetLen sets the length of the contents. It panics if n is out of range.
func (b *Buffer) SetLen(n int) {
	if n < 0 || n > len(b.mem) {
		panic(fmt.Sprintf("bufpool: SetLen(%d) on a buffer of capacity %d", n, len(b.mem)))
	}
	b.n = n
}

// Write appends p to the contents, as much as fits, and reports how much
// was appended; it returns an error only if not all of p fit.
func (b *Buffer) Write(p []byte) (int, error) {
	n := copy(b.mem[b.n:], p)
	b.n += n
	if n < len(p) {
		return n, fmt.Errorf("bufpool: buffer full after %d of %d bytes", n, len(p))
	}
	return n, nil
}

// Handle returns the registration handle of the buffer's slab, as returned
// by the pool's Registrar (zero without one).
func (b *Buffer) Handle() uint64 { return b.slab.handle }

// Pool returns the pool the buffer belongs to.
func (b *Buffer) Pool() *Pool { return b.pool }

// Retain adds an owner: the buffer goes back to the pool only after one more
// Release.
func (b *Buffer) Retain() {
	if b.refs.Add(1) <= 1 {
		panic("bufpool: Retain of a released buffer")
	}
}

// Release gives up one ownership of the buffer; the last one returns it to
// the pool. Releasing a buffer that is not owned panics.
func (b *Buffer) Release() {
	switch r := b.refs.Add(-1); {
	case r == 0:
		b.pool.put(b)
	case r < 0:
		panic("bufpool: Release of a buffer that is not owned (double release)")
	}
}
