// Package wire is the binary codec for the messages of package bft.
//
// # Format
//
// A message is its type byte (bft.MessageType) followed by its fields in
// declaration order:
//
//   - unsigned integers (views, sequence numbers, timestamps, client and
//     replica IDs) are uvarints (encoding/binary), and must be minimal: a
//     padded varint such as 0x80 0x00 is rejected, so that every message
//     has exactly one encoding;
//   - a request's flags (ReadOnly, Restart) are one uvarint of bits, as
//     bft.RequestFlags gives them, with no unknown bit set; a reply's
//     ReadOnly is one byte, 0 or 1;
//   - Nonce, in a request and a reply, is there only if ReadOnly is set
//     (right after the flags, or ReadOnly): it names a read, and an
//     ordered request or reply has none (it decodes as 0);
//   - byte slices are a uvarint length followed by the bytes;
//   - digests are their 32 bytes, with no length;
//   - lists are a uvarint element count followed by the elements, each
//     encoded like a message of its type but without a type byte (the
//     type is implied by the field).
//
// Nested messages (a PrePrepare's Batch, a ViewChange's Stable proof
// and claims, a NewView's ViewChanges and PrePrepares, a State's Stable
// proof, a Batch's Requests) are encoded recursively in that way; a
// State's Chunks are a list of digests. One exception: the pre-prepares
// of a new view are encoded without their Batch field (view, sequence
// number, time and digest only), since they never carry a batch. There
// is no framing: the transport delimits messages, and Decode takes
// exactly one.
//
// SignedBytes is the content a signature covers: the same encoding with
// the message's own Sig field written as empty. The leading type byte
// separates the domains of the message types. Signatures of nested
// messages stay in (a view change's signature covers the signatures of
// the checkpoint certificate it carries). Only checkpoints, view changes
// and new views are signed; pre-prepares, prepares and commits carry no
// signature (the link's MAC authenticates them).
//
// # Decoding untrusted input
//
// Decode is written for bytes from a Byzantine peer. It never panics, and
// it checks every length and count against the remaining input before
// allocating, and against Limits. A decoded message takes at most about
// 16 bytes of memory per input byte (a request with an empty op and
// authenticator is 5 bytes on the wire and 80 in memory), besides the
// input itself, which it keeps (see below). Every error wraps
// ErrMalformed and says where decoding stopped, for example
// "wire: prepare: digest: truncated".
//
// # Aliasing and ownership
//
// Decoded byte slices (Request.Op and Auth, Reply.Result, Notify.Payload,
// every Sig, Chunk.Data) ALIAS THE INPUT: Decode does not copy them. The caller
// hands the buffer over to the message and must not modify or reuse it
// for as long as the message, or anything taken from it, is in use; the
// core keeps requests in its log for a long time, so a driver should
// decode each frame from a buffer of its own, not from a reused read
// buffer. The aliased slices have their capacity clipped to their length,
// so appending to one of them never writes into the frame.
//
// Empty byte slices and empty lists decode as nil, never as non-nil
// empty slices, and the encoder writes nil and empty alike; so a decoded
// message re-encodes to exactly its input, and a message round-trips
// unchanged if it uses nil for its empty slices.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/rubin-go/rubin/bft"
)

// ErrMalformed is wrapped by every error Decode returns.
var ErrMalformed = errors.New("wire: malformed message")

// Limits bounds what Decode accepts. A zero field takes its value from
// DefaultLimits, so Limits{MaxReplicas: 4} changes only that bound.
type Limits struct {
	// MaxMessage bounds the length of the whole encoded message. It also
	// bounds Chunk.Data, which has no limit of its own.
	MaxMessage int
	// MaxOp bounds a request's operation, a reply's result and a
	// notification's payload.
	MaxOp int
	// MaxBatch bounds the number of requests in a pre-prepare.
	MaxBatch int
	// MaxSig bounds a signature's length.
	MaxSig int
	// MaxAuth bounds a request's authenticator.
	MaxAuth int
	// MaxList bounds the lists whose length depends on the log or on
	// the number of clients: a view change's claims, a new view's
	// pre-prepares and a state manifest's chunk digests.
	MaxList int
	// MaxReplicas bounds every replica ID (IDs must be below it) and the
	// certificates that hold at most one entry per replica: stable
	// checkpoint proofs and a new view's view changes. A driver that knows the cluster size n should
	// set it to n.
	MaxReplicas int
}

// DefaultLimits returns generous limits, suitable for a cluster of up to
// 1024 replicas.
func DefaultLimits() Limits {
	return Limits{
		MaxMessage:  16 << 20,
		MaxOp:       1 << 20,
		MaxBatch:    4096,
		MaxSig:      64,       // an Ed25519 signature
		MaxAuth:     32 << 10, // 32 bytes per replica for 1024 replicas
		MaxList:     1 << 16,
		MaxReplicas: 1024,
	}
}

// withDefaults fills the zero fields of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.MaxMessage, d.MaxMessage)
	set(&l.MaxOp, d.MaxOp)
	set(&l.MaxBatch, d.MaxBatch)
	set(&l.MaxSig, d.MaxSig)
	set(&l.MaxAuth, d.MaxAuth)
	set(&l.MaxList, d.MaxList)
	set(&l.MaxReplicas, d.MaxReplicas)
	return l
}

// The smallest encodings of list elements (no type byte): every uvarint
// and every length takes at least one byte, a digest 32. A list count is
// checked against remaining/min before the list is allocated.
const (
	minRequest    = 5                         // client, timestamp, flags, op length, auth length (a read's nonce besides)
	minReply      = 7                         // view, timestamp, client, replica, read-only, notes, result length (a read's nonce besides)
	minPPHeader   = 1 + 1 + 1 + 32            // view, seq, time, digest (no batch)
	minClaim      = 1 + 1 + 32                // view, seq, digest
	minCheckpoint = 1 + 32 + 1 + 1            // seq, state, replica, sig length
	minViewChange = 1 + 1 + 1 + 1 + 1 + 1 + 1 // view, stable seq, three counts, replica, sig length
)

// Append appends the encoding of m to b and returns the extended slice.
// It panics if m is nil, a nil pointer, or not one of package bft's
// message types, or if a new view's pre-prepare carries a batch or an
// ordered request or reply a nonce (the format has no place for either):
// that is a programming error, not an input error.
func Append(b []byte, m bft.Message) []byte {
	return appendMessage(b, m, true)
}

// SignedBytes appends to b the bytes a signature over m covers: m's
// encoding with its own Sig field written as empty. For a message type
// without a Sig field it is the plain encoding.
func SignedBytes(b []byte, m bft.Message) []byte {
	return appendMessage(b, m, false)
}

func appendMessage(b []byte, m bft.Message, sig bool) []byte {
	switch m := m.(type) {
	case *bft.Request:
		b = append(b, byte(bft.TypeRequest))
		return appendRequest(b, m)
	case *bft.Reply:
		b = append(b, byte(bft.TypeReply))
		return appendReply(b, m)
	case *bft.PrePrepare:
		b = append(b, byte(bft.TypePrePrepare))
		return appendPrePrepare(b, m)
	case *bft.Prepare:
		b = append(b, byte(bft.TypePrepare))
		b = binary.AppendUvarint(b, m.View)
		b = binary.AppendUvarint(b, m.Seq)
		b = append(b, m.Digest[:]...)
		return binary.AppendUvarint(b, uint64(m.Replica))
	case *bft.Commit:
		b = append(b, byte(bft.TypeCommit))
		b = binary.AppendUvarint(b, m.View)
		b = binary.AppendUvarint(b, m.Seq)
		b = append(b, m.Digest[:]...)
		return binary.AppendUvarint(b, uint64(m.Replica))
	case *bft.Checkpoint:
		b = append(b, byte(bft.TypeCheckpoint))
		return appendCheckpoint(b, m, sig)
	case *bft.ViewChange:
		b = append(b, byte(bft.TypeViewChange))
		return appendViewChange(b, m, sig)
	case *bft.NewView:
		b = append(b, byte(bft.TypeNewView))
		b = binary.AppendUvarint(b, m.View)
		b = binary.AppendUvarint(b, uint64(len(m.ViewChanges)))
		for i := range m.ViewChanges {
			b = appendViewChange(b, &m.ViewChanges[i], true)
		}
		b = binary.AppendUvarint(b, uint64(len(m.PrePrepares)))
		for i := range m.PrePrepares {
			b = appendPPHeader(b, &m.PrePrepares[i])
		}
		b = binary.AppendUvarint(b, uint64(m.Replica))
		return appendSig(b, m.Sig, sig)
	case *bft.FetchState:
		b = append(b, byte(bft.TypeFetchState))
		b = binary.AppendUvarint(b, m.Seq)
		return binary.AppendUvarint(b, uint64(m.Replica))
	case *bft.State:
		b = append(b, byte(bft.TypeState))
		b = binary.AppendUvarint(b, m.Seq)
		b = appendCheckpoints(b, m.Stable)
		b = binary.AppendUvarint(b, m.ChunkSize)
		b = binary.AppendUvarint(b, m.Length)
		b = binary.AppendUvarint(b, uint64(len(m.Chunks)))
		for i := range m.Chunks {
			b = append(b, m.Chunks[i][:]...)
		}
		return binary.AppendUvarint(b, uint64(m.Replica))
	case *bft.FetchChunk:
		b = append(b, byte(bft.TypeFetchChunk))
		b = binary.AppendUvarint(b, m.Seq)
		b = binary.AppendUvarint(b, m.Index)
		return binary.AppendUvarint(b, uint64(m.Replica))
	case *bft.Chunk:
		b = append(b, byte(bft.TypeChunk))
		b = binary.AppendUvarint(b, m.Seq)
		b = binary.AppendUvarint(b, m.Index)
		b = appendBytes(b, m.Data)
		return binary.AppendUvarint(b, uint64(m.Replica))
	case *bft.FetchBatch:
		b = append(b, byte(bft.TypeFetchBatch))
		b = binary.AppendUvarint(b, m.Seq)
		b = append(b, m.Digest[:]...)
		return binary.AppendUvarint(b, uint64(m.Replica))
	case *bft.Batch:
		b = append(b, byte(bft.TypeBatch))
		b = binary.AppendUvarint(b, m.Seq)
		b = binary.AppendUvarint(b, m.Time)
		b = append(b, m.Digest[:]...)
		b = binary.AppendUvarint(b, uint64(len(m.Requests)))
		for i := range m.Requests {
			b = appendRequest(b, &m.Requests[i])
		}
		return binary.AppendUvarint(b, uint64(m.Replica))
	case *bft.Notify:
		b = append(b, byte(bft.TypeNotify))
		b = binary.AppendUvarint(b, uint64(m.Client))
		b = binary.AppendUvarint(b, m.Number)
		b = binary.AppendUvarint(b, m.Oldest)
		b = binary.AppendUvarint(b, uint64(m.Replica))
		return appendBytes(b, m.Payload)
	case *bft.FetchNotes:
		b = append(b, byte(bft.TypeFetchNotes))
		b = binary.AppendUvarint(b, uint64(m.Client))
		return binary.AppendUvarint(b, m.From)
	}
	panic(fmt.Sprintf("wire: cannot encode message of type %T", m))
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// appendSig writes a Sig field, or an empty one for SignedBytes.
func appendSig(b, s []byte, sig bool) []byte {
	if !sig {
		return append(b, 0)
	}
	return appendBytes(b, s)
}

// appendNonce writes a read's nonce. An ordered request or reply has no
// place for one in the format: one that carries a nonce panics.
func appendNonce(b []byte, what string, readOnly bool, nonce uint64) []byte {
	if readOnly {
		return binary.AppendUvarint(b, nonce)
	}
	if nonce != 0 {
		panic(fmt.Sprintf("wire: ordered %s carries nonce %d", what, nonce))
	}
	return b
}

func appendRequest(b []byte, r *bft.Request) []byte {
	b = binary.AppendUvarint(b, uint64(r.Client))
	b = binary.AppendUvarint(b, r.Timestamp)
	b = binary.AppendUvarint(b, bft.RequestFlags(r))
	b = appendNonce(b, "request", r.ReadOnly, r.Nonce)
	b = appendBytes(b, r.Op)
	return appendBytes(b, r.Auth)
}

func appendReply(b []byte, r *bft.Reply) []byte {
	b = binary.AppendUvarint(b, r.View)
	b = binary.AppendUvarint(b, r.Timestamp)
	b = binary.AppendUvarint(b, uint64(r.Client))
	b = binary.AppendUvarint(b, uint64(r.Replica))
	b = appendBool(b, r.ReadOnly)
	b = appendNonce(b, "reply", r.ReadOnly, r.Nonce)
	b = binary.AppendUvarint(b, r.Notes)
	return appendBytes(b, r.Result)
}

func appendPrePrepare(b []byte, m *bft.PrePrepare) []byte {
	b = binary.AppendUvarint(b, m.View)
	b = binary.AppendUvarint(b, m.Seq)
	b = binary.AppendUvarint(b, m.Time)
	b = append(b, m.Digest[:]...)
	b = binary.AppendUvarint(b, uint64(len(m.Batch)))
	for i := range m.Batch {
		b = appendRequest(b, &m.Batch[i])
	}
	return b
}

// appendPPHeader writes a pre-prepare without its batch, as new views
// carry it.
func appendPPHeader(b []byte, m *bft.PrePrepare) []byte {
	if len(m.Batch) != 0 {
		panic(fmt.Sprintf("wire: pre-prepare for seq %d in a new view carries a batch", m.Seq))
	}
	b = binary.AppendUvarint(b, m.View)
	b = binary.AppendUvarint(b, m.Seq)
	b = binary.AppendUvarint(b, m.Time)
	return append(b, m.Digest[:]...)
}

func appendClaims(b []byte, cs []bft.Claim) []byte {
	b = binary.AppendUvarint(b, uint64(len(cs)))
	for i := range cs {
		b = binary.AppendUvarint(b, cs[i].View)
		b = binary.AppendUvarint(b, cs[i].Seq)
		b = append(b, cs[i].Digest[:]...)
	}
	return b
}

func appendCheckpoint(b []byte, m *bft.Checkpoint, sig bool) []byte {
	b = binary.AppendUvarint(b, m.Seq)
	b = append(b, m.State[:]...)
	b = binary.AppendUvarint(b, uint64(m.Replica))
	return appendSig(b, m.Sig, sig)
}

func appendCheckpoints(b []byte, cs []bft.Checkpoint) []byte {
	b = binary.AppendUvarint(b, uint64(len(cs)))
	for i := range cs {
		b = appendCheckpoint(b, &cs[i], true)
	}
	return b
}

func appendViewChange(b []byte, m *bft.ViewChange, sig bool) []byte {
	b = binary.AppendUvarint(b, m.View)
	b = binary.AppendUvarint(b, m.StableSeq)
	b = appendCheckpoints(b, m.Stable)
	b = appendClaims(b, m.Prepared)
	b = appendClaims(b, m.PrePrepared)
	b = binary.AppendUvarint(b, uint64(m.Replica))
	return appendSig(b, m.Sig, sig)
}

// Decode decodes one message with DefaultLimits. The message's byte
// slices alias b: see the package documentation on ownership.
func Decode(b []byte) (bft.Message, error) {
	return decode(b, defaultLimits)
}

// defaultLimits saves Decode from filling in the defaults on every call.
var defaultLimits = DefaultLimits()

// DecodeLimits decodes one message, which must fill b exactly, within lim
// (zero fields default). The message's byte slices alias b.
func DecodeLimits(b []byte, lim Limits) (bft.Message, error) {
	return decode(b, lim.withDefaults())
}

func decode(b []byte, lim Limits) (bft.Message, error) {
	if len(b) > lim.MaxMessage {
		return nil, &malformed{msg: fmt.Sprintf("%d bytes exceed the limit of %d", len(b), lim.MaxMessage)}
	}
	if len(b) == 0 {
		return nil, &malformed{msg: "empty input"}
	}
	d := decoder{b: b, off: 1, lim: lim}
	var (
		m    bft.Message
		name string
		err  error
	)
	switch t := bft.MessageType(b[0]); t {
	case bft.TypeRequest:
		r := new(bft.Request)
		m, name, err = r, "request", d.request(r)
	case bft.TypeReply:
		r := new(bft.Reply)
		m, name, err = r, "reply", d.reply(r)
	case bft.TypePrePrepare:
		p := new(bft.PrePrepare)
		m, name, err = p, "pre-prepare", d.prePrepare(p)
	case bft.TypePrepare:
		p := new(bft.Prepare)
		m, name, err = p, "prepare", d.prepare(p)
	case bft.TypeCommit:
		c := new(bft.Commit)
		m, name, err = c, "commit", d.commit(c)
	case bft.TypeCheckpoint:
		c := new(bft.Checkpoint)
		m, name, err = c, "checkpoint", d.checkpoint(c)
	case bft.TypeViewChange:
		v := new(bft.ViewChange)
		m, name, err = v, "view-change", d.viewChange(v)
	case bft.TypeNewView:
		v := new(bft.NewView)
		m, name, err = v, "new-view", d.newView(v)
	case bft.TypeFetchState:
		f := new(bft.FetchState)
		m, name, err = f, "fetch-state", d.fetchState(f)
	case bft.TypeState:
		s := new(bft.State)
		m, name, err = s, "state", d.state(s)
	case bft.TypeFetchChunk:
		f := new(bft.FetchChunk)
		m, name, err = f, "fetch-chunk", d.fetchChunk(f)
	case bft.TypeChunk:
		c := new(bft.Chunk)
		m, name, err = c, "chunk", d.chunk(c)
	case bft.TypeFetchBatch:
		f := new(bft.FetchBatch)
		m, name, err = f, "fetch-batch", d.fetchBatch(f)
	case bft.TypeBatch:
		bt := new(bft.Batch)
		m, name, err = bt, "batch", d.batch(bt)
	case bft.TypeNotify:
		nt := new(bft.Notify)
		m, name, err = nt, "notify", d.notify(nt)
	case bft.TypeFetchNotes:
		f := new(bft.FetchNotes)
		m, name, err = f, "fetch-notes", d.fetchNotes(f)
	default:
		return nil, &malformed{msg: fmt.Sprintf("unknown message type %d", t)}
	}
	if err == nil && d.off != len(b) {
		err = &malformed{msg: fmt.Sprintf("%d trailing bytes", len(b)-d.off)}
	}
	if err != nil {
		return nil, wrap(err, name)
	}
	return m, nil
}

// malformed is a decoding error: msg is what was wrong, path where.
type malformed struct {
	path string // "prepared[2]: pre-prepare: digest"
	msg  string // "truncated"
}

func (e *malformed) Error() string {
	if e.path == "" {
		return "wire: " + e.msg
	}
	return "wire: " + e.path + ": " + e.msg
}

func (e *malformed) Unwrap() error { return ErrMalformed }

// wrap prefixes err's path with an outer field name. It runs only on the
// error path, so building strings here costs nothing when decoding works.
func wrap(err error, name string) error {
	e := err.(*malformed)
	if e.path == "" {
		e.path = name
	} else {
		e.path = name + ": " + e.path
	}
	return e
}

func wrapIndex(err error, name string, i int) error {
	return wrap(err, fmt.Sprintf("%s[%d]", name, i))
}

const errTruncated = "truncated"

// decoder reads from b at off. Its methods take the name of the field
// they read, for errors; the names are constants, so the success path
// does not allocate for them.
type decoder struct {
	b   []byte
	off int
	lim Limits
}

func (d *decoder) fail(field, msg string) error {
	return &malformed{path: field, msg: msg}
}

func (d *decoder) uvarint(field string) (uint64, error) {
	// Fast path: one byte, the common case for small values.
	if d.off < len(d.b) && d.b[d.off] < 0x80 {
		v := uint64(d.b[d.off])
		d.off++
		return v, nil
	}
	v, n := binary.Uvarint(d.b[d.off:])
	switch {
	case n == 0:
		return 0, d.fail(field, errTruncated)
	case n < 0:
		return 0, d.fail(field, "varint overflows 64 bits")
	case d.b[d.off+n-1] == 0:
		// A last byte of zero adds nothing: the encoding is padded.
		// Reject it so that every message has one encoding.
		return 0, d.fail(field, "non-minimal varint")
	}
	d.off += n
	return v, nil
}

// bool reads a byte that must be 0 or 1.
func (d *decoder) bool(field string) (bool, error) {
	if d.off >= len(d.b) {
		return false, d.fail(field, errTruncated)
	}
	v := d.b[d.off]
	if v > 1 {
		return false, d.fail(field, fmt.Sprintf("boolean %d", v))
	}
	d.off++
	return v == 1, nil
}

func (d *decoder) replica(field string) (bft.ReplicaID, error) {
	v, err := d.uvarint(field)
	if err != nil {
		return 0, err
	}
	if v >= uint64(d.lim.MaxReplicas) || v > math.MaxUint32 {
		return 0, d.fail(field, fmt.Sprintf("replica %d out of range (limit %d)", v, d.lim.MaxReplicas))
	}
	return bft.ReplicaID(v), nil
}

func (d *decoder) digest(field string, dst *bft.Digest) error {
	if len(d.b)-d.off < len(dst) {
		return d.fail(field, errTruncated)
	}
	d.off += copy(dst[:], d.b[d.off:])
	return nil
}

// bytes reads a length-prefixed byte slice of at most max bytes. It
// aliases the input, with its capacity clipped; empty is nil.
func (d *decoder) bytes(field string, max int) ([]byte, error) {
	n, err := d.uvarint(field)
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, d.fail(field, fmt.Sprintf("length %d exceeds the limit of %d", n, max))
	}
	if n > uint64(len(d.b)-d.off) {
		return nil, d.fail(field, fmt.Sprintf("length %d: truncated", n))
	}
	if n == 0 {
		return nil, nil
	}
	end := d.off + int(n)
	p := d.b[d.off:end:end]
	d.off = end
	return p, nil
}

// count reads a list's element count, checking it against max and
// against the elements the remaining input can hold at minSize bytes
// each, before the caller allocates the list.
func (d *decoder) count(field string, max, minSize int) (int, error) {
	n, err := d.uvarint(field)
	if err != nil {
		return 0, err
	}
	if n > uint64(max) {
		return 0, d.fail(field, fmt.Sprintf("count %d exceeds the limit of %d", n, max))
	}
	if n > uint64((len(d.b)-d.off)/minSize) {
		return 0, d.fail(field, fmt.Sprintf("count %d: truncated", n))
	}
	return int(n), nil
}

func (d *decoder) request(r *bft.Request) (err error) {
	var c uint64
	if c, err = d.uvarint("client"); err != nil {
		return err
	}
	r.Client = bft.ClientID(c)
	if r.Timestamp, err = d.uvarint("timestamp"); err != nil {
		return err
	}
	var f uint64
	if f, err = d.uvarint("flags"); err != nil {
		return err
	}
	if !bft.SetRequestFlags(r, f) {
		return d.fail("flags", fmt.Sprintf("unknown flags %#x", f))
	}
	if r.ReadOnly {
		if r.Nonce, err = d.uvarint("nonce"); err != nil {
			return err
		}
	}
	if r.Op, err = d.bytes("op", d.lim.MaxOp); err != nil {
		return err
	}
	r.Auth, err = d.bytes("auth", d.lim.MaxAuth)
	return err
}

func (d *decoder) reply(r *bft.Reply) (err error) {
	if r.View, err = d.uvarint("view"); err != nil {
		return err
	}
	if r.Timestamp, err = d.uvarint("timestamp"); err != nil {
		return err
	}
	var c uint64
	if c, err = d.uvarint("client"); err != nil {
		return err
	}
	r.Client = bft.ClientID(c)
	if r.Replica, err = d.replica("replica"); err != nil {
		return err
	}
	if r.ReadOnly, err = d.bool("read-only"); err != nil {
		return err
	}
	if r.ReadOnly {
		if r.Nonce, err = d.uvarint("nonce"); err != nil {
			return err
		}
	}
	if r.Notes, err = d.uvarint("notes"); err != nil {
		return err
	}
	r.Result, err = d.bytes("result", d.lim.MaxOp)
	return err
}

func (d *decoder) prePrepare(m *bft.PrePrepare) (err error) {
	if err = d.ppStart(m); err != nil {
		return err
	}
	m.Batch, err = list(d, "batch", d.lim.MaxBatch, minRequest, d.request)
	return err
}

// viewSeqDigest reads the view, sequence number and digest that open a
// prepare and a commit.
func (d *decoder) viewSeqDigest(view, seq *uint64, dg *bft.Digest) (err error) {
	if *view, err = d.uvarint("view"); err != nil {
		return err
	}
	return d.seqDigest(seq, dg)
}

// seqDigest reads a sequence number and a digest.
func (d *decoder) seqDigest(seq *uint64, dg *bft.Digest) (err error) {
	if *seq, err = d.uvarint("seq"); err != nil {
		return err
	}
	return d.digest("digest", dg)
}

// ppStart reads the view, sequence number, time and digest that open a
// pre-prepare.
func (d *decoder) ppStart(m *bft.PrePrepare) (err error) {
	if m.View, err = d.uvarint("view"); err != nil {
		return err
	}
	if m.Seq, err = d.uvarint("seq"); err != nil {
		return err
	}
	if m.Time, err = d.uvarint("time"); err != nil {
		return err
	}
	return d.digest("digest", &m.Digest)
}

// ppHeader decodes a pre-prepare without its batch field.
func (d *decoder) ppHeader(m *bft.PrePrepare) error {
	return d.ppStart(m)
}

func (d *decoder) prepare(m *bft.Prepare) (err error) {
	if err = d.viewSeqDigest(&m.View, &m.Seq, &m.Digest); err != nil {
		return err
	}
	m.Replica, err = d.replica("replica")
	return err
}

func (d *decoder) claim(c *bft.Claim) error {
	return d.viewSeqDigest(&c.View, &c.Seq, &c.Digest)
}

func (d *decoder) commit(m *bft.Commit) (err error) {
	if err = d.viewSeqDigest(&m.View, &m.Seq, &m.Digest); err != nil {
		return err
	}
	m.Replica, err = d.replica("replica")
	return err
}

func (d *decoder) checkpoint(m *bft.Checkpoint) (err error) {
	if m.Seq, err = d.uvarint("seq"); err != nil {
		return err
	}
	if err = d.digest("state", &m.State); err != nil {
		return err
	}
	if m.Replica, err = d.replica("replica"); err != nil {
		return err
	}
	m.Sig, err = d.bytes("sig", d.lim.MaxSig)
	return err
}

func (d *decoder) checkpoints(field string) ([]bft.Checkpoint, error) {
	return list(d, field, d.lim.MaxReplicas, minCheckpoint, d.checkpoint)
}

// list decodes a list: a count, at most max and at most what the input
// left holds at minSize bytes an element, checked before the list is
// allocated, then each element with one. An empty list is nil.
func list[T any](d *decoder, field string, max, minSize int, one func(*T) error) ([]T, error) {
	n, err := d.count(field, max, minSize)
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([]T, n)
	for i := range out {
		if err := one(&out[i]); err != nil {
			return nil, wrapIndex(err, field, i)
		}
	}
	return out, nil
}

func (d *decoder) viewChange(m *bft.ViewChange) (err error) {
	if m.View, err = d.uvarint("view"); err != nil {
		return err
	}
	if m.StableSeq, err = d.uvarint("stable-seq"); err != nil {
		return err
	}
	if m.Stable, err = d.checkpoints("stable"); err != nil {
		return err
	}
	if m.Prepared, err = list(d, "prepared", d.lim.MaxList, minClaim, d.claim); err != nil {
		return err
	}
	if m.PrePrepared, err = list(d, "pre-prepared", d.lim.MaxList, minClaim, d.claim); err != nil {
		return err
	}
	if m.Replica, err = d.replica("replica"); err != nil {
		return err
	}
	m.Sig, err = d.bytes("sig", d.lim.MaxSig)
	return err
}

func (d *decoder) newView(m *bft.NewView) (err error) {
	if m.View, err = d.uvarint("view"); err != nil {
		return err
	}
	if m.ViewChanges, err = list(d, "view-changes", d.lim.MaxReplicas, minViewChange, d.viewChange); err != nil {
		return err
	}
	if m.PrePrepares, err = list(d, "pre-prepares", d.lim.MaxList, minPPHeader, d.ppHeader); err != nil {
		return err
	}
	if m.Replica, err = d.replica("replica"); err != nil {
		return err
	}
	m.Sig, err = d.bytes("sig", d.lim.MaxSig)
	return err
}

func (d *decoder) fetchState(m *bft.FetchState) (err error) {
	if m.Seq, err = d.uvarint("seq"); err != nil {
		return err
	}
	m.Replica, err = d.replica("replica")
	return err
}

func (d *decoder) state(m *bft.State) (err error) {
	if m.Seq, err = d.uvarint("seq"); err != nil {
		return err
	}
	if m.Stable, err = d.checkpoints("stable"); err != nil {
		return err
	}
	if m.ChunkSize, err = d.uvarint("chunk-size"); err != nil {
		return err
	}
	if m.Length, err = d.uvarint("length"); err != nil {
		return err
	}
	m.Chunks, err = list(d, "chunks", d.lim.MaxList, len(bft.Digest{}), func(c *bft.Digest) error { return d.digest("digest", c) })
	if err != nil {
		return err
	}
	m.Replica, err = d.replica("replica")
	return err
}

func (d *decoder) fetchChunk(m *bft.FetchChunk) (err error) {
	if m.Seq, err = d.uvarint("seq"); err != nil {
		return err
	}
	if m.Index, err = d.uvarint("index"); err != nil {
		return err
	}
	m.Replica, err = d.replica("replica")
	return err
}

func (d *decoder) chunk(m *bft.Chunk) (err error) {
	if m.Seq, err = d.uvarint("seq"); err != nil {
		return err
	}
	if m.Index, err = d.uvarint("index"); err != nil {
		return err
	}
	// A chunk is bounded only by the message limit, checked above.
	if m.Data, err = d.bytes("data", d.lim.MaxMessage); err != nil {
		return err
	}
	m.Replica, err = d.replica("replica")
	return err
}

func (d *decoder) fetchBatch(m *bft.FetchBatch) (err error) {
	if err = d.seqDigest(&m.Seq, &m.Digest); err != nil {
		return err
	}
	m.Replica, err = d.replica("replica")
	return err
}

func (d *decoder) batch(m *bft.Batch) (err error) {
	if m.Seq, err = d.uvarint("seq"); err != nil {
		return err
	}
	if m.Time, err = d.uvarint("time"); err != nil {
		return err
	}
	if err = d.digest("digest", &m.Digest); err != nil {
		return err
	}
	if m.Requests, err = list(d, "requests", d.lim.MaxBatch, minRequest, d.request); err != nil {
		return err
	}
	m.Replica, err = d.replica("replica")
	return err
}

func (d *decoder) notify(m *bft.Notify) (err error) {
	var c uint64
	if c, err = d.uvarint("client"); err != nil {
		return err
	}
	m.Client = bft.ClientID(c)
	if m.Number, err = d.uvarint("number"); err != nil {
		return err
	}
	if m.Oldest, err = d.uvarint("oldest"); err != nil {
		return err
	}
	if m.Replica, err = d.replica("replica"); err != nil {
		return err
	}
	// A payload is an application's, like a result.
	m.Payload, err = d.bytes("payload", d.lim.MaxOp)
	return err
}

func (d *decoder) fetchNotes(m *bft.FetchNotes) (err error) {
	var c uint64
	if c, err = d.uvarint("client"); err != nil {
		return err
	}
	m.Client = bft.ClientID(c)
	m.From, err = d.uvarint("from")
	return err
}
