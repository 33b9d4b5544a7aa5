package block

import (
	"fmt"
	"time"
)

// Config is how blocks are cut: the BatchSize and BatchTimeout of a
// Fabric channel's orderer configuration. A zero field takes its default.
type Config struct {
	// MaxMessageCount is the most envelopes in a block (default 500).
	MaxMessageCount int
	// AbsoluteMaxBytes is the largest envelope accepted for ordering
	// (default 512 KiB). Fabric's default, 10 MB, is above what one
	// request of the ordering core may carry.
	AbsoluteMaxBytes int
	// PreferredMaxBytes is the size a block's envelopes should not pass
	// (default 512 KiB, at most AbsoluteMaxBytes): an envelope that
	// would take the pending ones past it is cut into the next block,
	// and one larger than it gets a block of its own.
	PreferredMaxBytes int
	// BatchTimeout is how long after the first envelope of a block the
	// block is cut even if it is not full (default 2s), measured in the
	// ordering service's agreed time.
	BatchTimeout time.Duration
}

// Normalized returns c with its defaults filled in.
func (c Config) Normalized() Config {
	if c.MaxMessageCount <= 0 {
		c.MaxMessageCount = 500
	}
	if c.AbsoluteMaxBytes <= 0 {
		c.AbsoluteMaxBytes = 512 << 10
	}
	if c.PreferredMaxBytes <= 0 {
		c.PreferredMaxBytes = 512 << 10
	}
	c.PreferredMaxBytes = min(c.PreferredMaxBytes, c.AbsoluteMaxBytes)
	if c.BatchTimeout <= 0 {
		c.BatchTimeout = 2 * time.Second
	}
	return c
}

// Cutter collects envelopes in the agreed order and cuts them into
// batches, one per block, by Fabric's block cutting rules. It is
// deterministic: it reads no clock, and BatchTimeout is enforced by the
// caller, which calls Cut for an agreed timeout event (see Since). It is
// not safe for concurrent use.
type Cutter struct {
	cfg     Config
	pending [][]byte
	bytes   int
	since   time.Time // the agreed time of the first pending envelope
}

// NewCutter returns a Cutter with nothing pending.
func NewCutter(cfg Config) *Cutter { return &Cutter{cfg: cfg.Normalized()} }

// Config returns the Cutter's configuration, defaults filled in.
func (c *Cutter) Config() Config { return c.cfg }

// Ordered adds env, ordered at agreed time now, and returns the batches
// it completes, in order (none, one or two): as Fabric's cutter, an
// envelope larger than PreferredMaxBytes cuts what is pending and goes
// alone, one that would take the pending bytes past PreferredMaxBytes
// cuts them first, and a batch is cut when it holds MaxMessageCount
// envelopes. It returns an error, and adds nothing, for an envelope
// larger than AbsoluteMaxBytes. The Cutter keeps env.
func (c *Cutter) Ordered(env []byte, now time.Time) ([][][]byte, error) {
	size := len(env)
	if size > c.cfg.AbsoluteMaxBytes {
		return nil, fmt.Errorf("block: envelope of %d bytes is larger than AbsoluteMaxBytes %d", size, c.cfg.AbsoluteMaxBytes)
	}
	var out [][][]byte
	if size > c.cfg.PreferredMaxBytes {
		if len(c.pending) > 0 {
			out = append(out, c.Cut())
		}
		return append(out, [][]byte{env}), nil
	}
	if len(c.pending) > 0 && c.bytes+size > c.cfg.PreferredMaxBytes {
		out = append(out, c.Cut())
	}
	if len(c.pending) == 0 {
		c.since = now
	}
	c.pending = append(c.pending, env)
	c.bytes += size
	if len(c.pending) >= c.cfg.MaxMessageCount {
		out = append(out, c.Cut())
	}
	return out, nil
}

// Cut returns the pending envelopes as a batch (nil if none) and starts
// an empty one.
func (c *Cutter) Cut() [][]byte {
	b := c.pending
	c.pending, c.bytes, c.since = nil, 0, time.Time{}
	return b
}

// Pending returns the envelopes waiting for the next cut; the caller must
// not modify them.
func (c *Cutter) Pending() [][]byte { return c.pending }

// Since returns the agreed time of the first pending envelope (the zero
// time if none): the batch is due to be cut by timeout at
// Since().Add(BatchTimeout).
func (c *Cutter) Since() time.Time { return c.since }

// Due reports whether envelopes are pending and their BatchTimeout has
// passed at agreed time now.
func (c *Cutter) Due(now time.Time) bool {
	return len(c.pending) > 0 && !now.Before(c.since.Add(c.cfg.BatchTimeout))
}

// Restore replaces the pending envelopes, first ordered at since, as
// taken from Pending and Since. It keeps pending and checks its sizes.
func (c *Cutter) Restore(pending [][]byte, since time.Time) error {
	n := 0
	for _, e := range pending {
		if len(e) > c.cfg.PreferredMaxBytes {
			return fmt.Errorf("block: a pending envelope of %d bytes is larger than PreferredMaxBytes %d", len(e), c.cfg.PreferredMaxBytes)
		}
		n += len(e)
	}
	if len(pending) >= c.cfg.MaxMessageCount || n > c.cfg.PreferredMaxBytes {
		return fmt.Errorf("block: %d pending envelopes of %d bytes would have been cut", len(pending), n)
	}
	if len(pending) == 0 {
		pending, since = nil, time.Time{}
	}
	c.pending, c.bytes, c.since = pending, n, since
	return nil
}
