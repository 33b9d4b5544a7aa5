// Package ledger is the orderer's block store: an append-only ledger of
// blocks numbered from 0, each kept as the exact bytes appended.
//
// # Layout
//
// A directory holds segment files named blocks-N, N the number of the
// segment's first block in 20 decimal digits (so names sort like
// numbers). Blocks are appended to the last segment; a new one is started
// when the next record would carry the last past Options.SegmentSize
// (default 64 MiB; a segment holds at least one block, so a large block
// makes a segment larger). A record is a 32-byte header (a magic, the
// block's size, its number, the ledger's durable height when it was
// written, a CRC-32C of the block, and a CRC-32C of the header that
// depends on the record's file offset) followed by the block. Nothing else is stored:
// no index file.
//
// # Index
//
// The index, the offset of every block, is rebuilt at Open by reading
// each record's header and kept in memory, 8 bytes a block (8 MB for a
// million blocks). An index file would be a second copy of the same
// facts that a crash can leave out of step with the blocks, with its own
// recovery; reading 32 bytes a block at Open is cheap next to that, and
// an index derived from the segments cannot disagree with them. With the
// index, Block(n) is one read of the record, checked against both its
// checksums before it is returned. Every segment stays open: one file
// descriptor per 64 MiB of blocks with the default SegmentSize.
//
// # Durability
//
// Append writes the record (to the page cache); Sync makes every block
// appended before it durable (fdatasync of the last segment). Sync, then
// acknowledge: a block is promised to survive a crash only once a Sync
// that began after its Append has returned. Starting a new segment syncs
// the old one and the directory, so every segment but the last is
// durable entire.
//
// # Recovery
//
// Open reads the headers of every segment and, in the last one, the
// blocks too (their checksums), with a buffer of a fixed size: never a
// whole file.
//
//   - The last segment may end in a torn tail: the records of blocks no
//     Sync covered, written in part or not at all (a crash may have
//     written some of their pages and not others, in any order). Open
//     cuts the last segment at its first damaged record and keeps the
//     blocks before it: exactly a prefix of the appended blocks,
//     including every block a Sync covered.
//   - A damaged record that a later intact record proves durable (its
//     header's durable height is above the damaged block's number), and
//     any damage in a segment before the last, is not a torn tail: Open
//     fails with ErrCorrupt and names the file and offset. Damage to a
//     block of the last Sync, with no record written after that Sync,
//     cannot be told from a torn write and is cut.
//   - A segment before the last has only its headers read at Open; a
//     damaged block in it is found by Block, which returns ErrCorrupt
//     naming the file and offset, never the damaged bytes.
//
// After a failed write or fdatasync every later Append, Sync and Close
// fails (ErrBroken): a failed fdatasync may have dropped the dirty pages,
// so nothing is retried. Reopen to continue from what is on disk.
//
// # Concurrency
//
// A Ledger is safe for concurrent use: one writer (Append, Sync) and any
// number of readers (Block, Height, Wait), e.g. Deliver streams reading
// old blocks and waiting for new ones while they are appended. Appends
// and Syncs are serialized (an Append waits for a Sync in progress);
// readers never wait for a Sync's disk flush.
package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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
	dir string
	opt Options

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

// Open opens the ledger in dir with the default Options.
func Open(dir string) (*Ledger, error) { return OpenOptions(dir, Options{}) }

// OpenOptions opens (creating it if needed) the ledger in dir: it checks
// every segment, cuts a torn tail off the last one and syncs it.
func OpenOptions(dir string, opt Options) (*Ledger, error) {
	if opt.SegmentSize <= 0 {
		opt.SegmentSize = DefaultSegmentSize
	}
	if opt.MaxBlock <= 0 {
		opt.MaxBlock = DefaultMaxBlock
	}
	if opt.MaxBlock > math.MaxUint32 {
		return nil, fmt.Errorf("ledger: MaxBlock %d above 4 GiB - 1", opt.MaxBlock)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return nil, err
		}
	}
	firsts, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	l := &Ledger{dir: dir, opt: opt}
	if err := l.load(firsts); err != nil {
		for _, s := range l.segs {
			s.f.Close()
		}
		return nil, err
	}
	l.synced = l.height
	return l, nil
}

// listSegments returns the first block numbers of dir's segments, in
// order.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var firsts []uint64
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), segPrefix)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil || segName(dir, n) != filepath.Join(dir, e.Name()) {
			return nil, fmt.Errorf("%w: %s: not a segment name", ErrCorrupt, filepath.Join(dir, e.Name()))
		}
		firsts = append(firsts, n)
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	return firsts, nil
}

func segName(dir string, first uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%s%020d", segPrefix, first))
}

// load opens and checks the segments starting at firsts, or creates the
// first one.
func (l *Ledger) load(firsts []uint64) error {
	if len(firsts) == 0 {
		s, err := createSegment(l.dir, 0)
		if err != nil {
			return err
		}
		l.segs = []*segment{s}
		return nil
	}
	for i, first := range firsts {
		if first != l.height {
			return fmt.Errorf("%w: %s: segment starts at block %d, the blocks before it end at %d", ErrCorrupt, segName(l.dir, first), first, l.height)
		}
		last := i == len(firsts)-1
		flag := os.O_RDONLY
		if last {
			flag = os.O_RDWR
		}
		f, err := os.OpenFile(segName(l.dir, first), flag, 0)
		if err != nil {
			return err
		}
		s := &segment{first: first, name: f.Name(), f: f}
		l.segs = append(l.segs, s)
		if err := l.index(s, last); err != nil {
			return err
		}
		l.height += uint64(len(s.offs))
	}
	// The last segment was synced by index; its directory entry
	// may not have been.
	return syncDir(l.dir)
}

// index reads the records of segment s into its index. In a segment
// before the last (synced whole when the next one was started) it reads
// only the headers, and any damage is corruption. In the last it checks
// every block too, cuts the segment at its first damaged record if that
// is a torn tail, and syncs it.
func (l *Ledger) index(s *segment, last bool) error {
	sc, err := newScanner(s.f, l.opt.MaxBlock)
	if err != nil {
		return err
	}
	var off int64
	for off < sc.size {
		k := s.first + uint64(len(s.offs))
		h, why, err := sc.record(off, k, last)
		if err != nil {
			return err
		}
		if why != "" && !last {
			return fmt.Errorf("%w: %s at offset %d: %s (in a segment before the last)", ErrCorrupt, s.name, off, why)
		}
		if why != "" {
			at, j, err := sc.vouched(off+1, k)
			if err != nil {
				return err
			}
			if at >= 0 {
				return fmt.Errorf("%w: %s at offset %d: %s, but block %d at offset %d, written after it, records block %d as synced", ErrCorrupt, s.name, off, why, j, at, k)
			}
			break
		}
		s.offs = append(s.offs, off)
		off += headerSize + int64(h.size)
	}
	s.size = off
	if !last {
		return nil
	}
	if off < sc.size {
		if err := s.f.Truncate(off); err != nil {
			return fmt.Errorf("ledger: cut the torn tail of %s at offset %d: %w", s.name, off, err)
		}
	}
	// Synced even when nothing was cut: what Open read may be in the page
	// cache only (the process died, not the machine), and later records
	// will say it is durable.
	return s.f.Sync()
}

func createSegment(dir string, first uint64) (*segment, error) {
	name := segName(dir, first)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		f.Close()
		return nil, err
	}
	return &segment{first: first, name: name, f: f}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("ledger: fsync directory %s: %w", dir, err)
	}
	return nil
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
	putHeader(l.hdr[:], h, s.size)
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
	h, why := parseHeader(b, off, l.opt.MaxBlock)
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
	l.mu.Unlock()
	return err
}
