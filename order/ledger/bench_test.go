package ledger

import (
	"testing"
)

// BenchmarkAppendSync appends 64 KiB blocks, synced one by one ("each")
// or sixteen to a Sync ("batch16"). The ledger is in the test's
// temporary directory: TMPDIR picks the disk.
func BenchmarkAppendSync(b *testing.B) {
	block := make([]byte, 64<<10)
	for _, bc := range []struct {
		name  string
		batch uint64
	}{{"each", 1}, {"batch16", 16}} {
		b.Run(bc.name, func(b *testing.B) {
			l := open(b, b.TempDir(), Options{})
			defer l.Close()
			b.SetBytes(int64(len(block)))
			b.ReportAllocs()
			n := uint64(0)
			for b.Loop() {
				if err := l.Append(n, block); err != nil {
					b.Fatal(err)
				}
				n++
				if n%bc.batch == 0 {
					if err := l.Sync(); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(n/bc.batch)/b.Elapsed().Seconds(), "syncs/s")
		})
	}
}

// BenchmarkBlock reads 64 KiB blocks back, in order, from a ledger of
// 256 of them (16 MiB, in the page cache).
func BenchmarkBlock(b *testing.B) {
	const n = 256
	l := open(b, b.TempDir(), Options{})
	defer l.Close()
	block := make([]byte, 64<<10)
	for i := uint64(0); i < n; i++ {
		if err := l.Append(i, block); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(block)))
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		if _, err := l.Block(i % n); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkOpen opens a ledger of 16 MiB of 64 KiB blocks in four
// segments: the headers of three are read, the last one whole.
func BenchmarkOpen(b *testing.B) {
	opt := Options{SegmentSize: 4 << 20}
	dir := b.TempDir()
	l := open(b, dir, opt)
	block := make([]byte, 64<<10)
	for i := uint64(0); i < 256; i++ {
		if err := l.Append(i, block); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		l := open(b, dir, opt)
		if h := l.Height(); h != 256 {
			b.Fatalf("height %d", h)
		}
		l.Close()
	}
}

// BenchmarkHeader checks a record header ("tag"), the cost its tag adds
// to every Append, Block and record read at Open; "crc32c" is the
// baseline, an unkeyed CRC-32C of the same bytes, as headers had before
// they were keyed.
func BenchmarkHeader(b *testing.B) {
	k := newHeaderKey(testKey)
	var hdr [headerSize]byte
	k.putHeader(hdr[:], header{size: 64 << 10, number: 7, synced: 3, sum: 99}, 1<<20)
	b.Run("tag", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, why := k.parseHeader(hdr[:], 1<<20, DefaultMaxBlock); why != "" {
				b.Fatal(why)
			}
		}
	})
	b.Run("crc32c", func(b *testing.B) {
		want := crc32Castagnoli(hdr[:tagged])
		b.ReportAllocs()
		for b.Loop() {
			if crc32Castagnoli(hdr[:tagged]) != want {
				b.Fatal("checksum mismatch")
			}
		}
	})
}
