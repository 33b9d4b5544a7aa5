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
	fail := func(err error) (*Link, error) {
		conn.Close()
		return nil, fmt.Errorf("link: handshake with %s: %w", remote, err)
	}
	if err := conn.SetDeadline(time.Now().Add(opts.HandshakeTimeout)); err != nil {
		return fail(fmt.Errorf("setting deadline: %w", err))
	}
	hello, err := newHello(self, remote, key)
	if err != nil {
		return fail(err)
	}
	if _, err := conn.Write(hello); err != nil {
		return fail(fmt.Errorf("sending hello: %w", err))
	}
	reply := make([]byte, replySize)
	if _, err := io.ReadFull(conn, reply); err != nil {
		return fail(replyReadError(err, self, remote))
	}
	confirm, ks, err := clientVerify(hello, reply, key)
	if err != nil {
		return fail(err)
	}
	if _, err := conn.Write(confirm); err != nil {
		return fail(fmt.Errorf("sending confirmation: %w", err))
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return fail(fmt.Errorf("clearing deadline: %w", err))
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
	fail := func(err error) (*Link, error) {
		conn.Close()
		return nil, fmt.Errorf("link: handshake with %s: %w", who, err)
	}
	if err := conn.SetDeadline(time.Now().Add(opts.HandshakeTimeout)); err != nil {
		return fail(fmt.Errorf("setting deadline: %w", err))
	}
	hello := make([]byte, helloSize)
	if _, err := io.ReadFull(conn, hello); err != nil {
		return fail(fmt.Errorf("reading hello: %w", err))
	}
	remote, reply, ks, err := serverReply(hello, self, lookup)
	if remote != nil {
		// From here the error names the claimed peer; it is not yet proven.
		who = remote.String()
	}
	if err != nil {
		return fail(err)
	}
	if _, err := conn.Write(reply); err != nil {
		return fail(fmt.Errorf("sending reply: %w", err))
	}
	confirm := make([]byte, confirmSz)
	if _, err := io.ReadFull(conn, confirm); err != nil {
		return fail(confirmReadError(err))
	}
	if err := serverVerify(ks, confirm); err != nil {
		return fail(err)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return fail(fmt.Errorf("clearing deadline: %w", err))
	}
	return newLink(conn, self, *remote, ks.s2c, ks.c2s, opts), nil
}

// The steps of the handshake, as functions of the bytes exchanged, shared
// by the Link (blocking, on a net.Conn) and the Chan (non-blocking, on a
// channel). Each error is one the caller wraps with the peer's name.

// newHello returns the dialer's hello, with a fresh nonce.
func newHello(self, remote Peer, key []byte) ([]byte, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("key is %d bytes, want %d", len(key), KeySize)
	}
	hello := make([]byte, 0, helloSize)
	hello = append(hello, magic...)
	hello = append(hello, version)
	hello = appendPeer(hello, self)
	hello = appendPeer(hello, remote)
	hello = hello[:helloSize]
	if _, err := rand.Read(hello[helloSize-nonceSize:]); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return hello, nil
}

// replyReadError explains a failure to read the server's reply.
func replyReadError(err error, self, remote Peer) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// The server says nothing when it rejects a hello.
		return fmt.Errorf("reading reply: %w (server closed: it does not know %s, is not %s, or speaks another version)", err, self, remote)
	}
	return fmt.Errorf("reading reply: %w", err)
}

// clientVerify checks the server's reply to hello and returns the
// dialer's confirmation and the session keys.
func clientVerify(hello, reply, key []byte) (confirm []byte, ks sessionKeys, err error) {
	if string(reply[:len(magic)]) != magic || reply[len(magic)] != version {
		return nil, ks, fmt.Errorf("%w: reply starts %q, want %q version %d", ErrProtocol, reply[:prefixSize], magic, version)
	}
	ks, err = deriveKeys(key, hello, reply[:prefixSize+nonceSize])
	if err != nil {
		return nil, ks, err
	}
	if !hmac.Equal(ks.macS, reply[prefixSize+nonceSize:]) {
		return nil, ks, fmt.Errorf("%w from server (it holds a different key)", ErrBadMAC)
	}
	return ks.macC, ks, nil
}

// serverReply checks a dialer's hello and returns the peer it claims to
// be (nil if the hello does not say), the server's reply and the session
// keys.
func serverReply(hello []byte, self Peer, lookup func(remote Peer) (key []byte, ok bool)) (*Peer, []byte, sessionKeys, error) {
	var ks sessionKeys
	if string(hello[:len(magic)]) != magic || hello[len(magic)] != version {
		return nil, nil, ks, fmt.Errorf("%w: hello starts %q, want %q version %d", ErrProtocol, hello[:prefixSize], magic, version)
	}
	remote, ok1 := decodePeer(hello[prefixSize:])
	want, ok2 := decodePeer(hello[prefixSize+peerSize:])
	if !ok1 || !ok2 {
		return nil, nil, ks, fmt.Errorf("%w: malformed peer in hello", ErrProtocol)
	}
	if want != self {
		return &remote, nil, ks, fmt.Errorf("%w: it wants %s, this is %s", ErrWrongPeer, want, self)
	}
	key, ok := lookup(remote)
	if !ok {
		return &remote, nil, ks, ErrUnknownPeer
	}
	if len(key) != KeySize {
		return &remote, nil, ks, fmt.Errorf("configured key is %d bytes, want %d", len(key), KeySize)
	}
	reply := make([]byte, replySize)
	copy(reply, hello[:prefixSize])
	if _, err := rand.Read(reply[prefixSize : prefixSize+nonceSize]); err != nil {
		return &remote, nil, ks, fmt.Errorf("nonce: %w", err)
	}
	ks, err := deriveKeys(key, hello, reply[:prefixSize+nonceSize])
	if err != nil {
		return &remote, nil, ks, err
	}
	copy(reply[prefixSize+nonceSize:], ks.macS)
	return &remote, reply, ks, nil
}

// confirmReadError explains a failure to read the dialer's confirmation.
func confirmReadError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// The dialer closes without a word when our proof fails.
		return fmt.Errorf("reading confirmation: %w (dialer closed: it holds a different key?)", err)
	}
	return fmt.Errorf("reading confirmation: %w", err)
}

// serverVerify checks the dialer's confirmation.
func serverVerify(ks sessionKeys, confirm []byte) error {
	if !hmac.Equal(ks.macC, confirm) {
		return fmt.Errorf("%w from dialer (it holds a different key)", ErrBadMAC)
	}
	return nil
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
