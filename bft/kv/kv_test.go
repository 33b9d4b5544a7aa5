package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/rubin-go/rubin/bft"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// do executes op and decodes the result, failing on undecodable results.
func do(t testing.TB, s *Store, op []byte) (value []byte, found bool, err error) {
	t.Helper()
	value, found, err = DecodeResult(s.Execute(bft.ExecContext{}, op))
	var oe *OpError
	if err != nil && !errors.As(err, &oe) {
		t.Fatalf("Execute(%x) gave an undecodable result: %v", op, err)
	}
	return value, found, err
}

func TestOps(t *testing.T) {
	s := New(Config{})
	k, v := []byte("k"), []byte("v1")

	if _, found, err := do(t, s, EncodeGet(k)); found || err != nil {
		t.Fatalf("Get on empty store: found=%v err=%v", found, err)
	}
	if _, found, err := do(t, s, EncodePut(k, v)); found || err != nil {
		t.Fatalf("first Put: found=%v (want false) err=%v", found, err)
	}
	if got, found, err := do(t, s, EncodeGet(k)); !found || err != nil || !bytes.Equal(got, v) {
		t.Fatalf("Get = %q, %v, %v; want %q", got, found, err, v)
	}
	if _, found, err := do(t, s, EncodePut(k, []byte("a much longer second value"))); !found || err != nil {
		t.Fatalf("overwriting Put: found=%v (want true) err=%v", found, err)
	}
	if _, found, err := do(t, s, EncodePut(k, []byte("v3"))); !found || err != nil {
		t.Fatalf("shrinking Put: found=%v err=%v", found, err)
	}
	if got, _, _ := do(t, s, EncodeGet(k)); string(got) != "v3" {
		t.Fatalf("Get after shrinking Put = %q, want v3", got)
	}

	// Results must not alias the store: mutating one changes nothing.
	res := s.Execute(bft.ExecContext{}, EncodeGet(k))
	res[1] = 'X'
	if got, _, _ := do(t, s, EncodeGet(k)); string(got) != "v3" {
		t.Fatalf("store aliased a result: Get = %q", got)
	}
	// Nor does the store keep op.
	op := EncodePut([]byte("alias"), []byte("before"))
	s.Execute(bft.ExecContext{}, op)
	copy(op[len(op)-6:], "after!")
	if got, _, _ := do(t, s, EncodeGet([]byte("alias"))); string(got) != "before" {
		t.Fatalf("store kept op: Get = %q", got)
	}

	// Empty key and empty value are legal and distinct from absence.
	if _, _, err := do(t, s, EncodePut(nil, nil)); err != nil {
		t.Fatal(err)
	}
	if got, found, err := do(t, s, EncodeGet(nil)); !found || err != nil || len(got) != 0 {
		t.Fatalf("Get(empty) = %q, %v, %v", got, found, err)
	}

	if _, found, _ := do(t, s, EncodeDelete(k)); !found {
		t.Fatal("Delete of existing key: found=false")
	}
	if _, found, _ := do(t, s, EncodeDelete(k)); found {
		t.Fatal("second Delete: found=true")
	}
	if _, found, _ := do(t, s, EncodeGet(k)); found {
		t.Fatal("Get after Delete: found")
	}
}

func TestAdd(t *testing.T) {
	s := New(Config{})
	c := []byte("counter")
	for i, want := range []int64{5, 2, math.MaxInt64} {
		delta := []int64{5, -3, math.MaxInt64 - 2}[i]
		got, found, err := do(t, s, EncodeAdd(c, delta))
		if err != nil || !found || len(got) != 8 || int64(binary.BigEndian.Uint64(got)) != want {
			t.Fatalf("Add #%d = %x, %v, %v; want %d", i, got, found, err, want)
		}
	}
	// Overflow wraps.
	got, _, _ := do(t, s, EncodeAdd(c, 1))
	if int64(binary.BigEndian.Uint64(got)) != math.MinInt64 {
		t.Fatalf("overflowing Add = %d, want MinInt64", int64(binary.BigEndian.Uint64(got)))
	}
	s.Execute(bft.ExecContext{}, EncodePut([]byte("str"), []byte("abc")))
	if _, _, err := do(t, s, EncodeAdd([]byte("str"), 1)); err == nil || !strings.Contains(err.Error(), "not an 8-byte integer") {
		t.Fatalf("Add on a non-integer: err = %v", err)
	}
}

func TestCAS(t *testing.T) {
	s := New(Config{})
	k := []byte("k")
	if _, found, err := do(t, s, EncodeCAS(k, true, []byte("x"), []byte("y"))); found || err != nil {
		t.Fatalf("CAS(present) on absent key: found=%v err=%v", found, err)
	}
	if _, found, err := do(t, s, EncodeCAS(k, false, nil, []byte("one"))); !found || err != nil {
		t.Fatalf("CAS(absent) on absent key: found=%v err=%v", found, err)
	}
	cur, found, err := do(t, s, EncodeCAS(k, false, nil, []byte("two")))
	if found || err != nil || string(cur) != "one" {
		t.Fatalf("CAS(absent) on present key = %q, %v, %v; want current value", cur, found, err)
	}
	cur, found, _ = do(t, s, EncodeCAS(k, true, []byte("wrong"), []byte("two")))
	if found || string(cur) != "one" {
		t.Fatalf("CAS with wrong old = %q, %v", cur, found)
	}
	if _, found, _ := do(t, s, EncodeCAS(k, true, []byte("one"), []byte("two"))); !found {
		t.Fatal("CAS with right old did not swap")
	}
	if v, _ := s.Lookup(k); string(v) != "two" {
		t.Fatalf("after CAS value = %q", v)
	}
}

func TestEmptyOp(t *testing.T) {
	s := New(Config{})
	s.Execute(bft.ExecContext{}, EncodePut([]byte("a"), []byte("b")))
	before := s.Snapshot()
	for _, op := range [][]byte{nil, {}} {
		if res := s.Execute(bft.ExecContext{}, op); len(res) != 0 {
			t.Fatalf("Execute(%#v) = %x, want empty", op, res)
		}
	}
	if !bytes.Equal(before, s.Snapshot()) {
		t.Fatal("empty op changed the state")
	}
	if v, found, err := DecodeResult(nil); v != nil || found || err != nil {
		t.Fatalf("DecodeResult(empty) = %v, %v, %v", v, found, err)
	}
}

func TestLimitsAndMalformed(t *testing.T) {
	s := New(Config{MaxKeySize: 4, MaxValueSize: 8, MaxKeys: 2})
	big := bytes.Repeat([]byte("x"), 9)
	for _, tc := range []struct {
		name, op, want string
	}{
		{"unknown opcode", "\x7fzz", "unknown opcode 0x7f"},
		{"truncated put", "\x01", "malformed length"},
		{"put key overruns", "\x01\x09ab", "length 9 exceeds the 2 bytes left"},
		{"padded varint", "\x01\x81\x00k", "malformed length"},
		{"overlong varint", "\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", "malformed length"},
		{"key too long", string(EncodePut([]byte("12345"), nil)), "key of 5 bytes exceeds limit 4"},
		{"value too long", string(EncodePut([]byte("k"), big)), "value of 9 bytes exceeds limit 8"},
		{"get key too long", string(EncodeGet([]byte("12345"))), "get: key of 5 bytes"},
		{"add short delta", "\x04\x01k\x00", "delta is 1 bytes, want 8"},
		{"cas bad flag", "\x05\x01k\x02\x00", "presence flag is 2"},
		{"cas absent with old", "\x05\x01k\x00\x01o", "old value given for an absent key"},
		{"cas truncated", "\x05\x01k", "truncated presence flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Snapshot()
			res := s.Execute(bft.ExecContext{}, []byte(tc.op))
			_, _, err := DecodeResult(res)
			var oe *OpError
			if !errors.As(err, &oe) || !strings.Contains(oe.Msg, tc.want) {
				t.Fatalf("err = %v, want an OpError containing %q", err, tc.want)
			}
			if !bytes.Equal(res, s.Execute(bft.ExecContext{}, []byte(tc.op))) {
				t.Fatal("error result not deterministic")
			}
			if !bytes.Equal(before, s.Snapshot()) {
				t.Fatal("a failed op changed the state")
			}
		})
	}
	s.Execute(bft.ExecContext{}, EncodePut([]byte("a"), nil))
	s.Execute(bft.ExecContext{}, EncodePut([]byte("b"), nil))
	if _, _, err := DecodeResult(s.Execute(bft.ExecContext{}, EncodePut([]byte("c"), nil))); err == nil || !strings.Contains(err.Error(), "store full") {
		t.Fatalf("Put beyond MaxKeys: err = %v", err)
	}
	if _, found, err := DecodeResult(s.Execute(bft.ExecContext{}, EncodePut([]byte("a"), []byte("ok")))); err != nil || !found {
		t.Fatalf("overwrite in a full store: found=%v err=%v", found, err)
	}
	if _, _, err := DecodeResult([]byte{0x09}); err == nil {
		t.Fatal("DecodeResult accepted status 0x09")
	}
}

func fill(s *Store, order []int) {
	for _, i := range order {
		s.Execute(bft.ExecContext{}, EncodePut(fmt.Appendf(nil, "key-%03d", i), fmt.Appendf(nil, "value-%d", i*i)))
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := New(Config{})
	fill(s, rand.Perm(200))
	s.Execute(bft.ExecContext{}, EncodePut(nil, nil)) // the empty key survives too
	s.Execute(bft.ExecContext{}, EncodeDelete([]byte("key-007")))
	snap := s.Snapshot()

	r := New(Config{})
	r.Execute(bft.ExecContext{}, EncodePut([]byte("stale"), []byte("gone after restore")))
	if err := r.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if r.Len() != s.Len() {
		t.Fatalf("restored %d keys, want %d", r.Len(), s.Len())
	}
	for k, e := range s.m {
		got, ok := r.Lookup([]byte(k))
		if !ok || !bytes.Equal(got, e.v) {
			t.Fatalf("key %q: restored %q, %v; want %q", k, got, ok, e.v)
		}
	}
	if _, ok := r.Lookup([]byte("stale")); ok {
		t.Fatal("Restore kept a key absent from the snapshot")
	}
	if !bytes.Equal(r.Snapshot(), snap) {
		t.Fatal("snapshot of restored store differs")
	}
	// The restored store must not alias the snapshot buffer.
	for i := range snap {
		snap[i] = 0
	}
	if got, _ := r.Lookup([]byte("key-001")); string(got) != "value-1" {
		t.Fatalf("restored store aliases the snapshot: %q", got)
	}
	// Empty store round trip.
	e := New(Config{})
	if err := r.Restore(e.Snapshot()); err != nil || r.Len() != 0 {
		t.Fatalf("restore of empty snapshot: %v, len %d", err, r.Len())
	}
}

func TestSnapshotDeterministic(t *testing.T) {
	a, b := New(Config{}), New(Config{})
	fill(a, rand.Perm(300))
	fill(b, rand.Perm(300))
	// Different histories, same final state.
	b.Execute(bft.ExecContext{}, EncodePut([]byte("tmp"), []byte("x")))
	b.Execute(bft.ExecContext{}, EncodeDelete([]byte("tmp")))
	if !bytes.Equal(a.Snapshot(), b.Snapshot()) {
		t.Fatal("equal states gave different snapshots")
	}
	if !bytes.Equal(a.Snapshot(), a.Snapshot()) {
		t.Fatal("two snapshots of one state differ")
	}
}

func TestRestoreRejects(t *testing.T) {
	good := New(Config{})
	good.Execute(bft.ExecContext{}, EncodePut([]byte("a"), []byte("1")))
	good.Execute(bft.ExecContext{}, EncodePut([]byte("b"), []byte("2")))
	snap := good.Snapshot()
	entry := func(k, v string) []byte {
		b := binary.AppendUvarint(nil, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...)
	}
	mk := func(count int, entries ...[]byte) []byte {
		b := binary.AppendUvarint([]byte(snapshotMagic), uint64(count))
		for _, e := range entries {
			b = append(b, e...)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		snap []byte
		want string
	}{
		{"empty", nil, "bad magic"},
		{"bad magic", append([]byte("XKV1"), snap[4:]...), "bad magic"},
		{"truncated", snap[:len(snap)-1], "exceeds"},
		{"trailing", append(bytes.Clone(snap), 0), "trailing"},
		{"padded count", []byte(snapshotMagic + "\x80\x00"), "malformed entry count"},
		{"huge count", binary.AppendUvarint([]byte(snapshotMagic), math.MaxUint64), "too large"},
		{"unsorted", mk(2, entry("b", ""), entry("a", "")), "not after"},
		{"duplicate", mk(2, entry("a", "1"), entry("a", "2")), "not after"},
		{"key limit", mk(1, entry("12345", "")), "key of 5 bytes"},
		{"value limit", mk(1, entry("k", "123456789")), "value of 9 bytes"},
		{"too many keys", mk(3, entry("a", ""), entry("b", ""), entry("c", "")), "exceed limit 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{MaxKeySize: 4, MaxValueSize: 8, MaxKeys: 2})
			s.Execute(bft.ExecContext{}, EncodePut([]byte("keep"), []byte("me")))
			err := s.Restore(tc.snap)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore err = %v, want one containing %q", err, tc.want)
			}
			if v, ok := s.Lookup([]byte("keep")); !ok || string(v) != "me" || s.Len() != 1 {
				t.Fatal("a failed Restore changed the state")
			}
		})
	}
}

func FuzzExecute(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodePut([]byte("k"), []byte("v")))
	f.Add(EncodeGet([]byte("k")))
	f.Add(EncodeDelete([]byte("k")))
	f.Add(EncodeAdd([]byte("k"), -1))
	f.Add(EncodeCAS([]byte("k"), true, []byte("v"), []byte("w")))
	f.Add([]byte{OpPut, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, op []byte) {
		s := New(Config{MaxKeySize: 16, MaxValueSize: 64, MaxKeys: 4})
		s.Execute(bft.ExecContext{}, EncodePut([]byte("k"), []byte("v")))
		s.Execute(bft.ExecContext{}, EncodeAdd([]byte("n"), 1))
		before := s.Snapshot()
		res := s.Execute(bft.ExecContext{}, op)
		if len(op) == 0 && len(res) != 0 {
			t.Fatalf("empty op gave %x", res)
		}
		if len(op) > 0 {
			if _, _, err := DecodeResult(res); err != nil {
				var oe *OpError
				if !errors.As(err, &oe) {
					t.Fatalf("undecodable result %x: %v", res, err)
				}
				if !bytes.Equal(before, s.Snapshot()) {
					t.Fatal("an error result changed the state")
				}
			}
		}
		// Determinism: a second replica in the same state agrees.
		r := New(Config{MaxKeySize: 16, MaxValueSize: 64, MaxKeys: 4})
		if err := r.Restore(before); err != nil {
			t.Fatal(err)
		}
		if got := r.Execute(bft.ExecContext{}, op); !bytes.Equal(got, res) {
			t.Fatalf("replicas disagree on %x: %x vs %x", op, res, got)
		}
		if !bytes.Equal(r.Snapshot(), s.Snapshot()) {
			t.Fatal("replicas diverged")
		}
	})
}

func FuzzRestore(f *testing.F) {
	s := New(Config{})
	fill(s, []int{3, 1, 2})
	f.Add(s.Snapshot())
	f.Add(New(Config{}).Snapshot())
	f.Add([]byte(snapshotMagic + "\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, snap []byte) {
		r := New(Config{MaxKeySize: 32, MaxValueSize: 64, MaxKeys: 100})
		r.Execute(bft.ExecContext{}, EncodePut([]byte("keep"), nil))
		before := r.Snapshot()
		if err := r.Restore(snap); err != nil {
			if !bytes.Equal(before, r.Snapshot()) {
				t.Fatal("a failed Restore changed the state")
			}
			return
		}
		// Accepted snapshots are canonical: they re-encode identically.
		if got := r.Snapshot(); !bytes.Equal(got, snap) {
			t.Fatalf("accepted a non-canonical snapshot:\n in  %x\n out %x", snap, got)
		}
	})
}

func BenchmarkExecute(b *testing.B) {
	value := bytes.Repeat([]byte("v"), 64)
	keys := make([][]byte, 1024)
	puts := make([][]byte, len(keys))
	gets := make([][]byte, len(keys))
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%06d", i)
		puts[i] = EncodePut(keys[i], value)
		gets[i] = EncodeGet(keys[i])
	}
	b.Run("Put", func(b *testing.B) {
		s := New(Config{})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s.Execute(bft.ExecContext{}, puts[i%len(puts)])
		}
	})
	b.Run("Get", func(b *testing.B) {
		s := New(Config{})
		for _, p := range puts {
			s.Execute(bft.ExecContext{}, p)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			s.Execute(bft.ExecContext{}, gets[i%len(gets)])
		}
	})
	b.Run("Empty", func(b *testing.B) {
		s := New(Config{})
		b.ReportAllocs()
		for b.Loop() {
			s.Execute(bft.ExecContext{}, nil)
		}
	})
}

// Query answers a get as Execute does, changes nothing, and refuses
// every other operation.
func TestQuery(t *testing.T) {
	s := New(Config{})
	s.Execute(bft.ExecContext{}, EncodePut([]byte("a"), []byte("1")))
	for _, op := range [][]byte{EncodeGet([]byte("a")), EncodeGet([]byte("b")), EncodeGet(nil)} {
		if q, e := s.Query(bft.QueryContext{}, op), s.Execute(bft.ExecContext{}, op); !bytes.Equal(q, e) {
			t.Fatalf("%x: query %x, execute %x", op, q, e)
		}
	}
	before := s.Snapshot()
	for _, op := range [][]byte{EncodePut([]byte("a"), []byte("2")), EncodeDelete([]byte("a")), EncodeAdd([]byte("n"), 1), nil, {0xff}} {
		if _, _, err := DecodeResult(s.Query(bft.QueryContext{}, op)); err == nil || !strings.Contains(err.Error(), "only get is read-only") {
			t.Fatalf("query %x: %v", op, err)
		}
	}
	if !bytes.Equal(before, s.Snapshot()) {
		t.Fatal("Query changed the store")
	}
}
