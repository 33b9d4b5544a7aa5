package client

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/grpc"

	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
)

// DeliverConfig configures a Deliverer. Orderers, Keys, Quorum and Seek
// are required.
type DeliverConfig struct {
	// Orderers are the orderers' AtomicBroadcast addresses, by ID; an
	// empty one is not asked.
	Orderers []string
	// Keys are the orderers' public keys, by ID.
	Keys []ed25519.PublicKey
	// Quorum is how many orderers' signatures a block needs: 2f+1.
	Quorum int
	// Seek returns a signed DELIVER_SEEK_INFO envelope for blocks start
	// to stop, inclusive, with BLOCK_UNTIL_READY.
	Seek func(start, stop uint64) (*cb.Envelope, error)
	// SeekHeaders, if set, returns an envelope as Seek does but with
	// ContentType HEADER_WITH_SIG: the client then follows the other
	// orderers' headers while it reads blocks from one (see Deliverer).
	// Nil: it does not.
	SeekHeaders func(start, stop uint64) (*cb.Envelope, error)
	// CensorshipTimeout is how long the orderer the client reads blocks
	// from may go without sending the next block once another orderer
	// sent a header, signed by a quorum, of that block or a later one
	// (default Patience/5: 2s with the default Patience). It counts from
	// the later of that header and the orderer's last block.
	CensorshipTimeout time.Duration
	// Retry is how long the client waits after a round in which no
	// orderer gave a block (default 1s).
	Retry time.Duration
	// Options: Patience is how long an orderer may leave the client
	// without a block before the client asks the next one.
	Options
}

// A Deliverer reads blocks from the orderers' AtomicBroadcast Deliver and
// hands on only blocks it verified, switching orderer when one fails,
// lies or withholds.
//
// A block is taken only if it is the next one expected, carries valid
// signatures of a quorum (2f+1) of distinct orderers over its header
// (order.VerifySignatures), its data hashes to its DataHash, and its
// PreviousHash is the hash of the block before (when that block is
// known). A client that trusts the orderers' public keys therefore gets
// the chain the correct orderers agreed on from any mix of orderers,
// as long as one correct orderer answers. An orderer is left for the
// next when its stream fails, it sends anything that does not verify, or
// it sends no block for Patience while the client waits for one.
//
// With SeekHeaders, an orderer that withholds is also noticed by
// comparison, as Fabric v3's BFT deliverer does: while the client reads
// blocks from one orderer (the data source), it follows each other
// orderer's headers (HEADER_WITH_SIG), one goroutine and stream per
// orderer from the next block expected, and keeps of each only its
// latest header. When one of them sent the header of the next block
// expected or a later one, and the data source has not sent the next
// block for CensorshipTimeout since that header came or since its last
// block, whichever is later, the client checks that header's signatures
// (order.VerifySignatures) and, if a quorum signed it, leaves the data
// source for the next orderer. A header that does not verify ends the
// following of the orderer that sent it, and leaves the data source
// where it is: a Byzantine orderer can make the client switch only by
// showing a block that exists. A header stream that fails is not
// renewed until the client moves to another data source. The header
// streams end when the client leaves the data source or Blocks returns.
//
// Its methods must not be called concurrently.
type Deliverer struct {
	cfg  DeliverConfig
	next int // the orderer to ask first
}

// NewDeliverer returns a Deliverer.
func NewDeliverer(cfg DeliverConfig) (*Deliverer, error) {
	if len(cfg.Orderers) == 0 || len(cfg.Keys) < len(cfg.Orderers) || cfg.Quorum < 1 || cfg.Seek == nil {
		return nil, errors.New("client: a deliverer needs the orderers, their keys, a quorum and a way to sign a seek")
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	cfg.Options = cfg.Options.normalized()
	if cfg.CensorshipTimeout <= 0 {
		cfg.CensorshipTimeout = cfg.Patience / 5
	}
	return &Deliverer{cfg: cfg}, nil
}

// Blocks hands blocks start to stop, inclusive, to fn, in order, each
// verified; prev is the header of block start-1 if the caller knows it
// (nil: block start's PreviousHash is not checked, unless start is 0). It
// returns nil once fn took block stop, fn's first error, or ctx's error.
func (c *Deliverer) Blocks(ctx context.Context, start, stop uint64, prev *cb.BlockHeader, fn func(*cb.Block) error) error {
	if stop < start {
		return fmt.Errorf("client: blocks %d to %d", start, stop)
	}
	want := start
	for {
		got, first := false, c.next
		for k := range len(c.cfg.Orderers) {
			i := (first + k) % len(c.cfg.Orderers)
			if c.cfg.Orderers[i] == "" {
				continue
			}
			n, last, err := c.from(ctx, i, want, stop, prev, fn)
			if n > 0 {
				got, want, prev = true, want+n, last
			}
			var fnErr *callbackError
			switch {
			case errors.As(err, &fnErr):
				return fnErr.err
			case ctx.Err() != nil:
				return ctx.Err()
			case want > stop:
				return nil
			}
			c.cfg.Logger.Debug("orderer left", "orderer", i, "blocks", n, "err", err)
			c.next = i + 1
		}
		if !got {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(c.cfg.Retry):
			}
		}
	}
}

// callbackError is an error of Blocks' fn, which ends Blocks.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// errWithheld is why an orderer that sent no block for Patience is left.
var errWithheld = errors.New("client: no block within the patience")

// from reads blocks want to stop from orderer i until it fails, and
// returns how many fn took and the last one's header.
func (c *Deliverer) from(ctx context.Context, i int, want, stop uint64, prev *cb.BlockHeader, fn func(*cb.Block) error) (uint64, *cb.BlockHeader, error) {
	seek, err := c.cfg.Seek(want, stop)
	if err != nil {
		return 0, prev, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stream, done, err := c.open(ctx, i, seek)
	if err != nil {
		return 0, prev, err
	}
	defer done()
	// The patience: a timer that ends the stream, reset by every block.
	patience := time.AfterFunc(c.cfg.Patience, func() { cancel(errWithheld) })
	defer patience.Stop()
	w := c.watch(ctx, cancel, i, want, stop)
	defer w.close()
	var n uint64
	for {
		r, err := stream.Recv()
		if err != nil {
			if cause := context.Cause(ctx); cause != nil {
				err = cause
			}
			return n, prev, err
		}
		b := r.GetBlock()
		if b == nil {
			return n, prev, fmt.Errorf("client: orderer %d: status %v before block %d", i, r.GetStatus(), want+n)
		}
		if err := c.verify(b, want+n, prev); err != nil {
			return n, prev, fmt.Errorf("client: orderer %d: %w", i, err)
		}
		if err := fn(b); err != nil {
			return n, prev, &callbackError{err}
		}
		n++
		prev = b.Header
		w.took(want + n)
		if want+n > stop {
			return n, prev, nil
		}
		patience.Reset(c.cfg.Patience)
	}
}

// open dials orderer i, opens a Deliver stream and sends seek on it;
// done closes the connection.
func (c *Deliverer) open(ctx context.Context, i int, seek *cb.Envelope) (stream ab.AtomicBroadcast_DeliverClient, done func(), err error) {
	conn, err := grpc.NewClient(c.cfg.Orderers[i], c.cfg.DialOptions...)
	if err != nil {
		return nil, nil, err
	}
	if stream, err = ab.NewAtomicBroadcastClient(conn).Deliver(ctx); err == nil {
		err = stream.Send(seek)
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return stream, func() { conn.Close() }, nil
}

// verify checks that b is block number, follows prev (if known) and is
// signed by a quorum of orderers.
func (c *Deliverer) verify(b *cb.Block, number uint64, prev *cb.BlockHeader) error {
	h := b.GetHeader()
	switch {
	case h == nil || h.Number != number:
		return fmt.Errorf("block %d numbered %d", number, h.GetNumber())
	case prev != nil && !bytes.Equal(h.PreviousHash, block.HeaderHash(prev)):
		return fmt.Errorf("block %d does not follow block %d", number, prev.Number)
	case number == 0 && len(h.PreviousHash) != 0:
		return errors.New("block 0 has a previous hash")
	case !bytes.Equal(h.DataHash, block.DataHash(b.GetData().GetData())):
		return fmt.Errorf("block %d: data hash does not match its data", number)
	}
	return order.VerifySignatures(b, c.cfg.Keys, c.cfg.Quorum)
}
