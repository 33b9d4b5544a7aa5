package wal

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rubin-go/rubin/internal/cost"
)

// BenchmarkDurableWrite measures the ways Linux offers to make a 4 KiB
// write durable, each into a file filled with zeros and synced first, so
// that none pays for allocating blocks: write then fdatasync (what the
// log does), a write on an O_DSYNC file, and an aligned write on an
// O_DIRECT|O_DSYNC file, which bypasses the page cache; and write then
// fdatasync into space fallocate(2) reserved instead, as the log once
// grew, where each sync also writes the extent it converts. It reports the
// process CPU per durable write (user and system, by getrusage): the
// cost a replica pays per sync where replicas share a CPU, whichever way
// it syncs.
func BenchmarkDurableWrite(b *testing.B) {
	const size, span = 4 << 10, 32 << 20
	for _, bc := range []struct {
		name  string
		flags int
		sync  bool
		fall  bool
	}{{"fdatasync", 0, true, false}, {"fallocated-fdatasync", 0, true, true}, {"dsync", unix.O_DSYNC, false, false}, {"direct-dsync", unix.O_DIRECT | unix.O_DSYNC, false, false}} {
		b.Run(bc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "durable")
			if bc.fall {
				f, err := os.Create(path)
				if err != nil {
					b.Fatal(err)
				}
				if err := unix.Fallocate(int(f.Fd()), 0, 0, span); err != nil {
					b.Fatal(err)
				}
				f.Sync()
				f.Close()
			} else if err := os.WriteFile(path, make([]byte, span), 0o600); err != nil {
				b.Fatal(err)
			}
			f, err := os.OpenFile(path, os.O_RDWR|bc.flags, 0)
			if err != nil {
				b.Skipf("open with flags %#x: %v", bc.flags, err)
			}
			defer f.Close()
			fd := int(f.Fd())
			if err := unix.Fdatasync(fd); err != nil {
				b.Fatal(err)
			}
			// Aligned for O_DIRECT.
			buf := make([]byte, 2*size)
			off := size - int(uintptr(unsafe.Pointer(&buf[0]))%size)
			data := buf[off : off+size]
			m := cost.Open(cost.Config{})
			start := m.Read()
			i := 0
			for b.Loop() {
				if _, err := unix.Pwrite(fd, data, int64(i*size%span)); err != nil {
					b.Fatal(err)
				}
				if bc.sync {
					if err := unix.Fdatasync(fd); err != nil {
						b.Fatal(err)
					}
				}
				i++
			}
			spent := m.Read().Sub(start)
			if spent.HasCPU {
				b.ReportMetric(float64(spent.CPU.Microseconds())/float64(b.N), "cpu-us/op")
			}
		})
	}
}

// TestAllocatedSpaceIsWritten: the space the log allocates ahead of its
// frames holds written zeros, not extents the file system only reserved
// (fallocate's unwritten extents), so that an Append into it needs no
// metadata change: FIEMAP reports no unwritten extent in the file.
func TestAllocatedSpaceIsWritten(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append([][]byte{[]byte("one record")}); err != nil {
		t.Fatal(err)
	}
	if l.alloc < minChunk {
		t.Fatalf("allocated %d bytes, want at least %d", l.alloc, minChunk)
	}
	f, err := os.Open(walName(dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	exts, err := fiemap(f)
	if err != nil {
		t.Skipf("the file system does not map extents (FIEMAP): %v", err)
	}
	var mapped uint64
	for _, e := range exts {
		if e.flags&fiemapExtentUnwritten != 0 {
			t.Fatalf("extent at %d, %d bytes, is unwritten (flags %#x): the first Append into it changes metadata", e.logical, e.length, e.flags)
		}
		mapped += e.length
	}
	if mapped < uint64(l.alloc) {
		t.Fatalf("%d bytes of %d mapped: the allocated space has holes", mapped, l.alloc)
	}
}

type extent struct {
	logical, length uint64
	flags           uint32
}

const (
	fsIocFiemap           = 0xC020660B // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync        = 0x1
	fiemapExtentUnwritten = 0x800
)

// fiemap returns f's extents (FS_IOC_FIEMAP, synced first).
func fiemap(f *os.File) ([]extent, error) {
	const max, head, size = 64, 32, 56 // extents asked for; struct fiemap; struct fiemap_extent
	buf := make([]byte, head+max*size)
	le := binary.LittleEndian
	le.PutUint64(buf[8:], ^uint64(0)) // fm_length: the whole file
	le.PutUint32(buf[16:], fiemapFlagSync)
	le.PutUint32(buf[24:], max)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&buf[0]))); errno != 0 {
		return nil, errno
	}
	n := le.Uint32(buf[20:])
	var exts []extent
	for i := range n {
		e := buf[head+int(i)*size:]
		exts = append(exts, extent{logical: le.Uint64(e[0:]), length: le.Uint64(e[16:]), flags: le.Uint32(e[40:])})
	}
	return exts, nil
}
