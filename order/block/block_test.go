package block

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
)

// TestHeaderBytesByHand checks the DER encoding against bytes written out
// by hand from X.690: a SEQUENCE (0x30) of an INTEGER (0x02, big-endian
// two's complement, shortest form, a 0x00 before a set top bit), and two
// OCTET STRINGs (0x04).
func TestHeaderBytesByHand(t *testing.T) {
	ones, twos := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	for _, c := range []struct {
		h    *cb.BlockHeader
		want string
	}{
		{&cb.BlockHeader{Number: 0}, "3007" + "020100" + "0400" + "0400"},
		{&cb.BlockHeader{Number: 0, DataHash: twos}, "3027" + "020100" + "0400" + "0420" + hex.EncodeToString(twos)},
		{&cb.BlockHeader{Number: 1, PreviousHash: ones, DataHash: twos}, "3047" + "020101" + "0420" + hex.EncodeToString(ones) + "0420" + hex.EncodeToString(twos)},
		{&cb.BlockHeader{Number: 127}, "3007" + "02017f" + "0400" + "0400"},
		{&cb.BlockHeader{Number: 128}, "3008" + "02020080" + "0400" + "0400"},
		{&cb.BlockHeader{Number: 256}, "3008" + "02020100" + "0400" + "0400"},
		{&cb.BlockHeader{Number: 1<<64 - 1}, "300f" + "020900ffffffffffffffff" + "0400" + "0400"},
	} {
		if got := hex.EncodeToString(HeaderBytes(c.h)); got != c.want {
			t.Errorf("HeaderBytes(%d, %x, %x) = %s, want %s", c.h.Number, c.h.PreviousHash, c.h.DataHash, got, c.want)
		}
		want, _ := hex.DecodeString(c.want)
		if s := sha256.Sum256(want); !bytes.Equal(HeaderHash(c.h), s[:]) {
			t.Errorf("HeaderHash(%d) is not SHA-256 of its DER bytes", c.h.Number)
		}
	}
}

func TestDataHash(t *testing.T) {
	data := [][]byte{[]byte("ab"), []byte(""), []byte("cde")}
	want := sha256.Sum256([]byte("abcde"))
	if !bytes.Equal(DataHash(data), want[:]) {
		t.Fatal("DataHash is not SHA-256 of the concatenation")
	}
	empty := sha256.Sum256(nil)
	if !bytes.Equal(DataHash(nil), empty[:]) {
		t.Fatal("DataHash(nil) is not SHA-256 of nothing")
	}
}

func TestChain(t *testing.T) {
	b0 := New(0, nil, [][]byte{[]byte("genesis")})
	b1 := New(1, HeaderHash(b0.Header), [][]byte{[]byte("x"), []byte("y")})
	if len(b0.Metadata.Metadata) != len(cb.BlockMetadataIndex_name) {
		t.Fatalf("%d metadata entries", len(b0.Metadata.Metadata))
	}
	if err := Check(nil, b0); err != nil {
		t.Fatal(err)
	}
	if err := Check(b0.Header, b1); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]func() (*cb.BlockHeader, *cb.Block){
		"first not 0":    func() (*cb.BlockHeader, *cb.Block) { return nil, b1 },
		"number skipped": func() (*cb.BlockHeader, *cb.Block) { return b0.Header, New(2, HeaderHash(b0.Header), nil) },
		"previous hash":  func() (*cb.BlockHeader, *cb.Block) { return b0.Header, New(1, DataHash(nil), nil) },
		"data changed": func() (*cb.BlockHeader, *cb.Block) {
			b := New(1, HeaderHash(b0.Header), [][]byte{[]byte("x")})
			b.Data.Data[0] = []byte("z")
			return b0.Header, b
		},
		"data reordered": func() (*cb.BlockHeader, *cb.Block) {
			b := New(1, HeaderHash(b0.Header), [][]byte{[]byte("x"), []byte("y")})
			b.Data.Data = [][]byte{[]byte("y"), []byte("x")}
			return b0.Header, b
		},
		"no header":        func() (*cb.BlockHeader, *cb.Block) { return nil, &cb.Block{} },
		"genesis has prev": func() (*cb.BlockHeader, *cb.Block) { return nil, New(0, []byte{1}, nil) },
	} {
		prev, b := bad()
		if err := Check(prev, b); !errors.Is(err, ErrChain) {
			t.Errorf("%s: Check = %v, want ErrChain", name, err)
		}
	}
}

// TestHeaderHashOfFabricBlocks checks HeaderHash against a chain Fabric
// made: the headers of blocks 0, 1 and 6 of the channel ledger in
// Hyperledger Fabric's test data (internal/ledgerutil/testdata/sample_prod,
// blockfile_000000), each with the PreviousHash that Fabric wrote into
// the block after it.
func TestHeaderHashOfFabricBlocks(t *testing.T) {
	for _, c := range []struct {
		number          uint64
		prev, data      string
		prevOfNextBlock string
	}{
		{0, "", "2aaa2d6e91d8b6ca889004b975328e114f9169c30fe437284385095cd5584104", "c4a1491ab9a62e9125b3cbab3a782ea1f56e24c608620d85bb940585d059a2a1"},
		{1, "c4a1491ab9a62e9125b3cbab3a782ea1f56e24c608620d85bb940585d059a2a1", "f38eb85e2157d17b41a4220a356ec22111851951df646ab1b30c3c8ad1627575", "e785e7c8a054685b73763ab79750bd7e4ffe4fe377992f96a3618e19ea6b29d9"},
		{6, "3e50ef0e7abbbc7fa53d210386fbad81c8f05687f0bd9872e1b6ca5995c97e39", "3dc7e8ebb754493135be191e7edd74563cf9a2785f87c3aafd01906df5edd8a3", "72eacca7e750be47a4bc8ead206df62336ccb4dde06c85f9d4d03a9f87414811"},
	} {
		h := &cb.BlockHeader{Number: c.number, PreviousHash: mustHex(t, c.prev), DataHash: mustHex(t, c.data)}
		if got := hex.EncodeToString(HeaderHash(h)); got != c.prevOfNextBlock {
			t.Errorf("block %d: HeaderHash %s, Fabric's %s", c.number, got, c.prevOfNextBlock)
		}
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
