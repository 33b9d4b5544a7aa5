package auth

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/wire"
)

// MACSize is the size of one entry of a request authenticator: an
// HMAC-SHA256 truncated to its first 16 bytes. A forger must guess 128
// bits per attempt, and each attempt costs a message to a replica; the
// truncation halves the authenticator, which every request carries once
// per replica and every pre-prepare once per request.
const MACSize = 16

// ReplicaAuth is one replica's bft.Authenticator. It is safe for
// concurrent use: a driver may verify messages on many goroutines. Its
// state is read-only after NewReplicaAuth, and each call takes its
// scratch hash and buffers from pools.
//
// Ed25519 is curve25519-voi's (as CometBFT uses it), about twice as fast
// to verify as crypto/ed25519 with each replica's public key expanded
// once, and set to accept exactly the signatures crypto/ed25519 accepts
// (VerifyOptionsStdLib); signatures are the same bytes.
type ReplicaAuth struct {
	id      bft.ReplicaID
	priv    voi.PrivateKey
	pubs    []*voi.ExpandedPublicKey
	clients map[bft.ClientID]*macKey // request keys each client shares with this replica
}

// verifyOptions makes voi accept what crypto/ed25519.Verify accepts.
var verifyOptions = &voi.Options{Verify: voi.VerifyOptionsStdLib}

var _ bft.Authenticator = (*ReplicaAuth)(nil)

// NewReplicaAuth returns replica id's authenticator. c must hold the
// replica's secrets: its private key and every client's key with it.
func NewReplicaAuth(c *Cluster, id bft.ReplicaID) (*ReplicaAuth, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("auth: replica %d: %w", id, err)
	}
	n := len(c.Replicas)
	if uint64(id) >= uint64(n) {
		return nil, fmt.Errorf("auth: no replica %d in a cluster of %d", id, n)
	}
	if !c.holdsReplica(int(id)) {
		return nil, fmt.Errorf("auth: replica %d's secrets are not in %s's configuration", id, c.Holder)
	}
	a := &ReplicaAuth{
		id:      id,
		priv:    voi.PrivateKey(ed25519.NewKeyFromSeed(c.Replicas[id].PrivateKey)),
		pubs:    make([]*voi.ExpandedPublicKey, n),
		clients: make(map[bft.ClientID]*macKey, len(c.Clients)),
	}
	for i, r := range c.Replicas {
		// Expanding copies the key: c may change later.
		xp, err := voi.NewExpandedPublicKey(voi.PublicKey(r.PublicKey))
		if err != nil {
			return nil, fmt.Errorf("auth: replica %d's public key: %w", i, err)
		}
		a.pubs[i] = xp
	}
	for _, cl := range c.Clients {
		k := c.clientKey(cl.ID, id)
		if k == nil { // Validate makes this impossible; be sure anyway
			return nil, fmt.Errorf("auth: replica %d: no key for client %d", id, cl.ID)
		}
		a.clients[cl.ID] = newMACKey(derive(k, labelRequest))
	}
	return a, nil
}

// ID returns the replica's ID.
func (a *ReplicaAuth) ID() bft.ReplicaID { return a.id }

// Sign returns the replica's Ed25519 signature over wire.SignedBytes(m).
func (a *ReplicaAuth) Sign(m bft.Message) []byte {
	buf := getBuf()
	*buf = wire.SignedBytes((*buf)[:0], m)
	sig := voi.Sign(a.priv, *buf)
	putBuf(buf)
	return sig
}

// Verify reports whether sig is replica id's Ed25519 signature over
// wire.SignedBytes(m). It is false for an unknown replica.
func (a *ReplicaAuth) Verify(id bft.ReplicaID, m bft.Message, sig []byte) bool {
	if uint64(id) >= uint64(len(a.pubs)) || len(sig) != ed25519.SignatureSize {
		return false
	}
	buf := getBuf()
	*buf = wire.SignedBytes((*buf)[:0], m)
	ok := voi.VerifyExpandedWithOptions(a.pubs[id], *buf, sig, verifyOptions)
	putBuf(buf)
	return ok
}

// VerifyRequest reports whether r's authenticator holds a valid MAC for
// this replica from r.Client. An authenticator is n MACs of MACSize
// bytes, the one for replica i at offset i*MACSize; any other length is
// rejected, as is an unknown client.
func (a *ReplicaAuth) VerifyRequest(r *bft.Request) bool {
	if r == nil || len(r.Auth) != len(a.pubs)*MACSize {
		return false
	}
	k := a.clients[r.Client]
	if k == nil {
		return false
	}
	h := getHasher()
	mac := k.sum(h, r)
	off := int(a.id) * MACSize
	ok := hmac.Equal(mac, r.Auth[off:off+MACSize])
	putHasher(h)
	return ok
}

// ClientAuth computes a client's request authenticators. It is safe for
// concurrent use.
type ClientAuth struct {
	id   bft.ClientID
	keys []*macKey // indexed by replica
}

// NewClientAuth returns client id's authenticator. c must hold the
// client's keys: be the dealer's configuration or the client's own.
func NewClientAuth(c *Cluster, id bft.ClientID) (*ClientAuth, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("auth: client %d: %w", id, err)
	}
	cl := c.client(id)
	if cl == nil {
		return nil, fmt.Errorf("auth: no client %d", id)
	}
	a := &ClientAuth{id: id, keys: make([]*macKey, len(c.Replicas))}
	for r := range a.keys {
		k := c.clientKey(id, bft.ReplicaID(r))
		if k == nil {
			return nil, fmt.Errorf("auth: client %d's key for replica %d is not in %s's configuration", id, r, c.Holder)
		}
		a.keys[r] = newMACKey(derive(k, labelRequest))
	}
	return a, nil
}

// ID returns the client's ID.
func (a *ClientAuth) ID() bft.ClientID { return a.id }

// Sign authenticates r as this client's: it sets r.Client to the
// client's ID and fills r.Auth with one MAC per replica over (client,
// timestamp, op), reusing r.Auth's capacity. Change none of those fields
// afterwards.
func (a *ClientAuth) Sign(r *bft.Request) {
	r.Client = a.id
	size := len(a.keys) * MACSize
	if cap(r.Auth) < size {
		r.Auth = make([]byte, size)
	}
	r.Auth = r.Auth[:size]
	h := getHasher()
	for i, k := range a.keys {
		copy(r.Auth[i*MACSize:], k.sum(h, r))
	}
	putHasher(h)
}

// macKey is an HMAC-SHA256 key reduced to the SHA-256 states after
// hashing its inner and outer padded blocks. HMAC(k, m) is
// H((k^opad) || H((k^ipad) || m)); restoring a saved state skips the two
// key blocks, half the work for a short request, and lets concurrent
// calls share the key, which crypto/hmac's stateful Hash cannot.
type macKey struct {
	inner, outer []byte // marshaled sha256 states
}

func newMACKey(key []byte) *macKey {
	// Keys are KeySize bytes, shorter than a SHA-256 block, so HMAC pads
	// them with zeros rather than hashing them.
	var pad [sha256.BlockSize]byte
	state := func(x byte) []byte {
		for i := range pad {
			pad[i] = x
			if i < len(key) {
				pad[i] ^= key[i]
			}
		}
		h := sha256.New()
		h.Write(pad[:])
		s, err := h.(encoding.BinaryMarshaler).MarshalBinary()
		if err != nil {
			panic("auth: sha256 state: " + err.Error())
		}
		return s
	}
	return &macKey{inner: state(0x36), outer: state(0x5c)}
}

// sum returns the truncated MAC of r's client, timestamp, flags, nonce
// (a read's only) and op: their uvarints, the op's uvarint length, and
// the op, as in bft.BatchDigest.
// The result aliases h and is valid until h's next use.
func (k *macKey) sum(h *hasher, r *bft.Request) []byte {
	n := binary.PutUvarint(h.hdr[:], uint64(r.Client))
	n += binary.PutUvarint(h.hdr[n:], r.Timestamp)
	n += binary.PutUvarint(h.hdr[n:], bft.RequestFlags(r))
	if r.ReadOnly {
		n += binary.PutUvarint(h.hdr[n:], r.Nonce)
	}
	n += binary.PutUvarint(h.hdr[n:], uint64(len(r.Op)))
	h.restore(k.inner)
	h.h.Write(h.hdr[:n])
	h.h.Write(r.Op)
	inner := h.h.Sum(h.sum[:0])
	h.restore(k.outer)
	h.h.Write(inner)
	return h.h.Sum(h.sum[:0])[:MACSize]
}

// hasher is a goroutine's scratch space for MACs.
type hasher struct {
	h   hash.Hash
	u   encoding.BinaryUnmarshaler
	hdr [5 * binary.MaxVarintLen64]byte
	sum [sha256.Size]byte
}

func (h *hasher) restore(state []byte) {
	if err := h.u.UnmarshalBinary(state); err != nil {
		panic("auth: sha256 state: " + err.Error()) // states come from MarshalBinary
	}
}

var hashers = sync.Pool{New: func() any {
	h := sha256.New()
	return &hasher{h: h, u: h.(encoding.BinaryUnmarshaler)}
}}

func getHasher() *hasher  { return hashers.Get().(*hasher) }
func putHasher(h *hasher) { hashers.Put(h) }

// bufs holds buffers for signed bytes. Buffers that grew past maxPooled
// (a state transfer, a large new view) are dropped rather than kept.
var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooled = 64 << 10

func getBuf() *[]byte { return bufs.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) <= maxPooled {
		bufs.Put(b)
	}
}
