package simnet

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/wire"
)

// Keys is the key material of a simulated cluster: an HMAC-SHA256 key per
// replica (standing in for a signature key pair: Verify recomputes the
// MAC) and a key per client and replica pair for request authenticators.
// Deterministic: derived from a seed.
type Keys struct {
	N    int
	seed []byte
}

// NewKeys derives keys for n replicas from seed.
func NewKeys(n int, seed uint64) *Keys {
	s := binary.BigEndian.AppendUint64(nil, seed)
	return &Keys{N: n, seed: s}
}

func (k *Keys) derive(parts ...uint64) []byte {
	m := hmac.New(sha256.New, k.seed)
	for _, p := range parts {
		m.Write(binary.BigEndian.AppendUint64(nil, p))
	}
	return m.Sum(nil)
}

func (k *Keys) replicaKey(id bft.ReplicaID) []byte { return k.derive(1, uint64(id)) }
func (k *Keys) clientKey(c bft.ClientID, r int) []byte {
	return k.derive(2, uint64(c), uint64(r))
}

// signedContent is what a signature covers: wire.SignedBytes, as with
// the real authenticator (it is canonical, so a message survives the
// codec round trip with its signatures valid).
func signedContent(m bft.Message) []byte { return wire.SignedBytes(nil, m) }

// MAC computes replica id's "signature" over m.
func (k *Keys) MAC(id bft.ReplicaID, m bft.Message) []byte {
	h := hmac.New(sha256.New, k.replicaKey(id))
	h.Write(signedContent(m))
	return h.Sum(nil)
}

func requestContent(r *bft.Request) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(r.Client))
	b = binary.BigEndian.AppendUint64(b, r.Timestamp)
	b = binary.BigEndian.AppendUint64(b, bft.RequestFlags(r))
	b = binary.BigEndian.AppendUint64(b, r.Nonce)
	return append(b, r.Op...)
}

// SignRequest fills r.Auth with one 32-byte MAC per replica.
func (k *Keys) SignRequest(r *bft.Request) {
	r.Auth = r.Auth[:0]
	for i := 0; i < k.N; i++ {
		h := hmac.New(sha256.New, k.clientKey(r.Client, i))
		h.Write(requestContent(r))
		r.Auth = h.Sum(r.Auth)
	}
}

// Auth is replica id's Authenticator.
func (k *Keys) Auth(id bft.ReplicaID) bft.Authenticator { return &hmacAuth{k: k, id: id} }

type hmacAuth struct {
	k  *Keys
	id bft.ReplicaID
}

func (a *hmacAuth) Sign(m bft.Message) []byte { return a.k.MAC(a.id, m) }

func (a *hmacAuth) Verify(id bft.ReplicaID, m bft.Message, sig []byte) bool {
	if int(id) >= a.k.N || len(sig) != sha256.Size {
		return false
	}
	return hmac.Equal(a.k.MAC(id, m), sig)
}

func (a *hmacAuth) VerifyRequest(r *bft.Request) bool {
	i := int(a.id) * sha256.Size
	if len(r.Auth) != a.k.N*sha256.Size {
		return false
	}
	h := hmac.New(sha256.New, a.k.clientKey(r.Client, int(a.id)))
	h.Write(requestContent(r))
	return hmac.Equal(h.Sum(nil), r.Auth[i:i+sha256.Size])
}
