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
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
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
// a creator of OrdererMSPID.
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
	block, _ := pem.Decode(p.Creator.GetIdBytes())
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errorf(cb.Status_BAD_REQUEST, "the creator's identity is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, errorf(cb.Status_BAD_REQUEST, "the creator's certificate does not parse: %v", err)
	}
	p.Cert = cert
	return p, nil
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
// certificates may sign. A Policy is immutable and safe for concurrent
// use.
type Policy struct {
	roots *x509.CertPool
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
// a low S, and that the creator's certificate chains to one of the
// policy's CAs and is valid at time now (the agreed time, where replicas
// must agree).
func (pol *Policy) Authorize(p *Parsed, now time.Time) error {
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
	if !ecdsa.Verify(pub, digest[:], sig.R, sig.S) {
		return errorf(cb.Status_FORBIDDEN, "the signature does not verify")
	}
	opts := x509.VerifyOptions{Roots: pol.roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := p.Cert.Verify(opts); err != nil {
		return errorf(cb.Status_FORBIDDEN, "the creator's certificate is not from a CA of the policy: %v", err)
	}
	return nil
}
