package link

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Handshake constants; see the package documentation for the format.
const (
	magic      = "RBFL"
	version    = 1
	nonceSize  = 32
	peerSize   = 9
	prefixSize = len(magic) + 1
	helloSize  = prefixSize + 2*peerSize + nonceSize  // 55
	replySize  = prefixSize + nonceSize + sha256.Size // 69
	confirmSz  = sha256.Size                          // 32
	labelSrvOK = "server finished"                    // key for macS
	labelCliOK = "client finished"                    // key for macC
	labelC2S   = "dialer to server"                   // frames from the dialer
	labelS2C   = "server to dialer"                   // frames from the server
)

// Client runs the dialing side of the handshake on conn: it proves to the
// server that it is self, holding key (the KeySize-byte key self shares
// with remote), and checks that the server is remote. conn is usually
// fresh from net.Dial or rubin.Dial. On success the Link owns conn; on
// failure Client closes conn.
//
// Client returns once it has verified the server. The server checks the
// dialer's proof after that; if it rejects it (which only a tampered
// connection can cause, since the server's proof already showed the keys
// match), it closes the connection and the first Recv fails.
func Client(conn net.Conn, self, remote Peer, key []byte, opts Options) (*Link, error) {
	opts = opts.withDefaults()
	fail := func(format string, args ...any) (*Link, error) {
		conn.Close()
		return nil, fmt.Errorf("link: handshake with %s: %w", remote, fmt.Errorf(format, args...))
	}
	if len(key) != KeySize {
		return fail("key is %d bytes, want %d", len(key), KeySize)
	}
	if err := conn.SetDeadline(time.Now().Add(opts.HandshakeTimeout)); err != nil {
		return fail("setting deadline: %w", err)
	}

	hello := make([]byte, 0, helloSize)
	hello = append(hello, magic...)
	hello = append(hello, version)
	hello = appendPeer(hello, self)
	hello = appendPeer(hello, remote)
	hello = hello[:helloSize]
	if _, err := rand.Read(hello[helloSize-nonceSize:]); err != nil {
		return fail("nonce: %w", err)
	}
	if _, err := conn.Write(hello); err != nil {
		return fail("sending hello: %w", err)
	}

	reply := make([]byte, replySize)
	if _, err := io.ReadFull(conn, reply); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// The server says nothing when it rejects a hello.
			return fail("reading reply: %w (server closed: it does not know %s, is not %s, or speaks another version)", err, self, remote)
		}
		return fail("reading reply: %w", err)
	}
	if string(reply[:len(magic)]) != magic || reply[len(magic)] != version {
		return fail("%w: reply starts %q, want %q version %d", ErrProtocol, reply[:prefixSize], magic, version)
	}
	ks, err := deriveKeys(key, hello, reply[:prefixSize+nonceSize])
	if err != nil {
		return fail("%w", err)
	}
	if !hmac.Equal(ks.macS, reply[prefixSize+nonceSize:]) {
		return fail("%w from server (it holds a different key)", ErrBadMAC)
	}
	if _, err := conn.Write(ks.macC); err != nil {
		return fail("sending confirmation: %w", err)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return fail("clearing deadline: %w", err)
	}
	return newLink(conn, self, remote, ks.c2s, ks.s2c, opts), nil
}

// Server runs the accepting side of the handshake on conn: it reads which
// peer the dialer claims to be, gets that peer's key from lookup (ok false
// for an unknown peer), and checks the dialer's proof. On success the
// Link's Remote is the authenticated dialer and the Link owns conn; on
// failure Server closes conn without telling the dialer why.
//
// Server blocks for up to Options.HandshakeTimeout; an accept loop should
// run it in a goroutine per connection so that a slow or silent dialer
// does not hold up the others.
func Server(conn net.Conn, self Peer, lookup func(remote Peer) (key []byte, ok bool), opts Options) (*Link, error) {
	opts = opts.withDefaults()
	who := "dialer at " + addrString(conn.RemoteAddr())
	fail := func(format string, args ...any) (*Link, error) {
		conn.Close()
		return nil, fmt.Errorf("link: handshake with %s: %w", who, fmt.Errorf(format, args...))
	}
	if err := conn.SetDeadline(time.Now().Add(opts.HandshakeTimeout)); err != nil {
		return fail("setting deadline: %w", err)
	}

	hello := make([]byte, helloSize)
	if _, err := io.ReadFull(conn, hello); err != nil {
		return fail("reading hello: %w", err)
	}
	if string(hello[:len(magic)]) != magic || hello[len(magic)] != version {
		return fail("%w: hello starts %q, want %q version %d", ErrProtocol, hello[:prefixSize], magic, version)
	}
	remote, ok1 := decodePeer(hello[prefixSize:])
	want, ok2 := decodePeer(hello[prefixSize+peerSize:])
	if !ok1 || !ok2 {
		return fail("%w: malformed peer in hello", ErrProtocol)
	}
	// From here the error names the claimed peer; it is not yet proven.
	who = remote.String()
	if want != self {
		return fail("%w: it wants %s, this is %s", ErrWrongPeer, want, self)
	}
	key, ok := lookup(remote)
	if !ok {
		return fail("%w", ErrUnknownPeer)
	}
	if len(key) != KeySize {
		return fail("configured key is %d bytes, want %d", len(key), KeySize)
	}

	reply := make([]byte, replySize)
	copy(reply, hello[:prefixSize])
	if _, err := rand.Read(reply[prefixSize : prefixSize+nonceSize]); err != nil {
		return fail("nonce: %w", err)
	}
	ks, err := deriveKeys(key, hello, reply[:prefixSize+nonceSize])
	if err != nil {
		return fail("%w", err)
	}
	copy(reply[prefixSize+nonceSize:], ks.macS)
	if _, err := conn.Write(reply); err != nil {
		return fail("sending reply: %w", err)
	}
	confirm := make([]byte, confirmSz)
	if _, err := io.ReadFull(conn, confirm); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// The dialer closes without a word when our proof fails.
			return fail("reading confirmation: %w (dialer closed: it holds a different key?)", err)
		}
		return fail("reading confirmation: %w", err)
	}
	if !hmac.Equal(ks.macC, confirm) {
		return fail("%w from dialer (it holds a different key)", ErrBadMAC)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return fail("clearing deadline: %w", err)
	}
	return newLink(conn, self, remote, ks.s2c, ks.c2s, opts), nil
}

// sessionKeys are what a handshake derives.
type sessionKeys struct {
	macS, macC []byte // the two finished MACs
	c2s, s2c   []byte // frame keys per direction
}

// deriveKeys derives the handshake MACs and frame keys from the pair's key
// and the transcript: the hello (both identities, the dialer's nonce) and
// the reply's prefix (the server's nonce). Binding the transcript into the
// salt makes every key specific to this connection and these identities.
func deriveKeys(key, hello, replyPrefix []byte) (sessionKeys, error) {
	h := sha256.New()
	h.Write(hello)
	h.Write(replyPrefix)
	transcript := h.Sum(nil)
	prk, err := hkdf.Extract(sha256.New, key, transcript)
	if err != nil {
		return sessionKeys{}, fmt.Errorf("deriving keys: %w", err)
	}
	expand := func(label string) []byte {
		if err != nil {
			return nil
		}
		var k []byte
		k, err = hkdf.Expand(sha256.New, prk, label, sha256.Size)
		return k
	}
	finish := func(k []byte) []byte {
		m := hmac.New(sha256.New, k)
		m.Write(transcript)
		return m.Sum(nil)
	}
	ks := sessionKeys{
		macS: finish(expand(labelSrvOK)),
		macC: finish(expand(labelCliOK)),
		c2s:  expand(labelC2S),
		s2c:  expand(labelS2C),
	}
	if err != nil {
		return sessionKeys{}, fmt.Errorf("deriving keys: %w", err)
	}
	return ks, nil
}

func appendPeer(b []byte, p Peer) []byte {
	kind := byte(0)
	if p.Client {
		kind = 1
	}
	return binary.BigEndian.AppendUint64(append(b, kind), p.ID)
}

func decodePeer(b []byte) (Peer, bool) {
	if b[0] > 1 {
		return Peer{}, false
	}
	return Peer{Client: b[0] == 1, ID: binary.BigEndian.Uint64(b[1:peerSize])}, true
}

func addrString(a net.Addr) string {
	if a == nil {
		return "unknown address"
	}
	return a.String()
}
