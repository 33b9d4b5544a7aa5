package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rubin-go/rubin/bft"
)

func digest(b byte) bft.Digest {
	var d bft.Digest
	for i := range d {
		d[i] = b + byte(i)
	}
	return d
}

func sig(b byte) []byte { return bytes.Repeat([]byte{b}, 64) }

func batch(n, opSize int) []bft.Request {
	rs := make([]bft.Request, n)
	for i := range rs {
		rs[i] = bft.Request{
			Client:    bft.ClientID(1000 + i),
			Timestamp: uint64(1<<40 + i),
			Op:        bytes.Repeat([]byte{byte(i)}, opSize),
			Auth:      bytes.Repeat([]byte{0xa0 + byte(i)}, 4*16),
		}
	}
	return rs
}

func prePrepare(view, seq uint64, n int) bft.PrePrepare {
	b := batch(n, 100)
	return bft.PrePrepare{View: view, Seq: seq, Time: 1<<60 + seq, Digest: bft.BatchDigest(1<<60+seq, b), Batch: b}
}

// ppHeader is a pre-prepare as new views carry it: no batch.
func ppHeader(view, seq uint64, n int) bft.PrePrepare {
	pp := prePrepare(view, seq, n)
	pp.Batch = nil
	return pp
}

func checkpoints() []bft.Checkpoint {
	return []bft.Checkpoint{
		{Seq: 128, State: digest(7), Replica: 0, Sig: sig(2)},
		{Seq: 128, State: digest(7), Replica: 2, Sig: sig(3)},
		{Seq: 128, State: digest(7), Replica: 3, Sig: sig(4)},
	}
}

func viewChange(r bft.ReplicaID) bft.ViewChange {
	return bft.ViewChange{
		View:      5,
		StableSeq: 128,
		Stable:    checkpoints(),
		Prepared: []bft.Claim{
			{View: 4, Seq: 129, Digest: digest(9)},
			{View: 1 << 40, Seq: 130}, // a zero digest
		},
		PrePrepared: []bft.Claim{
			{View: 4, Seq: 129, Digest: digest(9)},
			{View: 2, Seq: 129, Digest: digest(10)},
			{View: 4, Seq: 131, Digest: digest(11)},
		},
		Replica: r,
		Sig:     sig(8),
	}
}

// samples holds one or more messages of every type, with nil for every
// empty slice, so that they round-trip exactly.
func samples() []bft.Message {
	pp := prePrepare(3, 77, 3)
	vc := viewChange(1)
	return []bft.Message{
		&bft.Request{},
		&bft.Request{Client: 42, Timestamp: 1e12, Op: []byte("put x 1"), Auth: bytes.Repeat([]byte{9}, 64)},
		&bft.Request{Client: ^bft.ClientID(0), Timestamp: ^uint64(0), Op: []byte{0}},
		&bft.Request{Client: 7, Timestamp: 3, ReadOnly: true, Op: []byte("get x"), Auth: bytes.Repeat([]byte{8}, 64)},
		&bft.Request{Client: 7, Timestamp: 3, ReadOnly: true, Nonce: 1 << 33, Op: []byte("get x"), Auth: bytes.Repeat([]byte{8}, 64)},
		&bft.Request{Client: 7, Timestamp: 4, Restart: true, Op: []byte("put x"), Auth: bytes.Repeat([]byte{8}, 64)},
		&bft.Reply{},
		&bft.Reply{View: 2, Timestamp: 99, Client: 42, Replica: 3, Result: []byte("ok")},
		&bft.Reply{View: 2, Timestamp: 99, Client: 42, Replica: 3, ReadOnly: true, Notes: 7, Result: []byte("x=1")},
		&bft.Reply{View: 2, Timestamp: 99, Client: 42, Replica: 3, ReadOnly: true, Nonce: 300, Notes: 7, Result: []byte("x=1")},
		&bft.Notify{},
		&bft.Notify{Client: 42, Number: 9, Oldest: 3, Replica: 2, Payload: []byte("fired")},
		&bft.FetchNotes{},
		&bft.FetchNotes{Client: 42, From: 1 << 40},
		&bft.PrePrepare{},
		&pp,
		&bft.Prepare{},
		&bft.Prepare{View: 3, Seq: 77, Digest: digest(1), Replica: 2},
		&bft.Commit{},
		&bft.Commit{View: 1 << 62, Seq: 300, Digest: digest(2), Replica: 1},
		&bft.Checkpoint{},
		&checkpoints()[1],
		&bft.ViewChange{},
		&vc,
		&bft.NewView{},
		&bft.NewView{
			View:        5,
			ViewChanges: []bft.ViewChange{viewChange(1), viewChange(2), {View: 5, Replica: 3}},
			PrePrepares: []bft.PrePrepare{ppHeader(5, 129, 2), {View: 5, Seq: 130, Digest: bft.BatchDigest(0, nil)}},
			Replica:     1,
			Sig:         sig(4),
		},
		&bft.FetchState{},
		&bft.FetchState{Seq: 1000, Replica: 3},
		&bft.State{},
		&bft.State{
			Seq:       256,
			Stable:    checkpoints(),
			ChunkSize: 1 << 20,
			Length:    3<<20 - 5,
			Chunks:    []bft.Digest{{1}, {2}, {3, 4}},
			Replica:   2,
		},
		&bft.FetchChunk{},
		&bft.FetchChunk{Seq: 256, Index: 2, Replica: 3},
		&bft.Chunk{},
		&bft.Chunk{Seq: 256, Index: 1, Data: bytes.Repeat([]byte("state"), 1000), Replica: 1},
		&bft.FetchBatch{},
		&bft.FetchBatch{Seq: 129, Digest: digest(9), Replica: 2},
		&bft.Batch{},
		&bft.Batch{Seq: 129, Time: pp.Time, Digest: pp.Digest, Requests: pp.Batch, Replica: 3},
	}
}

func TestRoundTrip(t *testing.T) {
	seen := map[bft.MessageType]bool{}
	for _, m := range samples() {
		seen[m.Type()] = true
		b := Append(nil, m)
		if b[0] != byte(m.Type()) {
			t.Errorf("%T: type byte %d, want %d", m, b[0], m.Type())
		}
		got, err := Decode(b)
		if err != nil {
			t.Errorf("Decode(Append(%T)): %v", m, err)
			continue
		}
		if diff := cmp.Diff(m, got); diff != "" {
			t.Errorf("%T round trip (-want +got):\n%s", m, diff)
		}
		if again := Append(nil, got); !bytes.Equal(again, b) {
			t.Errorf("%T: re-encoding differs", m)
		}
		// Appending extends b and leaves its prefix alone.
		prefix := []byte("prefix")
		if ext := Append(prefix, m); !bytes.Equal(ext[:6], []byte("prefix")) || !bytes.Equal(ext[6:], b) {
			t.Errorf("%T: Append to a prefix is wrong", m)
		}
	}
	for typ := bft.TypeRequest; typ <= bft.TypeChunk; typ++ {
		if !seen[typ] {
			t.Errorf("no sample of message type %d", typ)
		}
	}
	for _, typ := range []bft.MessageType{bft.TypeFetchChunk, bft.TypeChunk} {
		if !seen[typ] {
			t.Errorf("no sample of message type %d", typ)
		}
	}
}

// TestEmptyIsNil checks the normalization: empty and nil encode alike,
// and both decode as nil.
func TestEmptyIsNil(t *testing.T) {
	empty := []bft.Message{
		&bft.Request{Op: []byte{}, Auth: []byte{}},
		&bft.Reply{Result: []byte{}},
		&bft.PrePrepare{Batch: []bft.Request{}},
		&bft.Checkpoint{Sig: []byte{}},
		&bft.ViewChange{Stable: []bft.Checkpoint{}, Prepared: []bft.Claim{}, PrePrepared: []bft.Claim{}, Sig: []byte{}},
		&bft.NewView{ViewChanges: []bft.ViewChange{}, PrePrepares: []bft.PrePrepare{}, Sig: []byte{}},
		&bft.State{Stable: []bft.Checkpoint{}, Chunks: []bft.Digest{}},
		&bft.Chunk{Data: []byte{}},
		&bft.Batch{Requests: []bft.Request{}},
	}
	nilled := []bft.Message{
		&bft.Request{},
		&bft.Reply{},
		&bft.PrePrepare{},
		&bft.Checkpoint{},
		&bft.ViewChange{},
		&bft.NewView{},
		&bft.State{},
		&bft.Chunk{},
		&bft.Batch{},
	}
	for i, m := range empty {
		b := Append(nil, m)
		if want := Append(nil, nilled[i]); !bytes.Equal(b, want) {
			t.Errorf("%T: empty encodes as %x, nil as %x", m, b, want)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		// Exactly the nil form: cmp.Diff tells nil from empty.
		if diff := cmp.Diff(nilled[i], got); diff != "" {
			t.Errorf("%T: decoded empties are not nil (-want +got):\n%s", m, diff)
		}
		// And equal to the input once nil and empty are equated.
		if diff := cmp.Diff(m, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%T (-want +got):\n%s", m, diff)
		}
	}
}

func TestSignedBytes(t *testing.T) {
	p := &checkpoints()[1]
	unsigned := *p
	unsigned.Sig = nil
	if got, want := SignedBytes(nil, p), Append(nil, &unsigned); !bytes.Equal(got, want) {
		t.Errorf("SignedBytes(checkpoint) = %x, want the encoding without its sig %x", got, want)
	}
	// Only the outer signature is left out: a view change's signature
	// covers the certificate it forwards, signatures included, and its
	// claims.
	vc := viewChange(1)
	sb := SignedBytes(nil, &vc)
	vc2 := viewChange(1)
	vc2.Stable[0].Sig = sig(0xee)
	if bytes.Equal(sb, SignedBytes(nil, &vc2)) {
		t.Error("a view change's signed bytes do not cover its checkpoints' signatures")
	}
	vc2 = viewChange(1)
	vc2.PrePrepared[1].View++
	if bytes.Equal(sb, SignedBytes(nil, &vc2)) {
		t.Error("a view change's signed bytes do not cover its Q claims")
	}
	vc2 = viewChange(1)
	vc2.Sig = sig(0xee)
	if !bytes.Equal(sb, SignedBytes(nil, &vc2)) {
		t.Error("a view change's signed bytes depend on its own signature")
	}
	// A prepare and a commit with the same fields sign different bytes.
	c := &bft.Commit{View: 3, Seq: 77, Digest: digest(1), Replica: 2}
	pr := &bft.Prepare{View: 3, Seq: 77, Digest: digest(1), Replica: 2}
	if bytes.Equal(SignedBytes(nil, c), SignedBytes(nil, pr)) {
		t.Error("the type byte does not separate prepare from commit")
	}
	// Unsigned types sign their plain encoding.
	if !bytes.Equal(SignedBytes(nil, c), Append(nil, c)) {
		t.Error("SignedBytes(commit) differs from its encoding")
	}
}

func TestDecodeAliases(t *testing.T) {
	r := &bft.Request{Client: 1, Timestamp: 2, Op: []byte("operation"), Auth: []byte("authauthauth")}
	b := Append(nil, r)
	m, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	got := m.(*bft.Request)
	if &got.Op[0] != &b[5] {
		t.Error("Op does not alias the input")
	}
	if cap(got.Op) != len(got.Op) {
		t.Errorf("Op has capacity %d beyond its length %d: appending would overwrite the frame", cap(got.Op), len(got.Op))
	}
	_ = append(got.Op, 'X')
	if !bytes.Equal(got.Auth, r.Auth) {
		t.Error("appending to Op overwrote Auth")
	}
}

func TestLimitsDefaults(t *testing.T) {
	got := Limits{MaxReplicas: 4}.withDefaults()
	want := DefaultLimits()
	want.MaxReplicas = 4
	if got != want {
		t.Errorf("Limits{MaxReplicas: 4} = %+v, want %+v", got, want)
	}
}

func TestEncodePanicsOnForeignType(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Append(nil message) did not panic")
		}
	}()
	Append(nil, nil)
}

// A pre-prepare in a new view has no place for a batch in the format:
// encoding one that carries a batch is a programming error, not a silent
// loss.
func TestEncodePanicsOnBatchInNewView(t *testing.T) {
	withBatch := prePrepare(4, 129, 2)
	for _, m := range []bft.Message{
		&bft.NewView{PrePrepares: []bft.PrePrepare{withBatch}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Append(%T with a batch in a pre-prepare) did not panic", m)
				}
			}()
			Append(nil, m)
		}()
	}
}

// An ordered request or reply has no nonce in the format: encoding one
// that carries a nonce is a programming error, not a silent loss.
func TestEncodePanicsOnOrderedNonce(t *testing.T) {
	for _, m := range []bft.Message{
		&bft.Request{Client: 7, Timestamp: 3, Nonce: 1},
		&bft.Reply{Client: 7, Timestamp: 3, Nonce: 1},
		&bft.PrePrepare{Batch: []bft.Request{{Client: 7, Timestamp: 3, Nonce: 1}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Append(%T with an ordered nonce) did not panic", m)
				}
			}()
			Append(nil, m)
		}()
	}
}

// A read's nonce follows its flags (a request) or its read-only byte (a
// reply); ordered requests and replies encode as they did before reads
// had nonces.
func TestNonceLayout(t *testing.T) {
	op, auth := []byte("get x"), []byte("mac")
	for _, tt := range []struct {
		m    bft.Message
		want []byte
	}{
		{&bft.Request{Client: 7, Timestamp: 300, Op: op, Auth: auth},
			cat([]byte{byte(bft.TypeRequest)}, uv(7), uv(300), uv(0), uv(5), op, uv(3), auth)},
		{&bft.Request{Client: 7, Timestamp: 300, Restart: true, Op: op, Auth: auth},
			cat([]byte{byte(bft.TypeRequest)}, uv(7), uv(300), uv(2), uv(5), op, uv(3), auth)},
		{&bft.Request{Client: 7, Timestamp: 300, ReadOnly: true, Nonce: 9, Op: op, Auth: auth},
			cat([]byte{byte(bft.TypeRequest)}, uv(7), uv(300), uv(1), uv(9), uv(5), op, uv(3), auth)},
		{&bft.Reply{View: 1, Timestamp: 300, Client: 7, Replica: 2, Notes: 4, Result: op},
			cat([]byte{byte(bft.TypeReply)}, uv(1), uv(300), uv(7), uv(2), []byte{0}, uv(4), uv(5), op)},
		{&bft.Reply{View: 1, Timestamp: 300, Client: 7, Replica: 2, ReadOnly: true, Nonce: 1 << 20, Notes: 4, Result: op},
			cat([]byte{byte(bft.TypeReply)}, uv(1), uv(300), uv(7), uv(2), []byte{1}, uv(1<<20), uv(4), uv(5), op)},
	} {
		if got := Append(nil, tt.m); !bytes.Equal(got, tt.want) {
			t.Errorf("%+v encodes as %x, want %x", tt.m, got, tt.want)
		}
	}
}

// uv is a uvarint's encoding, for building inputs by hand.
func uv(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestMalformed(t *testing.T) {
	d := digest(0)
	prep := func(replica []byte) []byte {
		return cat([]byte{byte(bft.TypePrepare)}, uv(1), uv(2), d[:], replica)
	}
	ckpt := func(sig []byte) []byte {
		return cat([]byte{byte(bft.TypeCheckpoint)}, uv(8), d[:], uv(1), sig)
	}
	valid := prep(uv(1))
	if _, err := Decode(valid); err != nil {
		t.Fatalf("the base prepare does not decode: %v", err)
	}
	small := Limits{MaxMessage: 200, MaxOp: 8, MaxBatch: 2, MaxSig: 64, MaxAuth: 4 * 16, MaxList: 2, MaxReplicas: 4}
	tests := []struct {
		name string
		in   []byte
		lim  Limits
		want string // a substring of the error
	}{
		{"nil", nil, Limits{}, "wire: empty input"},
		{"type 0", []byte{0}, Limits{}, "unknown message type 0"},
		{"type 99", []byte{99, 0, 0}, Limits{}, "unknown message type 99"},
		{"type 255", []byte{255}, Limits{}, "unknown message type 255"},
		{"type only", []byte{byte(bft.TypePrepare)}, Limits{}, "wire: prepare: view: truncated"},
		{"short digest", cat([]byte{byte(bft.TypePrepare)}, uv(1), uv(2), d[:31]), Limits{}, "wire: prepare: digest: truncated"},
		{"trailing byte", append(bytes.Clone(valid), 0), Limits{}, "wire: prepare: 1 trailing bytes"},
		{"padded varint", cat([]byte{byte(bft.TypePrepare), 0x81, 0x00}), Limits{}, "wire: prepare: view: non-minimal varint"},
		{"padded zero", cat([]byte{byte(bft.TypeFetchState), 0x80, 0x80, 0x00}), Limits{}, "fetch-state: seq: non-minimal varint"},
		{"varint overflow", cat([]byte{byte(bft.TypeFetchState)}, bytes.Repeat([]byte{0xff}, 10), []byte{0x01}), Limits{}, "fetch-state: seq: varint overflows"},
		{"unterminated varint", []byte{byte(bft.TypeFetchState), 0x80}, Limits{}, "fetch-state: seq: truncated"},
		{"replica out of range", prep(uv(4)), small, "prepare: replica: replica 4 out of range (limit 4)"},
		{"replica over uint32", prep(uv(1 << 32)), Limits{MaxReplicas: 1 << 62}, "replica 4294967296 out of range"},
		{"sig too long", ckpt(cat(uv(65), make([]byte, 65))), Limits{}, "checkpoint: sig: length 65 exceeds the limit of 64"},
		{"sig truncated", ckpt(cat(uv(64), make([]byte, 10))), Limits{}, "checkpoint: sig: length 64: truncated"},
		{"huge sig length", ckpt(uv(1 << 63)), Limits{MaxSig: 1 << 62}, "checkpoint: sig: length 9223372036854775808 exceeds"},
		{"prepare with a sig", cat(prep(uv(1)), uv(0)), Limits{}, "prepare: 1 trailing bytes"},
		{"too big", make([]byte, 201), small, "wire: 201 bytes exceed the limit of 200"},
		{"unknown request flag", cat([]byte{byte(bft.TypeRequest)}, uv(1), uv(1), uv(4), uv(0), uv(0)), Limits{}, "request: flags: unknown flags 0x4"},
		{"notify payload over limit", cat([]byte{byte(bft.TypeNotify)}, uv(1), uv(1), uv(1), uv(1), uv(9), make([]byte, 9)), small, "notify: payload: length 9 exceeds"},
		{"notify replica", cat([]byte{byte(bft.TypeNotify)}, uv(1), uv(1), uv(1), uv(9), uv(0)), Limits{MaxReplicas: 4}, "notify: replica: replica 9 out of range"},
		{"read nonce padded", cat([]byte{byte(bft.TypeRequest)}, uv(1), uv(1), uv(1), []byte{0x80, 0x00}, uv(0), uv(0)), Limits{}, "request: nonce: non-minimal varint"},
		{"read nonce missing", cat([]byte{byte(bft.TypeReply)}, uv(1), uv(1), uv(1), uv(1), []byte{1}), Limits{}, "reply: nonce: truncated"},
		{"reply boolean", cat([]byte{byte(bft.TypeReply)}, uv(1), uv(1), uv(1), uv(1), []byte{2}, uv(0), uv(0)), Limits{}, "reply: read-only: boolean 2"},
		{"op over limit", cat([]byte{byte(bft.TypeRequest)}, uv(1), uv(1), uv(0), uv(9), make([]byte, 9), uv(0)), small, "request: op: length 9 exceeds the limit of 8"},
		{"auth over limit", cat([]byte{byte(bft.TypeRequest)}, uv(1), uv(1), uv(0), uv(0), uv(65), make([]byte, 65)), small, "request: auth: length 65 exceeds"},
		{"result over limit", cat([]byte{byte(bft.TypeReply)}, uv(1), uv(1), uv(1), uv(1), []byte{0}, uv(0), uv(9), make([]byte, 9)), small, "reply: result: length 9 exceeds"},
		{"batch over limit", cat([]byte{byte(bft.TypePrePrepare)}, uv(1), uv(1), uv(7), d[:], uv(3), make([]byte, 12)), small, "pre-prepare: batch: count 3 exceeds the limit of 2"},
		// A count the remaining input cannot hold fails before the
		// list is allocated: 1e6 requests of at least 4 bytes in 5.
		{"batch count vs input", cat([]byte{byte(bft.TypePrePrepare)}, uv(1), uv(1), uv(7), d[:], uv(1e6), make([]byte, 5)), Limits{MaxBatch: 1 << 30}, "pre-prepare: batch: count 1000000: truncated"},
		{"bad request in batch", cat([]byte{byte(bft.TypePrePrepare)}, uv(1), uv(1), uv(7), d[:], uv(2), uv(1), uv(1), uv(0), uv(0), uv(0), uv(1), uv(1), uv(0), uv(5), make([]byte, 2)), Limits{}, "pre-prepare: batch[1]: op: length 5: truncated"},
		{"stable over limit", cat([]byte{byte(bft.TypeState)}, uv(1), uv(5)), small, "state: stable: count 5 exceeds the limit of 4"},
		{"chunks over limit", cat([]byte{byte(bft.TypeState)}, uv(1), uv(0), uv(1), uv(0), uv(3)), small, "state: chunks: count 3 exceeds the limit of 2"},
		{"chunks count vs input", cat([]byte{byte(bft.TypeState)}, uv(1), uv(0), uv(1), uv(0), uv(2), make([]byte, 40)), Limits{}, "state: chunks: count 2: truncated"},
		{"chunk data vs input", cat([]byte{byte(bft.TypeChunk)}, uv(1), uv(0), uv(1<<20), make([]byte, 40)), Limits{}, "chunk: data: length 1048576: truncated"},
		{"chunk data over limit", cat([]byte{byte(bft.TypeChunk)}, uv(1), uv(0), uv(1<<30)), Limits{}, "chunk: data: length 1073741824 exceeds the limit of 16777216"},
		{"batch requests over limit", cat([]byte{byte(bft.TypeBatch)}, uv(1), uv(7), d[:], uv(3), make([]byte, 12), uv(0)), small, "batch: requests: count 3 exceeds the limit of 2"},
		{"batch requests vs input", cat([]byte{byte(bft.TypeBatch)}, uv(1), uv(7), d[:], uv(1e6), make([]byte, 5)), Limits{MaxBatch: 1 << 30}, "batch: requests: count 1000000: truncated"},
		{"fetch-batch short digest", cat([]byte{byte(bft.TypeFetchBatch)}, uv(1), d[:20]), Limits{}, "fetch-batch: digest: truncated"},
		{"view changes count vs input", cat([]byte{byte(bft.TypeNewView)}, uv(1), uv(100), make([]byte, 50)), Limits{}, "new-view: view-changes: count 100: truncated"},
		{"nested error path", func() []byte {
			vc := viewChange(1)
			vc.Stable[1].Replica = 9
			return Append(nil, &vc)
		}(), Limits{MaxReplicas: 4}, "wire: view-change: stable[1]: replica: replica 9 out of range"},
		{"nested checkpoint", func() []byte {
			nv := &bft.NewView{ViewChanges: []bft.ViewChange{viewChange(1)}}
			nv.ViewChanges[0].Stable[0].Sig = make([]byte, 65)
			return Append(nil, nv)
		}(), Limits{}, "wire: new-view: view-changes[0]: stable[0]: sig: length 65 exceeds"},
		{"claims over limit", func() []byte {
			vc := viewChange(1)
			vc.Stable = nil
			return Append(nil, &vc)
		}(), Limits{MaxList: 2}, "wire: view-change: pre-prepared: count 3 exceeds the limit of 2"},
		{"claim truncated", func() []byte {
			vc := viewChange(1)
			b := Append(nil, &vc)
			return b[:len(b)-len(sig(8))-3-20]
		}(), Limits{}, "wire: view-change: pre-prepared: count 3: truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := DecodeLimits(tt.in, tt.lim)
			if err == nil {
				t.Fatalf("decoded %#v, want an error", m)
			}
			if m != nil {
				t.Errorf("returned message %#v with error", m)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %q does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestTruncations decodes every proper prefix of every sample: each must
// fail cleanly, since a message fills its input exactly.
func TestTruncations(t *testing.T) {
	for _, m := range samples() {
		b := Append(nil, m)
		for i := range len(b) {
			if _, err := Decode(b[:i]); !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T cut to %d of %d bytes: err %v, want ErrMalformed", m, i, len(b), err)
			}
		}
	}
}

// TestDecodeMemory checks the bound the package documents: decoding the
// worst case, a batch of empty requests, allocates at most about 16 bytes
// per input byte.
func TestDecodeMemory(t *testing.T) {
	const n = 100000
	in := cat([]byte{byte(bft.TypePrePrepare)}, uv(1), uv(1), uv(7), make([]byte, 32), uv(n), make([]byte, 5*n))
	lim := Limits{MaxBatch: n}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := DecodeLimits(in, lim)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(m.(*bft.PrePrepare).Batch); got != n {
		t.Fatalf("decoded %d requests, want %d", got, n)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	ratio := float64(alloc) / float64(len(in))
	t.Logf("%d input bytes, %d allocated: %.1f bytes per input byte", len(in), alloc, ratio)
	if ratio > 17 {
		t.Errorf("decoding allocated %.1f bytes per input byte, want at most 17", ratio)
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		f.Add(Append(nil, m))
	}
	f.Add([]byte{})
	f.Add([]byte{byte(bft.TypeFetchState), 0x80, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := Decode(in)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Every accepted input is canonical: it is the encoding of
		// what it decodes to, so it re-decodes to an equal message.
		out := Append(nil, m)
		if !bytes.Equal(out, in) {
			t.Fatalf("%T re-encodes to\n%x\nfrom\n%x", m, out, in)
		}
		m2, err := Decode(out)
		if err != nil {
			t.Fatalf("re-encoded %T does not decode: %v", m, err)
		}
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Fatalf("%T differs after a second round trip (-first +second):\n%s", m, diff)
		}
		_ = SignedBytes(nil, m)
	})
}

func BenchmarkEncode(b *testing.B) {
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			buf := Append(nil, bc.m)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = Append(buf[:0], bc.m)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, bc := range benchCases() {
		b.Run(bc.name, func(b *testing.B) {
			buf := Append(nil, bc.m)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type benchCase struct {
	name string
	m    bft.Message
}

func benchCases() []benchCase {
	pp := prePrepare(3, 1000, 64)
	return []benchCase{
		{"prepare", &bft.Prepare{View: 3, Seq: 1000, Digest: digest(1), Replica: 2}},
		{fmt.Sprintf("pre-prepare-64x%dB", len(pp.Batch[0].Op)), &pp},
	}
}
