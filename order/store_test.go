package order_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
)

// TestChain: the chain grows one final block at a time and wakes its
// waiters; a block it holds already (a replay after a restart) is not
// stored again, and one past its height (a gap) stops it.
func TestChain(t *testing.T) {
	h := newHarness(t, block.Config{MaxMessageCount: 1})
	store := new(order.MemStore)
	cfg := h.cfg
	cfg.Chain = order.NewChain(store)
	h.apps[0], _ = order.New(cfg)
	c := h.apps[0].Chain()
	height, grown := c.Height()
	if height != 0 {
		t.Fatal("a new chain is not empty")
	}
	snap := h.apps[0].Snapshot()
	h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "x")))
	h.signAll(t, 0, 0, 1, 2)
	select {
	case <-grown:
	default:
		t.Fatal("the chain grew without waking its waiter")
	}
	if n, _ := c.Height(); n != 1 || store.Height() != 1 {
		t.Fatalf("height %d, store %d, want 1", n, store.Height())
	}
	b, err := c.Block(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Block(1); err == nil {
		t.Fatal("block 1 of a chain of 1")
	}
	// Replica 0 restarts from the snapshot before block 0 with the store
	// that holds it, and replays: block 0 is final again, not stored twice.
	again, _ := order.New(cfg)
	if err := again.Restore(snap); err != nil {
		t.Fatal(err)
	}
	hdr := b.Header
	for _, op := range [][]byte{
		order.EnvelopeOp(b.Data.Data[0]),
		order.SignOp(0, 0, order.SignHeader(h.keys[0], 0, hdr)),
		order.SignOp(1, 0, order.SignHeader(h.keys[1], 1, hdr)),
		order.SignOp(2, 0, order.SignHeader(h.keys[2], 2, hdr)),
	} {
		if r, _ := order.ParseResult(again.Execute(bft.ExecContext{Time: h.now}, op)); r.Status != cb.Status_SUCCESS {
			t.Fatalf("replay: %v", r)
		}
	}
	h.apps[0] = again
	if store.Height() != 1 || c.Err() != nil {
		t.Fatalf("after the replay: store height %d, %v", store.Height(), c.Err())
	}
	// A fresh store under a replica restored past it: a gap, which the
	// chain reports and Fill closes with blocks from another replica,
	// each checked against the one before.
	late := h.apps[1].Snapshot()
	cfg.Chain = order.NewChain(new(order.MemStore))
	gap, _ := order.New(cfg)
	if err := gap.Restore(late); err != nil {
		t.Fatal(err)
	}
	h.apps[0] = gap
	h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "y")))
	h.signAll(t, 1, 0, 1, 2)
	from, to, more := gap.Chain().Missing()
	if from != 0 || to != 2 {
		t.Fatalf("missing [%d, %d), want [0, 2)", from, to)
	}
	select {
	case <-more:
	default:
		t.Fatal("no word of the gap")
	}
	source := h.decoded(t, 1)
	fill := func(n uint64) error {
		raw, _ := proto.Marshal(source[n])
		return gap.Chain().Fill(n, raw, func(prev *cb.BlockHeader) error { return block.Check(prev, source[n]) })
	}
	if err := fill(1); err == nil {
		t.Fatal("Fill took block 1 before block 0")
	}
	wrong := func(*cb.BlockHeader) error { return errors.New("refused") }
	if err := gap.Chain().Fill(0, nil, wrong); err == nil {
		t.Fatal("Fill took a block its check refused")
	}
	if err := fill(0); err != nil {
		t.Fatal(err)
	}
	if err := fill(1); err != nil {
		t.Fatal(err)
	}
	if err := fill(1); err == nil {
		t.Fatal("Fill took a block the chain holds")
	}
	if from, to, _ := gap.Chain().Missing(); from != 2 || to != 2 || gap.Chain().Filled() != 2 {
		t.Fatalf("after the fill: missing [%d, %d), %d filled", from, to, gap.Chain().Filled())
	}
	// The App's next final block goes straight to the store again.
	h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, "z")))
	h.signAll(t, 2, 0, 1, 2)
	h.checkChains(t)
	raw, _ := store.Block(0)
	if want, _ := proto.Marshal(b); !proto.Equal(b, mustBlock(t, raw)) || len(want) == 0 {
		t.Fatal("the stored block is not the one delivered")
	}
}

func mustBlock(t *testing.T, raw []byte) *cb.Block {
	t.Helper()
	b := new(cb.Block)
	if err := proto.Unmarshal(raw, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// gatedStore is a MemStore whose Sync waits for a word on release and
// returns it (nil: success), counting the Syncs.
type gatedStore struct {
	order.MemStore
	release chan error
	syncs   atomic.Int32
}

func (g *gatedStore) Sync() error {
	g.syncs.Add(1)
	return <-g.release
}

// TestChainServesSynced: with Run syncing in the background, a final
// block is appended at once but served only when a Sync begun after it
// returns; the blocks appended during one Sync are covered by the next,
// one Sync for all; a failed Sync stops the chain, which then serves
// nothing more, and Run returns the error.
func TestChainServesSynced(t *testing.T) {
	h := newHarness(t, block.Config{MaxMessageCount: 1})
	store := &gatedStore{release: make(chan error)}
	cfg := h.cfg
	cfg.Chain = order.NewChain(store)
	h.apps[0], _ = order.New(cfg)
	c := h.apps[0].Chain()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	defer func() {
		cancel()
		close(store.release)
		<-ran
	}()
	final := func(n uint64, data string) {
		t.Helper()
		h.exec(t, order.EnvelopeOp(h.envelope(t, h.writer, data)))
		h.signAll(t, n, 0, 1, 2)
	}
	waitSyncs := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); store.syncs.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d Syncs begun, want %d", store.syncs.Load(), n)
			}
		}
	}
	waitHeight := func(n uint64) {
		t.Helper()
		for {
			height, grown := c.Height()
			if height >= n {
				if height != n {
					t.Fatalf("height %d, want %d", height, n)
				}
				return
			}
			select {
			case <-grown:
			case <-time.After(10 * time.Second):
				t.Fatalf("height %d, want %d", height, n)
			}
		}
	}
	final(0, "a")
	waitSyncs(1)
	if n, _ := c.Height(); n != 0 || store.Height() != 1 {
		t.Fatalf("before its Sync returned: height %d, store %d; want 0, 1", n, store.Height())
	}
	if _, err := c.Block(0); err == nil {
		t.Fatal("a block was served before its Sync returned")
	}
	final(1, "b")
	final(2, "c")
	store.release <- nil // the first Sync, which began before blocks 1 and 2
	waitHeight(1)
	waitSyncs(2)
	store.release <- nil
	waitHeight(3)
	if s := store.syncs.Load(); s != 2 {
		t.Fatalf("%d Syncs for blocks 1 and 2, want one", s-1)
	}
	final(3, "d")
	waitSyncs(3)
	broken := errors.New("disk on fire")
	store.release <- broken
	select {
	case err := <-ran:
		if !errors.Is(err, broken) || !errors.Is(c.Err(), broken) {
			t.Fatalf("Run returned %v, Err %v; want the Sync's error", err, c.Err())
		}
		ran <- err
	case <-time.After(10 * time.Second):
		t.Fatal("Run goes on after a failed Sync")
	}
	select {
	case <-c.Failed():
	default:
		t.Fatal("Failed is not closed")
	}
	if n, _ := c.Height(); n != 3 {
		t.Fatalf("after the failed Sync: height %d, want 3", n)
	}
}
