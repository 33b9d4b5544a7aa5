package wal

import (
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
// O_DIRECT|O_DSYNC file, which bypasses the page cache. It reports the
// process CPU per durable write (user and system, by getrusage): the
// cost a replica pays per sync where replicas share a CPU, whichever way
// it syncs.
func BenchmarkDurableWrite(b *testing.B) {
	const size, span = 4 << 10, 32 << 20
	for _, bc := range []struct {
		name  string
		flags int
		sync  bool
	}{{"fdatasync", 0, true}, {"dsync", unix.O_DSYNC, false}, {"direct-dsync", unix.O_DIRECT | unix.O_DSYNC, false}} {
		b.Run(bc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "durable")
			if err := os.WriteFile(path, make([]byte, span), 0o600); err != nil {
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
