// Package kv is a replicated key-value store: a deterministic bft.App.
//
// Every correct replica executes the same operations in the same order, so
// Execute, Snapshot and Restore depend only on the store's contents, its
// Config and their arguments: no maps iterated in random order, no clocks,
// no randomness. Replicas of one cluster must use the same Config, since the
// limits decide which operations fail.
//
// A Byzantine client can get any bytes committed as an operation, so
// Execute never panics: a malformed operation, or one that breaks a limit,
// gives an error result with a deterministic message and leaves the state
// unchanged.
//
// # Operation format
//
// An operation is one opcode byte followed by its arguments. Lengths are
// unsigned varints (encoding/binary's Uvarint) in their shortest form, here
// and in snapshots: zero-padded varints are rejected, so each operation and
// each state has one encoding. The last byte string of an operation takes
// the rest of the operation, so it has no length.
//
//	Put    0x01 uvarint(len(key)) key value
//	Get    0x02 key
//	Delete 0x03 key
//	Add    0x04 uvarint(len(key)) key delta        (delta: 8 bytes, big-endian int64)
//	CAS    0x05 uvarint(len(key)) key present uvarint(len(old)) old new
//	                                               (present: 0 or 1)
//
// The empty operation is a no-op: it returns an empty result and touches
// no state (benchmarks send 0-byte requests).
//
// # Result format
//
// A result is one status byte and its payload:
//
//	0x00 not found (no payload)
//	0x01 found, followed by a value
//	0x02 error, followed by an error message (UTF-8 text)
//
// What each operation returns:
//
//	Put    found if the key existed before (no value); else not found
//	Get    found and the value; else not found
//	Delete found if the key existed (no value); else not found
//	Add    found and the new 8-byte big-endian value. A missing key counts
//	       as 0; a stored value that is not 8 bytes is an error. Adding
//	       wraps around on overflow (two's complement), like Go.
//	CAS    found (no value) if it swapped; else not found and, if the key
//	       exists, its current value. It swaps if the key exists with value
//	       old (present=1), or if the key does not exist (present=0; old must
//	       be empty).
//
// DecodeResult decodes a result.
//
// # Snapshot format
//
//	"RKV1" uvarint(count) count × (uvarint(len(key)) key uvarint(len(value)) value)
//
// with entries in strictly increasing byte order of their keys, so one
// state has exactly one encoding. Restore accepts only that encoding,
// within the Config's limits, and allocates memory in proportion to the
// snapshot's length: a lying count cannot make it reserve more.
package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/rubin-go/rubin/bft"
)

// Opcodes: the first byte of an operation. The values are part of the
// replicated format.
const (
	OpPut    byte = 0x01
	OpGet    byte = 0x02
	OpDelete byte = 0x03
	OpAdd    byte = 0x04
	OpCAS    byte = 0x05
)

// Status bytes: the first byte of a non-empty result.
const (
	StatusNotFound byte = 0x00
	StatusFound    byte = 0x01
	StatusError    byte = 0x02
)

// Default limits.
const (
	DefaultMaxKeySize   = 1 << 10 // 1 KiB
	DefaultMaxValueSize = 1 << 20 // 1 MiB
)

// snapshotMagic starts every snapshot; the digit is the format version.
const snapshotMagic = "RKV1"

// Config bounds what the store accepts. The zero value means the defaults.
// Every replica of a cluster must use the same Config.
type Config struct {
	// MaxKeySize bounds a key's length in bytes. Default DefaultMaxKeySize.
	MaxKeySize int
	// MaxValueSize bounds a value's length in bytes. Default
	// DefaultMaxValueSize.
	MaxValueSize int
	// MaxKeys bounds the number of keys; a Put or Add of a new key beyond
	// it fails. 0 means no limit.
	MaxKeys int
}

func (c Config) withDefaults() Config {
	if c.MaxKeySize <= 0 {
		c.MaxKeySize = DefaultMaxKeySize
	}
	if c.MaxValueSize <= 0 {
		c.MaxValueSize = DefaultMaxValueSize
	}
	if c.MaxKeys < 0 {
		c.MaxKeys = 0
	}
	return c
}

// Store is the key-value store. It is not safe for concurrent use: the
// replica executes operations one at a time, and so must any other caller.
type Store struct {
	cfg Config
	// m holds pointers so that overwriting a key's value needs no map
	// assignment, which would allocate the key string again.
	m map[string]*entry
}

type entry struct{ v []byte }

var (
	_ bft.App     = (*Store)(nil)
	_ bft.Querier = (*Store)(nil)
)

// New returns an empty store with the given limits.
func New(cfg Config) *Store {
	return &Store{cfg: cfg.withDefaults(), m: make(map[string]*entry)}
}

// Len returns the number of keys.
func (s *Store) Len() int { return len(s.m) }

// Lookup returns a copy of key's value, for local reads and tests. Reads
// that must be linearizable go through the replicas instead: ordered
// (Execute with EncodeGet(key)) or read-only (Query, see bft.Querier).
func (s *Store) Lookup(key []byte) (value []byte, found bool) {
	e, ok := s.m[string(key)]
	if !ok {
		return nil, false
	}
	return append([]byte{}, e.v...), true
}

// Execute runs one operation and returns its result; see the package
// documentation for both formats. It never panics and never keeps op.
// The store's operations depend on nothing in ctx.
func (s *Store) Execute(_ bft.ExecContext, op []byte) []byte {
	if len(op) == 0 {
		return nil
	}
	args := op[1:]
	switch op[0] {
	case OpPut:
		key, value, err := splitKey(args)
		if err != nil {
			return errorResult("put", err)
		}
		return s.put(key, value)
	case OpGet:
		return s.get(args)
	case OpDelete:
		if err := s.checkKey(args); err != nil {
			return errorResult("delete", err)
		}
		if _, ok := s.m[string(args)]; !ok {
			return []byte{StatusNotFound}
		}
		delete(s.m, string(args))
		return []byte{StatusFound}
	case OpAdd:
		return s.add(args)
	case OpCAS:
		return s.cas(args)
	default:
		return errorResult("execute", fmt.Errorf("unknown opcode 0x%02x", op[0]))
	}
}

// Query answers a get without ordering it (see bft.Querier): the same
// result as Execute's for the same state. Every other opcode would change
// the store and gets an error result.
func (s *Store) Query(_ bft.QueryContext, op []byte) []byte {
	if len(op) == 0 || op[0] != OpGet {
		return errorResult("query", errors.New("only get is read-only"))
	}
	return s.get(op[1:])
}

func (s *Store) get(key []byte) []byte {
	if err := s.checkKey(key); err != nil {
		return errorResult("get", err)
	}
	e, ok := s.m[string(key)]
	if !ok {
		return []byte{StatusNotFound}
	}
	return append(append(make([]byte, 0, 1+len(e.v)), StatusFound), e.v...)
}

func (s *Store) put(key, value []byte) []byte {
	if err := s.checkKey(key); err != nil {
		return errorResult("put", err)
	}
	if err := s.checkValue(value); err != nil {
		return errorResult("put", err)
	}
	old, existed := s.m[string(key)]
	if !existed && s.full() {
		return errorResult("put", s.fullError())
	}
	s.set(key, old, value)
	if existed {
		return []byte{StatusFound}
	}
	return []byte{StatusNotFound}
}

// set stores a copy of value under key; old is key's entry, nil if the
// key is new. It reuses old's memory when the new value fits: no one else
// holds it, since results and snapshots are copies.
func (s *Store) set(key []byte, old *entry, value []byte) {
	if old == nil {
		s.m[string(key)] = &entry{v: append([]byte{}, value...)}
		return
	}
	if cap(old.v) >= len(value) {
		old.v = append(old.v[:0], value...)
		return
	}
	old.v = append([]byte{}, value...)
}

func (s *Store) add(args []byte) []byte {
	key, rest, err := splitKey(args)
	if err != nil {
		return errorResult("add", err)
	}
	if err := s.checkKey(key); err != nil {
		return errorResult("add", err)
	}
	if len(rest) != 8 {
		return errorResult("add", fmt.Errorf("delta is %d bytes, want 8", len(rest)))
	}
	delta := binary.BigEndian.Uint64(rest)
	old, existed := s.m[string(key)]
	var n uint64
	if existed {
		if len(old.v) != 8 {
			return errorResult("add", fmt.Errorf("stored value is %d bytes, not an 8-byte integer", len(old.v)))
		}
		n = binary.BigEndian.Uint64(old.v)
	} else if s.full() {
		return errorResult("add", s.fullError())
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], n+delta) // wraps, as documented
	s.set(key, old, v[:])
	return append([]byte{StatusFound}, v[:]...)
}

func (s *Store) cas(args []byte) []byte {
	key, rest, err := splitKey(args)
	if err != nil {
		return errorResult("cas", err)
	}
	if err := s.checkKey(key); err != nil {
		return errorResult("cas", err)
	}
	if len(rest) == 0 {
		return errorResult("cas", errors.New("truncated presence flag"))
	}
	present := rest[0]
	if present > 1 {
		return errorResult("cas", fmt.Errorf("presence flag is %d, want 0 or 1", present))
	}
	old, value, err := splitKey(rest[1:])
	if err != nil {
		return errorResult("cas", fmt.Errorf("old value: %w", err))
	}
	if present == 0 && len(old) != 0 {
		return errorResult("cas", errors.New("old value given for an absent key"))
	}
	if err := s.checkValue(value); err != nil {
		return errorResult("cas", err)
	}
	cur, existed := s.m[string(key)]
	if existed != (present == 1) || (existed && !bytes.Equal(cur.v, old)) {
		if !existed {
			return []byte{StatusNotFound}
		}
		return append(append(make([]byte, 0, 1+len(cur.v)), StatusNotFound), cur.v...)
	}
	if !existed && s.full() {
		return errorResult("cas", s.fullError())
	}
	s.set(key, cur, value)
	return []byte{StatusFound}
}

func (s *Store) full() bool { return s.cfg.MaxKeys > 0 && len(s.m) >= s.cfg.MaxKeys }

func (s *Store) fullError() error {
	return fmt.Errorf("store full: %d keys", s.cfg.MaxKeys)
}

func (s *Store) checkKey(key []byte) error {
	if len(key) > s.cfg.MaxKeySize {
		return fmt.Errorf("key of %d bytes exceeds limit %d", len(key), s.cfg.MaxKeySize)
	}
	return nil
}

func (s *Store) checkValue(value []byte) error {
	if len(value) > s.cfg.MaxValueSize {
		return fmt.Errorf("value of %d bytes exceeds limit %d", len(value), s.cfg.MaxValueSize)
	}
	return nil
}

// uvarint decodes a canonical uvarint: binary.Uvarint also accepts
// zero-padded encodings (0x80 0x00 for 0), which would give one snapshot
// several encodings.
func uvarint(b []byte) (uint64, int) {
	n, w := binary.Uvarint(b)
	if w > 1 && b[w-1] == 0 {
		return 0, 0
	}
	return n, w
}

// splitKey splits uvarint(len(key)) key rest.
func splitKey(b []byte) (key, rest []byte, err error) {
	n, w := uvarint(b)
	if w <= 0 {
		return nil, nil, errors.New("malformed length")
	}
	b = b[w:]
	if n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("length %d exceeds the %d bytes left", n, len(b))
	}
	return b[:n], b[n:], nil
}

// errorResult builds an error result. The message depends only on the
// operation and the Config, so every replica returns the same bytes.
func errorResult(op string, err error) []byte {
	msg := "kv: " + op + ": " + err.Error()
	return append(append(make([]byte, 0, 1+len(msg)), StatusError), msg...)
}

// Snapshot returns the state, with keys in increasing byte order so that
// equal states give equal bytes.
func (s *Store) Snapshot() []byte {
	keys := make([]string, 0, len(s.m))
	size := len(snapshotMagic) + binary.MaxVarintLen64
	for k, e := range s.m {
		keys = append(keys, k)
		size += 2*binary.MaxVarintLen64 + len(k) + len(e.v)
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, snapshotMagic...)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		v := s.m[k].v
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// Restore replaces the state with a snapshot. It checks the whole snapshot
// first and leaves the state unchanged if it is malformed, out of order,
// or beyond the Config's limits.
func (s *Store) Restore(snapshot []byte) error {
	m, err := s.decodeSnapshot(snapshot)
	if err != nil {
		return fmt.Errorf("kv: restore: %w", err)
	}
	s.m = m
	return nil
}

func (s *Store) decodeSnapshot(b []byte) (map[string]*entry, error) {
	if !bytes.HasPrefix(b, []byte(snapshotMagic)) {
		return nil, errors.New("not a kv snapshot (bad magic)")
	}
	b = b[len(snapshotMagic):]
	count, w := uvarint(b)
	if w <= 0 {
		return nil, errors.New("malformed entry count")
	}
	b = b[w:]
	// Every entry takes at least two bytes (two zero lengths), so a count
	// beyond len(b)/2 is a lie; checking it first keeps the map's
	// preallocation proportional to the snapshot's size.
	if count > uint64(len(b)/2) {
		return nil, fmt.Errorf("entry count %d too large for %d bytes", count, len(b))
	}
	if s.cfg.MaxKeys > 0 && count > uint64(s.cfg.MaxKeys) {
		return nil, fmt.Errorf("%d keys exceed limit %d", count, s.cfg.MaxKeys)
	}
	m := make(map[string]*entry, count)
	var prev []byte
	for i := uint64(0); i < count; i++ {
		key, rest, err := splitKey(b)
		if err != nil {
			return nil, fmt.Errorf("entry %d key: %w", i, err)
		}
		if err := s.checkKey(key); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			return nil, fmt.Errorf("entry %d: key %s not after %s", i, strconv.Quote(string(key)), strconv.Quote(string(prev)))
		}
		value, rest, err := splitKey(rest)
		if err != nil {
			return nil, fmt.Errorf("entry %d value: %w", i, err)
		}
		if err := s.checkValue(value); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		m[string(key)] = &entry{v: append([]byte{}, value...)}
		prev, b = key, rest
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes", len(b))
	}
	return m, nil
}
