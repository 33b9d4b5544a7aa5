package link

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
)

// ErrHandshakeTimeout: a Chan's handshake did not finish within
// Options.HandshakeTimeout.
var ErrHandshakeTimeout = errors.New("handshake timed out")

// ErrNoRoom: a frame larger than the room Chan.Encode was given.
var ErrNoRoom = errors.New("no room for the frame")

// A Chan is a link over a non-blocking message channel (package channel),
// for a driver that serves many links from one selector: it speaks the
// same handshake and frames as a Link, so either end may be a Link on a
// net.Conn, and it never blocks. The channel's messages are a byte
// stream to it: a frame may span messages, and a message may hold many
// frames.
//
// Frames are written straight into the channel's pool buffers (Encode
// appends a payload in place, and its tag beside it), and a buffer that
// already holds a frame's header and payload can go to several Chans
// without a copy (SendShared: each Chan retains it and sends its own tag
// after it). Received frames are verified in the buffer they arrived in;
// Next returns a payload that aliases it.
//
// Concurrency: a Chan, Close included, belongs to one goroutine at a
// time (the selector's).
//
// Errors are final, as for a Link, except ErrFrameTooLarge from Encode
// (nothing was written) and channel.ErrWouldBlock (try again when the
// selector says).
type Chan struct {
	conn   channel.Conn
	pool   *bufpool.Pool
	self   Peer
	remote Peer
	opts   Options
	bufCap int // how much of a pool buffer one message may use

	// Handshake, until done.
	hs       hsState
	deadline time.Time
	key      []byte
	lookup   func(Peer) ([]byte, bool)
	hello    []byte
	hsBuf    []byte // the bytes being read: reply, hello or confirm
	hsHave   int
	ks       sessionKeys

	// Sending.
	wmac    hash.Hash
	wseq    uint64
	out     *bufpool.Buffer   // frames not yet handed to the channel
	pending []*bufpool.Buffer // handed over but refused for now, in order
	queued  int               // bytes in out and pending
	tag     [sha256.Size]byte
	werr    error

	// Receiving.
	rmac    hash.Hash
	rseq    uint64
	in      *bufpool.Buffer // the buffer being parsed
	inOff   int
	held    *bufpool.Buffer // holds the payload Next returned last
	payIn   *bufpool.Buffer // the buffer the payload being read lies in
	rstate  int             // what is being read: rHeader, rPayload, rTag
	hdr     [HeaderSize]byte
	hdrHave int
	plen    int
	payload []byte
	asm     []byte // a payload that spans messages, assembled
	rtag    [TagSize]byte
	tagHave int
	rerr    error
}

type hsState int

const (
	hsDialing hsState = iota // connect pending: hello not sent
	hsReply                  // dialer: reading the reply
	hsHello                  // server: reading the hello
	hsConfirm                // server: reading the confirmation
	hsDone
)

const (
	rHeader = iota
	rPayload
	rTag
)

// maxAsmKeep is the largest assembly buffer a Chan keeps between frames.
const maxAsmKeep = 1 << 20

// DialChan starts the dialing side of the handshake on conn, a
// non-blocking channel whose connect may still be pending, as Client does
// on a net.Conn. Call Handshake whenever the selector reports conn
// connectable or readable, until it reports done.
func DialChan(conn channel.Conn, self, remote Peer, key []byte, opts Options) (*Chan, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("link: handshake with %s: key is %d bytes, want %d", remote, len(key), KeySize)
	}
	c := newChan(conn, self, opts)
	c.remote, c.key, c.hs = remote, key, hsDialing
	return c, nil
}

// AcceptChan starts the accepting side of the handshake on conn, a
// non-blocking accepted channel, as Server does on a net.Conn. Call
// Handshake whenever the selector reports conn readable, until it reports
// done.
func AcceptChan(conn channel.Conn, self Peer, lookup func(remote Peer) (key []byte, ok bool), opts Options) *Chan {
	c := newChan(conn, self, opts)
	c.lookup, c.hs = lookup, hsHello
	c.hsBuf = make([]byte, helloSize)
	return c
}

func newChan(conn channel.Conn, self Peer, opts Options) *Chan {
	opts = opts.withDefaults()
	pool := conn.Pool()
	return &Chan{
		conn:     conn,
		pool:     pool,
		self:     self,
		opts:     opts,
		bufCap:   min(pool.BufferSize(), conn.MaxMessageSize()),
		deadline: time.Now().Add(opts.HandshakeTimeout),
	}
}

// Conn returns the channel.
func (c *Chan) Conn() channel.Conn { return c.conn }

// Remote returns the peer at the other end: authenticated once Handshake
// reported done; before, the peer dialed, or the zero Peer.
func (c *Chan) Remote() Peer { return c.remote }

// Self returns this end's Peer.
func (c *Chan) Self() Peer { return c.self }

// Established reports whether the handshake is done.
func (c *Chan) Established() bool { return c.hs == hsDone }

// Handshake advances the handshake as far as the channel allows without
// blocking and reports whether it is done. It fails once
// Options.HandshakeTimeout has passed since the Chan was made, so a
// driver calls it on a timer too. On the dialing side the channel's
// connect must have finished (FinishConnect reported true). A failure is
// final: close the Chan. Frames that follow the handshake in the same
// message wait for Next.
func (c *Chan) Handshake() (done bool, err error) {
	if c.hs == hsDone {
		return true, nil
	}
	if c.rerr != nil {
		return false, c.rerr
	}
	if err := c.handshake(); err != nil {
		if errors.Is(err, channel.ErrWouldBlock) {
			if time.Now().After(c.deadline) {
				return false, c.hsFail(ErrHandshakeTimeout)
			}
			return false, nil
		}
		return false, c.hsFail(err)
	}
	return true, nil
}

func (c *Chan) hsFail(err error) error {
	who := c.remote.String()
	if c.lookup != nil && c.hs == hsHello {
		who = "dialer at " + addrString(c.conn.RemoteAddr())
	}
	c.rerr = fmt.Errorf("link: handshake with %s: %w", who, err)
	c.werr = c.rerr
	return c.rerr
}

// handshake runs the steps the bytes at hand allow; it returns
// channel.ErrWouldBlock when it needs more.
func (c *Chan) handshake() error {
	for {
		switch c.hs {
		case hsDialing:
			hello, err := newHello(c.self, c.remote, c.key)
			if err != nil {
				return err
			}
			c.hello = hello
			if err := c.sendRaw(hello); err != nil {
				return fmt.Errorf("sending hello: %w", err)
			}
			c.hs, c.hsBuf = hsReply, make([]byte, replySize)
		case hsReply:
			if err := c.fill(); err != nil {
				if !errors.Is(err, channel.ErrWouldBlock) {
					err = replyReadError(err, c.self, c.remote)
				}
				return err
			}
			confirm, ks, err := clientVerify(c.hello, c.hsBuf, c.key)
			if err != nil {
				return err
			}
			if err := c.sendRaw(confirm); err != nil {
				return fmt.Errorf("sending confirmation: %w", err)
			}
			c.established(ks.c2s, ks.s2c)
			return nil
		case hsHello:
			if err := c.fill(); err != nil {
				if !errors.Is(err, channel.ErrWouldBlock) {
					err = fmt.Errorf("reading hello: %w", err)
				}
				return err
			}
			remote, reply, ks, err := serverReply(c.hsBuf, c.self, c.lookup)
			if remote != nil {
				c.remote = *remote
				c.lookup = nil // errors name the claimed peer from here
			}
			if err != nil {
				return err
			}
			if err := c.sendRaw(reply); err != nil {
				return fmt.Errorf("sending reply: %w", err)
			}
			c.ks = ks
			c.hs, c.hsBuf, c.hsHave = hsConfirm, make([]byte, confirmSz), 0
		case hsConfirm:
			if err := c.fill(); err != nil {
				if !errors.Is(err, channel.ErrWouldBlock) {
					err = confirmReadError(err)
				}
				return err
			}
			if err := serverVerify(c.ks, c.hsBuf); err != nil {
				return err
			}
			c.established(c.ks.s2c, c.ks.c2s)
			return nil
		}
	}
}

// established ends the handshake with the frame keys of each direction.
func (c *Chan) established(sendKey, recvKey []byte) {
	c.wmac = hmac.New(sha256.New, sendKey)
	c.rmac = hmac.New(sha256.New, recvKey)
	c.hs = hsDone
	c.key, c.lookup, c.hello, c.hsBuf, c.ks = nil, nil, nil, nil, sessionKeys{}
}

// fill reads into hsBuf until it is full.
func (c *Chan) fill() error {
	for c.hsHave < len(c.hsBuf) {
		avail, err := c.input()
		if err != nil {
			if errors.Is(err, io.EOF) && c.hsHave > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		k := copy(c.hsBuf[c.hsHave:], avail)
		c.hsHave += k
		c.inOff += k
	}
	c.hsHave = 0
	return nil
}

// sendRaw sends p, a handshake message, in a buffer of its own.
func (c *Chan) sendRaw(p []byte) error {
	b, err := c.pool.TryGet()
	if err != nil {
		return err
	}
	b.Write(p)
	c.queued += b.Len()
	return c.send(b)
}

// input returns the unread bytes of the current buffer, receiving the
// next one when it is used up: never empty unless err is set.
func (c *Chan) input() ([]byte, error) {
	for c.in == nil || c.inOff == c.in.Len() {
		if c.in != nil {
			if c.in == c.payIn {
				// The payload being verified lies in it.
				c.held = c.in
			} else {
				c.in.Release()
			}
			c.in = nil
		}
		b, err := c.conn.Receive()
		if err != nil {
			return nil, err
		}
		c.in, c.inOff = b, 0
	}
	return c.in.Bytes()[c.inOff:], nil
}

// Next returns the payload of the next frame, verified, or
// channel.ErrWouldBlock if no whole frame has arrived. The payload aliases
// a receive buffer (or, for a frame that spans messages, the Chan's
// assembly buffer): it is valid until the next call to Next or Close, and
// a caller that keeps it must copy it. A clean end between frames is
// io.EOF, unwrapped.
func (c *Chan) Next() ([]byte, error) {
	if c.held != nil && c.held != c.payIn {
		// The payload returned last lay in it.
		c.held.Release()
		c.held = nil
	}
	if c.rerr != nil {
		return nil, c.rerr
	}
	if c.hs != hsDone {
		return nil, fmt.Errorf("link: recv from %s: handshake not done", c.remote)
	}
	for {
		avail, err := c.input()
		if err != nil {
			switch {
			case errors.Is(err, channel.ErrWouldBlock):
				return nil, err
			case err == io.EOF && c.rstate == rHeader && c.hdrHave == 0:
				c.rerr = io.EOF
				return nil, io.EOF
			case err == io.EOF:
				err = io.ErrUnexpectedEOF
			}
			c.rerr = fmt.Errorf("link: recv from %s: frame %d: %w", c.remote, c.rseq, err)
			return nil, c.rerr
		}
		switch c.rstate {
		case rHeader:
			k := copy(c.hdr[c.hdrHave:], avail)
			c.hdrHave += k
			c.inOff += k
			if c.hdrHave < HeaderSize {
				continue
			}
			n := binary.BigEndian.Uint32(c.hdr[:])
			if uint64(n) > uint64(c.opts.MaxFrame) {
				c.rerr = fmt.Errorf("link: recv from %s: frame %d: %w: length %d, limit %d",
					c.remote, c.rseq, ErrFrameTooLarge, n, c.opts.MaxFrame)
				return nil, c.rerr
			}
			c.plen, c.rstate = int(n), rPayload
			c.asm = c.asm[:0]
			if cap(c.asm) > maxAsmKeep {
				c.asm = nil
			}
			if c.plen == 0 {
				c.payload, c.rstate = nil, rTag
			}
		case rPayload:
			if len(c.asm) == 0 && len(avail) >= c.plen {
				// In place: the whole payload is in this buffer.
				c.payload = avail[:c.plen:c.plen]
				c.payIn = c.in
				c.inOff += c.plen
				c.rstate = rTag
				continue
			}
			// Grows with what arrives, not with the announced length.
			k := min(len(avail), c.plen-len(c.asm))
			c.asm = append(c.asm, avail[:k]...)
			c.inOff += k
			if len(c.asm) == c.plen {
				c.payload = c.asm[:c.plen:c.plen]
				c.rstate = rTag
			}
		case rTag:
			k := copy(c.rtag[c.tagHave:], avail)
			c.tagHave += k
			c.inOff += k
			if c.tagHave < TagSize {
				continue
			}
			return c.verify()
		}
	}
}

// verify checks the tag of the frame just read and returns its payload.
func (c *Chan) verify() ([]byte, error) {
	p := c.payload
	c.payload, c.payIn = nil, nil
	c.rstate, c.hdrHave, c.tagHave = rHeader, 0, 0
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], c.rseq)
	c.rmac.Reset()
	c.rmac.Write(seq[:])
	c.rmac.Write(p)
	want := c.rmac.Sum(c.tag[:0])
	if !hmac.Equal(want[:TagSize], c.rtag[:]) {
		c.rerr = fmt.Errorf("link: recv from %s: frame %d: %w (frame modified, replayed, reordered or dropped; or wrong session)",
			c.remote, c.rseq, ErrBadMAC)
		return nil, c.rerr
	}
	c.rseq++
	return p, nil
}

// Encode appends one frame whose payload enc appends to the slice it is
// given, and returns the frame's size on the wire. enc should append in
// place: the slice's capacity is what is left of the current pool buffer,
// and a payload that fits is written there, tagged beside it, and never
// copied. A payload that outgrows it (enc's append moved it) is copied
// into as many buffers as it needs. The frame leaves on Flush, or
// earlier when its buffer fills.
//
// A frame that cannot be sent is not, and these errors are not final: a
// payload larger than Options.MaxFrame (ErrFrameTooLarge), a frame larger
// than limit bytes on the wire, if limit is positive (ErrNoRoom: a driver
// bounds what waits for a slow peer with it), and no free pool buffer
// (bufpool.ErrExhausted).
func (c *Chan) Encode(limit int, enc func(dst []byte) []byte) (int, error) {
	if err := c.writable(); err != nil {
		return 0, err
	}
	if err := c.room(HeaderSize + TagSize + minRoom); err != nil {
		return 0, fmt.Errorf("link: send to %s: %w", c.remote, err)
	}
	full := c.out.Full()[:c.bufCap]
	start := c.out.Len()
	room := full[start+HeaderSize : start+HeaderSize : c.bufCap-TagSize]
	p := enc(room)
	if cap(p) != cap(room) {
		// It did not fit: p is a copy of its own.
		if err := c.checkSize(len(p), limit); err != nil {
			return 0, err
		}
		return c.appendCopy(p)
	}
	if err := c.checkSize(len(p), limit); err != nil {
		return 0, err
	}
	binary.BigEndian.PutUint32(full[start:], uint32(len(p)))
	end := start + HeaderSize + len(p)
	copy(full[end:], c.sign(p))
	n := HeaderSize + len(p) + TagSize
	c.out.SetLen(start + n)
	c.queued += n
	return n, nil
}

// room makes sure the out buffer has n bytes free, handing a fuller one
// to the channel and starting a new one.
func (c *Chan) room(n int) error {
	if c.out != nil && c.bufCap-c.out.Len() < n {
		if err := c.emit(); err != nil {
			return err
		}
	}
	if c.out == nil {
		b, err := c.pool.TryGet()
		if err != nil {
			return err
		}
		c.out = b
	}
	return nil
}

// minRoom is the least payload room worth starting a frame in; with less,
// Encode starts a new buffer.
const minRoom = 256

// checkSize tells whether a payload of n bytes may be sent, as a frame of
// at most limit bytes if limit is positive.
func (c *Chan) checkSize(n, limit int) error {
	if n > c.opts.MaxFrame {
		return fmt.Errorf("link: send to %s: %w: %d bytes, limit %d", c.remote, ErrFrameTooLarge, n, c.opts.MaxFrame)
	}
	if limit > 0 && HeaderSize+n+TagSize > limit {
		return fmt.Errorf("link: send to %s: %w: a frame of %d bytes, room for %d", c.remote, ErrNoRoom, HeaderSize+n+TagSize, limit)
	}
	return nil
}

// sign returns the tag of payload p, the next frame, and advances the
// sequence number.
func (c *Chan) sign(p []byte) []byte {
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], c.wseq)
	c.wmac.Reset()
	c.wmac.Write(seq[:])
	c.wmac.Write(p)
	c.wseq++
	return c.wmac.Sum(c.tag[:0])[:TagSize]
}

// Append appends one frame with payload p, copied, and returns the
// frame's size on the wire; see Encode.
func (c *Chan) Append(p []byte) (int, error) {
	if err := c.writable(); err != nil {
		return 0, err
	}
	if err := c.checkSize(len(p), 0); err != nil {
		return 0, err
	}
	return c.appendCopy(p)
}

// appendCopy writes the frame of p into out buffers, as many as it takes.
func (c *Chan) appendCopy(p []byte) (int, error) {
	var hdr [HeaderSize]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(p)))
	tag := c.sign(p)
	for _, part := range [3][]byte{hdr[:], p, tag} {
		for len(part) > 0 {
			if err := c.room(1); err != nil {
				// Part of the frame is written: the stream is broken.
				return 0, c.writeFailed(err)
			}
			k := copy(c.out.Full()[c.out.Len():c.bufCap], part)
			c.out.SetLen(c.out.Len() + k)
			part = part[k:]
		}
	}
	n := HeaderSize + len(p) + TagSize
	c.queued += n
	return n, nil
}

// SendShared sends the frame whose header and payload fill b (b's bytes:
// the 4-byte length, then that many payload bytes; see PutHeader) after
// the frames before it, and its tag after it. b may go to many Chans: each
// retains it, so the caller keeps its own reference and releases it when
// it has handed b to all. b must fit one message of the channel. It
// returns the frame's size on the wire. Without a free pool buffer for
// the tag it sends nothing and fails with bufpool.ErrExhausted, which is
// not final.
func (c *Chan) SendShared(b *bufpool.Buffer) (int, error) {
	if err := c.writable(); err != nil {
		return 0, err
	}
	fr := b.Bytes()
	if len(fr) < HeaderSize || int(binary.BigEndian.Uint32(fr)) != len(fr)-HeaderSize {
		return 0, fmt.Errorf("link: send to %s: shared buffer of %d bytes is not one frame without its tag", c.remote, len(fr))
	}
	p := fr[HeaderSize:]
	if err := c.checkSize(len(p), 0); err != nil {
		return 0, err
	}
	o, err := c.pool.TryGet() // for the tag
	if err != nil {
		return 0, fmt.Errorf("link: send to %s: %w", c.remote, err)
	}
	if err := c.emit(); err != nil {
		o.Release()
		return 0, err
	}
	tag := c.sign(p)
	b.Retain()
	c.queued += len(fr)
	if err := c.send(b); err != nil {
		o.Release()
		return 0, err
	}
	o.Write(tag)
	c.out = o
	c.queued += TagSize
	return len(fr) + TagSize, nil
}

// PutHeader writes the header of a frame whose payload follows it in b
// (from byte HeaderSize on): b is then ready for SendShared.
func PutHeader(b []byte) {
	binary.BigEndian.PutUint32(b, uint32(len(b)-HeaderSize))
}

// emit hands the out buffer to the channel.
func (c *Chan) emit() error {
	if c.out == nil {
		return nil
	}
	b := c.out
	c.out = nil
	return c.send(b)
}

// send hands b to the channel, after the buffers it refused before; one
// it refuses now waits in pending.
func (c *Chan) send(b *bufpool.Buffer) error {
	if len(c.pending) == 0 {
		n := b.Len()
		err := c.conn.Send(b)
		if err == nil {
			c.queued -= n
			return nil
		}
		if !errors.Is(err, channel.ErrWouldBlock) {
			return c.writeFailed(err) // the channel took b all the same
		}
	}
	c.pending = append(c.pending, b)
	return nil
}

// Flush hands every frame appended so far to the channel and pushes it
// out. It returns channel.ErrWouldBlock if some must wait for the channel
// (register for OpWrite and call Flush again).
func (c *Chan) Flush() error {
	if c.werr != nil {
		return c.werr
	}
	if err := c.emit(); err != nil {
		return err
	}
	for len(c.pending) > 0 {
		b := c.pending[0]
		n := b.Len()
		if err := c.conn.Send(b); errors.Is(err, channel.ErrWouldBlock) {
			return err
		} else if err != nil {
			c.pending = c.pending[1:] // the channel took b all the same
			return c.writeFailed(err)
		}
		c.pending[0] = nil
		c.pending = c.pending[1:]
		c.queued -= n
	}
	c.pending = c.pending[:0:0]
	if err := c.conn.Flush(); err != nil {
		if errors.Is(err, channel.ErrWouldBlock) {
			return err
		}
		return c.writeFailed(err)
	}
	return nil
}

// writable returns why frames cannot be sent now, if they cannot.
func (c *Chan) writable() error {
	if c.werr != nil {
		return c.werr
	}
	if c.hs != hsDone {
		return fmt.Errorf("link: send to %s: handshake not done", c.remote)
	}
	return nil
}

// Buffered reports whether received bytes wait in the Chan, where no
// selector sees them: a driver that stops calling Next before it returns
// channel.ErrWouldBlock must come back for them.
func (c *Chan) Buffered() bool { return c.in != nil && c.inOff < c.in.Len() }

// Queued returns the bytes appended and not yet taken by the channel.
func (c *Chan) Queued() int { return c.queued }

// Waiting returns how many pool buffers wait for the channel to take
// them: what a slow peer holds of the pool.
func (c *Chan) Waiting() int { return len(c.pending) }

func (c *Chan) writeFailed(err error) error {
	c.werr = fmt.Errorf("link: send to %s: %w", c.remote, err)
	return c.werr
}

// Close closes the channel and releases the Chan's buffers. Frames not
// yet taken by the channel are lost.
func (c *Chan) Close() error {
	err := c.conn.Close()
	for _, b := range c.pending {
		b.Release()
	}
	c.pending = nil
	for _, b := range []*bufpool.Buffer{c.out, c.in, c.held} {
		if b != nil {
			b.Release()
		}
	}
	c.out, c.in, c.held, c.payIn = nil, nil, nil, nil
	if c.werr == nil {
		c.werr = fmt.Errorf("link: send to %s: %w", c.remote, net.ErrClosed)
	}
	if c.rerr == nil {
		c.rerr = fmt.Errorf("link: recv from %s: %w", c.remote, net.ErrClosed)
	}
	return err
}
