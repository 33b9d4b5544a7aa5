package main

import (
	"encoding/binary"
	"fmt"
)

// Every message carries a pattern derived from its sequence number, so that
// a client detects an echo that is corrupted, truncated into the next one, or
// the echo of another message. The pattern is a run of little-endian 64-bit
// words: the first is a hash of the sequence number, and each next one adds
// an odd constant. A payload whose length is not a multiple of eight ends
// with the first bytes of the next word.

// patternStep is added to each word to get the next one; being odd, it makes
// the words of one payload distinct for 2^64 words.
const patternStep = 0x9e3779b97f4a7c15

// patternSeed returns the first word of the pattern of message seq. It is
// the splitmix64 finalizer, so neighbouring sequence numbers start far apart.
func patternSeed(seq uint64) uint64 {
	x := seq + patternStep
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// fillPayload writes the pattern of message seq into b.
func fillPayload(b []byte, seq uint64) {
	x := patternSeed(seq)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], x)
		x += patternStep
	}
	if i < len(b) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], x)
		copy(b[i:], tail[:])
	}
}

// checkPayload returns nil if b holds the pattern of message seq, and a
// *payloadError for its first wrong byte otherwise.
func checkPayload(b []byte, seq uint64) error {
	x := patternSeed(seq)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != x {
			return newPayloadError(b, seq, i, x)
		}
		x += patternStep
	}
	if i < len(b) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], x)
		for j := i; j < len(b); j++ {
			if b[j] != tail[j-i] {
				return newPayloadError(b, seq, i, x)
			}
		}
	}
	return nil
}

// newPayloadError locates the first wrong byte in the word of b at offset
// off, whose expected value is want.
func newPayloadError(b []byte, seq uint64, off int, want uint64) *payloadError {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], want)
	for j := off; j < len(b) && j < off+8; j++ {
		if b[j] != w[j-off] {
			return &payloadError{Seq: seq, Offset: j, Size: len(b), Got: b[j], Want: w[j-off]}
		}
	}
	panic("echo: newPayloadError called on a matching word")
}

// A payloadError reports an echo that differs from the message sent.
type payloadError struct {
	Seq       uint64 // the message's sequence number
	Offset    int    // the first byte that differs
	Size      int    // the message's size
	Got, Want byte   // the byte at Offset, and what it should be
}

func (e *payloadError) Error() string {
	return fmt.Sprintf("echo of message %d is wrong at byte %d of %d: got %#02x, want %#02x",
		e.Seq, e.Offset, e.Size, e.Got, e.Want)
}
