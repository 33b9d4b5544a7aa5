package order_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
)

// The LyingOrderer family of TestSim: an orderer that serves forged and
// reordered blocks to whoever fetches from it, and orders forged ops.

// simLies are the ways the liar answers a request for blocks from want
// on:
//
//   - tampered: block want with another envelope in place of its first,
//     its data hash made to match;
//   - shuffled: block want with its envelopes in another order under
//     its signed header, whose data hash no longer matches;
//   - reordered: block want+1, then block want;
//   - replayed: block want-1;
//   - stripped: block want with one of its 2f+1 signatures removed;
//   - forked: a block want of its own, holding a forged envelope, that
//     follows block want-1 by the hash rules, signed by the liar and
//     its signature put under the other orderers' names too;
//   - withheld: nothing.
//
// It tells them in turn; one it lacks the blocks for becomes a forked
// block, or a withholding.
var simLies = []string{"tampered", "shuffled", "reordered", "replayed", "stripped", "forked", "withheld"}

// lie makes an orderer of the seed's choosing the liar: it also forges a
// tenth of its consensus messages (simnet.Forge).
func lie(c *simCluster) {
	c.liar = c.rng.IntN(simN)
	c.lieRng = rand.New(rand.NewPCG(c.seed, 0x11e))
	c.net.MakeByzantine(bft.ReplicaID(c.liar), simnet.Forge(0.1))
	s, err := c.evilCA.Issue("liar", "Org1MSP")
	if err != nil {
		c.t.Fatal(err)
	}
	c.evil = s
	c.client = &simDeliverer{c: c, self: -1, next: c.liar}
}

// lieTick: while the links are faulty the liar now and then orders,
// through its client, a forged envelope, its signature of a block header
// no replica cut, its signature under another orderer's name, or a
// timeout cut before its time; and every simPoll ticks the delivery
// client asks for the blocks it lacks.
func lieTick(c *simCluster) {
	if c.net.Now < simFaultTicks && c.lieRng.Float64() < 0.05 {
		d := &c.duty[c.liar]
		key, id := c.keys[c.liar], uint32(c.liar)
		var op []byte
		switch c.lieRng.IntN(4) {
		case 0:
			e, err := c.evil.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, fmt.Appendf(nil, "forged at tick %d", c.net.Now))
			if err != nil {
				c.t.Fatal(err)
			}
			raw, err := proto.Marshal(e)
			if err != nil {
				c.t.Fatal(err)
			}
			c.forgedBy = append(c.forgedBy, e)
			op = order.EnvelopeOp(raw)
		case 1:
			h := block.New(d.next, []byte("no such block"), [][]byte{[]byte("forged")}).Header
			op = order.SignOp(id, d.next, order.SignHeader(key, id, h))
		case 2:
			if len(d.signed) > 0 {
				h := d.signed[len(d.signed)-1]
				other := (id + 1 + uint32(c.lieRng.IntN(simN-1))) % simN
				op = order.SignOp(other, h.Number, order.SignHeader(key, other, h))
			}
		case 3:
			op = order.CutOp(d.next)
		}
		if op != nil {
			d.queue = append(d.queue, op)
		}
	}
	if c.net.Now >= simFaultTicks/2 && c.net.Now%simPoll == 0 {
		c.client.ask(uint64(len(c.got)), c.prevGot, func(b *cb.Block, raw []byte) bool {
			c.got, c.prevGot = append(c.got, raw), b.Header
			return true
		})
	}
}

// lieTo is the liar's answer to a request for blocks from want on: the
// next lie of simLies in turn, or, if it lacks the blocks for that one,
// a forked block, or nothing.
func (c *simCluster) lieTo(want uint64) []*cb.Block {
	kind := simLies[c.told%len(simLies)]
	c.told++
	blocks, ok := c.lieAbout(kind, want)
	if !ok {
		kind = "forked"
		if blocks, ok = c.lieAbout(kind, want); !ok {
			kind = "withheld"
		}
	}
	c.lies[kind]++
	return blocks
}

// lieAbout returns the blocks of lie kind about block want, from the
// chain the liar holds, and whether it could make them.
func (c *simCluster) lieAbout(kind string, want uint64) ([]*cb.Block, bool) {
	s := c.stores[c.liar]
	has := func(n uint64) bool { return n < s.Height() }
	get := func(n uint64) *cb.Block { return decode(c.t, s, n) }
	switch {
	case kind == "forked" && (!has(0) || want > 0 && !has(want-1)),
		kind == "replayed" && (want == 0 || !has(want-1)),
		kind == "reordered" && !has(want+1),
		kind == "shuffled" && (!has(want) || len(get(want).Data.Data) < 2),
		(kind == "tampered" || kind == "stripped") && !has(want):
		return nil, false
	}
	forged := func() []byte {
		e, err := c.evil.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, []byte("served, never ordered"))
		if err != nil {
			c.t.Fatal(err)
		}
		raw, err := proto.Marshal(e)
		if err != nil {
			c.t.Fatal(err)
		}
		return raw
	}
	switch kind {
	case "tampered":
		b := get(want)
		b.Data.Data[0] = forged()
		b.Header.DataHash = block.DataHash(b.Data.Data)
		return []*cb.Block{b}, true
	case "shuffled":
		b := get(want)
		d := b.Data.Data
		d[0], d[len(d)-1] = d[len(d)-1], d[0]
		return []*cb.Block{b}, true
	case "reordered":
		return []*cb.Block{get(want + 1), get(want)}, true
	case "replayed":
		return []*cb.Block{get(want - 1)}, true
	case "stripped":
		b := get(want)
		md := sigMetadata(c.t, b)
		md.Signatures = md.Signatures[:len(md.Signatures)-1]
		setSigMetadata(c.t, b, md)
		return []*cb.Block{b}, true
	case "forked":
		var prev []byte
		if want > 0 {
			prev = block.HeaderHash(get(want - 1).Header)
		}
		b := block.New(want, prev, [][]byte{forged()})
		// The metadata of a real block, with the liar's signature of
		// this one under its name and the names of 2f others.
		md := sigMetadata(c.t, get(0))
		id := uint32(c.liar)
		sig := order.SignHeader(c.keys[c.liar], id, b.Header)
		md.Signatures = nil
		for k := range uint32(simN - 1) {
			ih, err := proto.Marshal(&cb.IdentifierHeader{Identifier: (id + k) % simN})
			if err != nil {
				c.t.Fatal(err)
			}
			md.Signatures = append(md.Signatures, &cb.MetadataSignature{IdentifierHeader: ih, Signature: sig})
		}
		setSigMetadata(c.t, b, md)
		return []*cb.Block{b}, true
	}
	return nil, true // withheld
}

func sigMetadata(t *testing.T, b *cb.Block) *cb.Metadata {
	t.Helper()
	md := new(cb.Metadata)
	if err := proto.Unmarshal(b.Metadata.Metadata[cb.BlockMetadataIndex_SIGNATURES], md); err != nil {
		t.Fatal(err)
	}
	return md
}

func setSigMetadata(t *testing.T, b *cb.Block, md *cb.Metadata) {
	t.Helper()
	raw, err := proto.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	b.Metadata.Metadata[cb.BlockMetadataIndex_SIGNATURES] = raw
}

// deliveredAll: the delivery client holds as many blocks as the correct
// orderers.
func deliveredAll(c *simCluster) bool {
	return uint64(len(c.got)) == c.stores[c.longest()].Height()
}

// checkLies: the delivery client took exactly the correct orderers'
// chain; every block the liar served in the run that was not one of it
// was refused, by the client or by a correct orderer catching up; and,
// shown each lie about a block of the final chain, the client's check
// refuses it and takes the true block.
func checkLies(t *testing.T, c *simCluster) {
	ref := c.stores[c.longest()]
	for n, raw := range c.got {
		want, _ := ref.Block(uint64(n))
		if !bytes.Equal(raw, want) {
			t.Fatalf("the delivery client took a block %d that is not the correct orderers'", n)
		}
	}
	told := 0
	for _, k := range simLies {
		if k != "withheld" {
			told += c.lies[k]
		}
	}
	rejected := c.client.rejected
	for _, i := range c.correct() {
		rejected += c.catchUp[i].rejected
	}
	if told == 0 || rejected != told {
		t.Fatalf("the liar told %d lies in blocks (%v); %d blocks were refused", told, c.lies, rejected)
	}
	h := min(c.stores[c.liar].Height(), ref.Height())
	if h < 3 {
		t.Fatalf("the liar holds %d blocks, the correct orderers %d: too few to lie about", c.stores[c.liar].Height(), ref.Height())
	}
	// A block with a block before it, one after and two envelopes.
	n := h - 2
	for n > 1 && len(decode(t, ref, n).Data.Data) < 2 {
		n--
	}
	prev, real := decode(t, ref, n-1).Header, decode(t, ref, n)
	if err := verifyBlock(real, n, prev, c.pubs); err != nil {
		t.Fatalf("the correct block %d: %v", n, err)
	}
	for _, kind := range simLies[:len(simLies)-1] {
		blocks, ok := c.lieAbout(kind, n)
		if !ok {
			t.Fatalf("the liar could not tell the %s lie about block %d", kind, n)
		}
		if err := verifyBlock(blocks[0], n, prev, c.pubs); err == nil {
			t.Errorf("a %s block %d verified", kind, n)
		}
	}
}
