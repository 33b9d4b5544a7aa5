// Package link carries authenticated message frames between two parties
// of a BFT cluster (two replicas, or a client and a replica): a Link over
// any net.Conn (TCP, or package rubin's face of its transports), a Chan
// over a non-blocking channel of rubin's TCP and RDMA transports, served
// by a selector. Both speak the same bytes, so either end may be either.
//
// Each pair shares a 32-byte key from the cluster configuration. A
// connection starts with a handshake (Client on the dialing side, Server
// on the accepting side) that authenticates both ends with that key and
// derives two fresh session keys; every frame after it carries an
// HMAC-SHA256 tag under the session key of its direction.
//
// # What is protected
//
//   - Authenticity of the peer: a handshake succeeds only if both ends
//     hold the pair's key. The identities each end claims (its Peer, and
//     the Peer it wants) are covered by both handshake MACs, the server
//     rejects a hello that wants another peer (so a hello cannot be
//     reflected to a server of its own sender), and the two finished MACs
//     and the two frame directions use distinct derived keys.
//   - Freshness across connections: session keys are derived (HKDF-SHA256)
//     from the pair's key and a 32-byte random nonce from each side, so
//     frames recorded on one connection are rejected on every other, in
//     either direction, and replaying an old handshake fails because the
//     other side's nonce is new.
//   - Integrity and order within a connection: a frame's tag covers an
//     implicit per-direction sequence number and the payload, so a
//     modified, replayed, reordered, dropped or reflected frame fails
//     verification at the next frame that arrives. Any verification failure
//     closes the link: the receiver never sees a frame after a gap.
//
// # What is not protected
//
//   - Confidentiality: frames are authenticated, not encrypted. Anyone on
//     the path reads every payload.
//   - Truncation and availability: an attacker on the path can cut the
//     connection, or drop everything after some frame; the receiver sees
//     an error or EOF, never a forged frame. The protocol above must
//     retransmit (PBFT's does) over a new link.
//   - Traffic analysis: frame lengths and timing are visible.
//   - Compromised keys: whoever holds a pair's key can impersonate either
//     member of the pair to the other. There is no forward secrecy: a
//     recorded connection's frames can be verified (not forged into new
//     connections) by someone who later learns the key.
//
// # Wire format
//
// Handshake (fixed sizes; integers big-endian; a Peer is one byte, 0 for a
// replica and 1 for a client, then its 8-byte ID):
//
//	hello   (dialer → server, 55 bytes): "RBFL" version(1) self(9) want(9) nonceC(32)
//	reply   (server → dialer, 69 bytes): "RBFL" version(1) nonceS(32) macS(32)
//	confirm (dialer → server, 32 bytes): macC(32)
//
// With T = SHA-256(hello || "RBFL" version nonceS) and
// PRK = HKDF-Extract(SHA-256, salt=T, secret=key):
// macS = HMAC-SHA256(HKDF-Expand(PRK, "server finished"), T),
// macC = HMAC-SHA256(HKDF-Expand(PRK, "client finished"), T), and the
// frame keys are HKDF-Expand(PRK, "dialer to server") and
// HKDF-Expand(PRK, "server to dialer"), 32 bytes each. A party that
// rejects the handshake closes the connection without saying why; the
// error is reported on its own side only.
//
// Frame:
//
//	length(4, big-endian) payload(length) tag(16)
//
// where tag is HMAC-SHA256(direction key, seq(8, big-endian) || payload)
// truncated to its first 16 bytes (128 bits, as in RFC 4868), and seq
// counts the frames of that direction from 0. The length itself is not
// under the tag: a changed length misaligns the stream, so the tag check of
// that frame fails.
package link

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"
)

// KeySize is the length of a pair's shared key.
const KeySize = 32

// TagSize is the length of a frame's tag: HMAC-SHA256 truncated to 128
// bits.
const TagSize = 16

// HeaderSize is the length of a frame's length prefix.
const HeaderSize = 4

// Defaults for Options.
const (
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultMaxFrame         = 16 << 20
	DefaultBufferSize       = 64 << 10
)

// maxFrameLimit is the largest payload the 4-byte length can express.
const maxFrameLimit = 1<<32 - 1

// Errors a Link's methods wrap; test with errors.Is.
var (
	// ErrBadMAC: a handshake or frame MAC did not verify: wrong key, or
	// a frame modified, replayed, reordered or dropped on the way.
	ErrBadMAC = errors.New("bad MAC")
	// ErrUnknownPeer: the server's lookup has no key for the dialer.
	ErrUnknownPeer = errors.New("unknown peer")
	// ErrWrongPeer: the dialer asked for a peer other than the server.
	ErrWrongPeer = errors.New("wrong peer")
	// ErrProtocol: the handshake bytes are not this protocol or version.
	ErrProtocol = errors.New("protocol mismatch")
	// ErrFrameTooLarge: a frame's length exceeds Options.MaxFrame.
	ErrFrameTooLarge = errors.New("frame too large")
)

// Peer names one end of a link: a replica (its index in the cluster
// configuration) or a client (its client ID).
type Peer struct {
	Client bool
	ID     uint64
}

// Replica returns the Peer of replica id.
func Replica(id uint64) Peer { return Peer{ID: id} }

// ClientPeer returns the Peer of client id.
func ClientPeer(id uint64) Peer { return Peer{Client: true, ID: id} }

// String gives "replica 3" or "client 17", for errors and logs.
func (p Peer) String() string {
	if p.Client {
		return "client " + strconv.FormatUint(p.ID, 10)
	}
	return "replica " + strconv.FormatUint(p.ID, 10)
}

// Options tune a Link. The zero value means the defaults.
type Options struct {
	// HandshakeTimeout bounds the whole handshake. Default
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxFrame bounds a frame's payload, in both directions: Send refuses
	// larger payloads, and Recv rejects a larger length prefix before it
	// allocates anything. Default DefaultMaxFrame (16 MiB); at most
	// 4 GiB - 1.
	MaxFrame int
	// WriteTimeout, if positive, bounds each write to the connection
	// (Send, Flush, and a Queue that fills the buffer), so a peer that
	// stops reading cannot block a sender forever. Default 0: no bound.
	WriteTimeout time.Duration
	// BufferSize is the size of the read and write buffers. Default
	// DefaultBufferSize (64 KiB).
	BufferSize int
}

func (o Options) withDefaults() Options {
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	o.MaxFrame = min(o.MaxFrame, maxFrameLimit)
	if o.BufferSize <= 0 {
		o.BufferSize = DefaultBufferSize
	}
	return o
}

// A Link is an authenticated connection to one peer.
//
// Concurrency: Send, Queue and Flush may be called from any number of
// goroutines (they are serialized by a mutex, and a frame is never
// interleaved with another); Recv and RecvAppend likewise, independently:
// one goroutine can receive while others send. Close may be called at any
// time, from any goroutine, and unblocks pending calls.
//
// Errors are final: after a failed Send, Flush or Recv (a MAC failure, a
// malformed frame, a write or read error, a timeout) the link is closed,
// and every later call of that kind fails with the same error, because the
// stream's framing and sequence numbers can no longer be trusted. Reconnect
// with a new handshake.
type Link struct {
	conn   net.Conn
	self   Peer
	remote Peer
	opts   Options

	wmu  sync.Mutex
	w    *bufio.Writer
	wmac hash.Hash
	wseq uint64
	wbuf [HeaderSize + sha256.Size + 8]byte // header, or seq, or the full tag
	werr error

	rmu  sync.Mutex
	r    *bufio.Reader
	rmac hash.Hash
	rseq uint64
	rbuf [sha256.Size + TagSize]byte // header or seq, then computed tag; received tag
	rerr error

	closeOnce sync.Once
	closeErr  error
}

// newLink wraps conn with known session keys; the handshake ends with it,
// and tests construct links with it directly.
func newLink(conn net.Conn, self, remote Peer, sendKey, recvKey []byte, opts Options) *Link {
	opts = opts.withDefaults()
	return &Link{
		conn:   conn,
		self:   self,
		remote: remote,
		opts:   opts,
		w:      bufio.NewWriterSize(conn, opts.BufferSize),
		wmac:   hmac.New(sha256.New, sendKey),
		r:      bufio.NewReaderSize(conn, opts.BufferSize),
		rmac:   hmac.New(sha256.New, recvKey),
	}
}

// Remote returns the authenticated peer at the other end.
func (l *Link) Remote() Peer { return l.remote }

// Self returns this end's Peer.
func (l *Link) Self() Peer { return l.self }

// RemoteAddr returns the connection's remote network address, for logs.
func (l *Link) RemoteAddr() net.Addr { return l.conn.RemoteAddr() }

// Close closes the connection. Frames queued and not flushed are lost.
func (l *Link) Close() error {
	l.closeOnce.Do(func() { l.closeErr = l.conn.Close() })
	return l.closeErr
}

// fail records a final error for one direction and closes the link.
func (l *Link) fail(slot *error, err error) error {
	*slot = err
	l.Close()
	return err
}

// Send sends one frame and flushes it, with any frames queued before it,
// in a single write when they fit the buffer. The payload may be empty.
// Send does not keep payload.
func (l *Link) Send(payload []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.queue(payload); err != nil {
		return err
	}
	return l.flush()
}

// Queue appends one frame to the write buffer without flushing it, so that
// several frames go out in one write: call Flush after the last. A frame
// that does not fit the buffer is written through (the buffer's frames
// first), so Queue can block on the connection. Queue does not keep
// payload.
func (l *Link) Queue(payload []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.queue(payload)
}

// Flush writes the queued frames.
func (l *Link) Flush() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.flush()
}

func (l *Link) queue(payload []byte) error {
	if l.werr != nil {
		return l.werr
	}
	if len(payload) > l.opts.MaxFrame {
		// Not final: nothing was written, so the stream is intact.
		return fmt.Errorf("link: send to %s: %w: %d bytes, limit %d", l.remote, ErrFrameTooLarge, len(payload), l.opts.MaxFrame)
	}
	if HeaderSize+len(payload)+TagSize > l.w.Available() {
		// Only a frame that does not fit the buffer writes here.
		l.setWriteDeadline()
	}
	// The tag: HMAC(seq || payload), computed before the header is
	// written so the whole frame goes to the buffer in three writes.
	binary.BigEndian.PutUint64(l.wbuf[:8], l.wseq)
	l.wmac.Reset()
	l.wmac.Write(l.wbuf[:8])
	l.wmac.Write(payload)
	tag := l.wmac.Sum(l.wbuf[HeaderSize:HeaderSize])
	binary.BigEndian.PutUint32(l.wbuf[:HeaderSize], uint32(len(payload)))
	l.wseq++
	if _, err := l.w.Write(l.wbuf[:HeaderSize]); err != nil {
		return l.writeFailed(err)
	}
	if _, err := l.w.Write(payload); err != nil {
		return l.writeFailed(err)
	}
	if _, err := l.w.Write(tag[:TagSize]); err != nil {
		return l.writeFailed(err)
	}
	return nil
}

func (l *Link) flush() error {
	if l.werr != nil {
		return l.werr
	}
	if l.w.Buffered() == 0 {
		return nil
	}
	l.setWriteDeadline()
	if err := l.w.Flush(); err != nil {
		return l.writeFailed(err)
	}
	return nil
}

func (l *Link) setWriteDeadline() {
	if l.opts.WriteTimeout > 0 {
		l.conn.SetWriteDeadline(time.Now().Add(l.opts.WriteTimeout))
	}
}

func (l *Link) writeFailed(err error) error {
	return l.fail(&l.werr, fmt.Errorf("link: send to %s: %w", l.remote, err))
}

// Recv receives one frame and returns its payload in a newly allocated
// slice, which the caller owns: it may keep it (a consensus log does)
// and modify it.
func (l *Link) Recv() ([]byte, error) {
	return l.RecvAppend(nil)
}

// RecvAppend receives one frame and appends its payload to dst, returning
// the extended slice, so a caller that consumes each frame before the next
// can reuse one buffer: p, err = l.RecvAppend(p[:0]). On error it returns
// dst unchanged in length (its spare capacity may have been written).
//
// A frame's memory grows with the bytes actually received, not with the
// length prefix, so a peer that announces a large frame and stalls holds
// at most about twice what it sent.
func (l *Link) RecvAppend(dst []byte) ([]byte, error) {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if l.rerr != nil {
		return dst, l.rerr
	}
	hdr := l.rbuf[:HeaderSize]
	if _, err := io.ReadFull(l.r, hdr); err != nil {
		if err == io.EOF {
			// A clean end between frames.
			return dst, l.fail(&l.rerr, fmt.Errorf("link: recv from %s: %w", l.remote, io.EOF))
		}
		return dst, l.readFailed("header", err)
	}
	n := binary.BigEndian.Uint32(hdr)
	if uint64(n) > uint64(l.opts.MaxFrame) {
		return dst, l.fail(&l.rerr, fmt.Errorf("link: recv from %s: frame %d: %w: length %d, limit %d",
			l.remote, l.rseq, ErrFrameTooLarge, n, l.opts.MaxFrame))
	}
	start := len(dst)
	out, err := readPayload(l.r, dst, int(n))
	if err != nil {
		return dst, l.readFailed("payload", err)
	}
	got := l.rbuf[sha256.Size:]
	if _, err := io.ReadFull(l.r, got); err != nil {
		return dst, l.readFailed("tag", err)
	}
	binary.BigEndian.PutUint64(l.rbuf[:8], l.rseq)
	l.rmac.Reset()
	l.rmac.Write(l.rbuf[:8])
	l.rmac.Write(out[start:])
	want := l.rmac.Sum(l.rbuf[:0]) // overwrites seq, not the received tag
	if !hmac.Equal(want[:TagSize], got) {
		return dst, l.fail(&l.rerr, fmt.Errorf("link: recv from %s: frame %d: %w (frame modified, replayed, reordered or dropped; or wrong session)",
			l.remote, l.rseq, ErrBadMAC))
	}
	l.rseq++
	return out, nil
}

// FrameBuffered reports whether a whole frame has been received and
// buffered, so that the next Recv returns without reading the connection.
// A reader uses it to hand on a burst of frames together.
func (l *Link) FrameBuffered() bool {
	l.rmu.Lock()
	defer l.rmu.Unlock()
	if l.rerr != nil || l.r.Buffered() < HeaderSize {
		return false
	}
	hdr, err := l.r.Peek(HeaderSize)
	if err != nil {
		return false
	}
	n := uint64(binary.BigEndian.Uint32(hdr))
	return uint64(l.r.Buffered()) >= HeaderSize+n+TagSize
}

// readChunk is how far a payload's buffer grows past what has arrived.
const readChunk = 64 << 10

// readPayload appends n bytes from r to dst, growing dst as the bytes
// arrive (at most doubling, at least readChunk at a time) rather than
// trusting n up front.
func readPayload(r io.Reader, dst []byte, n int) ([]byte, error) {
	want := len(dst) + n
	for len(dst) < want {
		have := len(dst)
		step := min(want-have, max(readChunk, n-(want-have)))
		dst = slices.Grow(dst, step)
		m, err := io.ReadFull(r, dst[have:have+step])
		dst = dst[:have+m]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return dst, err
		}
	}
	return dst, nil
}

func (l *Link) readFailed(what string, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return l.fail(&l.rerr, fmt.Errorf("link: recv from %s: frame %d %s: %w", l.remote, l.rseq, what, err))
}
