package ledger

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// forge writes into b the header of a record at offset off as a client
// can compute it: the ledger's way, from the header's fields and the
// offset, under a key of its own (it cannot learn the ledger's).
func forge(b []byte, h header, off int64) {
	newHeaderKey(bytes.Repeat([]byte{0xc1}, keySize)).putHeader(b, h, off)
}

// TestForgedHeader: a client whose block holds what would pass for a
// record header, at the offset the block lands at, and claims the block
// before it was synced, cannot make Open refuse a ledger whose record
// before that block is torn: Open cuts the torn tail, and the ledger
// takes the next block.
func TestForgedHeader(t *testing.T) {
	src := t.TempDir()
	l := open(t, src, Options{})
	appendRange(t, l, 0, 2)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	appendRange(t, l, 2, 3)
	// Block 4's bytes: a prefix, then a record of "block 9" claiming the
	// ledger had synced five blocks when it was written.
	fake := []byte("block 9")
	prefix := []byte("envelope:")
	torn := []byte("block 3, to be torn")
	at := int64(4*headerSize + len(blockData(0)) + len(blockData(1)) + len(blockData(2)) + len(torn) + headerSize + len(prefix))
	evil := append(bytes.Clone(prefix), make([]byte, headerSize)...)
	forge(evil[len(prefix):], header{size: uint32(len(fake)), number: 9, synced: 5, sum: crc32Castagnoli(fake)}, at)
	evil = append(evil, fake...)
	if err := l.Append(3, torn); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(4, evil); err != nil {
		t.Fatal(err)
	}
	l.Close()
	s := readStream(t, src)
	if r := s.recs[4]; int64(r[0]+headerSize+len(prefix)) != at {
		t.Fatalf("block 4 at offset %d: the forged header is not where it claims", r[0])
	}

	// A crash before blocks 3 and 4 were synced kept block 4's pages but
	// not the end of block 3's.
	b := bytes.Clone(s.files[0])
	r := s.recs[3]
	clear(b[r[0]+headerSize : r[1]])
	dir := t.TempDir()
	s.writeFirst(t, dir, b)
	l, err := Open(dir)
	if err != nil {
		t.Fatalf("open after the record before the forged header was torn: %v", err)
	}
	defer l.Close()
	checkBlocks(t, l, 3)
	appendRange(t, l, 3, 5)
	checkBlocks(t, l, 5)
}

// TestKeyFile: Open of a ledger whose key file is missing or damaged
// fails with ErrCorrupt naming the file, and cuts nothing; a directory
// holding a key file and no segment (a crash while the ledger was being
// created) opens with that key.
func TestKeyFile(t *testing.T) {
	src := written(t, small, 20)
	s := readStream(t, src)
	good := keyFile(s.key)
	for _, tc := range []struct {
		name string
		key  []byte // nil: no key file
		why  string
	}{
		{"missing", nil, "no key file"},
		{"empty", []byte{}, "damaged key file"},
		{"cut short", good[:len(good)-1], "damaged key file"},
		{"one byte more", append(bytes.Clone(good), 0), "damaged key file: more than"},
		{"a MiB more", append(bytes.Clone(good), make([]byte, 1<<20)...), "damaged key file: more than"},
		{"key bit flipped", flip(good, 9), "damaged key file"},
		{"checksum bit flipped", flip(good, keyFileSize-1), "damaged key file"},
		{"magic bit flipped", flip(good, 0), "damaged key file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s.writeCut(t, dir, 1<<30, 0)
			name := filepath.Join(dir, keyName)
			if tc.key == nil {
				os.Remove(name)
			} else if err := os.WriteFile(name, tc.key, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := OpenOptions(dir, small)
			if err == nil {
				l.Close()
			}
			if want := name + ": " + tc.why; !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
				t.Fatalf("open: %v, want ErrCorrupt naming %q", err, want)
			}
			if err := os.WriteFile(name, good, 0o600); err != nil {
				t.Fatal(err)
			}
			l = open(t, dir, small)
			defer l.Close()
			checkBlocks(t, l, 20)
		})
	}

	t.Run("no segment", func(t *testing.T) {
		dir := t.TempDir()
		writeKey(t, dir, testKey)
		l := open(t, dir, small)
		appendRange(t, l, 0, 3)
		l.Close()
		if s := readStream(t, dir); !bytes.Equal(s.key, testKey) {
			t.Fatalf("key %x, want %x", s.key, testKey)
		}
	})

	t.Run("created", func(t *testing.T) {
		dir := t.TempDir()
		open(t, dir, small).Close()
		fi, err := os.Stat(filepath.Join(dir, keyName))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
		}
		if s := readStream(t, dir); bytes.Equal(s.key, make([]byte, keySize)) {
			t.Fatal("key of zeros")
		}
	})
}

// flip returns a copy of b with the low bit of byte i flipped.
func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 1
	return b
}
