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
type Chain struct {
	mu     sync.Mutex
	store  BlockStore
	height uint64
	grown  chan struct{} // closed when the height grows, then replaced
	err    error         // the first failure to append: the chain stops growing
}

// NewChain returns the chain of the blocks in store.
func NewChain(store BlockStore) *Chain {
	return &Chain{store: store, height: store.Height(), grown: make(chan struct{})}
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

// Err returns why the chain stopped growing, if it did.
func (c *Chain) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// put adds final block number. A block below the height is one the
// store kept from before a restart, which replay finalizes again; one
// above it leaves a gap (the App restored a snapshot past the store), and
// the chain stops growing.
func (c *Chain) put(number uint64, raw []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != nil || number < c.height:
		return
	case number > c.height:
		c.err = fmt.Errorf("order: block %d is final but the store holds only %d blocks", number, c.height)
		return
	}
	if err := c.store.Append(number, raw); err != nil {
		c.err = err
		return
	}
	c.height++
	close(c.grown)
	c.grown = make(chan struct{})
}

// sync makes the store's blocks durable.
func (c *Chain) sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.store.Sync()
}
