package order

import (
	"fmt"
	"sync"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"
)

// BlockStore keeps the final blocks of a chain, encoded, numbered from 0.
// Package order/ledger's *Ledger is one, on disk; MemStore another. The
// Chain calls it from one goroutine at a time.
type BlockStore interface {
	// Append adds block number, which must equal Height().
	Append(number uint64, block []byte) error
	// Sync makes every appended block durable.
	Sync() error
	// Height is the number of blocks held.
	Height() uint64
	// Block returns block n; an error if n >= Height().
	Block(n uint64) ([]byte, error)
}

// MemStore is a BlockStore in memory.
type MemStore struct {
	blocks [][]byte
}

var _ BlockStore = (*MemStore)(nil)

// Append adds block number, which must be the next.
func (m *MemStore) Append(number uint64, block []byte) error {
	if number != uint64(len(m.blocks)) {
		return fmt.Errorf("order: append block %d at height %d", number, len(m.blocks))
	}
	m.blocks = append(m.blocks, block)
	return nil
}

// Sync does nothing: memory is as durable as it gets.
func (m *MemStore) Sync() error { return nil }

// Height is the number of blocks held.
func (m *MemStore) Height() uint64 { return uint64(len(m.blocks)) }

// Block returns block n.
func (m *MemStore) Block(n uint64) ([]byte, error) {
	if n >= uint64(len(m.blocks)) {
		return nil, fmt.Errorf("order: block %d not found at height %d", n, len(m.blocks))
	}
	return m.blocks[n], nil
}

// Chain is the final blocks of a replica's chain, read by Deliver while
// the App appends. It is safe for concurrent use.
//
// A replica restored from a snapshot past what its store holds (its
// blocks were lost, or it caught up by state transfer) has a gap: the App
// finalizes blocks the store cannot take yet. The chain then keeps count
// of the blocks known final (Missing), takes the missing ones, in order,
// from whoever fetches them from other orderers and checks them (Fill),
// and takes the App's blocks again once the gap is closed.
type Chain struct {
	mu     sync.Mutex
	store  BlockStore
	height uint64
	grown  chan struct{} // closed when the height grows, then replaced
	err    error         // the first failure to append: the chain stops growing
	// known is the number of blocks known final (above height while
	// there is a gap); gap gets a token when it grows past height.
	known  uint64
	gap    chan struct{}
	filled uint64 // blocks taken by Fill
}

// NewChain returns the chain of the blocks in store.
func NewChain(store BlockStore) *Chain {
	h := store.Height()
	return &Chain{store: store, height: h, known: h, grown: make(chan struct{}), gap: make(chan struct{}, 1)}
}

// Height returns the number of final blocks held, and a channel closed
// when there are more.
func (c *Chain) Height() (uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.height, c.grown
}

// Block returns final block n, decoded.
func (c *Chain) Block(n uint64) (*cb.Block, error) {
	c.mu.Lock()
	raw, err := c.store.Block(n)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	b := new(cb.Block)
	if err := proto.Unmarshal(raw, b); err != nil {
		return nil, fmt.Errorf("order: stored block %d: %w", n, err)
	}
	return b, nil
}

// Err returns why the chain stopped growing, if it did: its store
// failed.
func (c *Chain) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// put adds final block number from the App. A block below the height is
// one the store kept from before a restart, which replay finalizes again;
// one above it is beyond a gap, for Fill to close.
func (c *Chain) put(number uint64, raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known = max(c.known, number+1)
	switch {
	case c.err != nil || number < c.height:
		return
	case number > c.height:
		select {
		case c.gap <- struct{}{}:
		default:
		}
		return
	}
	c.appendLocked(raw)
}

func (c *Chain) appendLocked(raw []byte) {
	if err := c.store.Append(c.height, raw); err != nil {
		c.err = err
		return
	}
	c.height++
	close(c.grown)
	c.grown = make(chan struct{})
}

// Missing returns the blocks known final that the chain lacks, [from,
// to), and a channel that gets a token when more go missing.
func (c *Chain) Missing() (from, to uint64, more <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.height, c.known, c.gap
}

// Fill adds block number, fetched from another orderer, if it is the
// next the chain lacks and check, given the header of the block before
// it (nil for block 0), accepts it. It stores raw, which must be the
// block's encoding.
func (c *Chain) Fill(number uint64, raw []byte, check func(prev *cb.BlockHeader) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if number != c.height || number >= c.known {
		return fmt.Errorf("order: block %d is not missing (height %d, %d final)", number, c.height, c.known)
	}
	var prev *cb.BlockHeader
	if number > 0 {
		b, err := c.store.Block(number - 1)
		if err != nil {
			return err
		}
		pb := new(cb.Block)
		if err := proto.Unmarshal(b, pb); err != nil {
			return fmt.Errorf("order: stored block %d: %w", number-1, err)
		}
		prev = pb.Header
	}
	if err := check(prev); err != nil {
		return err
	}
	c.appendLocked(raw)
	if c.err == nil {
		c.filled++
	}
	return c.err
}

// Filled returns how many blocks Fill added.
func (c *Chain) Filled() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.filled
}

// sync makes the store's blocks durable.
func (c *Chain) sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.store.Sync()
}
