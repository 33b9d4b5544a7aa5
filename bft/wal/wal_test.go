package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rubin-go/rubin/internal/cost"
)

func batch(i, n int) [][]byte {
	var recs [][]byte
	for j := 0; j < n; j++ {
		recs = append(recs, []byte(fmt.Sprintf("batch %d record %d %s", i, j, bytes.Repeat([]byte{byte(i)}, j*7))))
	}
	return recs
}

func open(t *testing.T, dir string) (*Log, *Recovered) {
	t.Helper()
	l, rec, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l, rec
}

// write appends batches 0..n-1, closes the log and returns where its
// frames end (the pre-allocated zeros follow).
func write(t *testing.T, dir string, n int) int {
	t.Helper()
	l, _ := open(t, dir)
	for i := 0; i < n; i++ {
		if err := l.Append(batch(i, 1+i%4)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	return l.size
}

// check says whether rec holds exactly batches 0..n-1.
func check(t *testing.T, rec *Recovered, n int) {
	t.Helper()
	if len(rec.Batches) != n {
		t.Fatalf("recovered %d batches, want %d", len(rec.Batches), n)
	}
	for i, b := range rec.Batches {
		want := batch(i, 1+i%4)
		if len(b) != len(want) {
			t.Fatalf("batch %d: %d records, want %d", i, len(b), len(want))
		}
		for j := range b {
			if !bytes.Equal(b[j], want[j]) {
				t.Fatalf("batch %d record %d differs", i, j)
			}
		}
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, 5)
	l, rec := open(t, dir)
	check(t, rec, 5)
	if err := l.Append(batch(5, 2)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, rec = open(t, dir)
	check(t, rec, 6)
}

// fourBatches writes batches 0..3 and returns the log's name, the bytes
// of its frames and those of batches 0..2 alone: everything before the
// last frame. Neither holds the pre-allocated zeros after the frames.
func fourBatches(t *testing.T) (dir, name string, full, prefix []byte) {
	dir = t.TempDir()
	n := write(t, dir, 4)
	name = walName(dir, 0)
	full, _ = os.ReadFile(name)
	if len(full) <= n {
		t.Fatalf("log of %d bytes, %d of frames: nothing pre-allocated", len(full), n)
	}
	if len(bytes.Trim(full[n:], "\x00")) != 0 {
		t.Fatal("the pre-allocated space is not zeros")
	}
	dir3 := t.TempDir()
	n3 := write(t, dir3, 3)
	prefix, _ = os.ReadFile(walName(dir3, 0))
	return dir, name, full[:n], prefix[:n3]
}

// TestTornTail cuts the file at every offset inside the last frame, with
// and without pre-allocated zeros after the cut: Open returns the
// batches before it, cuts the rest, and appends after the cut are
// recovered.
func TestTornTail(t *testing.T) {
	dir, name, full, prefix := fourBatches(t)
	if !bytes.Equal(full[:len(prefix)], prefix) {
		t.Fatal("logs of the same batches differ")
	}
	for _, pad := range []int{0, 4096} {
		for cut := len(prefix); cut < len(full); cut++ {
			b := append(bytes.Clone(full[:cut]), make([]byte, pad)...)
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Fatal(err)
			}
			l, rec := open(t, dir)
			check(t, rec, 3)
			// The torn frame up to its last byte other than zero.
			want := int64(len(bytes.TrimRight(full[len(prefix):cut], "\x00")))
			if rec.Cut != want {
				t.Fatalf("cut at %d, %d zeros after: Cut = %d, want %d", cut, pad, rec.Cut, want)
			}
			if err := l.Append(batch(3, 1+3%4)); err != nil {
				t.Fatal(err)
			}
			l.Close()
			_, rec = open(t, dir)
			check(t, rec, 4)
		}
	}
}

// TestZeroedTail: zeros after the last frame (the pre-allocated space, or
// a crash after the file grew but before its pages were written) are the
// end of the log, not damage: Cut is 0, the zeros are kept, and the next
// Append lands at the end of the frames.
func TestZeroedTail(t *testing.T) {
	dir := t.TempDir()
	n := write(t, dir, 3)
	name := walName(dir, 0)
	if err := os.Truncate(name, int64(n)); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(make([]byte, 4096))
	f.Close()
	l, rec := open(t, dir)
	check(t, rec, 3)
	if rec.Cut != 0 {
		t.Fatalf("Cut = %d, want 0", rec.Cut)
	}
	if fi, _ := os.Stat(name); fi.Size() != int64(n+4096) {
		t.Fatalf("log of %d bytes after Open, want %d", fi.Size(), n+4096)
	}
	if err := l.Append(batch(3, 1+3%4)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, rec = open(t, dir)
	check(t, rec, 4)
}

// syncs counts a File's fsyncs and fdatasyncs and can fail its Allocate.
type syncs struct {
	File
	full, data int
	allocErr   error
}

func (s *syncs) Sync() error     { s.full++; return s.File.Sync() }
func (s *syncs) Datasync() error { s.data++; return s.File.Datasync() }

func (s *syncs) Allocate(off, n int64) error {
	if s.allocErr != nil {
		return s.allocErr
	}
	return s.File.Allocate(off, n)
}

// TestPrealloc: the file grows by whole chunks; an Append that grows it
// fsyncs, one inside the allocated space fdatasyncs. With the zeros
// failing (a disk too full for a chunk) or pre-allocation off, the file
// grows by its frames and every Append fsyncs. Each way, a reopen
// recovers every batch.
func TestPrealloc(t *testing.T) {
	const chunk = 512
	for _, tc := range []struct {
		name     string
		prealloc int
		allocErr error
	}{
		{"chunks", chunk, nil},
		{"enospc", chunk, syscall.ENOSPC},
		{"off", -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var s *syncs
			wrap := func(f File) File { s = &syncs{File: f, allocErr: tc.allocErr}; return s }
			l, _, err := Open(dir, Options{Prealloc: tc.prealloc, Wrap: wrap})
			if err != nil {
				t.Fatal(err)
			}
			s.full = 0 // Open's own
			grew, n := 0, 40
			for i := range n {
				size := l.size
				if err := l.Append(batch(i, 1+i%4)); err != nil {
					t.Fatal(err)
				}
				fi, err := os.Stat(walName(dir, 0))
				if err != nil {
					t.Fatal(err)
				}
				want := int64(l.size)
				if tc.prealloc > 0 && tc.allocErr == nil {
					want = (want + chunk - 1) / chunk * chunk
				}
				if fi.Size() != want {
					t.Fatalf("after append %d: file of %d bytes, want %d", i, fi.Size(), want)
				}
				if tc.prealloc < 0 || tc.allocErr != nil || size == 0 || (size-1)/chunk != (l.size-1)/chunk {
					grew++
				}
				if s.full != grew || s.full+s.data != i+1 {
					t.Fatalf("after append %d: %d fsyncs and %d fdatasyncs, want %d and %d", i, s.full, s.data, grew, i+1-grew)
				}
			}
			if tc.prealloc > 0 && tc.allocErr == nil && (grew < 2 || grew == n) {
				t.Fatalf("%d of %d appends grew the file: the test does not cross chunks", grew, n)
			}
			l.Close()
			_, rec := open(t, dir)
			check(t, rec, n)
		})
	}
}

// TestBitFlips flips one bit of every byte of the log in turn (bit i mod
// 8 of byte i): a flip in the last frame cuts that frame; a flip in any
// earlier frame is ErrCorrupt. No flip ever yields a batch that was not
// written.
// Each is tried with and without pre-allocated zeros after the frames.
func TestBitFlips(t *testing.T) {
	dir, name, full, prefix := fourBatches(t)
	for _, pad := range []int{0, 4096} {
		b := make([]byte, len(full)+pad)
		for i := 0; i < len(full); i++ {
			copy(b, full)
			b[i] ^= 1 << (i % 8)
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Fatal(err)
			}
			l, rec, err := Open(dir, Options{})
			if i < len(prefix) {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("bit %d (before the last frame, %d zeros after the frames) flipped: err = %v, want ErrCorrupt", i, pad, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("bit %d (in the last frame, %d zeros after the frames) flipped: %v", i, pad, err)
			}
			l.Close()
			check(t, rec, 3)
		}
	}
}

func TestSnapshot(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, 3)
	l, _ := open(t, dir)
	if err := l.Snapshot([]byte("state one")); err != nil {
		t.Fatal(err)
	}
	l.Append(batch(0, 1))
	if err := l.Snapshot([]byte("state two")); err != nil {
		t.Fatal(err)
	}
	l.Append(batch(0, 1))
	l.Append(batch(1, 2))
	l.Close()
	l, rec := open(t, dir)
	l.Close()
	if string(rec.Snapshot) != "state two" {
		t.Fatalf("snapshot %q", rec.Snapshot)
	}
	check(t, rec, 2)
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("%d files left, want snap-2 and wal-2: %v", len(ents), ents)
	}
}

// TestSnapshotCrash: what a crash inside Snapshot can leave behind.
func TestSnapshotCrash(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, 2)
	// Crash before the rename: a temporary file; the old state holds.
	os.WriteFile(snapName(dir, 1)+".tmp", []byte("partial"), 0o644)
	l, rec := open(t, dir)
	check(t, rec, 2)
	if rec.Snapshot != nil {
		t.Fatal("a temporary snapshot was used")
	}
	// Crash after the rename, before the new log exists and the old one
	// is removed: the new snapshot with an empty log.
	if err := l.writeFile(snapName(dir, 1), []byte("new")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, rec = open(t, dir)
	l.Close()
	if string(rec.Snapshot) != "new" || len(rec.Batches) != 0 {
		t.Fatalf("snapshot %q, %d batches; want the new snapshot and none", rec.Snapshot, len(rec.Batches))
	}
	if _, err := os.Stat(walName(dir, 0)); !os.IsNotExist(err) {
		t.Fatal("the old log was not removed")
	}
}

func TestCorruptSnapshot(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, dir)
	l.Snapshot([]byte("some state"))
	l.Close()
	b, _ := os.ReadFile(snapName(dir, 1))
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		os.WriteFile(snapName(dir, 1), c, 0o644)
		if _, _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d of the snapshot flipped: err = %v, want ErrCorrupt", i, err)
		}
	}
	os.WriteFile(snapName(dir, 1), b[:len(b)-1], 0o644)
	if _, _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated snapshot: err = %v, want ErrCorrupt", err)
	}
}

// faulty fails its writes or fsyncs with err once armed.
type faulty struct {
	File
	failWrite, failSync *bool
	err                 error
}

func (f faulty) Write(p []byte) (int, error) {
	if *f.failWrite {
		n, _ := f.File.Write(p[:len(p)/2]) // a partial write, as a full disk leaves
		return n, f.err
	}
	return f.File.Write(p)
}

func (f faulty) Sync() error {
	if *f.failSync {
		return f.err
	}
	return f.File.Sync()
}

func (f faulty) Datasync() error {
	if *f.failSync {
		return f.err
	}
	return f.File.Datasync()
}

// TestWriteAndSyncFailures: after a failed write (ENOSPC) or fsync (EIO)
// the log refuses everything, and a reopen recovers exactly the batches
// whose Append returned nil.
func TestWriteAndSyncFailures(t *testing.T) {
	for _, tc := range []struct {
		name        string
		write, sync bool
		err         error
	}{
		{"enospc", true, false, syscall.ENOSPC},
		{"fsync", false, true, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var fw, fs bool
			l, _, err := Open(dir, Options{Wrap: func(f File) File { return faulty{f, &fw, &fs, tc.err} }})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				if err := l.Append(batch(i, 1+i%4)); err != nil {
					t.Fatal(err)
				}
			}
			fw, fs = tc.write, tc.sync
			err = l.Append(batch(3, 2))
			if !errors.Is(err, ErrIO) || !errors.Is(err, tc.err) {
				t.Fatalf("append on a failing file: %v, want ErrIO wrapping %v", err, tc.err)
			}
			fw, fs = false, false
			if err := l.Append(batch(3, 2)); !errors.Is(err, ErrBroken) {
				t.Fatalf("append after a failure: %v, want ErrBroken", err)
			}
			if err := l.Snapshot([]byte("x")); !errors.Is(err, ErrBroken) {
				t.Fatalf("snapshot after a failure: %v, want ErrBroken", err)
			}
			l.Close()
			_, rec := open(t, dir)
			if tc.write {
				check(t, rec, 3)
			} else if n := len(rec.Batches); n != 3 && n != 4 {
				// The failed fsync's data may or may not have reached
				// the disk; either way nothing else is there.
				t.Fatalf("%d batches after a failed fsync", n)
			}
		})
	}
}

// TestFullDisk fills a real 64 KiB tmpfs: Append fails with ENOSPC, the
// log stays broken, and a reopen (after space is freed) recovers every
// batch acknowledged before; with the default chunk, larger than the
// disk, and with chunks that fill it. Needs root for the mount; skipped
// otherwise.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	for _, prealloc := range []int{0, 16 << 10} {
		t.Run(fmt.Sprint(prealloc), func(t *testing.T) { fillDisk(t, prealloc) })
	}
}

func fillDisk(t *testing.T, prealloc int) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	defer exec.Command("umount", dir).Run()
	data := filepath.Join(dir, "data")
	l, _, err := Open(data, Options{Prealloc: prealloc})
	if err != nil {
		t.Fatal(err)
	}
	big := [][]byte{bytes.Repeat([]byte("x"), 3000)}
	acked := 0
	for i := 0; i < 100; i++ {
		if err = l.Append(big); err != nil {
			break
		}
		acked++
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v after %d batches, want ENOSPC", err, acked)
	}
	if err := l.Append([][]byte{[]byte("small")}); !errors.Is(err, ErrBroken) {
		t.Fatalf("append after ENOSPC: %v, want ErrBroken", err)
	}
	l.Close()
	l, rec := open(t, data)
	l.Close()
	if len(rec.Batches) != acked {
		t.Fatalf("recovered %d batches, %d were acknowledged", len(rec.Batches), acked)
	}
}

func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	l, _, _ := Open(dir, Options{})
	l.Append(batch(1, 3))
	l.Append(batch(2, 1))
	l.Close()
	seed, _ := os.ReadFile(walName(dir, 0))
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := t.TempDir()
		os.WriteFile(walName(d, 0), b, 0o644)
		l, rec, err := Open(d, Options{MaxFrame: 1 << 20})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		defer l.Close()
		if rec.Cut < 0 || rec.Cut > int64(len(b)) {
			t.Fatalf("Cut %d of %d bytes", rec.Cut, len(b))
		}
	})
}

// BenchmarkAppendSync appends and syncs one frame per op, of the sizes a
// replica's Ready makes with one client (about 400 B) and with 64 (a
// pre-prepare of about 60 requests: 4 to 10 KiB), and reports the
// process CPU time per sync (user and system, by getrusage): on a
// machine where every replica shares one CPU, that is what durability
// costs before any scheduling, beside the context switches of the
// process's threads per sync. "prealloc-snap128" takes a snapshot
// after every 128 appends, as a replica does at its default checkpoint
// interval with one slot a sync, so each new log file's space is paid
// for too.
func BenchmarkAppendSync(b *testing.B) {
	for _, size := range []int{400, 4 << 10, 10 << 10} {
		rec := [][]byte{bytes.Repeat([]byte("r"), size)}
		for _, bc := range []struct {
			name     string
			prealloc int
			every    int
		}{{"prealloc", 0, 0}, {"prealloc-snap128", 0, 128}, {"grow", -1, 0}} {
			b.Run(fmt.Sprintf("%s/%dB", bc.name, size), func(b *testing.B) {
				l, _, err := Open(b.TempDir(), Options{Prealloc: bc.prealloc})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				snap := []byte("snapshot")
				m := cost.Open(cost.Config{})
				start := m.Read()
				i := 0
				for b.Loop() {
					if err := l.Append(rec); err != nil {
						b.Fatal(err)
					}
					if i++; bc.every > 0 && i%bc.every == 0 {
						if err := l.Snapshot(snap); err != nil {
							b.Fatal(err)
						}
					}
				}
				spent := m.Read().Sub(start)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "syncs/s")
				if spent.HasCPU {
					b.ReportMetric(float64(spent.CPU.Microseconds())/float64(b.N), "cpu-us/op")
					b.ReportMetric(float64(spent.Switches)/float64(b.N), "switches/op")
				}
			})
		}
	}
}

// BenchmarkQuorumSync appends a 400 B frame (a one-client slot's
// records) to four logs in four directories of one disk at once, as the
// four replicas of a cluster on one machine do for a slot before they
// send their commits, and reports the median time until the third
// Append returned: the commit quorum of n = 4 (2f+1) waits for that
// long. On a machine whose replicas share a disk it bounds how close a
// durable request can come to an in-memory one, whatever the protocol
// does around it; each replica with its disk of its own waits for one
// sync. "one" is a single log alone, for comparison.
func BenchmarkQuorumSync(b *testing.B) {
	rec := [][]byte{bytes.Repeat([]byte("r"), 400)}
	for _, bc := range []struct {
		name string
		logs int
	}{{"one", 1}, {"four", 4}} {
		b.Run(bc.name, func(b *testing.B) {
			logs := make([]*Log, bc.logs)
			for i := range logs {
				l, _, err := Open(b.TempDir(), Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				logs[i] = l
			}
			third := min(3, bc.logs)
			var waits []time.Duration
			for b.Loop() {
				start := time.Now()
				done := make(chan time.Duration, len(logs))
				var wg sync.WaitGroup
				for _, l := range logs {
					wg.Go(func() {
						if err := l.Append(rec); err != nil {
							b.Error(err)
						}
						done <- time.Since(start)
					})
				}
				wg.Wait()
				close(done)
				var at []time.Duration
				for d := range done {
					at = append(at, d)
				}
				slices.Sort(at)
				waits = append(waits, at[third-1])
			}
			slices.Sort(waits)
			b.ReportMetric(float64(waits[len(waits)/2].Microseconds()), "quorum-us")
		})
	}
}
