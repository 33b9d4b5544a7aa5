package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// blockData is block i's content: sizes vary, and every seventh is empty.
func blockData(i uint64) []byte {
	if i%7 == 3 {
		return []byte{}
	}
	return append([]byte(fmt.Sprintf("block %d:", i)), bytes.Repeat([]byte{byte(i)}, int(i*13%90))...)
}

// small rolls segments every few blocks.
var small = Options{SegmentSize: 300}

func open(t testing.TB, dir string, opt Options) *Ledger {
	t.Helper()
	l, err := OpenOptions(dir, opt)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

func appendRange(t testing.TB, l *Ledger, from, to uint64) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := l.Append(i, blockData(i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// checkBlocks says whether l holds exactly blocks 0..n-1.
func checkBlocks(t testing.TB, l *Ledger, n uint64) {
	t.Helper()
	if h := l.Height(); h != n {
		t.Fatalf("height %d, want %d", h, n)
	}
	for i := uint64(0); i < n; i++ {
		b, err := l.Block(i)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if !bytes.Equal(b, blockData(i)) {
			t.Fatalf("block %d: %q, want %q", i, b, blockData(i))
		}
	}
	if _, err := l.Block(n); !errors.Is(err, ErrNotFound) {
		t.Fatalf("block %d of %d: %v, want ErrNotFound", n, n, err)
	}
}

func segments(t testing.TB, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, segPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// testKey is the key of the ledgers written makes, fixed so that an input
// a fuzzer found failing fails again in the next run.
var testKey = bytes.Repeat([]byte{0x5a}, keySize)

// writeKey writes key into dir's key file.
func writeKey(t testing.TB, dir string, key []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, keyName), keyFile(key), 0o600); err != nil {
		t.Fatal(err)
	}
}

// written makes a ledger of blocks 0..n-1 with opt and testKey, and
// closes it.
func written(t testing.TB, opt Options, n uint64) string {
	t.Helper()
	dir := t.TempDir()
	writeKey(t, dir, testKey)
	l := open(t, dir, opt)
	appendRange(t, l, 0, n)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestAppendReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "ledger")
	l := open(t, dir, small)
	checkBlocks(t, l, 0)
	appendRange(t, l, 0, 40)
	checkBlocks(t, l, 40)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(segments(t, dir)); n < 5 {
		t.Fatalf("%d segments: the test does not roll", n)
	}
	for _, name := range segments(t, dir) {
		if fi, _ := os.Stat(name); fi.Size() > small.SegmentSize {
			t.Fatalf("%s has %d bytes, above the segment size %d", name, fi.Size(), small.SegmentSize)
		}
	}
	l = open(t, dir, small)
	checkBlocks(t, l, 40)
	appendRange(t, l, 40, 50)
	l.Close() // syncs
	l = open(t, dir, small)
	defer l.Close()
	checkBlocks(t, l, 50)
}

// TestLargeBlock: a block larger than a segment gets a segment of its own.
func TestLargeBlock(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, small)
	big := bytes.Repeat([]byte("big"), 400)
	appendRange(t, l, 0, 2)
	if err := l.Append(2, big); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(3, blockData(3)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = open(t, dir, small)
	defer l.Close()
	if b, err := l.Block(2); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("block 2: %d bytes, %v", len(b), err)
	}
	if n := len(segments(t, dir)); n != 3 {
		t.Fatalf("%d segments, want 3", n)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{MaxBlock: 100})
	appendRange(t, l, 0, 3)
	for _, n := range []uint64{0, 2, 4} {
		if err := l.Append(n, []byte("x")); !errors.Is(err, ErrOrder) {
			t.Errorf("append %d at height 3: %v, want ErrOrder", n, err)
		}
	}
	if err := l.Append(3, make([]byte, 101)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("append of 101 bytes with MaxBlock 100: %v, want ErrTooLarge", err)
	}
	if err := l.Append(3, make([]byte, 100)); err != nil {
		t.Errorf("append of 100 bytes with MaxBlock 100: %v", err)
	}
	if _, err := l.Block(1 << 40); !errors.Is(err, ErrNotFound) {
		t.Errorf("block 1<<40: %v, want ErrNotFound", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	if err := l.Append(4, nil); !errors.Is(err, os.ErrClosed) {
		t.Errorf("append after close: %v, want os.ErrClosed", err)
	}
	if err := l.Sync(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("sync after close: %v, want os.ErrClosed", err)
	}
	if _, err := l.Block(0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("block after close: %v, want os.ErrClosed", err)
	}
	// A record claiming more than MaxBlock is damage at Open: here the
	// torn tail.
	l = open(t, dir, Options{MaxBlock: 99})
	defer l.Close()
	checkBlocks(t, l, 3)
}

func TestOptionsRefused(t *testing.T) {
	if _, err := OpenOptions(t.TempDir(), Options{MaxBlock: 1 << 32}); err == nil {
		t.Fatal("MaxBlock of 4 GiB accepted")
	}
}

// TestForeignFiles: a file named like a segment that is not one, and a
// missing segment, are corruption.
func TestForeignFiles(t *testing.T) {
	dir := written(t, small, 30)
	names := segments(t, dir)
	os.WriteFile(filepath.Join(dir, "notes"), []byte("kept"), 0o644)
	bad := filepath.Join(dir, segPrefix+"12")
	os.WriteFile(bad, nil, 0o644)
	if _, err := OpenOptions(dir, small); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("with %s: %v, want ErrCorrupt naming it", bad, err)
	}
	os.Remove(bad)
	os.Remove(names[1])
	if _, err := OpenOptions(dir, small); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), names[2]) {
		t.Fatalf("without %s: %v, want ErrCorrupt naming %s", names[1], err, names[2])
	}
}

// stream is a ledger's bytes: its key, its segments, in order, and where
// each record starts and ends in their concatenation.
type stream struct {
	key    []byte
	hk     *headerKey
	names  []string // base names
	files  [][]byte
	starts []int // each file's start in the concatenation
	recs   [][2]int
}

func readStream(t testing.TB, dir string) *stream {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, keyName))
	if err != nil {
		t.Fatal(err)
	}
	key, why := parseKeyFile(b)
	if why != "" {
		t.Fatalf("%s: %s", keyName, why)
	}
	s := &stream{key: key, hk: newHeaderKey(key)}
	pos := 0
	for _, name := range segments(t, dir) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		s.names = append(s.names, filepath.Base(name))
		s.files = append(s.files, b)
		s.starts = append(s.starts, pos)
		for off := 0; off < len(b); {
			h, why := s.hk.parseHeader(b[off:], int64(off), DefaultMaxBlock)
			if why != "" {
				t.Fatalf("%s at %d: %s", name, off, why)
			}
			end := off + headerSize + int(h.size)
			s.recs = append(s.recs, [2]int{pos + off, pos + end})
			off = end
		}
		pos += len(b)
	}
	return s
}

// writeCut writes the ledger as a crash at byte x of the stream leaves
// it: the key, the segments before x whole, the one holding x cut there
// and pad zeros added, none after.
func (s *stream) writeCut(t *testing.T, dir string, x, pad int) {
	t.Helper()
	writeKey(t, dir, s.key)
	for i, b := range s.files {
		if s.starts[i] > x {
			break
		}
		n := min(len(b), x-s.starts[i])
		data := b[:n]
		if n < len(b) {
			data = append(bytes.Clone(data), make([]byte, pad)...)
		}
		if err := os.WriteFile(filepath.Join(dir, s.names[i]), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if n < len(b) {
			break
		}
	}
}

// writeFirst writes the key and b as the first segment into dir.
func (s *stream) writeFirst(t testing.TB, dir string, b []byte) {
	t.Helper()
	writeKey(t, dir, s.key)
	if err := os.WriteFile(filepath.Join(dir, s.names[0]), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// whole is how many records end at or before x.
func (s *stream) whole(x int) uint64 {
	n := uint64(0)
	for _, r := range s.recs {
		if r[1] <= x {
			n++
		}
	}
	return n
}

// TestCrashAtEveryByte: a ledger cut at every byte (as a crash leaves it,
// with and without zeros after the cut) opens to exactly the blocks whole
// before the cut, and takes the next block after it.
func TestCrashAtEveryByte(t *testing.T) {
	s := readStream(t, written(t, small, 12))
	if len(s.files) < 3 {
		t.Fatalf("%d segments: the test does not cross segments", len(s.files))
	}
	total := s.starts[len(s.starts)-1] + len(s.files[len(s.files)-1])
	for _, pad := range []int{0, 100} {
		for x := 0; x <= total; x++ {
			dir := t.TempDir()
			s.writeCut(t, dir, x, pad)
			l, err := OpenOptions(dir, small)
			if err != nil {
				t.Fatalf("cut at %d, %d zeros after: %v", x, pad, err)
			}
			n := s.whole(x)
			checkBlocks(t, l, n)
			appendRange(t, l, n, n+1)
			l.Close()
			l = open(t, dir, small)
			checkBlocks(t, l, n+1)
			l.Close()
		}
	}
}

// TestWait: Wait returns once the block is appended, at once for a block
// there, with ctx's error, and with os.ErrClosed when the Ledger closes
// under a waiter.
func TestWait(t *testing.T) {
	l := open(t, t.TempDir(), small)
	ctx := context.Background()
	got := make(chan error, 1)
	go func() { got <- l.Wait(ctx, 4) }()
	for i := uint64(0); i < 5; i++ {
		select {
		case err := <-got:
			t.Fatalf("wait for block 4 returned %v at height %d", err, i)
		default:
		}
		appendRange(t, l, i, i+1)
	}
	if err := <-got; err != nil {
		t.Fatalf("wait for block 4: %v", err)
	}
	if err := l.Wait(ctx, 2); err != nil {
		t.Fatalf("wait for block 2 at height 5: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Wait(cctx, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with a canceled context: %v", err)
	}
	appendRange(t, l, 5, 6) // takes the channel the canceled Wait left
	go func() { got <- l.Wait(ctx, 6) }()
	for {
		l.mu.RLock()
		waiting := l.grown != nil
		l.mu.RUnlock()
		if waiting {
			break
		}
		runtime.Gosched()
	}
	l.Close()
	if err := <-got; !errors.Is(err, os.ErrClosed) {
		t.Fatalf("wait across Close: %v, want os.ErrClosed", err)
	}
	if err := l.Wait(ctx, 0); err != nil {
		t.Fatalf("wait for a block there after Close: %v", err)
	}
}

// TestOpenTwice: while a Ledger is open, a second Open of its directory
// fails; after Close it succeeds.
func TestOpenTwice(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the directory lock is flock(2), taken on Linux only")
	}
	dir := t.TempDir()
	l := open(t, dir, small)
	if l2, err := Open(dir); !errors.Is(err, ErrInUse) {
		if l2 != nil {
			l2.Close()
		}
		t.Fatalf("second open: %v, want ErrInUse", err)
	}
	l.Close()
	l = open(t, dir, small)
	l.Close()
}
