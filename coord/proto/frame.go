package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// MaxBuffer is the default of ZooKeeper's jute.maxbuffer, 0xfffff bytes (1
// MiB less one): the longest frame ZooKeeper's server reads, and the
// longest its Java client accepts.
const MaxBuffer = 0xfffff

// MaxPacket is the longest frame, without its 4-byte length, that
// ReadFrame accepts and AppendFrame writes: MaxBuffer plus 1024 bytes,
// the slack ZooKeeper's record decoder has always allowed beyond
// jute.maxbuffer for the fields around a buffer. Every frame a ZooKeeper
// server accepts fits, and so does the reply to any request that fits
// MaxBuffer: a getData reply carries the header and Stat (88 bytes)
// around data that a setData request carried with its header, path and
// version.
const MaxPacket = MaxBuffer + 1024

// ErrFrameTooLarge is wrapped by the errors of ReadFrame, for a frame whose
// length prefix is negative or beyond MaxPacket, and of AppendFrame, for
// records too long to send in one frame.
var ErrFrameTooLarge = errors.New("zookeeper protocol: frame too large")

// ReadFrame reads one frame from r: a 4-byte big-endian length, then that
// many bytes, which it returns. It rejects a length beyond MaxPacket
// before reading or allocating anything more.
//
// The frame is read into buf if it fits buf's capacity, and into a new
// slice otherwise; either way the caller owns the result, which is valid
// until the caller reuses buf. Pass buf[:0] of a buffer of MaxPacket bytes
// to read every frame without allocating. A new slice grows with what
// arrives, not with the length announced: a peer that announces a
// megabyte and sends a byte makes the reader hold a few KiB (at most
// twice what arrived, or frameChunk).
//
// At a clean end of stream, before a frame's first byte, ReadFrame returns
// io.EOF itself; a stream that ends inside a frame gives
// io.ErrUnexpectedEOF. Other errors are r's.
func ReadFrame(r io.Reader, buf []byte) ([]byte, error) {
	return ReadFrameLimit(r, buf, MaxPacket)
}

// ReadFrameLimit is ReadFrame with frames of at most limit bytes (at most
// MaxPacket).
func ReadFrameLimit(r io.Reader, buf []byte, limit int) ([]byte, error) {
	var prefix [4]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, err
	}
	n := int(int32(binary.BigEndian.Uint32(prefix[:])))
	limit = min(limit, MaxPacket)
	if n < 0 || n > limit {
		return nil, fmt.Errorf("%w: length %d, at most %d", ErrFrameTooLarge, n, limit)
	}
	if cap(buf) >= n {
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return buf, nil
	}
	buf = make([]byte, 0, min(n, frameChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(len(buf), n-len(buf)))
		}
		m, err := r.Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// frameChunk is the first allocation for a frame that does not fit the
// caller's buffer; it then doubles as the bytes arrive.
const frameChunk = 4 << 10

// AppendFrame appends to b one frame holding the encodings of recs, one
// after the other: a reply header and its body, or a ConnectResponse
// alone. If they are longer than MaxPacket it returns b unchanged and an
// error wrapping ErrFrameTooLarge.
func AppendFrame(b []byte, recs ...Record) ([]byte, error) {
	start := len(b)
	e := NewEncoder(append(b, 0, 0, 0, 0))
	for _, r := range recs {
		r.Encode(e)
	}
	out := e.Bytes()
	n := len(out) - start - 4
	if n > MaxPacket {
		return b[:start], fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLarge, n, MaxPacket)
	}
	binary.BigEndian.PutUint32(out[start:], uint32(n))
	return out, nil
}

// WriteFrame writes one frame holding the encodings of recs to w, in one
// Write.
func WriteFrame(w io.Writer, recs ...Record) error {
	b, err := AppendFrame(nil, recs...)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
