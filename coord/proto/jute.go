package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed is wrapped by every error that decoding bytes returns, so
// that a server can tell a peer that sent garbage (close the connection)
// from its own failures: errors.Is(err, ErrMalformed).
var ErrMalformed = errors.New("zookeeper protocol: malformed record")

// An Encoder appends the jute encoding of values to a byte slice. The zero
// Encoder starts from an empty slice; NewEncoder appends to a given one.
// Encoding cannot fail (only a MultiResponse whose results do not match
// their types panics, a bug AppendReply reports as an error instead).
type Encoder struct {
	buf []byte
}

// NewEncoder returns an Encoder that appends to buf, which it owns until
// the caller takes the result back with Bytes.
func NewEncoder(buf []byte) *Encoder { return &Encoder{buf: buf} }

// Bytes returns the slice with everything encoded so far appended.
func (e *Encoder) Bytes() []byte { return e.buf }

// Int32 appends v big-endian, as jute's int.
func (e *Encoder) Int32(v int32) { e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(v)) }

// Int64 appends v big-endian, as jute's long.
func (e *Encoder) Int64(v int64) { e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v)) }

// Bool appends v as one byte, 1 or 0.
func (e *Encoder) Bool(v bool) {
	if v {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
	}
}

// Buffer appends b as jute's buffer: its length, then its bytes. A nil b
// is written as length -1, which a Java client reads as null, as
// ZooKeeper writes a znode that has no data; an empty non-nil b as 0.
func (e *Encoder) Buffer(b []byte) {
	if b == nil {
		e.Int32(-1)
		return
	}
	e.Int32(int32(len(b)))
	e.buf = append(e.buf, b...)
}

// String appends s as jute's ustring: its length in bytes, then its bytes.
// Go has no null string; the empty string is written as length 0.
func (e *Encoder) String(s string) {
	e.Int32(int32(len(s)))
	e.buf = append(e.buf, s...)
}

// Strings appends ss as jute's vector<ustring>: the count, then each
// string. A nil slice is written as an empty vector (count 0), never as
// -1: ZooKeeper's servers never send a null vector, and clients do not
// all accept one.
func (e *Encoder) Strings(ss []string) {
	e.Int32(int32(len(ss)))
	for _, s := range ss {
		e.String(s)
	}
}

// Stat appends a Stat's eleven fields in order.
func (e *Encoder) Stat(s *Stat) {
	e.Int64(s.Czxid)
	e.Int64(s.Mzxid)
	e.Int64(s.Ctime)
	e.Int64(s.Mtime)
	e.Int32(s.Version)
	e.Int32(s.Cversion)
	e.Int32(s.Aversion)
	e.Int64(s.EphemeralOwner)
	e.Int32(s.DataLength)
	e.Int32(s.NumChildren)
	e.Int64(s.Pzxid)
}

// ACLs appends acl as jute's vector<ACL>; nil is written as an empty
// vector, as Strings writes it.
func (e *Encoder) ACLs(acl []ACL) {
	e.Int32(int32(len(acl)))
	for _, a := range acl {
		e.Int32(int32(a.Perms))
		e.String(a.ID.Scheme)
		e.String(a.ID.ID)
	}
}

// Record appends r's encoding.
func (e *Encoder) Record(r Record) { r.Encode(e) }

// The smallest encodings of vector elements, against which a vector's
// count is checked before anything is allocated for it.
const (
	minString     = 4                   // its length
	minACL        = 4 + minString*2     // perms, scheme, id
	minClientInfo = minString * 2       // scheme, user
	minMultiOp    = multiHeaderSize + 4 // a header and a path
	statSize      = 8*4 + 4*3 + 8 + 4*2 + 8
)

// A Decoder reads jute values from one frame's bytes. Every read checks
// the bytes left before it allocates, so a decoded value takes memory in
// proportion to the input, whatever lengths the input claims.
//
// The first error sticks: later reads return zero values, and Err reports
// the first failure with the offset where it happened. A Decoder never
// panics on any input.
//
// Buffers and strings are copied out of the input, so the caller may
// reuse the frame's buffer as soon as decoding returns.
type Decoder struct {
	buf  []byte
	off  int
	err  error
	what string // the record being decoded, for errors
}

// NewDecoder returns a Decoder over b, which it reads and never modifies.
func NewDecoder(b []byte) *Decoder { return &Decoder{buf: b} }

// Err returns the first error, or nil.
func (d *Decoder) Err() error { return d.err }

// Len returns the number of bytes not yet read.
func (d *Decoder) Len() int { return len(d.buf) - d.off }

// Fail records err, wrapped with ErrMalformed and the offset, unless an
// error is already recorded. Records use it to reject values the format
// allows but the protocol does not (an unknown op in a multi).
func (d *Decoder) Fail(err error) {
	if d.err != nil {
		return
	}
	what := ""
	if d.what != "" {
		what = d.what + ": "
	}
	d.err = fmt.Errorf("%w: %sat byte %d: %w", ErrMalformed, what, d.off, err)
}

func (d *Decoder) failf(format string, args ...any) {
	d.Fail(fmt.Errorf(format, args...))
}

// take returns the next n bytes, or nil and an error if fewer are left.
func (d *Decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n > d.Len() {
		d.failf("%s needs %d bytes, %d left", what, n, d.Len())
		return nil
	}
	b := d.buf[d.off : d.off+n : d.off+n]
	d.off += n
	return b
}

// Int32 reads jute's int.
func (d *Decoder) Int32() int32 {
	b := d.take(4, "int")
	if b == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(b))
}

// Int64 reads jute's long.
func (d *Decoder) Int64() int64 {
	b := d.take(8, "long")
	if b == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// Bool reads jute's boolean: one byte, true unless it is 0, as Java's
// DataInput reads it.
func (d *Decoder) Bool() bool {
	b := d.take(1, "boolean")
	if b == nil {
		return false
	}
	return b[0] != 0
}

// length reads a length or count and checks it: -1 means null, and a
// non-negative n must leave room for n elements of at least min bytes
// each in what remains. It returns -1 for null or failure.
func (d *Decoder) length(what string, min int) int {
	n := d.Int32()
	if d.err != nil || n == -1 {
		return -1
	}
	if n < 0 {
		d.failf("%s length %d is negative", what, n)
		return -1
	}
	if min == 1 && int(n) > d.Len() {
		d.failf("%s needs %d bytes, %d left", what, n, d.Len())
		return -1
	}
	if int(n) > d.Len()/min {
		d.failf("%s claims %d elements of at least %d bytes, %d bytes left", what, n, min, d.Len())
		return -1
	}
	return int(n)
}

// Buffer reads jute's buffer into a new slice: nil for length -1, a
// non-nil empty slice for 0.
func (d *Decoder) Buffer() []byte {
	n := d.length("buffer", 1)
	if n < 0 {
		return nil
	}
	b := d.take(n, "buffer")
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, n), b...)
}

// String reads jute's ustring. Length -1 (null) reads as "". The bytes
// are not checked to be UTF-8: a path's validity is the data model's
// business, and a string decodes to the same bytes on every replica.
func (d *Decoder) String() string {
	n := d.length("string", 1)
	if n <= 0 {
		return ""
	}
	return string(d.take(n, "string"))
}

// Strings reads jute's vector<ustring>; null and empty read as nil.
func (d *Decoder) Strings() []string {
	n := d.length("vector<ustring>", minString)
	if n <= 0 {
		return nil
	}
	ss := make([]string, 0, n)
	for range n {
		ss = append(ss, d.String())
	}
	if d.err != nil {
		return nil
	}
	return ss
}

// Stat reads a Stat.
func (d *Decoder) Stat() Stat {
	if d.err == nil && d.Len() < statSize {
		d.failf("stat needs %d bytes, %d left", statSize, d.Len())
	}
	return Stat{
		Czxid:          d.Int64(),
		Mzxid:          d.Int64(),
		Ctime:          d.Int64(),
		Mtime:          d.Int64(),
		Version:        d.Int32(),
		Cversion:       d.Int32(),
		Aversion:       d.Int32(),
		EphemeralOwner: d.Int64(),
		DataLength:     d.Int32(),
		NumChildren:    d.Int32(),
		Pzxid:          d.Int64(),
	}
}

// ACLs reads jute's vector<ACL>; null and empty read as nil.
func (d *Decoder) ACLs() []ACL {
	n := d.length("vector<ACL>", minACL)
	if n <= 0 {
		return nil
	}
	acl := make([]ACL, 0, n)
	for range n {
		perms := Perms(d.Int32())
		scheme := d.String()
		acl = append(acl, ACL{Perms: perms, ID: ID{Scheme: scheme, ID: d.String()}})
	}
	if d.err != nil {
		return nil
	}
	return acl
}

// Record reads r.
func (d *Decoder) Record(r Record) { r.Decode(d) }

// A Record is one of the protocol's jute records: it writes its fields in
// the order ZooKeeper's zookeeper.jute declares them and reads them back.
// Decode leaves its errors in the Decoder.
type Record interface {
	Encode(e *Encoder)
	Decode(d *Decoder)
}

// Marshal appends r's encoding to b and returns the extended slice.
func Marshal(b []byte, r Record) []byte {
	e := NewEncoder(b)
	r.Encode(e)
	return e.Bytes()
}

// Unmarshal decodes r from all of b: bytes left over after r are an
// error. The error wraps ErrMalformed.
func Unmarshal(b []byte, r Record) error {
	d := NewDecoder(b)
	d.what = recordName(r)
	r.Decode(d)
	return d.finish()
}

// finish returns the Decoder's error, or one if bytes are left over.
func (d *Decoder) finish() error {
	if d.err == nil && d.Len() != 0 {
		d.failf("%d bytes left over", d.Len())
	}
	return d.err
}

// recordName names r's type for errors: "proto.CreateRequest" without the
// package, as "CreateRequest".
func recordName(r Record) string {
	s := fmt.Sprintf("%T", r)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return s[i+1:]
		}
	}
	return s
}
