package ledger

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// The key file holds the ledger's secret key, made at random when the
// ledger is created and never changed:
//
//	 0  magic "LKY1"
//	 4  the key, 32 bytes
//	36  CRC-32C of bytes 0-35
const (
	keyName     = "key"
	keySize     = 32
	keyFileSize = 4 + keySize + 4
)

var keyMagic = []byte("LKY1")

// keyFile returns the key file's bytes for key.
func keyFile(key []byte) []byte {
	b := make([]byte, 0, keyFileSize)
	b = append(append(b, keyMagic...), key...)
	return binary.LittleEndian.AppendUint32(b, crc32Castagnoli(b))
}

// parseKeyFile returns the key in the key file's bytes b, or why b is not
// a key file.
func parseKeyFile(b []byte) ([]byte, string) {
	switch {
	case len(b) > keyFileSize:
		return nil, fmt.Sprintf("more than %d bytes", keyFileSize)
	case len(b) < keyFileSize:
		return nil, fmt.Sprintf("%d bytes, want %d", len(b), keyFileSize)
	case !bytes.Equal(b[:4], keyMagic):
		return nil, "no key file magic"
	case crc32Castagnoli(b[:4+keySize]) != binary.LittleEndian.Uint32(b[4+keySize:]):
		return nil, "checksum mismatch"
	}
	return b[4 : 4+keySize], ""
}

// loadKey reads the key of the ledger in the open directory dir. If dir
// has no key file and may be a new ledger (fresh: it holds no segment),
// it makes one; otherwise a missing or damaged key file is ErrCorrupt,
// naming it. It reads at most one byte more than a key file holds.
func loadKey(dir *os.File, fresh bool) ([]byte, error) {
	name := filepath.Join(dir.Name(), keyName)
	f, err := os.Open(name)
	switch {
	case errors.Is(err, os.ErrNotExist) && fresh:
		return createKey(dir)
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%w: %s: no key file, but the directory holds segments", ErrCorrupt, name)
	case err != nil:
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, keyFileSize+1))
	f.Close()
	if err != nil {
		return nil, err
	}
	key, why := parseKeyFile(b)
	if why != "" {
		return nil, fmt.Errorf("%w: %s: damaged key file: %s", ErrCorrupt, name, why)
	}
	return key, nil
}

// createKey makes a random key and stores it in the key file of the open
// directory dir: written to a temporary file, synced, renamed into place
// and dir synced, so a crash leaves the key file whole or absent, and
// durable before any segment can be.
func createKey(dir *os.File) ([]byte, error) {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	name := filepath.Join(dir.Name(), keyName)
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = f.Write(keyFile(key))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: create key file %s: %w", name, err)
	}
	return key, syncDir(dir)
}

// A headerKey computes the tags of record headers under a ledger's key.
// Safe for concurrent use: each tag is computed with an HMAC state of
// its own, taken from a pool (making one costs more than the tag).
type headerKey struct {
	macs sync.Pool // of *headerMAC
}

type headerMAC struct {
	h   hash.Hash // HMAC-SHA256 under the key
	in  [8 + tagged]byte
	out [sha256.Size]byte
}

func newHeaderKey(key []byte) *headerKey {
	key = bytes.Clone(key)
	k := &headerKey{}
	k.macs.New = func() any { return &headerMAC{h: hmac.New(sha256.New, key)} }
	return k
}

// tag fills dst (at most 32 bytes) with the tag of header b (its first
// tagged bytes) at offset off: the start of HMAC-SHA256 of off and b.
func (k *headerKey) tag(dst, b []byte, off int64) {
	m := k.macs.Get().(*headerMAC)
	binary.LittleEndian.PutUint64(m.in[:], uint64(off))
	copy(m.in[8:], b[:tagged])
	m.h.Reset()
	m.h.Write(m.in[:])
	copy(dst, m.h.Sum(m.out[:0]))
	k.macs.Put(m)
}
