package order

import (
	"context"
	"fmt"
	"sync"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"
)

// BlockStore keeps the final blocks of a chain, encoded, numbered from 0.
// Package order/ledger's *Ledger is one, on disk; MemStore another. The
// Chain calls Append, Height and Block from one goroutine at a time, and
// Sync from one goroutine at a time, possibly while one of the others
// runs.
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

// Sync does nothing (and so may run beside the other methods): memory
// is as durable as it gets.
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
// A block is served (Height, Block) only once it is durable: appended,
// then covered by a store Sync that began after its Append. Run syncs in
// the background, one Sync for every block appended while the last ran;
// while Run is not running, each block is synced as it is added.
//
// A replica restored from a snapshot past what its store holds (its
// blocks were lost, or it caught up by state transfer) has a gap: the App
// finalizes blocks the store cannot take yet. The chain then keeps count
// of the blocks known final (Missing), takes the missing ones, in order,
// from whoever fetches them from other orderers and checks them (Fill),
// and takes the App's blocks again once the gap is closed. A replica
// whose store is ahead of its snapshot finalizes again, as it replays
// its log, blocks the store holds: those are not appended again.
//
// The first failure of the store stops the chain for good: it takes no
// more blocks, serves none it had not synced, and Err and Failed report
// it.
type Chain struct {
	mu     sync.Mutex
	store  BlockStore
	height uint64        // blocks appended
	synced uint64        // blocks durable, the ones served
	grown  chan struct{} // closed when synced grows, then replaced
	err    error         // the first failure of the store
	failed chan struct{} // closed when err is set
	// dirty gets a token when height passes synced; background is set
	// while Run syncs.
	dirty      chan struct{}
	background bool
	syncing    sync.Mutex // held across a store Sync
	// known is the number of blocks known final (above height while
	// there is a gap); gap gets a token when it grows past height.
	known  uint64
	gap    chan struct{}
	filled uint64 // blocks taken by Fill
}

// NewChain returns the chain of the blocks in store, all of which it
// takes to be durable.
func NewChain(store BlockStore) *Chain {
	h := store.Height()
	return &Chain{
		store: store, height: h, synced: h, known: h,
		grown: make(chan struct{}), failed: make(chan struct{}),
		dirty: make(chan struct{}, 1), gap: make(chan struct{}, 1),
	}
}

// Height returns the number of final blocks durable and served, and a
// channel closed when there are more.
func (c *Chain) Height() (uint64, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.synced, c.grown
}

// Block returns final block n, decoded.
func (c *Chain) Block(n uint64) (*cb.Block, error) {
	c.mu.Lock()
	if n >= c.synced {
		c.mu.Unlock()
		return nil, fmt.Errorf("order: block %d not durable at height %d", n, c.synced)
	}
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

// Failed returns a channel closed when the store fails (see Err).
func (c *Chain) Failed() <-chan struct{} { return c.failed }

func (c *Chain) failLocked(err error) {
	if c.err == nil {
		c.err = fmt.Errorf("order: block store: %w", err)
		close(c.failed)
	}
}

// Run syncs the blocks added, in the background, until ctx ends (then
// it syncs what is left and returns nil) or the store fails (then it
// returns the error). One Run at a time.
func (c *Chain) Run(ctx context.Context) error {
	c.mu.Lock()
	c.background = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.background = false
		c.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			if err := c.sync(); err != nil {
				return err
			}
			return nil
		case <-c.failed:
			return c.Err()
		case <-c.dirty:
			if err := c.sync(); err != nil {
				return err
			}
		}
	}
}

// put adds final block number from the App. A block below the height is
// one the store kept from before a restart, which replay finalizes again;
// one above it is beyond a gap, for Fill to close.
func (c *Chain) put(number uint64, raw []byte) {
	c.mu.Lock()
	c.known = max(c.known, number+1)
	inline := false
	switch {
	case c.err != nil || number < c.height:
	case number > c.height:
		select {
		case c.gap <- struct{}{}:
		default:
		}
	default:
		inline = c.appendLocked(raw)
	}
	c.mu.Unlock()
	if inline {
		c.sync()
	}
}

// appendLocked appends raw as the next block, and has it synced: by Run,
// or at once (inline, which must then be called with c.mu released)
// if Run is not running.
func (c *Chain) appendLocked(raw []byte) (inline bool) {
	if err := c.store.Append(c.height, raw); err != nil {
		c.failLocked(err)
		return false
	}
	c.height++
	if !c.background {
		return true
	}
	select {
	case c.dirty <- struct{}{}:
	default:
	}
	return false
}

// knowFinal records that blocks up to final are final, as a snapshot
// restored says: if the store lacks some, they go missing at once, not
// only once the App finalizes the next block.
func (c *Chain) knowFinal(final uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if final <= c.known {
		return
	}
	c.known = final
	if c.known > c.height {
		select {
		case c.gap <- struct{}{}:
		default:
		}
	}
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
	inline, err := c.fillLocked(number, raw, check)
	c.mu.Unlock()
	if inline {
		return c.sync()
	}
	return err
}

func (c *Chain) fillLocked(number uint64, raw []byte, check func(prev *cb.BlockHeader) error) (inline bool, _ error) {
	if c.err != nil {
		return false, c.err
	}
	if number != c.height || number >= c.known {
		return false, fmt.Errorf("order: block %d is not missing (height %d, %d final)", number, c.height, c.known)
	}
	var prev *cb.BlockHeader
	if number > 0 {
		b, err := c.store.Block(number - 1)
		if err != nil {
			return false, err
		}
		pb := new(cb.Block)
		if err := proto.Unmarshal(b, pb); err != nil {
			return false, fmt.Errorf("order: stored block %d: %w", number-1, err)
		}
		prev = pb.Header
	}
	if err := check(prev); err != nil {
		return false, err
	}
	inline = c.appendLocked(raw)
	if c.err == nil {
		c.filled++
	}
	return inline, c.err
}

// Filled returns how many blocks Fill added.
func (c *Chain) Filled() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.filled
}

// sync makes the blocks appended durable, then serves them. Only one
// store Sync runs at a time, and never under c.mu: readers and appends
// go on meanwhile.
func (c *Chain) sync() error {
	c.syncing.Lock()
	defer c.syncing.Unlock()
	c.mu.Lock()
	h, err := c.height, c.err
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if h == c.syncedHeight() {
		return nil
	}
	err = c.store.Sync()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failLocked(err)
		return c.err
	}
	if h > c.synced {
		c.synced = h
		close(c.grown)
		c.grown = make(chan struct{})
	}
	return nil
}

func (c *Chain) syncedHeight() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.synced
}
