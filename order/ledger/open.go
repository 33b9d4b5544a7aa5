package ledger

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Open is OpenOptions with the default Options.
func Open(dir string) (*Ledger, error) { return OpenOptions(dir, Options{}) }

// OpenOptions opens the ledger in dir, creating dir if needed (and
// syncing its parent). It reads the ledger's key file, or creates it if
// dir holds no segment (a missing or damaged key file is ErrCorrupt,
// naming it: see Key in the package doc). It indexes and checks every
// segment, cuts a torn tail off the last one and syncs it (see Recovery
// in the package doc); damage that is not a torn tail is ErrCorrupt,
// naming the file and offset. On Linux it locks the directory (flock(2))
// until Close: a second Open of it, by this process or another, fails.
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
		if err := syncParent(dir); err != nil {
			return nil, err
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := lockDir(d); err != nil {
		d.Close()
		return nil, err
	}
	l := &Ledger{dir: d, opt: opt}
	if err := l.load(); err != nil {
		for _, s := range l.segs {
			s.f.Close()
		}
		d.Close()
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

// load reads the directory's key and opens and checks its segments, or
// creates the key and the first segment.
func (l *Ledger) load() error {
	firsts, err := listSegments(l.dir.Name())
	if err != nil {
		return err
	}
	key, err := loadKey(l.dir, len(firsts) == 0)
	if err != nil {
		return err
	}
	l.key = newHeaderKey(key)
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
			return fmt.Errorf("%w: %s: segment starts at block %d, the blocks before it end at %d", ErrCorrupt, segName(l.dir.Name(), first), first, l.height)
		}
		last := i == len(firsts)-1
		flag := os.O_RDONLY
		if last {
			flag = os.O_RDWR
		}
		f, err := os.OpenFile(segName(l.dir.Name(), first), flag, 0)
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
	sc, err := newScanner(l.key, s.f, l.opt.MaxBlock)
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

// createSegment creates the segment starting at block first in the open
// directory dir and syncs dir.
func createSegment(dir *os.File, first uint64) (*segment, error) {
	name := segName(dir.Name(), first)
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

// syncDir fsyncs the open directory d.
func syncDir(d *os.File) error {
	if err := d.Sync(); err != nil {
		return fmt.Errorf("ledger: fsync directory %s: %w", d.Name(), err)
	}
	return nil
}

// syncParent fsyncs the directory holding dir, which was just created.
func syncParent(dir string) error {
	p, err := os.Open(filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer p.Close()
	return syncDir(p)
}
