package order

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/order/block"
)

const snapshotVersion uint32 = 1

// hashSize is the size of a payload hash in the dedup window.
const hashSize = 32

// ErrSnapshot is wrapped by the errors of Restore.
var ErrSnapshot = errors.New("order: bad snapshot")

// Snapshot encodes the ordering state canonically: the next block's
// number and previous hash, the number of final blocks, the pending
// envelopes with the agreed time of the first, every cut block not yet
// final with the signatures ordered for it, and the dedup window's
// payload hashes, oldest first. Final blocks are not in
// it: they are in the Chain, whose store Snapshot syncs first, so that a
// replica that restarts from this snapshot finds every block it covers.
// If the store fails, the snapshot is taken all the same and the chain
// stops (Chain.Err), which stops the orderer: a replica restarted from
// this snapshot then finds its store behind it, a gap it fetches from
// the other orderers.
func (a *App) Snapshot() []byte {
	a.cfg.Chain.sync()
	b := binary.BigEndian.AppendUint32(nil, snapshotVersion)
	b = binary.BigEndian.AppendUint64(b, a.next)
	b = appendBytes(b, a.prevHash)
	b = binary.BigEndian.AppendUint64(b, a.final)
	since := int64(0)
	if s := a.cutter.Since(); !s.IsZero() {
		since = s.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(since))
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.cutter.Pending())))
	for _, e := range a.cutter.Pending() {
		b = appendBytes(b, e)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.unfinal)))
	for _, u := range a.unfinal {
		b = appendBytes(b, u.block.Header.PreviousHash)
		b = binary.BigEndian.AppendUint32(b, uint32(len(u.block.Data.Data)))
		for _, e := range u.block.Data.Data {
			b = appendBytes(b, e)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(u.sigs)))
		for _, s := range u.sigs {
			b = appendBytes(b, s.IdentifierHeader)
			b = appendBytes(b, s.Signature)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.seen)))
	for _, h := range a.seen {
		b = append(b, h[:]...)
	}
	return b
}

func appendBytes(b, p []byte) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(p))), p...)
}

// reader decodes a snapshot; its first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b) {
		if r.err == nil {
			r.err = fmt.Errorf("%d bytes wanted, %d left", n, len(r.b))
		}
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (r *reader) bytes() []byte { return r.take(int(r.u32())) }

// count reads a count of items of at least min bytes each: 0 (and an
// error) if the bytes left cannot hold that many.
func (r *reader) count(min int) int {
	n := int(r.u32())
	if r.err == nil && n*min > len(r.b) {
		r.err = fmt.Errorf("%d items in %d bytes", n, len(r.b))
	}
	if r.err != nil {
		return 0
	}
	return n
}

// Restore replaces the state with a snapshot taken by Snapshot, checking
// that it holds a consistent chain: every unfinal block follows the one
// before and none holds more than a quorum of signatures, each from a
// distinct orderer and valid. On an error the state is unchanged.
func (a *App) Restore(snap []byte) error {
	r := &reader{b: bytes.Clone(snap)}
	if v := r.u32(); v != snapshotVersion && r.err == nil {
		return fmt.Errorf("%w: version %d", ErrSnapshot, v)
	}
	next, prevHash, final := r.u64(), r.bytes(), r.u64()
	sinceNano := int64(r.u64())
	pending := make([][]byte, r.count(4))
	for i := range pending {
		pending[i] = r.bytes()
	}
	unf := make([]*unfinal, r.count(12))
	var prev []byte
	for i := range unf {
		ph := r.bytes()
		data := make([][]byte, r.count(4))
		for j := range data {
			data[j] = r.bytes()
		}
		b := block.New(final+uint64(i), ph, data)
		if len(ph) == 0 {
			b.Header.PreviousHash = nil
		}
		u := &unfinal{block: b, sigs: make([]*cb.MetadataSignature, r.count(8)), by: make(map[uint32]bool)}
		for k := range u.sigs {
			u.sigs[k] = &cb.MetadataSignature{IdentifierHeader: r.bytes(), Signature: r.bytes()}
		}
		if r.err != nil {
			break
		}
		if err := a.checkUnfinal(u, prev, i); err != nil {
			return fmt.Errorf("%w: %w", ErrSnapshot, err)
		}
		prev = block.HeaderHash(b.Header)
		unf[i] = u
	}
	seen := make([][32]byte, r.count(hashSize))
	seenAt := make(map[[32]byte]bool, len(seen))
	for i := range seen {
		copy(seen[i][:], r.take(hashSize))
		seenAt[seen[i]] = true
	}
	if r.err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshot, r.err)
	}
	if len(seen) > a.cfg.DedupWindow || len(seenAt) != len(seen) {
		return fmt.Errorf("%w: %d payload hashes, %d distinct, in a window of %d", ErrSnapshot, len(seen), len(seenAt), a.cfg.DedupWindow)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%w: %d bytes too many", ErrSnapshot, len(r.b))
	}
	if next != final+uint64(len(unf)) || (len(unf) > 0 && string(prev) != string(prevHash)) || (next == 0) != (len(prevHash) == 0) {
		return fmt.Errorf("%w: %d final and %d unfinal blocks do not lead to block %d", ErrSnapshot, final, len(unf), next)
	}
	since := time.Time{}
	if sinceNano != 0 {
		since = time.Unix(0, sinceNano).UTC()
	}
	cutter := block.NewCutter(a.cfg.Block)
	if err := cutter.Restore(pending, since); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	if len(prevHash) == 0 {
		prevHash = nil
	}
	a.cutter, a.next, a.prevHash, a.final, a.unfinal, a.seen, a.seenAt = cutter, next, prevHash, final, unf, seen, seenAt
	var toSign []*cb.BlockHeader
	for _, u := range unf {
		if !u.by[a.cfg.Self] {
			toSign = append(toSign, u.block.Header)
		}
	}
	a.duties.reset(toSign, next, since)
	a.cfg.Chain.knowFinal(final)
	return nil
}

// checkUnfinal checks the i-th unfinal block of a snapshot, after the one
// with header hash prev, and fills in who signed it.
func (a *App) checkUnfinal(u *unfinal, prev []byte, i int) error {
	if i > 0 && string(u.block.Header.PreviousHash) != string(prev) {
		return fmt.Errorf("block %d does not follow block %d", u.block.Header.Number, u.block.Header.Number-1)
	}
	if len(u.sigs) >= a.quorum {
		return fmt.Errorf("block %d has %d signatures and is not final", u.block.Header.Number, len(u.sigs))
	}
	for _, s := range u.sigs {
		ih := new(cb.IdentifierHeader)
		if err := proto.Unmarshal(s.IdentifierHeader, ih); err != nil || int(ih.Identifier) >= len(a.cfg.Orderers) || u.by[ih.Identifier] || string(s.IdentifierHeader) != string(identifierHeader(ih.Identifier)) {
			return fmt.Errorf("block %d: a signature of no orderer, or of one twice", u.block.Header.Number)
		}
		if !verifyHeader(a.cfg.Orderers[ih.Identifier], ih.Identifier, u.block.Header, s.Signature) {
			return fmt.Errorf("block %d: orderer %d's signature does not verify", u.block.Header.Number, ih.Identifier)
		}
		u.by[ih.Identifier] = true
	}
	return nil
}
