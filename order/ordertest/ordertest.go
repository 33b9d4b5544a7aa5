// Package ordertest is a Fabric client for the orderer's tests and demo: an
// ECDSA certificate authority, identities it issues, envelopes they sign
// as Fabric's SDKs do, and a check of a delivered chain by Fabric's hash
// rules. It is built only from the standard library and
// fabric-protos-go-apiv2, and shares no code with the orderer, so that
// what it accepts is what a Fabric client would.
package ordertest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"github.com/hyperledger/fabric-protos-go-apiv2/msp"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CA is a certificate authority with an ECDSA P-256 key.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA's certificate, PEM-encoded: what an operator names
	// for a channel's Writers or Readers.
	PEM []byte
}

// NewCA makes a self-signed CA valid from an hour ago for a year.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name, Organization: []string{name}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Signer is an identity a CA issued: an ECDSA P-256 key and its
// certificate, in MSP mspID.
type Signer struct {
	key     *ecdsa.PrivateKey
	creator []byte // the serialized msp.SerializedIdentity
}

// Issue makes a key and a certificate for it signed by the CA.
func (ca *CA) Issue(name, mspID string) (*Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	id, err := proto.Marshal(&msp.SerializedIdentity{Mspid: mspID, IdBytes: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})})
	if err != nil {
		return nil, err
	}
	return &Signer{key: key, creator: id}, nil
}

// Creator returns the serialized identity the signer puts in its
// signature headers.
func (s *Signer) Creator() []byte { return s.creator }

var halfOrder = new(big.Int).Rsh(elliptic.P256().Params().N, 1)

// Sign returns an ASN.1 ECDSA signature over SHA-256 of msg with a low S,
// as Fabric's MSP makes and requires.
func (s *Signer) Sign(msg []byte) ([]byte, error) {
	d := sha256.Sum256(msg)
	r, ss, err := ecdsa.Sign(rand.Reader, s.key, d[:])
	if err != nil {
		return nil, err
	}
	if ss.Cmp(halfOrder) > 0 {
		ss.Sub(s.key.Params().N, ss)
	}
	return asn1.Marshal(struct{ R, S *big.Int }{r, ss})
}

// HighS returns the same signature as sig with S replaced by N-S: valid
// for plain ECDSA, refused by Fabric's MSP.
func HighS(sig []byte) ([]byte, error) {
	var v struct{ R, S *big.Int }
	if _, err := asn1.Unmarshal(sig, &v); err != nil {
		return nil, err
	}
	v.S.Sub(elliptic.P256().Params().N, v.S)
	return asn1.Marshal(v)
}

// Envelope returns an envelope of header type typ for channel, holding
// data, signed by s: its channel header has a fresh transaction ID
// derived as Fabric's SDKs do, from the nonce and the creator.
func (s *Signer) Envelope(typ cb.HeaderType, channel string, data []byte) (*cb.Envelope, error) {
	nonce := make([]byte, 24)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	txid := sha256.Sum256(append(append([]byte{}, nonce...), s.creator...))
	ch, err := proto.Marshal(&cb.ChannelHeader{Type: int32(typ), ChannelId: channel, TxId: hex.EncodeToString(txid[:]), Timestamp: timestamppb.Now()})
	if err != nil {
		return nil, err
	}
	sh, err := proto.Marshal(&cb.SignatureHeader{Creator: s.creator, Nonce: nonce})
	if err != nil {
		return nil, err
	}
	payload, err := proto.Marshal(&cb.Payload{Header: &cb.Header{ChannelHeader: ch, SignatureHeader: sh}, Data: data})
	if err != nil {
		return nil, err
	}
	sig, err := s.Sign(payload)
	if err != nil {
		return nil, err
	}
	return &cb.Envelope{Payload: payload, Signature: sig}, nil
}

// Seek returns a signed DELIVER_SEEK_INFO envelope for channel.
func (s *Signer) Seek(channel string, si *ab.SeekInfo) (*cb.Envelope, error) {
	data, err := proto.Marshal(si)
	if err != nil {
		return nil, err
	}
	return s.Envelope(cb.HeaderType_DELIVER_SEEK_INFO, channel, data)
}

// Specified is a seek position at block n.
func Specified(n uint64) *ab.SeekPosition {
	return &ab.SeekPosition{Type: &ab.SeekPosition_Specified{Specified: &ab.SeekSpecified{Number: n}}}
}

// Oldest and Newest are the seek positions of the first and last block.
var (
	Oldest = &ab.SeekPosition{Type: &ab.SeekPosition_Oldest{Oldest: &ab.SeekOldest{}}}
	Newest = &ab.SeekPosition{Type: &ab.SeekPosition_Newest{Newest: &ab.SeekNewest{}}}
)

// headerDER is the header's ASN.1 DER encoding, as Fabric hashes and
// its orderers sign it.
func headerDER(h *cb.BlockHeader) []byte {
	der, err := asn1.Marshal(struct {
		Number       *big.Int
		PreviousHash []byte
		DataHash     []byte
	}{new(big.Int).SetUint64(h.GetNumber()), append([]byte{}, h.GetPreviousHash()...), append([]byte{}, h.GetDataHash()...)})
	if err != nil {
		panic(err)
	}
	return der
}

func headerHash(h *cb.BlockHeader) []byte {
	s := sha256.Sum256(headerDER(h))
	return s[:]
}

// CheckChain checks blocks as a chain from block first by Fabric's hash
// rules: consecutive numbers, each PreviousHash the hash of the header
// before (block first's is not checked unless first is 0, where it must
// be empty), each DataHash SHA-256 of the block's envelopes concatenated.
func CheckChain(first uint64, blocks []*cb.Block) error {
	for i, b := range blocks {
		h := b.GetHeader()
		if h == nil || h.Number != first+uint64(i) {
			return fmt.Errorf("block %d of the chain is numbered %d", first+uint64(i), h.GetNumber())
		}
		switch {
		case i > 0 && !bytes.Equal(h.PreviousHash, headerHash(blocks[i-1].Header)):
			return fmt.Errorf("block %d: previous hash does not match block %d's header", h.Number, h.Number-1)
		case h.Number == 0 && len(h.PreviousHash) != 0:
			return fmt.Errorf("block 0 has a previous hash")
		}
		d := sha256.Sum256(bytes.Join(b.GetData().GetData(), nil))
		if !bytes.Equal(h.DataHash, d[:]) {
			return fmt.Errorf("block %d: data hash does not match its data", h.Number)
		}
	}
	return nil
}

// CheckSignatures checks that block b's SIGNATURES metadata holds
// Ed25519 signatures of at least quorum distinct orderers, by keys
// (indexed by the IdentifierHeader's identifier), each over the
// concatenation of the metadata's value, the signature's
// IdentifierHeader and the DER encoding of b's header.
func CheckSignatures(b *cb.Block, keys [][]byte, quorum int) error {
	mds := b.GetMetadata().GetMetadata()
	if len(mds) <= int(cb.BlockMetadataIndex_SIGNATURES) {
		return fmt.Errorf("block %d has no signatures", b.GetHeader().GetNumber())
	}
	md := new(cb.Metadata)
	if err := proto.Unmarshal(mds[cb.BlockMetadataIndex_SIGNATURES], md); err != nil {
		return fmt.Errorf("block %d: signatures: %w", b.GetHeader().GetNumber(), err)
	}
	h := b.GetHeader()
	der := headerDER(h)
	valid := make(map[uint32]bool)
	for _, s := range md.Signatures {
		id := new(cb.IdentifierHeader)
		if proto.Unmarshal(s.IdentifierHeader, id) != nil || int(id.Identifier) >= len(keys) {
			continue
		}
		msg := append(append(append([]byte{}, md.Value...), s.IdentifierHeader...), der...)
		if ed25519.Verify(keys[id.Identifier], msg, s.Signature) {
			valid[id.Identifier] = true
		}
	}
	if len(valid) < quorum {
		return fmt.Errorf("block %d: %d orderers' valid signatures, want %d", h.GetNumber(), len(valid), quorum)
	}
	return nil
}
