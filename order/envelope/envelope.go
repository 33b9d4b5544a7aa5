// Package envelope decodes and authorizes the envelopes of Fabric's
// orderer API: the transactions a client broadcasts and the signed
// DELIVER_SEEK_INFO requests of a reader.
//
// Authorization is Fabric's Writers and Readers policies in their
// simplest form: an envelope passes if
//
//   - its SignatureHeader.Creator is an msp.SerializedIdentity holding a
//     PEM X.509 certificate with an ECDSA P-256 key;
//   - its Signature is an ASN.1 ECDSA signature by that key over
//     SHA-256 of Envelope.Payload, with a low S (S ≤ N/2), as Fabric's
//     MSP requires;
//   - the certificate chains to one of the CAs the operator named for
//     the policy, at the time given.
//
// The MSP ID is not checked, nor are organizational units, revocation
// lists or any other part of a full MSP configuration.
//
// Errors are *Error values carrying the Fabric status the orderer
// answers with: BAD_REQUEST for what does not decode or is not allowed on
// this API, NOT_FOUND for another channel, FORBIDDEN for a creator or
// signature the policy refuses. Every function is safe for concurrent
// use and deterministic given its arguments.
package envelope

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"github.com/hyperledger/fabric-protos-go-apiv2/msp"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/protobuf/proto"
)

// Error is why an envelope was refused, with the status to answer.
type Error struct {
	Status cb.Status
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Status, e.Reason) }

func errorf(st cb.Status, format string, args ...any) error {
	return &Error{Status: st, Reason: fmt.Sprintf(format, args...)}
}

// StatusOf returns the status an error of this package carries, and
// INTERNAL_SERVER_ERROR for any other non-nil error.
func StatusOf(err error) cb.Status {
	var e *Error
	switch {
	case err == nil:
		return cb.Status_SUCCESS
	case errors.As(err, &e):
		return e.Status
	default:
		return cb.Status_INTERNAL_SERVER_ERROR
	}
}

// OrdererMSPID is the MSP ID of the orderers' own identities: a creator
// of that MSP holds no certificate but an orderer's ID in decimal, and its
// signature is that orderer's Ed25519 signature over the payload, which
// the orderers check with the cluster's keys (Policy.Authorize refuses
// it). The orderers use it to fetch blocks from one another.
const OrdererMSPID = "rubin.orderer"

// Parsed is an envelope decoded down to its creator's certificate. Its
// fields are the decoded messages; none is nil but Cert, which is nil for
// a creator of OrdererMSPID. Cert may be shared with other Parsed values
// of the same creator: it is only read.
type Parsed struct {
	Envelope        *cb.Envelope
	Payload         *cb.Payload
	ChannelHeader   *cb.ChannelHeader
	SignatureHeader *cb.SignatureHeader
	Creator         *msp.SerializedIdentity
	Cert            *x509.Certificate
}

// Parse decodes an encoded envelope for channel: its payload, headers and
// creator. It checks the structure only, not the signature.
func Parse(raw []byte, channel string) (*Parsed, error) {
	env := new(cb.Envelope)
	if err := proto.Unmarshal(raw, env); err != nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the envelope does not decode: %v", err)
	}
	return ParseEnvelope(env, channel)
}

// ParseEnvelope is Parse for an envelope already decoded. The result
// keeps env.
func ParseEnvelope(env *cb.Envelope, channel string) (*Parsed, error) {
	p := &Parsed{Envelope: env, Payload: new(cb.Payload), ChannelHeader: new(cb.ChannelHeader), SignatureHeader: new(cb.SignatureHeader), Creator: new(msp.SerializedIdentity)}
	if err := proto.Unmarshal(env.GetPayload(), p.Payload); err != nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the payload does not decode: %v", err)
	}
	hdr := p.Payload.GetHeader()
	if hdr == nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the payload has no header")
	}
	if err := proto.Unmarshal(hdr.GetChannelHeader(), p.ChannelHeader); err != nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the channel header does not decode: %v", err)
	}
	if err := proto.Unmarshal(hdr.GetSignatureHeader(), p.SignatureHeader); err != nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the signature header does not decode: %v", err)
	}
	if ch := p.ChannelHeader.GetChannelId(); ch != channel {
		return nil, errorf(cb.Status_NOT_FOUND, "channel %q is not served here (%q is)", ch, channel)
	}
	if err := proto.Unmarshal(p.SignatureHeader.GetCreator(), p.Creator); err != nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the creator is not a serialized identity: %v", err)
	}
	if p.Creator.GetMspid() == OrdererMSPID {
		return p, nil
	}
	cert, err := certs.parse(p.Creator.GetIdBytes())
	if err != nil {
		return nil, err
	}
	p.Cert = cert
	return p, nil
}

// certs are the creators' certificates parsed lately: a channel has few
// writers, each sending many envelopes, and parsing a certificate costs
// about as much as the rest of an envelope's decoding.
var certs = certCache{byPEM: make(map[string]*x509.Certificate)}

// certCacheSize bounds certCache, which forgets everything when full.
const certCacheSize = 1024

// certCache maps a creator's id_bytes to its parsed certificate, which
// its users only read.
type certCache struct {
	mu    sync.Mutex
	byPEM map[string]*x509.Certificate
}

func (c *certCache) parse(idBytes []byte) (*x509.Certificate, error) {
	c.mu.Lock()
	cert, ok := c.byPEM[string(idBytes)]
	c.mu.Unlock()
	if ok {
		return cert, nil
	}
	block, _ := pem.Decode(idBytes)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errorf(cb.Status_BAD_REQUEST, "the creator's identity is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the creator's certificate does not parse: %v", err)
	}
	c.mu.Lock()
	if len(c.byPEM) >= certCacheSize {
		clear(c.byPEM)
	}
	c.byPEM[string(idBytes)] = cert
	c.mu.Unlock()
	return cert, nil
}

// CheckTransaction checks that p may be broadcast: a MESSAGE or
// ENDORSER_TRANSACTION, since channel configuration is not supported.
func CheckTransaction(p *Parsed) error {
	switch t := cb.HeaderType(p.ChannelHeader.GetType()); t {
	case cb.HeaderType_MESSAGE, cb.HeaderType_ENDORSER_TRANSACTION:
		return nil
	case cb.HeaderType_CONFIG, cb.HeaderType_CONFIG_UPDATE:
		return errorf(cb.Status_BAD_REQUEST, "channel configuration (%s) is not supported by this orderer", t)
	default:
		return errorf(cb.Status_BAD_REQUEST, "header type %s cannot be broadcast", t)
	}
}

// SeekInfo returns the SeekInfo of a deliver request: p's data, if p is a
// DELIVER_SEEK_INFO envelope with a start position.
func SeekInfo(p *Parsed) (*ab.SeekInfo, error) {
	if t := cb.HeaderType(p.ChannelHeader.GetType()); t != cb.HeaderType_DELIVER_SEEK_INFO {
		return nil, errorf(cb.Status_BAD_REQUEST, "header type %s is not DELIVER_SEEK_INFO", t)
	}
	si := new(ab.SeekInfo)
	if err := proto.Unmarshal(p.Payload.GetData(), si); err != nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the seek info does not decode: %v", err)
	}
	if si.GetStart().GetType() == nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the seek info has no start position")
	}
	return si, nil
}

// Policy is a channel's Writers or Readers policy: the CAs whose
// certificates may sign. A Policy is safe for concurrent use; one made
// by NewPolicy is immutable, one made by Memoized remembers.
type Policy struct {
	roots *x509.CertPool
	memo  *memo // nil: Authorize remembers nothing
}

// Memoized returns a policy of the same CAs whose Authorize remembers
// the ECDSA verifications that passed and the certificate chains it
// verified, and so answers an envelope checked before, or another from
// the same certificate, without verifying again. It answers exactly as
// pol does at every time: a signature verification is a pure function
// of the key, digest and signature, and a chain is reused only when the
// time checked lies within the validity of every certificate in it, the
// only part of a chain's verification that depends on the time; any
// other check verifies afresh. What it remembers is bounded (MemoSize
// entries of each kind, then forgotten all at once). An orderer keeps
// one for the checks on receipt and at execution; orderers that share
// one in a process share their work too.
func (pol *Policy) Memoized() *Policy {
	return &Policy{roots: pol.roots, memo: &memo{sigs: make(map[[32]byte]struct{}), chains: make(map[string]validity)}}
}

// MemoSize bounds what a Memoized policy remembers of each kind.
const MemoSize = 1 << 16

type memo struct {
	mu     sync.Mutex
	sigs   map[[32]byte]struct{} // sigKey of the verifications that passed
	chains map[string]validity   // by the certificate's DER
}

// validity is when every certificate of a verified chain is valid,
// NotBefore to NotAfter, both included, as crypto/x509 judges it.
type validity struct{ from, to time.Time }

// sigKey names a verification: the key, the digest, the signature.
func sigKey(spki []byte, digest [32]byte, sig []byte) [32]byte {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(spki)))
	h.Write(n[:])
	h.Write(spki)
	h.Write(digest[:])
	h.Write(sig)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (m *memo) verified(k [32]byte) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.sigs[k]
	return ok
}

func (m *memo) rememberSig(k [32]byte) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sigs) >= MemoSize {
		clear(m.sigs)
	}
	m.sigs[k] = struct{}{}
}

// chainValid reports whether cert has a chain remembered that is valid
// at now.
func (m *memo) chainValid(cert *x509.Certificate, now time.Time) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.chains[string(cert.Raw)]
	return ok && !now.Before(v.from) && !now.After(v.to)
}

func (m *memo) rememberChain(cert *x509.Certificate, chain []*x509.Certificate) {
	if m == nil || len(chain) == 0 {
		return
	}
	v := validity{from: chain[0].NotBefore, to: chain[0].NotAfter}
	for _, c := range chain[1:] {
		if c.NotBefore.After(v.from) {
			v.from = c.NotBefore
		}
		if c.NotAfter.Before(v.to) {
			v.to = c.NotAfter
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.chains) >= MemoSize {
		clear(m.chains)
	}
	m.chains[string(cert.Raw)] = v
}

// NewPolicy returns the policy of the CA certificates in caPEM, one or
// more PEM CERTIFICATE blocks.
func NewPolicy(caPEM []byte) (*Policy, error) {
	roots := x509.NewCertPool()
	n := 0
	for rest := caPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("envelope: a CA certificate: %w", err)
		}
		roots.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("envelope: no CA certificate in the PEM data")
	}
	return &Policy{roots: roots}, nil
}

// halfOrder is half the order of P-256: a low-S signature has S at most
// this.
var halfOrder = new(big.Int).Rsh(elliptic.P256().Params().N, 1)

// Authorize checks that p's signature verifies by its creator's key with
// a low S (CheckSignature), and that the creator's certificate chains to
// one of the policy's CAs and is valid at time now (CheckCreator; the
// agreed time, where replicas must agree).
func (pol *Policy) Authorize(p *Parsed, now time.Time) error {
	if err := pol.CheckSignature(p); err != nil {
		return err
	}
	return pol.CheckCreator(p, now)
}

// CheckSignature checks that p's signature is an ASN.1 ECDSA signature
// with a low S that verifies by the ECDSA P-256 key of its creator's
// certificate: the part of Authorize that does not depend on the time,
// nor on the policy's CAs.
func (pol *Policy) CheckSignature(p *Parsed) error {
	if p.Cert == nil {
		return errorf(cb.Status_FORBIDDEN, "the creator has no certificate")
	}
	pub, ok := p.Cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return errorf(cb.Status_FORBIDDEN, "the creator's key is not ECDSA P-256")
	}
	var sig struct{ R, S *big.Int }
	rest, err := asn1.Unmarshal(p.Envelope.GetSignature(), &sig)
	if err != nil || len(rest) != 0 || sig.R.Sign() <= 0 || sig.S.Sign() <= 0 {
		return errorf(cb.Status_FORBIDDEN, "the signature is not an ASN.1 ECDSA signature")
	}
	if sig.S.Cmp(halfOrder) > 0 {
		return errorf(cb.Status_FORBIDDEN, "the signature has a high S")
	}
	digest := sha256.Sum256(p.Envelope.GetPayload())
	var k [32]byte
	if pol.memo != nil {
		k = sigKey(p.Cert.RawSubjectPublicKeyInfo, digest, p.Envelope.GetSignature())
	}
	if !pol.memo.verified(k) {
		if !ecdsa.Verify(pub, digest[:], sig.R, sig.S) {
			return errorf(cb.Status_FORBIDDEN, "the signature does not verify")
		}
		pol.memo.rememberSig(k)
	}
	return nil
}

// CheckCreator checks that p's creator has a certificate that chains to
// one of the policy's CAs and is valid at time now.
func (pol *Policy) CheckCreator(p *Parsed, now time.Time) error {
	if p.Cert == nil {
		return errorf(cb.Status_FORBIDDEN, "the creator has no certificate")
	}
	if pol.memo.chainValid(p.Cert, now) {
		return nil
	}
	opts := x509.VerifyOptions{Roots: pol.roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	chains, err := p.Cert.Verify(opts)
	if err != nil {
		return errorf(cb.Status_FORBIDDEN, "the creator's certificate is not from a CA of the policy: %v", err)
	}
	pol.memo.rememberChain(p.Cert, chains[0])
	return nil
}
