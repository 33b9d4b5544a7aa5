// Package block builds Hyperledger Fabric blocks and cuts batches of
// envelopes into them as Fabric's orderer configures it.
//
// A block's header binds it to its data and to the block before it, by
// Fabric's rules:
//
//   - Header.Number counts from 0, one more than the previous block's;
//   - Header.DataHash is SHA-256 of the block's envelopes concatenated
//     in order (DataHash);
//   - Header.PreviousHash is SHA-256 of the previous header's ASN.1 DER
//     encoding SEQUENCE{INTEGER number, OCTET STRING previous_hash,
//     OCTET STRING data_hash} (HeaderBytes, HeaderHash), and empty in
//     block 0.
//
// Every function here is deterministic: two replicas that cut the same
// sequence of envelopes and timeouts produce byte-identical blocks.
package block

import (
	"bytes"
	"crypto/sha256"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
)

// asn1Header is the ASN.1 structure a header hash covers. The number is
// an INTEGER of arbitrary size, as Fabric encodes it from a big.Int.
type asn1Header struct {
	Number       *big.Int
	PreviousHash []byte
	DataHash     []byte
}

// HeaderBytes returns the ASN.1 DER encoding of h that Fabric hashes.
func HeaderBytes(h *cb.BlockHeader) []byte {
	b, err := asn1.Marshal(asn1Header{
		Number:       new(big.Int).SetUint64(h.GetNumber()),
		PreviousHash: nonNil(h.GetPreviousHash()),
		DataHash:     nonNil(h.GetDataHash()),
	})
	if err != nil {
		// An integer and two octet strings always encode.
		panic(fmt.Sprintf("block: encoding a header: %v", err))
	}
	return b
}

// nonNil returns b, or an empty slice if b is nil: encoding/asn1 encodes
// both as an empty OCTET STRING, and says so only for the latter.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// HeaderHash returns SHA-256 of HeaderBytes(h): the PreviousHash of the
// block after h's.
func HeaderHash(h *cb.BlockHeader) []byte {
	s := sha256.Sum256(HeaderBytes(h))
	return s[:]
}

// DataHash returns SHA-256 of the envelopes concatenated in order.
func DataHash(data [][]byte) []byte {
	h := sha256.New()
	for _, d := range data {
		h.Write(d)
	}
	return h.Sum(nil)
}

// New returns block number with the given data after the block whose
// header hash is previousHash (nil for block 0), and metadata with an
// empty entry for every index Fabric defines. It keeps data.
func New(number uint64, previousHash []byte, data [][]byte) *cb.Block {
	md := make([][]byte, len(cb.BlockMetadataIndex_name))
	for i := range md {
		md[i] = []byte{}
	}
	return &cb.Block{
		Header:   &cb.BlockHeader{Number: number, PreviousHash: previousHash, DataHash: DataHash(data)},
		Data:     &cb.BlockData{Data: data},
		Metadata: &cb.BlockMetadata{Metadata: md},
	}
}

// ErrChain is wrapped by the errors of Check.
var ErrChain = errors.New("block: not the next block of the chain")

// Check reports whether b is a well-formed block that follows the block
// with header prev (nil: b must be block 0): its number, its previous
// hash and its data hash follow Fabric's rules.
func Check(prev *cb.BlockHeader, b *cb.Block) error {
	h := b.GetHeader()
	if h == nil {
		return fmt.Errorf("%w: no header", ErrChain)
	}
	switch {
	case prev == nil && h.Number != 0:
		return fmt.Errorf("%w: number %d, want 0", ErrChain, h.Number)
	case prev == nil && len(h.PreviousHash) != 0:
		return fmt.Errorf("%w: block 0 has a previous hash", ErrChain)
	case prev != nil && h.Number != prev.Number+1:
		return fmt.Errorf("%w: number %d after %d", ErrChain, h.Number, prev.Number)
	case prev != nil && !bytes.Equal(h.PreviousHash, HeaderHash(prev)):
		return fmt.Errorf("%w: block %d: previous hash %x, want %x", ErrChain, h.Number, h.PreviousHash, HeaderHash(prev))
	}
	if d := DataHash(b.GetData().GetData()); !bytes.Equal(h.DataHash, d) {
		return fmt.Errorf("%w: block %d: data hash %x, want %x", ErrChain, h.Number, h.DataHash, d)
	}
	return nil
}
