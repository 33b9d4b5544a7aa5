package client_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/internal/leakcheck"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/client"
	"github.com/rubin-go/rubin/order/ordertest"
)

// chain is a chain of blocks signed by four orderers' keys, as package
// order signs them, that fake orderers serve; a block added later wakes
// the streams waiting for it.
type chain struct {
	keys []ed25519.PrivateKey
	pubs []ed25519.PublicKey

	mu     sync.Mutex
	blocks []*cb.Block
	grown  chan struct{} // closed when a block is added
}

// metadataValue is the Value of the SIGNATURES metadata of package
// order's blocks, which order.VerifySignatures requires.
var metadataValue, _ = proto.MarshalOptions{Deterministic: true}.Marshal(&cb.OrdererBlockMetadata{
	LastConfig: &cb.LastConfig{Index: 0}, ConsenterMetadata: []byte("rubin/v1/order-block"),
})

func newChain(t *testing.T, n int) *chain {
	t.Helper()
	c := &chain{grown: make(chan struct{})}
	for range 4 {
		pub, key, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		c.keys, c.pubs = append(c.keys, key), append(c.pubs, pub)
	}
	for range n {
		c.add()
	}
	return c
}

// signatures returns SIGNATURES metadata over h with the given
// signatures, by orderer ID.
func signatures(h *cb.BlockHeader, sigs map[uint32][]byte) []byte {
	md := &cb.Metadata{Value: metadataValue}
	for id := range uint32(4) {
		if sig, ok := sigs[id]; ok {
			ih, _ := proto.Marshal(&cb.IdentifierHeader{Identifier: id})
			md.Signatures = append(md.Signatures, &cb.MetadataSignature{IdentifierHeader: ih, Signature: sig})
		}
	}
	b, _ := proto.Marshal(md)
	return b
}

// add appends a block signed by every orderer.
func (c *chain) add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := uint64(len(c.blocks))
	var prev []byte
	if n > 0 {
		prev = block.HeaderHash(c.blocks[n-1].Header)
	}
	b := block.New(n, prev, [][]byte{fmt.Appendf(nil, "envelope %d", n)})
	sigs := make(map[uint32][]byte)
	for id, key := range c.keys {
		sigs[uint32(id)] = order.SignHeader(key, uint32(id), b.Header)
	}
	b.Metadata.Metadata[cb.BlockMetadataIndex_SIGNATURES] = signatures(b.Header, sigs)
	c.blocks = append(c.blocks, b)
	close(c.grown)
	c.grown = make(chan struct{})
}

// get returns block n, or nil and a channel closed when a block is added.
func (c *chain) get(n uint64) (*cb.Block, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n < uint64(len(c.blocks)) {
		return c.blocks[n], nil
	}
	return nil, c.grown
}

// fake is an orderer's AtomicBroadcast Deliver serving a chain, from the
// SeekInfo the test's seek envelopes carry unsigned. It may withhold
// blocks, and forge a header.
type fake struct {
	ab.UnimplementedAtomicBroadcastServer
	chain *chain
	// withhold: blocks from this number on are not sent; the stream
	// stays open.
	withhold uint64
	// forge: a HEADER_WITH_SIG request is answered with a forged header
	// of block 1000, and nothing more.
	forge bool
	// blockSeeks and headerSeeks count the requests served.
	blockSeeks, headerSeeks atomic.Int32
}

func (f *fake) Deliver(stream ab.AtomicBroadcast_DeliverServer) error {
	env, err := stream.Recv()
	if err != nil {
		return nil
	}
	si := new(ab.SeekInfo)
	if err := proto.Unmarshal(env.Payload, si); err != nil {
		return err
	}
	ctx := stream.Context()
	headers := si.ContentType == ab.SeekInfo_HEADER_WITH_SIG
	if !headers {
		f.blockSeeks.Add(1)
	} else if f.headerSeeks.Add(1); f.forge {
		if err := stream.Send(&ab.DeliverResponse{Type: &ab.DeliverResponse_Block{Block: forged(f.chain)}}); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	for n := si.Start.GetSpecified().GetNumber(); n <= si.Stop.GetSpecified().GetNumber(); n++ {
		b, grown := f.chain.get(n)
		for b == nil || n >= f.withhold {
			select {
			case <-ctx.Done():
				return nil
			case <-grown:
			}
			b, grown = f.chain.get(n)
		}
		if headers {
			b = &cb.Block{Header: b.Header, Metadata: b.Metadata}
		}
		if err := stream.Send(&ab.DeliverResponse{Type: &ab.DeliverResponse_Block{Block: b}}); err != nil {
			return err
		}
	}
	return stream.Send(&ab.DeliverResponse{Type: &ab.DeliverResponse_Status{Status: cb.Status_SUCCESS}})
}

// forged is a header of block 1000 with orderer 1's valid signature and
// two signatures that claim to be orderers 2's and 3's but are orderer
// 1's too: one valid signature of a quorum of three.
func forged(c *chain) *cb.Block {
	h := &cb.BlockHeader{Number: 1000, PreviousHash: make([]byte, 32), DataHash: block.DataHash(nil)}
	sig := order.SignHeader(c.keys[1], 1, h)
	b := block.New(1000, h.PreviousHash, nil)
	b.Data = nil
	b.Metadata.Metadata[cb.BlockMetadataIndex_SIGNATURES] = signatures(h, map[uint32][]byte{1: sig, 2: sig, 3: order.SignHeader(c.keys[1], 3, h)})
	return b
}

// serve runs srv's AtomicBroadcast on a loopback port until the test
// ends, and returns its address.
func serve(t *testing.T, srv ab.AtomicBroadcastServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	ab.RegisterAtomicBroadcastServer(gs, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gs.Serve(ln)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return ln.Addr().String()
}

// orderers serves each fake and returns their addresses.
func orderers(t *testing.T, fakes ...*fake) []string {
	t.Helper()
	var addrs []string
	for _, f := range fakes {
		addrs = append(addrs, serve(t, f))
	}
	return addrs
}

// seek returns a DeliverConfig's Seek (BLOCK) or SeekHeaders
// (HEADER_WITH_SIG) for the fakes: an unsigned envelope whose payload is
// the SeekInfo.
func seek(content ab.SeekInfo_SeekContentType) func(start, stop uint64) (*cb.Envelope, error) {
	return func(start, stop uint64) (*cb.Envelope, error) {
		p, err := proto.Marshal(&ab.SeekInfo{Start: ordertest.Specified(start), Stop: ordertest.Specified(stop), ContentType: content})
		return &cb.Envelope{Payload: p}, err
	}
}

// following returns a Deliverer of the orderers at addrs that follows
// headers, with a censorship timeout of ct and a patience of a minute.
func following(t *testing.T, c *chain, addrs []string, ct time.Duration) *client.Deliverer {
	t.Helper()
	d, err := client.NewDeliverer(client.DeliverConfig{
		Orderers: addrs, Keys: c.pubs, Quorum: 3, Retry: 50 * time.Millisecond,
		Seek: seek(ab.SeekInfo_BLOCK), SeekHeaders: seek(ab.SeekInfo_HEADER_WITH_SIG),
		CensorshipTimeout: ct, Options: client.Options{Patience: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// sameChain checks that got is c's chain from block 0.
func sameChain(t *testing.T, c *chain, got []*cb.Block) {
	t.Helper()
	for n, b := range got {
		want, _ := c.get(uint64(n))
		if !proto.Equal(b, want) {
			t.Fatalf("block %d is not the chain's", n)
		}
	}
}

// An orderer that stops sending blocks, its stream open, while the
// others' headers show the next block is left after the censorship
// timeout, long before the patience.
func TestDeliverLeavesWithholdingOrderer(t *testing.T) {
	leakcheck.Check(t)
	c := newChain(t, 8)
	f := []*fake{{chain: c, withhold: 3}, {chain: c, withhold: 1 << 62}, {chain: c, withhold: 1 << 62}, {chain: c, withhold: 1 << 62}}
	const ct = 500 * time.Millisecond
	d := following(t, c, orderers(t, f...), ct)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []*cb.Block
	var at []time.Time
	if err := d.Blocks(ctx, 0, 7, nil, func(b *cb.Block) error {
		got, at = append(got, b), append(at, time.Now())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 8 {
		t.Fatalf("got %d blocks, want 8", len(got))
	}
	sameChain(t, c, got)
	wait := at[3].Sub(at[2])
	t.Logf("block 3 came %v after block 2", wait)
	if wait < ct || wait > 10*time.Second {
		t.Errorf("block 3 came %v after block 2; want the censorship timeout, %v, or a little more", wait, ct)
	}
	if f[0].blockSeeks.Load() != 1 || f[1].blockSeeks.Load() != 1 {
		t.Errorf("blocks asked of orderers 0 and 1: %d and %d times, want once each", f[0].blockSeeks.Load(), f[1].blockSeeks.Load())
	}
}

// A forged header of a far block, from an orderer followed for headers,
// does not make the client leave an orderer that sends every block there
// is, however long the next one takes.
func TestDeliverIgnoresForgedHeader(t *testing.T) {
	leakcheck.Check(t)
	c := newChain(t, 5)
	f := []*fake{{chain: c, withhold: 1 << 62}, {chain: c, withhold: 1 << 62, forge: true}, {chain: c, withhold: 1 << 62}, {chain: c, withhold: 1 << 62}}
	const ct = 500 * time.Millisecond
	d := following(t, c, orderers(t, f...), ct)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []*cb.Block
	grow := time.AfterFunc(4*ct, c.add) // block 5, well past the timeout
	defer grow.Stop()
	if err := d.Blocks(ctx, 0, 5, nil, func(b *cb.Block) error {
		got = append(got, b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 {
		t.Fatalf("got %d blocks, want 6", len(got))
	}
	sameChain(t, c, got)
	if n := f[1].headerSeeks.Load(); n != 1 {
		t.Errorf("orderer 1 was asked for headers %d times, want once", n)
	}
	for i := range f {
		want := int32(0)
		if i == 0 {
			want = 1
		}
		if n := f[i].blockSeeks.Load(); n != want {
			t.Errorf("orderer %d was asked for blocks %d times, want %d", i, n, want)
		}
	}
}

// The header streams end with the stream they watch: when Blocks
// returns by its stop, its context, fn's error, and after a switch.
func TestDeliverHeaderStreamsEnd(t *testing.T) {
	c := newChain(t, 5)
	correct := []*fake{{chain: c, withhold: 1 << 62}, {chain: c, withhold: 1 << 62}, {chain: c, withhold: 1 << 62}, {chain: c, withhold: 1 << 62}}
	withholding := []*fake{{chain: c, withhold: 2}, {chain: c, withhold: 1 << 62}, {chain: c, withhold: 1 << 62}, {chain: c, withhold: 1 << 62}}
	addrs, withheld := orderers(t, correct...), orderers(t, withholding...)
	errStop := errors.New("enough")
	for _, tc := range []struct {
		name  string
		addrs []string
		peer  *fake // followed for headers while block 0 is read
		stop  uint64
		fn    func(ctx context.CancelFunc, b *cb.Block) error
		want  error
	}{
		{"stop", addrs, correct[1], 4, func(context.CancelFunc, *cb.Block) error { return nil }, nil},
		{"context", addrs, correct[1], 100, func(cancel context.CancelFunc, b *cb.Block) error {
			if b.Header.Number == 4 {
				cancel()
			}
			return nil
		}, context.Canceled},
		{"fn", addrs, correct[1], 100, func(_ context.CancelFunc, b *cb.Block) error {
			if b.Header.Number == 4 {
				return errStop
			}
			return nil
		}, errStop},
		{"switch", withheld, withholding[1], 4, func(context.CancelFunc, *cb.Block) error { return nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := leakcheck.Take()
			d := following(t, c, tc.addrs, 200*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := d.Blocks(ctx, 0, tc.stop, nil, func(b *cb.Block) error {
				// Let a header stream begin, so that there is one to end.
				for deadline := time.Now().Add(5 * time.Second); b.Header.Number == 0 && tc.peer.headerSeeks.Load() == 0 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				return tc.fn(cancel, b)
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Blocks = %v, want %v", err, tc.want)
			}
			if tc.peer.headerSeeks.Load() == 0 {
				t.Error("no header stream was begun")
			}
			leakcheck.Verify(t, base, leakcheck.DefaultTimeout)
		})
	}
}
