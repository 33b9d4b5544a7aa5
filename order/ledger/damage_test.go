package ledger

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestBitFlips flips one bit of every byte of a ledger of several
// segments in turn (bit i mod 8 of byte i) and checks what Open and Block
// make of it:
//   - in a segment before the last, a flip in a header fails Open, one in
//     a block fails Block of that block only;
//   - in the last segment, a flip in block k fails Open if a record after
//     it was written after a Sync covering k, and is cut as a torn tail
//     otherwise.
//
// Every ErrCorrupt names the file and the damaged record's offset, and no
// flip ever yields a block that was not appended.
func TestBitFlips(t *testing.T) {
	opt := Options{SegmentSize: 700}
	src := t.TempDir()
	l := open(t, src, opt)
	const n = 33
	for i := uint64(0); i < n; i++ {
		appendRange(t, l, i, i+1)
		if i%3 == 2 {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	l.Close()
	s := readStream(t, src)
	last := len(s.files) - 1
	if last < 2 {
		t.Fatalf("%d segments: the test does not cross segments", len(s.files))
	}
	// The records of the last segment, and the durable height each says.
	var lastRecs []uint64
	var synced []uint64
	for k, r := range s.recs {
		if r[0] >= s.starts[last] {
			b := s.files[last][r[0]-s.starts[last]:]
			h, _ := s.hk.parseHeader(b, int64(r[0]-s.starts[last]), DefaultMaxBlock)
			lastRecs = append(lastRecs, uint64(k))
			synced = append(synced, h.synced)
		}
	}
	vouched := func(k uint64) bool {
		for i, j := range lastRecs {
			if j > k && synced[i] > k {
				return true
			}
		}
		return false
	}
	if !vouched(lastRecs[0]) || vouched(lastRecs[len(lastRecs)-1]) {
		t.Fatalf("durable heights %v of blocks %v: the test does not try both cases", synced, lastRecs)
	}

	dir := t.TempDir()
	for fi, file := range s.files {
		name := filepath.Join(dir, s.names[fi])
		for i := range file {
			s.writeCut(t, dir, 1<<30, 0) // every segment whole
			b := bytes.Clone(file)
			b[i] ^= 1 << (i % 8)
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Fatal(err)
			}
			pos := s.starts[fi] + i
			k := uint64(0)
			for s.recs[k][1] <= pos {
				k++
			}
			recOff := s.recs[k][0] - s.starts[fi]
			inHeader := pos-s.recs[k][0] < headerSize
			where := fmt.Sprintf("%s at offset %d", name, recOff)
			l, err := OpenOptions(dir, opt)
			switch {
			case fi < last && inHeader, fi == last && vouched(k):
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), where) {
					t.Fatalf("bit of byte %d of %s (block %d) flipped: open: %v, want ErrCorrupt naming %q", i, s.names[fi], k, err, where)
				}
				continue
			case err != nil:
				t.Fatalf("bit of byte %d of %s (block %d) flipped: open: %v", i, s.names[fi], k, err)
			case fi < last:
				if h := l.Height(); h != n {
					t.Fatalf("bit of byte %d of %s (block %d) flipped: height %d, want %d", i, s.names[fi], k, h, n)
				}
				for j := uint64(0); j < n; j++ {
					got, err := l.Block(j)
					if j == k {
						if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), where) {
							t.Fatalf("bit of byte %d of %s flipped: block %d: %v, want ErrCorrupt naming %q", i, s.names[fi], k, err, where)
						}
					} else if err != nil || !bytes.Equal(got, blockData(j)) {
						t.Fatalf("bit of byte %d of %s (block %d) flipped: block %d: %q, %v", i, s.names[fi], k, j, got, err)
					}
				}
			default:
				checkBlocks(t, l, k)
			}
			l.Close()
		}
	}
}

// TestTornWindow: a crash may write the pages of blocks no Sync covered
// in any order, so a damaged block followed by intact ones is a torn tail
// when none of those was written after a Sync covering it, and corruption
// when one was.
func TestTornWindow(t *testing.T) {
	src := t.TempDir()
	l := open(t, src, Options{})
	appendRange(t, l, 0, 10)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	appendRange(t, l, 10, 20)
	// The files as they are before the second Sync, as if the machine
	// had crashed now with some pages of blocks 10..19 on disk.
	s := readStream(t, src)
	l.Close()
	if len(s.files) != 1 {
		t.Fatalf("%d segments, want 1", len(s.files))
	}
	for _, tc := range []struct {
		name   string
		block  int
		from   int // zeros from here in the record to its end
		height uint64
	}{
		{"header of block 12 unwritten", 12, 0, 12},
		{"end of block 15 unwritten", 15, headerSize + 5, 15},
		{"block 5, synced, zeroed", 5, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := bytes.Clone(s.files[0])
			r := s.recs[tc.block]
			clear(b[r[0]+tc.from : r[1]])
			s.writeFirst(t, dir, b)
			l, err := Open(dir)
			if tc.height == 0 {
				where := fmt.Sprintf("offset %d", r[0])
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), where) {
					t.Fatalf("open: %v, want ErrCorrupt at %s", err, where)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			checkBlocks(t, l, tc.height)
		})
	}
}

// TestConcurrentReaders: readers check random blocks below the height
// while one writer appends, syncs and rolls segments (run it with -race).
func TestConcurrentReaders(t *testing.T) {
	l := open(t, t.TempDir(), Options{SegmentSize: 2000})
	const n = 400
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				h := l.Height()
				// Block h+1 may have been appended since.
				if b, err := l.Block(h + 1); err == nil && !bytes.Equal(b, blockData(h+1)) || err != nil && !errors.Is(err, ErrNotFound) {
					errs <- fmt.Errorf("block %d after height %d: %q, %v", h+1, h, b, err)
					return
				}
				if h == 0 {
					continue
				}
				k := rand.Uint64N(h)
				b, err := l.Block(k)
				if err != nil || !bytes.Equal(b, blockData(k)) {
					errs <- fmt.Errorf("block %d at height %d: %q, %v", k, h, b, err)
					return
				}
			}
		}()
	}
	for i := uint64(0); i < n; i++ {
		appendRange(t, l, i, i+1)
		if i%16 == 15 {
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkBlocks(t, l, n)
	l.Close()
}

var crashChild = flag.String("crash-child", "", "append to the ledger in this directory until killed (TestKillWhileAppending's child)")

func crashBlock(i uint64) []byte {
	return bytes.Repeat([]byte(strconv.FormatUint(i, 10)+","), 1000+int(i%50)*40)
}

// TestKillWhileAppending kills (SIGKILL) a process appending 2-15 KiB
// blocks at a random moment, a few times over, and opens what it left:
// every block it had synced is there, and every block there is one it
// appended. A process kill leaves the page cache, so this checks the
// recovery path, not what a power cut leaves (TestCrashAtEveryByte).
func TestKillWhileAppending(t *testing.T) {
	if *crashChild != "" {
		appendUntilKilled(*crashChild)
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	opt := Options{SegmentSize: 64 << 10}
	for round := 0; round < 4; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillWhileAppending$", "-crash-child="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		var synced uint64
		stopAt := 20 + rand.IntN(60)
		for k := 0; k < stopAt && sc.Scan(); k++ {
			if s, ok := strings.CutPrefix(sc.Text(), "synced "); ok {
				synced, _ = strconv.ParseUint(s, 10, 64)
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		if synced == 0 {
			t.Fatalf("round %d: the child reported no Sync", round)
		}
		l, err := OpenOptions(dir, opt)
		if err != nil {
			t.Fatalf("round %d: open after kill: %v", round, err)
		}
		h := l.Height()
		if h < synced {
			t.Fatalf("round %d: height %d after kill, %d were synced", round, h, synced)
		}
		for i := uint64(0); i < h; i++ {
			if b, err := l.Block(i); err != nil || !bytes.Equal(b, crashBlock(i)) {
				t.Fatalf("round %d: block %d of %d: %d bytes, %v", round, i, h, len(b), err)
			}
		}
		l.Close()
	}
}

// appendUntilKilled appends blocks to the ledger in dir from its height,
// syncing every fifth and saying so on stdout.
func appendUntilKilled(dir string) {
	l, err := OpenOptions(dir, Options{SegmentSize: 64 << 10})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	for i := l.Height(); ; i++ {
		if err := l.Append(i, crashBlock(i)); err != nil {
			fmt.Println("append:", err)
			os.Exit(1)
		}
		if i%5 == 4 {
			if err := l.Sync(); err != nil {
				fmt.Println("sync:", err)
				os.Exit(1)
			}
			fmt.Printf("synced %d\n", i+1)
		}
	}
}

// TestFileShrunk: a segment cut short under an open Ledger makes Block of
// the blocks lost ErrCorrupt, naming the file and offset.
func TestFileShrunk(t *testing.T) {
	dir := written(t, small, 20)
	s := readStream(t, dir)
	l := open(t, dir, small)
	defer l.Close()
	name := filepath.Join(dir, s.names[0])
	if err := os.Truncate(name, int64(s.recs[1][1]-1)); err != nil {
		t.Fatal(err)
	}
	if b, err := l.Block(0); err != nil || !bytes.Equal(b, blockData(0)) {
		t.Fatalf("block 0: %q, %v", b, err)
	}
	where := fmt.Sprintf("%s at offset %d", name, s.recs[1][0])
	if _, err := l.Block(1); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), where) {
		t.Fatalf("block 1, cut short: %v, want ErrCorrupt naming %q", err, where)
	}
}

// TestFullDisk fills a 256 KiB tmpfs: the write that does not fit fails
// with ENOSPC, every later Append and Sync with ErrBroken, and a reopen
// finds every synced block and only blocks appended. Needs root for the
// mount; skipped otherwise.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	dir := filepath.Join(mnt, "ledger")
	opt := Options{SegmentSize: 64 << 10}
	l := open(t, dir, opt)
	var synced uint64
	var err error
	for i := uint64(0); i < 1000 && err == nil; i++ {
		if err = l.Append(i, crashBlock(i)); err == nil && i%3 == 2 {
			if err = l.Sync(); err == nil {
				synced = i + 1
			}
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v at height %d, want ENOSPC", err, l.Height())
	}
	if err := l.Append(l.Height(), []byte("x")); !errors.Is(err, ErrBroken) {
		t.Fatalf("append after ENOSPC: %v, want ErrBroken", err)
	}
	if err := l.Sync(); !errors.Is(err, ErrBroken) {
		t.Fatalf("sync after ENOSPC: %v, want ErrBroken", err)
	}
	if err := l.Close(); !errors.Is(err, ErrBroken) {
		t.Fatalf("close after ENOSPC: %v, want ErrBroken", err)
	}
	l = open(t, dir, opt)
	defer l.Close()
	h := l.Height()
	if h < synced {
		t.Fatalf("height %d after ENOSPC, %d were synced", h, synced)
	}
	for i := uint64(0); i < h; i++ {
		if b, err := l.Block(i); err != nil || !bytes.Equal(b, crashBlock(i)) {
			t.Fatalf("block %d of %d: %d bytes, %v", i, h, len(b), err)
		}
	}
}

// TestVouchAcrossChunks: the record that proves a damaged block durable
// is found when its magic, or the rest of its header, straddles the end
// of a chunk of the search (1 MiB after the damaged record).
func TestVouchAcrossChunks(t *testing.T) {
	// Block 2's record starts at offset at; the search from offset 1
	// reads [1, 1 MiB + 1) first, which ends inside block 2's magic, or
	// after it inside its header.
	for _, at := range []int{1<<20 - 1, 1<<20 - 10} {
		src := t.TempDir()
		l := open(t, src, Options{})
		first := []byte("block zero")
		if err := l.Append(0, first); err != nil {
			t.Fatal(err)
		}
		if err := l.Append(1, make([]byte, at-2*headerSize-len(first))); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := l.Append(2, []byte("block two")); err != nil {
			t.Fatal(err)
		}
		l.Close()
		s := readStream(t, src)
		if s.recs[2][0] != at {
			t.Fatalf("block 2 at offset %d, want %d", s.recs[2][0], at)
		}
		b := bytes.Clone(s.files[0])
		b[headerSize] ^= 1 // block 0's first byte
		dir := t.TempDir()
		s.writeFirst(t, dir, b)
		_, err := Open(dir)
		if want := fmt.Sprintf("block 2 at offset %d", at); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
			t.Fatalf("open: %v, want ErrCorrupt citing %q", err, want)
		}
	}
}
