package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
)

// Errors; the errors of Open and of the methods wrap them.
var (
	// ErrNotFound: Block(n) with n at or above the height.
	ErrNotFound = errors.New("ledger: no such block")
	// ErrCorrupt: damage that is not a torn tail; the error names the file
	// and the offset.
	ErrCorrupt = errors.New("ledger: corrupt")
	// ErrOrder: Append of a number other than the height.
	ErrOrder = errors.New("ledger: block out of order")
	// ErrTooLarge: Append of a block above Options.MaxBlock.
	ErrTooLarge = errors.New("ledger: block too large")
	// ErrInUse: Open of a directory another Ledger has open.
	ErrInUse = errors.New("ledger: directory in use by another open Ledger")
	// ErrBroken: an earlier write or fdatasync failed; the Ledger takes
	// no more.
	ErrBroken = errors.New("ledger: broken by an earlier failure")
)

// Defaults of Options.
const (
	DefaultSegmentSize = 64 << 20
	DefaultMaxBlock    = 128 << 20
)

// Options tunes a Ledger; the zero value is the defaults.
type Options struct {
	// SegmentSize is the size a segment file is rolled at, in bytes
	// (default DefaultSegmentSize).
	SegmentSize int64
	// MaxBlock bounds a block's size in bytes (default DefaultMaxBlock,
	// at most 4 GiB - 1): Append refuses a larger block, and Open takes
	// a header claiming one for damage.
	MaxBlock int
}

const segPrefix = "blocks-"

// segment is one block file. first never changes; offs and size grow
// under Ledger.mu.
type segment struct {
	first uint64
	name  string
	f     *os.File
	offs  []int64 // the offset of each record
	size  int64   // the end of the last record
}

// Ledger is an open block store.
type Ledger struct {
	dir *os.File // open, holding the directory's lock
	opt Options
	key *headerKey

	wmu    sync.Mutex // serializes the writer: Append, Sync, Close
	hdr    [headerSize]byte
	synced uint64 // the durable height
	err    error  // sticky: the first write or sync failure

	mu     sync.RWMutex // guards what readers see
	segs   []*segment
	height uint64
	closed bool
	grown  chan struct{} // closed when the height grows or l closes; nil if none waits
}

// writable says why the writer may not go on, nil if it may. Under wmu.
func (l *Ledger) writable() error {
	if l.closed {
		return fmt.Errorf("ledger: %w", os.ErrClosed)
	}
	if l.err != nil {
		return fmt.Errorf("%w: %w", ErrBroken, l.err)
	}
	return nil
}

// fail makes err sticky and returns it. Under wmu.
func (l *Ledger) fail(err error) error {
	l.err = err
	return err
}

// Append adds block as block number, which must be Height(): ErrOrder
// otherwise. The block is written, not synced: see Sync. Append keeps no
// reference to block. A block above Options.MaxBlock is ErrTooLarge.
// Appends are serialized with each other and with Sync and Close; they
// do not wait for readers.
func (l *Ledger) Append(number uint64, block []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	if number != l.height {
		return fmt.Errorf("%w: append of block %d, the next block is %d", ErrOrder, number, l.height)
	}
	if len(block) > l.opt.MaxBlock {
		return fmt.Errorf("%w: block %d has %d bytes, the limit is %d", ErrTooLarge, number, len(block), l.opt.MaxBlock)
	}
	s := l.segs[len(l.segs)-1]
	n := headerSize + int64(len(block))
	if s.size > 0 && s.size+n > l.opt.SegmentSize {
		var err error
		if s, err = l.roll(); err != nil {
			return l.fail(err)
		}
	}
	h := header{size: uint32(len(block)), number: number, synced: l.synced, sum: crc32Castagnoli(block)}
	l.key.putHeader(l.hdr[:], h, s.size)
	if _, err := s.f.WriteAt(l.hdr[:], s.size); err != nil {
		return l.fail(fmt.Errorf("ledger: append block %d to %s: %w", number, s.name, err))
	}
	if _, err := s.f.WriteAt(block, s.size+headerSize); err != nil {
		return l.fail(fmt.Errorf("ledger: append block %d to %s: %w", number, s.name, err))
	}
	l.mu.Lock()
	s.offs = append(s.offs, s.size)
	s.size += n
	l.height++
	l.wake()
	l.mu.Unlock()
	return nil
}

// roll syncs the last segment and starts a new one. Under wmu.
func (l *Ledger) roll() (*segment, error) {
	old := l.segs[len(l.segs)-1]
	if err := datasync(old.f); err != nil {
		return nil, fmt.Errorf("ledger: fdatasync %s: %w", old.name, err)
	}
	l.synced = l.height
	s, err := createSegment(l.dir, l.height)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.segs = append(l.segs, s)
	l.mu.Unlock()
	return s, nil
}

// Sync makes every block appended before it durable; it returns when
// they are. It waits for no reader, and Appends wait for it.
func (l *Ledger) Sync() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.writable(); err != nil {
		return err
	}
	return l.sync()
}

func (l *Ledger) sync() error {
	if l.synced == l.height {
		return nil
	}
	s := l.segs[len(l.segs)-1]
	if err := datasync(s.f); err != nil {
		return l.fail(fmt.Errorf("ledger: fdatasync %s: %w", s.name, err))
	}
	l.synced = l.height
	return nil
}

// Height returns the number of blocks appended: the next block's number.
// Blocks below it may not be durable yet. Safe to call at any time.
func (l *Ledger) Height() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.height
}

// Block returns a new copy of block n, owned by the caller: the exact
// bytes appended, checked against the record's checksums (ErrCorrupt,
// naming the file and offset, if they fail). n at or above Height() is
// ErrNotFound. A block may be returned before it is durable. Safe to call
// from any number of goroutines, concurrently with Append and Sync; after
// Close it fails with an error wrapping os.ErrClosed.
func (l *Ledger) Block(n uint64) ([]byte, error) {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return nil, fmt.Errorf("ledger: block %d: %w", n, os.ErrClosed)
	}
	if n >= l.height {
		h := l.height
		l.mu.RUnlock()
		return nil, fmt.Errorf("%w: block %d, the height is %d", ErrNotFound, n, h)
	}
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].first > n }) - 1
	s := l.segs[i]
	k := n - s.first
	off, end := s.offs[k], s.size
	if k+1 < uint64(len(s.offs)) {
		end = s.offs[k+1]
	}
	l.mu.RUnlock()

	b := make([]byte, end-off)
	if _, err := s.f.ReadAt(b, off); errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s at offset %d: block %d: the file ends inside the record", ErrCorrupt, s.name, off, n)
	} else if err != nil {
		return nil, fmt.Errorf("ledger: block %d: %w", n, err)
	}
	h, why := l.key.parseHeader(b, off, l.opt.MaxBlock)
	switch {
	case why != "":
	case h.number != n:
		why = fmt.Sprintf("block number %d, want %d", h.number, n)
	case int64(h.size) != end-off-headerSize:
		why = fmt.Sprintf("block size %d, the index says %d", h.size, end-off-headerSize)
	default:
		why = checkBlock(h, b[headerSize:])
	}
	if why != "" {
		return nil, fmt.Errorf("%w: %s at offset %d: block %d: %s", ErrCorrupt, s.name, off, n, why)
	}
	return b[headerSize:], nil
}

// Wait returns nil once block n exists (Height() > n), ctx's error if it
// is done first, and an error wrapping os.ErrClosed if the Ledger is (or
// gets) closed first. Deliver streams wait for the next block with it.
// Safe to call from any number of goroutines.
func (l *Ledger) Wait(ctx context.Context, n uint64) error {
	for {
		l.mu.Lock()
		h, closed := l.height, l.closed
		if l.grown == nil {
			l.grown = make(chan struct{})
		}
		grown := l.grown
		l.mu.Unlock()
		switch {
		case n < h:
			return nil
		case closed:
			return fmt.Errorf("ledger: wait for block %d: %w", n, os.ErrClosed)
		}
		select {
		case <-grown:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wake wakes the goroutines in Wait. Under mu.
func (l *Ledger) wake() {
	if l.grown != nil {
		close(l.grown)
		l.grown = nil
	}
}

// Close syncs the ledger and closes its files. Block then fails; a Close
// after the first returns nil.
func (l *Ledger) Close() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed {
		return nil
	}
	err := l.writable()
	if err == nil {
		err = l.sync()
	}
	l.mu.Lock()
	l.closed = true
	l.wake()
	for _, s := range l.segs {
		if cerr := s.f.Close(); err == nil {
			err = cerr
		}
	}
	if cerr := l.dir.Close(); err == nil {
		err = cerr
	}
	l.mu.Unlock()
	return err
}
