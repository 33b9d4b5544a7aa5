package order

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/order/block"
)

// consenterTag is the ConsenterMetadata of every block's
// OrdererBlockMetadata: it names what the orderers' keys sign, so that a
// block signature can be taken for no other message those keys sign.
const consenterTag = "rubin/v1/order-block"

var deterministic = proto.MarshalOptions{Deterministic: true}

// metadataValue is the Value of every block's SIGNATURES metadata.
var metadataValue = mustMarshal(&cb.OrdererBlockMetadata{LastConfig: &cb.LastConfig{Index: 0}, ConsenterMetadata: []byte(consenterTag)})

func mustMarshal(m proto.Message) []byte {
	b, err := deterministic.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("order: encoding %T: %v", m, err))
	}
	return b
}

// identifierHeader is the encoded IdentifierHeader naming orderer id.
func identifierHeader(id uint32) []byte {
	return mustMarshal(&cb.IdentifierHeader{Identifier: id})
}

// signedBytes is what orderer id signs for the block with header h, as
// Fabric's BFT orderers sign: the metadata value, the encoded
// IdentifierHeader and the header's DER bytes, concatenated.
func signedBytes(value, idHeader []byte, h *cb.BlockHeader) []byte {
	b := append(append([]byte{}, value...), idHeader...)
	return append(b, block.HeaderBytes(h)...)
}

// SignHeader returns orderer id's signature over the block with header h.
func SignHeader(key ed25519.PrivateKey, id uint32, h *cb.BlockHeader) []byte {
	return ed25519.Sign(key, signedBytes(metadataValue, identifierHeader(id), h))
}

func verifyHeader(pub ed25519.PublicKey, id uint32, h *cb.BlockHeader, sig []byte) bool {
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, signedBytes(metadataValue, identifierHeader(id), h), sig)
}

// ErrSignatures is wrapped by the errors of VerifySignatures.
var ErrSignatures = errors.New("order: block signatures")

// VerifySignatures checks that b's SIGNATURES metadata holds valid
// signatures over its header by at least quorum distinct orderers of
// keys (indexed by orderer ID).
func VerifySignatures(b *cb.Block, keys []ed25519.PublicKey, quorum int) error {
	mds := b.GetMetadata().GetMetadata()
	if len(mds) <= int(cb.BlockMetadataIndex_SIGNATURES) {
		return fmt.Errorf("%w: block %d has no SIGNATURES metadata", ErrSignatures, b.GetHeader().GetNumber())
	}
	md := new(cb.Metadata)
	if err := proto.Unmarshal(mds[cb.BlockMetadataIndex_SIGNATURES], md); err != nil {
		return fmt.Errorf("%w: block %d: %v", ErrSignatures, b.GetHeader().GetNumber(), err)
	}
	if !bytes.Equal(md.Value, metadataValue) {
		return fmt.Errorf("%w: block %d: the metadata value is not this orderer's", ErrSignatures, b.GetHeader().GetNumber())
	}
	seen := make(map[uint32]bool)
	for _, s := range md.Signatures {
		ih := new(cb.IdentifierHeader)
		if err := proto.Unmarshal(s.IdentifierHeader, ih); err != nil || seen[ih.Identifier] || int(ih.Identifier) >= len(keys) {
			continue
		}
		pub := keys[ih.Identifier]
		if len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, signedBytes(md.Value, s.IdentifierHeader, b.Header), s.Signature) {
			seen[ih.Identifier] = true
		}
	}
	if len(seen) < quorum {
		return fmt.Errorf("%w: block %d has %d valid signatures, want %d", ErrSignatures, b.GetHeader().GetNumber(), len(seen), quorum)
	}
	return nil
}
