package ledger

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzOpen opens a ledger whose first segment holds arbitrary bytes:
// the last segment, or (sealed) one before an empty last one starting at
// block next. Open either fails with ErrCorrupt or finds a prefix of
// blocks that Block returns (or, in a segment before the last, reports
// as ErrCorrupt), and takes the next Append (TestCrashAtEveryByte
// reopens after it). MaxBlock bounds what a header can make it allocate.
func FuzzOpen(f *testing.F) {
	opt := Options{SegmentSize: 400, MaxBlock: 1 << 16}
	src := written(f, opt, 12)
	s := readStream(f, src)
	inFirst := 0 // the records of the first segment
	for _, r := range s.recs {
		if r[1] <= len(s.files[0]) {
			inFirst++
		}
	}
	f.Add(s.files[0], uint16(inFirst), true)
	for _, b := range s.files {
		f.Add(b, uint16(0), false)
	}
	f.Add([]byte{}, uint16(0), false)
	f.Add(bytes.Repeat(magic, 40), uint16(3), true)
	f.Fuzz(func(t *testing.T, data []byte, next uint16, sealed bool) {
		dir := t.TempDir()
		writeKey(t, dir, s.key)
		if err := os.WriteFile(segName(dir, 0), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if sealed && next > 0 {
			if err := os.WriteFile(segName(dir, uint64(next)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		l, err := OpenOptions(dir, opt)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v, want ErrCorrupt", err)
			}
			return
		}
		h := l.Height()
		if h > uint64(len(data))/headerSize {
			t.Fatalf("height %d from %d bytes", h, len(data))
		}
		for i := uint64(0); i < h; i++ {
			if _, err := l.Block(i); err != nil && (!sealed || !errors.Is(err, ErrCorrupt)) {
				t.Fatalf("block %d of %d: %v", i, h, err)
			}
		}
		defer l.Close()
		if err := l.Append(h, []byte("next")); err != nil {
			t.Fatal(err)
		}
		if b, err := l.Block(h); err != nil || string(b) != "next" {
			t.Fatalf("block %d appended after Open: %q, %v", h, b, err)
		}
	})
}

// FuzzHeader: parseHeader never panics, and a header it accepts is the
// one putHeader writes for the same fields and offset.
func FuzzHeader(f *testing.F) {
	k := newHeaderKey(testKey)
	var b [headerSize]byte
	k.putHeader(b[:], header{size: 5, number: 7, synced: 3, sum: 99}, 1234)
	f.Add(b[:], int64(1234))
	f.Add(b[:], int64(0))
	f.Add([]byte("LBK1"), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, off int64) {
		h, why := k.parseHeader(b, off, DefaultMaxBlock)
		if why != "" {
			return
		}
		var again [headerSize]byte
		k.putHeader(again[:], h, off)
		if !bytes.Equal(again[:], b[:headerSize]) {
			t.Fatalf("header %x parsed as %+v, written back as %x", b[:headerSize], h, again)
		}
	})
}
