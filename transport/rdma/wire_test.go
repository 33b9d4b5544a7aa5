package rdma

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestImmRoundTrip(t *testing.T) {
	for _, m := range []imm{
		{},
		{credits: 1},
		{credits: maxGrant, ctrl: maxCtrlGrant},
		{control: true, credits: 7, ctrl: 1},
		{control: true, fin: true},
		{control: true, paid: true, credits: 3},
		{credits: 2, more: true},
	} {
		got, err := decodeImm(m.encode(), 0)
		if err != nil {
			t.Fatalf("decodeImm(%+v.encode()): %v", m, err)
		}
		if diff := cmp.Diff(m, got, cmp.AllowUnexported(imm{})); diff != "" {
			t.Errorf("round trip of %+v (-want +got):\n%s", m, diff)
		}
	}
}

func TestImmRejects(t *testing.T) {
	for _, tc := range []struct {
		v      uint32
		length int
	}{
		{1 << 20, 0},              // reserved bit
		{immFIN, 0},               // FIN without control
		{immControl | 1, 5},       // control with payload
		{immControl | 1<<27, 0},   // reserved bit on a control message
		{immControl | immMore, 0}, // more on a control message
	} {
		if _, err := decodeImm(tc.v, tc.length); !errors.Is(err, errBadImm) {
			t.Errorf("decodeImm(%#x, %d) = %v, want errBadImm", tc.v, tc.length, err)
		}
	}
}

func TestHelloRoundTrip(t *testing.T) {
	h := hello{maxMessage: 128 << 10, credits: 16, ctrlCredits: 1, maxCredits: 16}
	got, err := decodeHello(append(h.encode(), 0, 0, 0)) // padding is ignored
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(h, got, cmp.AllowUnexported(hello{})); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestHelloRejects(t *testing.T) {
	good := hello{maxMessage: 4096, credits: 4, ctrlCredits: 1, maxCredits: 8}.encode()
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, b := range map[string][]byte{
		"empty":      nil,
		"short":      good[:helloLen-1],
		"magic":      mutate(func(b []byte) []byte { b[0] = 'X'; return b }),
		"version":    mutate(func(b []byte) []byte { b[3] = 1; return b }),
		"tiny max":   mutate(func(b []byte) []byte { b[4], b[5], b[6], b[7] = 0, 0, 0, 1; return b }),
		"huge max":   mutate(func(b []byte) []byte { b[4] = 0xff; return b }),
		"no credits": mutate(func(b []byte) []byte { b[8], b[9] = 0, 0; return b }),
		"no ctrl":    mutate(func(b []byte) []byte { b[10] = 0; return b }),
		"many ctrl":  mutate(func(b []byte) []byte { b[10] = 16; return b }),
		"reserved":   mutate(func(b []byte) []byte { b[11] = 1; return b }),
	} {
		if _, err := decodeHello(b); !errors.Is(err, errBadHello) {
			t.Errorf("%s: decodeHello(%x) = %v, want errBadHello", name, b, err)
		}
	}
}

// FuzzDecode feeds both decoders arbitrary input: they must never panic,
// and whatever they accept must encode back to an equivalent value.
func FuzzDecode(f *testing.F) {
	f.Add(uint32(0), 0, hello{maxMessage: 4096, credits: 4, ctrlCredits: 1, maxCredits: 8}.encode())
	f.Add(uint32(immControl|immFIN), 0, []byte("RBN\x01"))
	f.Fuzz(func(t *testing.T, v uint32, length int, private []byte) {
		if m, err := decodeImm(v, length); err == nil {
			if m.encode() != v {
				t.Errorf("decodeImm(%#x) = %+v, which encodes to %#x", v, m, m.encode())
			}
		}
		if h, err := decodeHello(private); err == nil {
			again, err := decodeHello(h.encode())
			if err != nil || again != h {
				t.Errorf("decodeHello(%x) = %+v, re-encoded decodes to %+v, %v", private, h, again, err)
			}
		}
	})
}
