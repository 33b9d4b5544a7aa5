package main

import (
	"errors"
	"testing"
)

func TestPayloadRoundTrip(t *testing.T) {
	for _, size := range []int{1, 7, 8, 9, 64, 1000, 1 << 16} {
		for _, seq := range []uint64{0, 1, 2, 1 << 40, ^uint64(0)} {
			b := make([]byte, size)
			fillPayload(b, seq)
			if err := checkPayload(b, seq); err != nil {
				t.Fatalf("size %d seq %d: %v", size, seq, err)
			}
		}
	}
}

func TestPayloadDetectsOtherMessage(t *testing.T) {
	for _, size := range []int{1, 8, 64, 1024} {
		b := make([]byte, size)
		fillPayload(b, 41)
		if size == 1 {
			// One byte cannot tell every pair of messages apart; make
			// sure it at least tells these two.
			var c [1]byte
			fillPayload(c[:], 42)
			if c[0] == b[0] {
				t.Fatal("messages 41 and 42 have the same first byte")
			}
		}
		var perr *payloadError
		if err := checkPayload(b, 42); !errors.As(err, &perr) {
			t.Fatalf("size %d: the echo of message 41 passed as message 42 (err %v)", size, err)
		}
		if perr.Seq != 42 || perr.Size != size {
			t.Errorf("size %d: error %+v names the wrong message", size, perr)
		}
	}
}

func TestPayloadErrorLocatesByte(t *testing.T) {
	b := make([]byte, 100)
	fillPayload(b, 7)
	want := b[93]
	b[93] ^= 0x10
	var perr *payloadError
	if err := checkPayload(b, 7); !errors.As(err, &perr) {
		t.Fatalf("corrupted payload passed: %v", err)
	}
	if perr.Offset != 93 || perr.Want != want || perr.Got != want^0x10 {
		t.Errorf("error %+v; want offset 93, want %#02x, got %#02x", perr, want, want^0x10)
	}
}

// FuzzPayloadCorruption checks that any change to any byte of a payload is
// caught and located.
func FuzzPayloadCorruption(f *testing.F) {
	f.Add(uint64(0), uint16(64), uint16(0), byte(1))
	f.Add(uint64(12345), uint16(1023), uint16(1022), byte(0x80))
	f.Fuzz(func(t *testing.T, seq uint64, size, offset uint16, flip byte) {
		if size == 0 || flip == 0 {
			return
		}
		off := int(offset) % int(size)
		b := make([]byte, size)
		fillPayload(b, seq)
		if err := checkPayload(b, seq); err != nil {
			t.Fatalf("intact payload rejected: %v", err)
		}
		b[off] ^= flip
		var perr *payloadError
		if err := checkPayload(b, seq); !errors.As(err, &perr) {
			t.Fatalf("byte %d of %d changed, payload accepted (err %v)", off, size, err)
		}
		if perr.Offset != off {
			t.Fatalf("byte %d changed, error says byte %d", off, perr.Offset)
		}
	})
}
