package order_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/envelope"
	"github.com/rubin-go/rubin/order/ordertest"
)

const channel = "mychannel"

// harness executes the same ops on the Apps of four replicas, as the
// core would, and checks that they agree.
type harness struct {
	apps   []*order.App
	keys   []ed25519.PrivateKey
	pubs   []ed25519.PublicKey
	cfg    order.Config
	seq    uint64
	now    time.Time
	writer *ordertest.Signer
	forger *ordertest.Signer // from a CA the channel does not name
}

func newHarness(t testing.TB, bc block.Config) *harness {
	t.Helper()
	ca, err := ordertest.NewCA("Org1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := ordertest.NewCA("Evil")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{now: time.Now().UTC()}
	if h.writer, err = ca.Issue("writer", "Org1MSP"); err != nil {
		t.Fatal(err)
	}
	if h.forger, err = other.Issue("forger", "Org1MSP"); err != nil {
		t.Fatal(err)
	}
	writers, err := envelope.NewPolicy(ca.PEM)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		h.keys, h.pubs = append(h.keys, priv), append(h.pubs, pub)
	}
	h.cfg = order.Config{Channel: channel, Writers: writers, Block: bc, Orderers: h.pubs, F: 1}
	for i := range 4 {
		h.apps = append(h.apps, h.newApp(t, i))
	}
	return h
}

func (h *harness) newApp(t testing.TB, self int) *order.App {
	t.Helper()
	cfg := h.cfg
	cfg.Self = uint32(self)
	a, err := order.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// exec executes op on every App, at the harness's time, and returns the
// result they agree on.
func (h *harness) exec(t testing.TB, op []byte) order.Result {
	t.Helper()
	h.seq++
	var first []byte
	for i, a := range h.apps {
		res := a.Execute(bft.ExecContext{Seq: h.seq, Time: h.now}, op)
		if i == 0 {
			first = res
		} else if !bytes.Equal(res, first) {
			t.Fatalf("replica %d's result differs", i)
		}
	}
	r, err := order.ParseResult(first)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (h *harness) envelope(t testing.TB, s *ordertest.Signer, data string) []byte {
	t.Helper()
	e, err := s.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signAll orders the signatures of orderers ids over block n.
func (h *harness) signAll(t testing.TB, n uint64, ids ...int) {
	t.Helper()
	for _, id := range ids {
		hdr := h.header(t, n)
		if r := h.exec(t, order.SignOp(uint32(id), n, order.SignHeader(h.keys[id], uint32(id), hdr))); r.Status != cb.Status_SUCCESS {
			t.Fatalf("orderer %d's signature of block %d: %v", id, n, r)
		}
	}
}

// header returns block n's header, cut and not final.
func (h *harness) header(t testing.TB, n uint64) *cb.BlockHeader {
	t.Helper()
	hdr := h.apps[0].UnfinalHeader(n)
	if hdr == nil {
		t.Fatalf("block %d is not waiting for signatures", n)
	}
	return hdr
}

// blocks returns replica i's final blocks, encoded.
func (h *harness) blocks(t testing.TB, i int) [][]byte {
	t.Helper()
	c := h.apps[i].Chain()
	height, _ := c.Height()
	var out [][]byte
	for n := range height {
		b, err := c.Block(n)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := proto.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, raw)
	}
	return out
}

func (h *harness) decoded(t testing.TB, i int) []*cb.Block {
	t.Helper()
	c := h.apps[i].Chain()
	height, _ := c.Height()
	var out []*cb.Block
	for n := range height {
		b, err := c.Block(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkChains checks that every replica holds the same final chain,
// valid by Fabric's hash rules, each block with a quorum of signatures,
// and returns it.
func (h *harness) checkChains(t testing.TB) []*cb.Block {
	t.Helper()
	want := h.blocks(t, 0)
	for i := 1; i < len(h.apps); i++ {
		got := h.blocks(t, i)
		if len(got) != len(want) {
			t.Fatalf("replica %d holds %d blocks, replica 0 %d", i, len(got), len(want))
		}
		for n := range got {
			if !bytes.Equal(got[n], want[n]) {
				t.Fatalf("replica %d's block %d differs from replica 0's", i, n)
			}
		}
	}
	chain := h.decoded(t, 0)
	if err := ordertest.CheckChain(0, chain); err != nil {
		t.Fatal(err)
	}
	for i, b := range chain {
		var prev *cb.BlockHeader
		if i > 0 {
			prev = chain[i-1].Header
		}
		if err := block.Check(prev, b); err != nil {
			t.Fatal(err)
		}
		if err := order.VerifySignatures(b, h.pubs, 3); err != nil {
			t.Fatal(err)
		}
	}
	return chain
}

func height(a *order.App) uint64 {
	n, _ := a.Chain().Height()
	return n
}

func TestAppOrdersSignsAndFinalizes(t *testing.T) {
	h := newHarness(t, block.Config{MaxMessageCount: 3, BatchTimeout: time.Second})
	var sent [][]byte
	for i := range 7 {
		env := h.envelope(t, h.writer, "tx"+string(rune('a'+i)))
		if r := h.exec(t, order.EnvelopeOp(env)); r.Status != cb.Status_SUCCESS {
			t.Fatalf("envelope %d: %v", i, r)
		}
		sent = append(sent, env)
		if i == 1 {
			forged := h.envelope(t, h.forger, "forged")
			if r := h.exec(t, order.EnvelopeOp(forged)); r.Status != cb.Status_FORBIDDEN {
				t.Fatalf("a forged envelope: %v", r)
			}
		}
	}
	// Blocks 0 and 1 are cut (3 envelopes each), one envelope pends.
	if height(h.apps[0]) != 0 {
		t.Fatal("a block is final without signatures")
	}
	h.signAll(t, 1, 0, 1, 2) // block 1 has its quorum but waits for block 0
	if height(h.apps[0]) != 0 {
		t.Fatal("block 1 is final before block 0")
	}
	h.signAll(t, 0, 3, 1)
	hdr := h.header(t, 0)
	// A signature by the wrong key, one for another block, and one twice.
	for _, op := range [][]byte{
		order.SignOp(2, 0, order.SignHeader(h.keys[3], 2, hdr)),
		order.SignOp(2, 0, order.SignHeader(h.keys[2], 2, h.apps[0].UnfinalHeader(1))),
		order.SignOp(1, 0, order.SignHeader(h.keys[1], 1, hdr)),
		order.SignOp(9, 0, nil),
		{0xee},
	} {
		if r := h.exec(t, op); r.Status == cb.Status_SUCCESS {
			t.Fatalf("a bad signature op was taken: %x", op[:min(len(op), 13)])
		}
	}
	if height(h.apps[0]) != 0 {
		t.Fatal("block 0 is final with two good signatures")
	}
	h.signAll(t, 0, 0)
	if height(h.apps[0]) != 2 {
		t.Fatalf("height %d after block 0's quorum, want 2", height(h.apps[0]))
	}
	// The pending envelope is cut by an agreed timeout only.
	if r := h.exec(t, order.CutOp(2)); r.Status != cb.Status_SUCCESS || h.apps[0].UnfinalHeader(2) != nil {
		t.Fatal("a timeout cut before BatchTimeout")
	}
	h.now = h.now.Add(time.Second)
	h.exec(t, order.CutOp(1)) // not the next block: nothing
	if h.apps[0].UnfinalHeader(2) != nil {
		t.Fatal("a stale timeout cut the pending envelope")
	}
	h.exec(t, order.CutOp(2))
	h.signAll(t, 2, 2, 3, 0)
	chain := h.checkChains(t)
	var got [][]byte
	for _, b := range chain {
		got = append(got, b.Data.Data...)
		if sigs := signatures(t, b); sigs != 3 {
			t.Fatalf("block %d carries %d signatures, want exactly 2f+1", b.Header.Number, sigs)
		}
	}
	if len(got) != len(sent) {
		t.Fatalf("%d envelopes in blocks, %d accepted", len(got), len(sent))
	}
	for i := range got {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("envelope %d in the chain is not the %d-th accepted", i, i)
		}
	}
}

func signatures(t *testing.T, b *cb.Block) int {
	t.Helper()
	md := new(cb.Metadata)
	if err := proto.Unmarshal(b.Metadata.Metadata[cb.BlockMetadataIndex_SIGNATURES], md); err != nil {
		t.Fatal(err)
	}
	return len(md.Signatures)
}

func TestAppRefuses(t *testing.T) {
	h := newHarness(t, block.Config{AbsoluteMaxBytes: 4096})
	big := h.envelope(t, h.writer, string(make([]byte, 5000)))
	other, _ := h.writer.Envelope(cb.HeaderType_MESSAGE, "other", nil)
	otherRaw, _ := proto.Marshal(other)
	cfg, _ := h.writer.Envelope(cb.HeaderType_CONFIG_UPDATE, channel, nil)
	cfgRaw, _ := proto.Marshal(cfg)
	for name, c := range map[string]struct {
		op   []byte
		want cb.Status
	}{
		"too large":     {order.EnvelopeOp(big), cb.Status_BAD_REQUEST},
		"other channel": {order.EnvelopeOp(otherRaw), cb.Status_NOT_FOUND},
		"config update": {order.EnvelopeOp(cfgRaw), cb.Status_BAD_REQUEST},
		"garbage":       {order.EnvelopeOp([]byte{0xff}), cb.Status_BAD_REQUEST},
		"empty op":      {nil, cb.Status_BAD_REQUEST},
	} {
		if r := h.exec(t, c.op); r.Status != c.want {
			t.Errorf("%s: %v, want %s", name, r, c.want)
		}
	}
}

// TestAppUnfinalBound: with no signatures ordered, the App cuts at most
// MaxUnfinal blocks and then refuses envelopes until signatures come.
func TestAppUnfinalBound(t *testing.T) {
	h := newHarness(t, block.Config{MaxMessageCount: 1})
	for i := range 4 {
		h.apps[i] = func() *order.App {
			cfg := h.cfg
			cfg.Self, cfg.MaxUnfinal = uint32(i), 2
			a, err := order.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}()
	}
	for i := range 2 {
		if r := h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "x"))); r.Status != cb.Status_SUCCESS {
			t.Fatalf("envelope %d: %v", i, r)
		}
	}
	if r := h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "x"))); r.Status != cb.Status_SERVICE_UNAVAILABLE {
		t.Fatalf("past MaxUnfinal: %v", r)
	}
	h.signAll(t, 0, 0, 1, 2)
	if r := h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "x"))); r.Status != cb.Status_SUCCESS {
		t.Fatalf("after a block became final: %v", r)
	}
}

// TestAppSnapshot: a replica restored from another's snapshot mid-chain
// goes on exactly as the original, and Restore refuses a snapshot that
// does not hold a consistent state, leaving the state as it was.
func TestAppSnapshot(t *testing.T) {
	h := newHarness(t, block.Config{MaxMessageCount: 2})
	for range 5 {
		h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "x")))
	}
	h.signAll(t, 0, 0, 1, 2)
	h.signAll(t, 1, 1) // block 1 cut with one signature, one envelope pending
	snap := h.apps[3].Snapshot()
	if !bytes.Equal(snap, h.apps[0].Snapshot()) {
		t.Fatal("two replicas in the same state took different snapshots")
	}
	// Replica 3 restarts from the snapshot with the block store it kept.
	cfg := h.cfg
	cfg.Self, cfg.Chain = 3, h.apps[3].Chain()
	restored, err := order.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(restored.Snapshot(), snap) {
		t.Fatal("the restored state's snapshot differs")
	}
	h.apps[3] = restored
	for range 3 {
		h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "y")))
	}
	h.signAll(t, 1, 2, 3)
	h.signAll(t, 2, 0, 1, 2)
	h.signAll(t, 3, 1, 2, 3)
	chain := h.checkChains(t)
	if len(chain) != 4 {
		t.Fatalf("%d blocks, want 4", len(chain))
	}
	before := restored.Snapshot()
	for name, bad := range map[string][]byte{
		"empty":     nil,
		"truncated": snap[:len(snap)-3],
		"trailing":  append(append([]byte{}, snap...), 0),
		"version":   append([]byte{0, 0, 0, 9}, snap[4:]...),
		"huge count": func() []byte {
			b := append([]byte{}, snap...)
			copy(b[len(b)-5*32-4:], []byte{0xff, 0xff, 0xff, 0xff})
			return b
		}(),
		"a hash twice": func() []byte {
			b := append([]byte{}, snap...)
			copy(b[len(b)-32:], b[len(b)-64:len(b)-32])
			return b
		}(),
	} {
		if err := restored.Restore(bad); !errors.Is(err, order.ErrSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrSnapshot", name, err)
		}
	}
	if !bytes.Equal(restored.Snapshot(), before) {
		t.Fatal("a failed Restore changed the state")
	}
	// A snapshot whose unfinal block carries a forged signature.
	h2 := newHarness(t, block.Config{MaxMessageCount: 1})
	h2.exec(t, order.EnvelopeOp(h2.envelope(t, h2.writer, "x")))
	h2.signAll(t, 0, 1)
	good := h2.apps[0].Snapshot()
	forged := append([]byte{}, good...)
	forged[len(forged)-4-32-1] ^= 1 // the last byte of the signature, before the window of one hash
	if err := h2.apps[1].Restore(forged); !errors.Is(err, order.ErrSnapshot) {
		t.Fatalf("a snapshot with a forged signature: %v", err)
	}
	if err := h2.apps[1].Restore(good); err != nil {
		t.Fatal(err)
	}
}

// TestVerifySignatures: a block a Byzantine orderer altered, or whose
// signatures it cut below the quorum or padded with one orderer's twice,
// fails the check a client makes.
func TestVerifySignatures(t *testing.T) {
	h := newHarness(t, block.Config{MaxMessageCount: 1})
	h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "x")))
	h.signAll(t, 0, 0, 1, 2)
	good := h.checkChains(t)[0]
	if err := order.VerifySignatures(good, h.pubs, 3); err != nil {
		t.Fatal(err)
	}
	withSigs := func(b *cb.Block, f func(md *cb.Metadata)) *cb.Block {
		b = proto.Clone(b).(*cb.Block)
		md := new(cb.Metadata)
		if err := proto.Unmarshal(b.Metadata.Metadata[cb.BlockMetadataIndex_SIGNATURES], md); err != nil {
			t.Fatal(err)
		}
		f(md)
		b.Metadata.Metadata[cb.BlockMetadataIndex_SIGNATURES], _ = proto.Marshal(md)
		return b
	}
	altered := proto.Clone(good).(*cb.Block)
	altered.Header.DataHash = block.DataHash([][]byte{[]byte("other")})
	renumbered := proto.Clone(good).(*cb.Block)
	renumbered.Header.Number = 7
	for name, b := range map[string]*cb.Block{
		"data hash altered": altered,
		"renumbered":        renumbered,
		"one signature cut": withSigs(good, func(md *cb.Metadata) { md.Signatures = md.Signatures[:2] }),
		"one signer twice": withSigs(good, func(md *cb.Metadata) {
			md.Signatures = append(md.Signatures[:2], md.Signatures[0])
		}),
		"another value": withSigs(good, func(md *cb.Metadata) { md.Value = []byte("x") }),
		"no metadata":   {Header: good.Header, Data: good.Data},
	} {
		if err := order.VerifySignatures(b, h.pubs, 3); !errors.Is(err, order.ErrSignatures) {
			t.Errorf("%s: %v, want ErrSignatures", name, err)
		}
		if name != "another value" && name != "no metadata" {
			keys := make([][]byte, len(h.pubs))
			for i, k := range h.pubs {
				keys[i] = k
			}
			if err := ordertest.CheckSignatures(b, keys, 3); err == nil {
				t.Errorf("%s: the test client's check passed it", name)
			}
		}
	}
}

// TestAppDedup: an envelope ordered again while its payload is in the
// window is answered SUCCESS, "duplicate", and is in no block again; once
// the window moved past it, it is ordered anew.
func TestAppDedup(t *testing.T) {
	h := newHarness(t, block.Config{MaxMessageCount: 1})
	for i := range 4 {
		cfg := h.cfg
		cfg.Self, cfg.DedupWindow = uint32(i), 2
		h.apps[i], _ = order.New(cfg)
	}
	a, b, c := h.envelope(t, h.writer, "a"), h.envelope(t, h.writer, "b"), h.envelope(t, h.writer, "c")
	n := uint64(0)
	for _, step := range []struct {
		env []byte
		dup bool
	}{{a, false}, {a, true}, {b, false}, {a, true}, {c, false}, {a, false}} {
		r := h.exec(t, order.EnvelopeOp(step.env))
		if r.Status != cb.Status_SUCCESS || (r.Info != "") != step.dup {
			t.Fatalf("%v, want SUCCESS, duplicate %v", r, step.dup)
		}
		if !step.dup {
			h.signAll(t, n, 0, 1, 2)
			n++
		}
	}
	chain := h.checkChains(t)
	if len(chain) != 4 || !bytes.Equal(chain[3].Data.Data[0], a) {
		t.Fatalf("%d blocks, want a, b, c and a again", len(chain))
	}
	// The window is replicated state: a replica restored from a snapshot
	// refuses the same duplicates.
	restored, _ := order.New(h.cfg)
	if err := restored.Restore(h.apps[1].Snapshot()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(restored.Snapshot(), h.apps[1].Snapshot()) {
		t.Fatal("the restored window differs")
	}
}

// TestValid: an envelope that arrives on its own is checked; one in a
// pre-prepare is taken unchecked only with f = 1 and when the orderer
// whose client identity carries it is not the primary that proposed it.
func TestValid(t *testing.T) {
	h := newHarness(t, block.Config{})
	good := h.envelope(t, h.writer, "good")
	tampered := h.envelope(t, h.writer, "tampered")
	tampered[len(tampered)-1] ^= 1 // the signature's last byte
	highS := func() []byte {
		e, err := h.writer.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, []byte("high s"))
		if err != nil {
			t.Fatal(err)
		}
		if e.Signature, err = ordertest.HighS(e.Signature); err != nil {
			t.Fatal(err)
		}
		return mustMarshalEnv(t, e)
	}()
	a := h.apps[2]
	arrived := func(c bft.ClientID) bft.ValidContext { return bft.ValidContext{Client: c} }
	proposed := func(c bft.ClientID, p bft.ReplicaID) bft.ValidContext {
		return bft.ValidContext{Client: c, Proposed: true, Proposer: p}
	}
	for _, tc := range []struct {
		name string
		ctx  bft.ValidContext
		op   []byte
		want bool
	}{
		{"good, arrived", arrived(1), order.EnvelopeOp(good), true},
		{"tampered, arrived", arrived(1), order.EnvelopeOp(tampered), false},
		{"high S, arrived", arrived(1), order.EnvelopeOp(highS), false},
		{"tampered, from orderer 1's identity, proposed by 0", proposed(1, 0), order.EnvelopeOp(tampered), true},
		{"tampered, from orderer 1's duty identity, proposed by 0", proposed(5, 0), order.EnvelopeOp(tampered), true},
		{"tampered, from the proposer's own identity", proposed(1, 1), order.EnvelopeOp(tampered), false},
		{"tampered, from the proposer's own duty identity", proposed(5, 1), order.EnvelopeOp(tampered), false},
		{"tampered, from a client no orderer orders through", proposed(8, 0), order.EnvelopeOp(tampered), false},
		{"good, from the proposer's own identity", proposed(0, 0), order.EnvelopeOp(good), true},
		{"a signature op is left to Execute", arrived(8), order.SignOp(1, 0, make([]byte, 64)), true},
		{"an op that does not decode is left to Execute", arrived(8), []byte{0xff}, true},
	} {
		if got := a.Valid(tc.ctx, tc.op); got != tc.want {
			t.Errorf("%s: Valid = %v, want %v", tc.name, got, tc.want)
		}
	}

	// With f = 2, no two orderers include a correct one: every backup
	// checks.
	cfg := h.cfg
	cfg.F = 2
	for range 3 {
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Orderers = append(cfg.Orderers, pub)
	}
	seven, err := order.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if seven.Valid(proposed(1, 0), order.EnvelopeOp(tampered)) {
		t.Error("f = 2: a tampered envelope in a pre-prepare passed unchecked")
	}
	if !seven.Valid(proposed(1, 0), order.EnvelopeOp(good)) {
		t.Error("f = 2: a good envelope in a pre-prepare was refused")
	}

	// Execute judges the creator at the agreed time, not the signature,
	// which Valid judged before the envelope could be ordered.
	if r := h.exec(t, order.EnvelopeOp(h.envelope(t, h.forger, "forged"))); r.Status != cb.Status_FORBIDDEN {
		t.Fatalf("an envelope from a CA the channel does not name: %v", r)
	}
}

func mustMarshalEnv(t *testing.T, e *cb.Envelope) []byte {
	t.Helper()
	b, err := proto.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRestoreKnowsTheGap: a replica restored from a snapshot past what
// its block store holds (a state transfer, a lost ledger) reports the
// missing blocks at once, so that it fetches them before the App
// finalizes another block, which on a quiet channel may be long.
func TestRestoreKnowsTheGap(t *testing.T) {
	h := newHarness(t, block.Config{MaxMessageCount: 1})
	for i := range 3 {
		h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, fmt.Sprint("x", i))))
		h.signAll(t, uint64(i), 0, 1, 2)
	}
	snap := h.apps[0].Snapshot()
	cfg := h.cfg
	cfg.Self, cfg.Chain = 3, order.NewChain(new(order.MemStore))
	restored, err := order.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, _, more := cfg.Chain.Missing()
	if err := restored.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if from, to, _ := cfg.Chain.Missing(); from != 0 || to != 3 {
		t.Fatalf("after the restore: missing [%d, %d), want [0, 3)", from, to)
	}
	select {
	case <-more:
	default:
		t.Fatal("the gap was not signalled")
	}
}

// TestStalled: the Duties find the view stalled once the oldest block cut
// has waited FinalityTimeout for its signatures, then after twice that,
// and not while blocks become final.
func TestStalled(t *testing.T) {
	h := newHarness(t, block.Config{MaxMessageCount: 1})
	h.cfg.FinalityTimeout = time.Second
	h.apps[0] = h.newApp(t, 0)
	a := h.apps[0]
	d := a.Duties()
	start := h.now
	if d.Stalled(start.Add(time.Hour)) {
		t.Fatal("stalled with no block cut")
	}
	h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "a"))) // block 0 cut at h.now
	if d.Stalled(start.Add(999 * time.Millisecond)) {
		t.Fatal("stalled before FinalityTimeout")
	}
	if !d.Stalled(start.Add(time.Second)) {
		t.Fatal("not stalled after FinalityTimeout")
	}
	if d.Stalled(start.Add(2*time.Second)) || !d.Stalled(start.Add(3*time.Second)) {
		t.Fatal("the second report is not after twice FinalityTimeout")
	}
	// Block 0 becomes final and block 1 is cut: the wait starts again.
	h.now = start.Add(4 * time.Second)
	h.signAll(t, 0, 0, 1, 2)
	h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "b")))
	if d.Stalled(h.now.Add(999 * time.Millisecond)) {
		t.Fatal("stalled before FinalityTimeout of block 1")
	}
	if !d.Stalled(h.now.Add(time.Second)) {
		t.Fatal("block 1 not stalled after FinalityTimeout")
	}
	h.signAll(t, 1, 0, 1, 2)
	if d.Stalled(h.now.Add(time.Hour)) {
		t.Fatal("stalled with every block final")
	}
}
