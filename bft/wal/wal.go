// Package wal is a replica's durable storage: a write-ahead log of framed,
// checksummed record batches and one snapshot file that replaces the log
// behind it.
//
// # Layout
//
// A directory holds snap-G (the snapshot of generation G; absent for
// generation 0) and wal-G (the records appended since that snapshot).
// Every write is a frame: a 12-byte header (payload length, CRC-32C of
// the payload, CRC-32C of those 8 bytes and the frame's file offset) and
// the payload. The offset in the header checksum keeps bytes inside a
// record (a client's operation) from passing for a frame. A log frame
// holds one batch of records (one Append, one sync: group commit); a
// snapshot file holds one frame.
//
// # Pre-allocation
//
// The log file grows by chunks of zeros written ahead of its frames
// (File.Allocate), so that an Append writes into blocks that are
// already part of the file: its fdatasync(2) then flushes the data
// alone, where a write into space fallocate(2) only reserved would also
// commit the metadata of the block it fills. A chunk is as large as the
// file already is, or as the last generation's log grew, at least
// minChunk and at most Options.Prealloc (default DefaultPrealloc,
// 4 MiB): a log restarted at every Snapshot writes about as many zeros
// as records, once. An Append that grows the file syncs with fsync,
// which makes the new size durable together with its frame; every
// Append inside space already allocated and synced syncs with
// fdatasync. An Append that grows the file by writing, because the
// zeros could not be written (a disk too full for a chunk), also syncs
// with fsync, so a full disk is found by the write that does not fit,
// never at Open. The unused, zeroed rest of the last chunk is the log's
// end at Open, like a torn tail; it is not damage, is kept for later
// Appends and is not counted in Cut. A log file so costs up to one chunk
// of disk beyond its records, and a new one is started at every
// Snapshot.
//
// # Guarantees
//
//   - Append returns only after its records are on stable storage
//     (written, and fsynced or fdatasynced); the records of one Append
//     are recovered all or none.
//   - Snapshot replaces the snapshot and every record before it
//     atomically: after a crash, Open finds either the old snapshot and
//     log or the new snapshot and an empty log.
//   - A damaged last frame of the log (torn by a crash, or corrupt) is
//     cut off at Open, never returned; its Append had not returned, or the
//     damage hit the one frame that cannot be told from a torn write.
//     Zeros after it are the pre-allocated space; they are cut with it.
//   - A damaged frame followed by an intact one, or a damaged snapshot,
//     is an error at Open (ErrCorrupt): never a silent wrong state.
//   - After a failed write or fsync (a full disk: ENOSPC) every later
//     call fails: the Log is broken, the caller must stop; nothing is
//     retried, since a failed fsync may have dropped the dirty pages.
//
// A Log is not safe for concurrent use.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Errors; the errors of Open and of the methods wrap them (and the
// operating system's error, e.g. syscall.ENOSPC, when there is one).
var (
	// ErrCorrupt: damage before the log's tail, or a damaged snapshot.
	ErrCorrupt = errors.New("wal: corrupt")
	// ErrBroken: an earlier write or fsync failed; the Log takes no more.
	ErrBroken = errors.New("wal: broken by an earlier failure")
	// ErrIO: a write, fsync, rename or read failed.
	ErrIO = errors.New("wal: i/o")
)

const headerSize = 12

// DefaultMaxFrame bounds one frame's payload unless Options says otherwise.
const DefaultMaxFrame = 1 << 30

// DefaultPrealloc is the largest chunk the log file grows by unless
// Options says otherwise: large enough that the fsync of a growth is
// rare in a long log (one per 4 MiB of records), small enough that
// writing its zeros is a modest cost on the disk.
const DefaultPrealloc = 4 << 20

// minChunk is the smallest chunk the log file grows by (unless
// Options.Prealloc is smaller): a log that stays small writes few zeros.
const minChunk = 64 << 10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// File is what the Log needs of an open file. Tests wrap it to inject
// failures.
type File interface {
	io.Writer
	// Sync is fsync(2): the data and all the metadata.
	Sync() error
	// Datasync is fdatasync(2): the data and the metadata needed to read
	// it back, not the timestamps.
	Datasync() error
	// Allocate writes n zero bytes at off, or has the file system write
	// them (the file size grows to cover them); errors.ErrUnsupported
	// where the Log is to grow the file by its frames alone.
	Allocate(off, n int64) error
	Close() error
}

// Options tunes a Log.
type Options struct {
	// MaxFrame bounds a frame's payload (default DefaultMaxFrame): a
	// header claiming more is damage.
	MaxFrame int
	// Prealloc is the largest chunk the log file grows by, in bytes
	// (default DefaultPrealloc; negative: none, the file grows by its
	// frames and every Append fsyncs).
	Prealloc int
	// Wrap, if set, wraps every file the Log writes (fault injection).
	Wrap func(File) File
}

// Log is an open storage directory.
type Log struct {
	dir    string
	opt    Options
	gen    uint64
	size   int // bytes of frames in the current log file
	alloc  int // the file's size, durable: Appends below it fdatasync
	last   int // bytes of frames the previous generation's log held
	f      File
	err    error // sticky: set by the first failure
	frame  []byte
	closed bool
}

// Recovered is what Open found.
type Recovered struct {
	// Snapshot is the latest snapshot's payload, nil if none was taken.
	Snapshot []byte
	// Batches are the record batches appended since, in order.
	Batches [][][]byte
	// Cut is the number of bytes of a damaged tail that Open removed,
	// not counting zeros after it (pre-allocated space).
	Cut int64
}

// Open opens (creating it if needed) the storage in dir and returns what
// it holds. A damaged log tail is truncated; damage elsewhere is
// ErrCorrupt.
func Open(dir string, opt Options) (*Log, *Recovered, error) {
	if opt.MaxFrame <= 0 {
		opt.MaxFrame = DefaultMaxFrame
	}
	if opt.Prealloc == 0 {
		opt.Prealloc = DefaultPrealloc
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrIO, err)
	}
	gen, err := latestGen(dir)
	if err != nil {
		return nil, nil, err
	}
	rec := &Recovered{}
	if gen > 0 {
		b, err := os.ReadFile(snapName(dir, gen))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrIO, err)
		}
		p, n, ok := parseFrame(b, 0, opt.MaxFrame)
		if !ok || n != len(b) {
			return nil, nil, fmt.Errorf("%w: snapshot %s fails its checksum", ErrCorrupt, snapName(dir, gen))
		}
		rec.Snapshot = p
	}
	if err := removeStale(dir, gen); err != nil {
		return nil, nil, err
	}
	name := walName(dir, gen)
	b, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: %v", ErrIO, err)
	}
	off := 0
	for off < len(b) {
		p, n, ok := parseFrame(b[off:], off, opt.MaxFrame)
		// Append writes no empty frame; zeros whose header checksum
		// matches by chance at this offset would pass for one.
		if !ok || n == headerSize {
			if at := intactAfter(b, off+1, nonZeroEnd(b, off), opt.MaxFrame); at >= 0 {
				return nil, nil, fmt.Errorf("%w: %s: damaged frame at offset %d before an intact one at %d", ErrCorrupt, name, off, at)
			}
			break
		}
		recs, err := splitRecords(p)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: frame at offset %d: %v", ErrCorrupt, name, off, err)
		}
		rec.Batches = append(rec.Batches, recs)
		off += n
	}
	// Bytes other than zeros after the last intact frame are damage, cut
	// with the zeros after them; zeros alone are the pre-allocated space
	// and are kept.
	rec.Cut = int64(nonZeroEnd(b, off) - off)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrIO, err)
	}
	alloc := len(b)
	if rec.Cut > 0 {
		alloc = off
	}
	// The file is synced even when nothing was cut: what Open found may
	// be in the page cache only (the process died, not the machine), and
	// later Appends inside alloc fdatasync only.
	if err := cutTail(f, name, off, alloc); err != nil {
		f.Close()
		return nil, nil, err
	}
	if b == nil {
		if err := syncDir(dir); err != nil {
			f.Close()
			return nil, nil, err
		}
	}
	l := &Log{dir: dir, opt: opt, gen: gen, size: off, alloc: alloc}
	l.f = l.wrap(osFile{f})
	return l, rec, nil
}

// cutTail positions f for appending at off, truncates it to size, and
// syncs it.
func cutTail(f *os.File, name string, off, size int) error {
	if fi, err := f.Stat(); err != nil || fi.Size() != int64(size) {
		if err := f.Truncate(int64(size)); err != nil {
			return fmt.Errorf("%w: cut the damaged tail of %s: %v", ErrIO, name, err)
		}
	}
	if _, err := f.Seek(int64(off), io.SeekStart); err != nil {
		return fmt.Errorf("%w: %v", ErrIO, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("%w: %v", ErrIO, err)
	}
	return nil
}

// nonZeroEnd returns the offset just past the last byte of b other than
// zero, from at the least.
func nonZeroEnd(b []byte, from int) int {
	end := len(b)
	for end > from && b[end-1] == 0 {
		end--
	}
	return end
}

func (l *Log) wrap(f File) File {
	if l.opt.Wrap != nil {
		return l.opt.Wrap(f)
	}
	return f
}

// fail makes err sticky and returns it.
func (l *Log) fail(err error) error {
	l.err = err
	return err
}

func (l *Log) check() error {
	if l.closed {
		return fmt.Errorf("%w: closed", ErrBroken)
	}
	if l.err != nil {
		return fmt.Errorf("%w: %w", ErrBroken, l.err)
	}
	return nil
}

// Append writes recs as one frame and syncs it: one sync however many
// records, fsync if the file grew, fdatasync if not. An empty recs writes
// nothing.
func (l *Log) Append(recs [][]byte) error {
	if err := l.check(); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	p := l.frame[:0]
	p = append(p, make([]byte, headerSize)...)
	for _, r := range recs {
		p = binary.AppendUvarint(p, uint64(len(r)))
		p = append(p, r...)
	}
	if len(p)-headerSize > l.opt.MaxFrame {
		return fmt.Errorf("wal: batch of %d bytes exceeds the frame limit %d", len(p)-headerSize, l.opt.MaxFrame)
	}
	putHeader(p, l.size)
	l.frame = p[:0]
	end := l.size + len(p)
	alloc := l.alloc
	if end > alloc && l.opt.Prealloc > 0 {
		// Whole chunks up to end or past it. If writing the zeros fails
		// the frame's write grows the file; the zeros may have grown it
		// part way too: the fsync below covers both, and zeros left past
		// end are the log's end at Open.
		chunk := min(l.opt.Prealloc, max(minChunk, alloc, l.last))
		next := alloc + (end-alloc+chunk-1)/chunk*chunk
		if err := l.f.Allocate(int64(alloc), int64(next-alloc)); err == nil {
			alloc = next
		} else if errors.Is(err, errors.ErrUnsupported) {
			l.opt.Prealloc = -1
		}
	}
	if _, err := l.f.Write(p); err != nil {
		return l.fail(fmt.Errorf("%w: append to %s: %w", ErrIO, walName(l.dir, l.gen), err))
	}
	if alloc == l.alloc && end <= alloc {
		if err := l.f.Datasync(); err != nil {
			return l.fail(fmt.Errorf("%w: fdatasync %s: %w", ErrIO, walName(l.dir, l.gen), err))
		}
	} else {
		if err := l.f.Sync(); err != nil {
			return l.fail(fmt.Errorf("%w: fsync %s: %w", ErrIO, walName(l.dir, l.gen), err))
		}
		l.alloc = max(alloc, end)
	}
	l.size = end
	return nil
}

// Snapshot durably replaces the snapshot and the whole log with snap and
// an empty log.
func (l *Log) Snapshot(snap []byte) error {
	if err := l.check(); err != nil {
		return err
	}
	next := l.gen + 1
	tmp := snapName(l.dir, next) + ".tmp"
	if err := l.writeFile(tmp, snap); err != nil {
		return l.fail(err)
	}
	if err := os.Rename(tmp, snapName(l.dir, next)); err != nil {
		return l.fail(fmt.Errorf("%w: %v", ErrIO, err))
	}
	// From here a crash recovers the new snapshot (and removes the old
	// files at Open).
	nf, err := os.OpenFile(walName(l.dir, next), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return l.fail(fmt.Errorf("%w: %v", ErrIO, err))
	}
	if err := syncDir(l.dir); err != nil {
		nf.Close()
		return l.fail(err)
	}
	l.f.Close()
	l.f = l.wrap(osFile{nf})
	old := l.gen
	l.gen = next
	l.last = l.size
	l.size = 0
	l.alloc = 0
	os.Remove(walName(l.dir, old))
	if old > 0 {
		os.Remove(snapName(l.dir, old))
	}
	return nil
}

// writeFile writes one frame holding p to a new file and fsyncs it.
func (l *Log) writeFile(name string, p []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrIO, err)
	}
	w := l.wrap(osFile{f})
	frame := make([]byte, headerSize, headerSize+len(p))
	frame = append(frame, p...)
	putHeader(frame, 0)
	_, err = w.Write(frame)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return fmt.Errorf("%w: write %s: %w", ErrIO, name, err)
	}
	return nil
}

// Close closes the log file; it does not sync (every Append did).
func (l *Log) Close() error {
	if l.closed {
		return nil
	}
	l.closed = true
	return l.f.Close()
}

// Dir returns the storage directory.
func (l *Log) Dir() string { return l.dir }

// putHeader fills the header of frame p, to be written at offset off.
func putHeader(p []byte, off int) {
	binary.LittleEndian.PutUint32(p[0:], uint32(len(p)-headerSize))
	binary.LittleEndian.PutUint32(p[4:], crc32.Checksum(p[headerSize:], castagnoli))
	binary.LittleEndian.PutUint32(p[8:], headerSum(p[:8], off))
}

// headerSum checksums a header's first 8 bytes and the frame's offset.
func headerSum(h []byte, off int) uint32 {
	var b [16]byte
	copy(b[:], h[:8])
	binary.LittleEndian.PutUint64(b[8:], uint64(off))
	return crc32.Checksum(b[:], castagnoli)
}

// parseFrame reads the frame at the start of b, which starts at file
// offset off: its payload and total size, ok false if it is incomplete or
// fails a checksum.
func parseFrame(b []byte, off, maxFrame int) (payload []byte, n int, ok bool) {
	if len(b) < headerSize {
		return nil, 0, false
	}
	if headerSum(b[:8], off) != binary.LittleEndian.Uint32(b[8:]) {
		return nil, 0, false
	}
	size := binary.LittleEndian.Uint32(b[0:])
	if uint64(size) > uint64(maxFrame) || uint64(size) > uint64(len(b)-headerSize) {
		return nil, 0, false
	}
	p := b[headerSize : headerSize+int(size)]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, false
	}
	return p, headerSize + int(size), true
}

// intactAfter returns the offset of the first intact frame at or after
// from and before to, -1 if there is none: a damaged frame with an intact
// one after it is not a torn tail. An intact frame's header holds its
// nonzero size, so none starts where only zeros follow: to is where they
// start.
func intactAfter(b []byte, from, to, maxFrame int) int {
	for at := from; at < to && at+headerSize <= len(b); at++ {
		if _, n, ok := parseFrame(b[at:], at, maxFrame); ok && n > headerSize {
			return at
		}
	}
	return -1
}

// splitRecords splits a frame's payload into its length-prefixed records.
func splitRecords(p []byte) ([][]byte, error) {
	var recs [][]byte
	for len(p) > 0 {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return nil, errors.New("bad record length")
		}
		recs = append(recs, p[k:k+int(n)])
		p = p[k+int(n):]
	}
	return recs, nil
}

func snapName(dir string, gen uint64) string {
	return filepath.Join(dir, "snap-"+strconv.FormatUint(gen, 10))
}

func walName(dir string, gen uint64) string {
	return filepath.Join(dir, "wal-"+strconv.FormatUint(gen, 10))
}

// latestGen finds the newest snapshot's generation, 0 if there is none.
func latestGen(dir string) (uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrIO, err)
	}
	var gens []uint64
	for _, e := range ents {
		if g, ok := strings.CutPrefix(e.Name(), "snap-"); ok {
			if n, err := strconv.ParseUint(g, 10, 64); err == nil {
				gens = append(gens, n)
			}
		}
	}
	if len(gens) == 0 {
		return 0, nil
	}
	sort.Slice(gens, func(i, j int) bool { return gens[i] > gens[j] })
	return gens[0], nil
}

// removeStale deletes what a crash in Snapshot may have left: temporary
// files and the files of older generations.
func removeStale(dir string, gen uint64) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrIO, err)
	}
	for _, e := range ents {
		name := e.Name()
		stale := strings.HasSuffix(name, ".tmp")
		for _, prefix := range []string{"snap-", "wal-"} {
			if g, ok := strings.CutPrefix(name, prefix); ok {
				if n, err := strconv.ParseUint(g, 10, 64); err == nil && n < gen {
					stale = true
				}
			}
		}
		if stale {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("%w: %v", ErrIO, err)
			}
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrIO, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%w: fsync directory %s: %v", ErrIO, dir, err)
	}
	return nil
}
