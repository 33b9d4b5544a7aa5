package bft

import (
	"errors"
	"fmt"
	"time"

	"github.com/rubin-go/rubin/bft/internal/quorum"
)

// Config configures a Replica. Every replica of a cluster must use the same
// N, CheckpointInterval, WatermarkWindow, MaxBatch, MaxBatchBytes,
// MaxOpSize, StateChunkBytes, ClientWindow, NoteRetain, NoteRetainBytes and
// MaxNoteBytes: they decide which messages are valid
// (StateChunkBytes is part of every checkpoint digest). The tick counts may
// differ.
type Config struct {
	ID ReplicaID
	// N is the number of replicas, at least 4. With N = 3f+1 the quorum
	// is 2f+1; other N use the smallest quorum whose pairwise overlap
	// holds a correct replica.
	N int
	// CheckpointInterval is K: a checkpoint after every K-th sequence
	// number. Default 128.
	CheckpointInterval uint64
	// WatermarkWindow is L, high minus low watermark: the primary proposes
	// and replicas accept sequence numbers in (low, low+L]. A multiple of
	// K, at least K. Default 2K.
	WatermarkWindow uint64
	// MaxBatch bounds the requests in a batch. Default 512.
	MaxBatch int
	// MaxBatchBytes bounds the sum of op sizes in a batch. Default 1 MiB.
	MaxBatchBytes int
	// MaxInFlight: while fewer batches than this are proposed and not yet
	// executed, the primary proposes a request at once; beyond it, it holds
	// requests back to fill a batch. Default 1: what arrives while a batch
	// is in flight goes out as one batch when it executes, and a lone
	// client waits for no timer. node.BenchmarkMaxInFlight (4 replicas
	// and 64 clients on 2 CPUs, 0 B ops) gave ~37k ops/s at 1 (average
	// batch 28), ~31k at 2 (17) and ~25k at 4 (10), with the same
	// 1-client p50 (~0.55 ms): fewer, larger batches cost fewer
	// signatures per request.
	MaxInFlight int
	// BatchTicks bounds how long a held-back, non-empty batch waits.
	// Default 1.
	BatchTicks int
	// RequestTicks: a replica that has held a request this long (since
	// it arrived, or since the current view began) without executing it
	// starts a view change, however many other requests execute
	// meanwhile; so does one whose log has slots that made no execution
	// progress for this long. Like ViewChangeTicks, it doubles with every
	// view change that brings no execution, up to 16 times, until a
	// request executes. Default 50.
	RequestTicks int
	// ViewChangeTicks: a view change that has a quorum of view changes but
	// no new view after this many ticks moves on to the next view; the
	// wait doubles for each consecutive failure. Default 50.
	ViewChangeTicks int
	// FetchTicks throttles state transfer: a replica that knows of a
	// stable checkpoint beyond what it executed, and made no execution
	// progress for this many ticks, asks for the state (again). It also
	// paces the view synchronization of a replica that sees a quorum-backed
	// higher view. Default 10.
	FetchTicks int
	// MaxOpSize: requests with a larger op are dropped. Default 64 KiB.
	MaxOpSize int
	// MaxPending bounds the requests a replica holds that are not
	// executed. Default 4*MaxBatch.
	MaxPending int
	// MaxPendingBytes bounds the same requests in bytes (op,
	// authenticator and a fixed charge each). Default 4*MaxBatchBytes:
	// like MaxPending, four full batches.
	MaxPendingBytes int
	// ClientWindow bounds the ordered requests a client has outstanding
	// (ClientConfig.Window): a replica caches each client's last
	// ClientWindow replies, replicated state, so every replica of a
	// cluster must use the same value. Default 16.
	ClientWindow int
	// MaxPendingPerClient bounds the requests of one client a replica
	// holds, so one client cannot fill MaxPending and starve the others.
	// A correct client has at most ClientWindow requests outstanding,
	// and a replica may still hold earlier ones for a moment (until they
	// execute here); beyond the quota, a client's newer request replaces
	// its oldest held one and an older one is refused (ErrFull). Default
	// 2*ClientWindow, at most a quarter of MaxPending (at least 4).
	MaxPendingPerClient int
	// NoteRetain is how many of each client's latest notifications (see
	// ExecContext.Notify) a replica keeps, to send again to a client that
	// missed them; NoteRetainBytes bounds their payloads, but the latest
	// one is always kept. They are replicated state, in every checkpoint,
	// so every replica of a cluster must use the same values. Defaults 64
	// and 256 KiB.
	NoteRetain      int
	NoteRetainBytes int
	// MaxNoteBytes bounds a notification's payload: Notify refuses a
	// longer one. It must be the same on every replica. Default 64 KiB.
	MaxNoteBytes int
	// MaxReads bounds the read-only requests a replica holds until it can
	// answer them (it answers once it executed what it prepared); each
	// client has at most one held, its latest. Default 4*MaxBatch.
	MaxReads int
	// MaxFutureBytes bounds, per sender, the normal-case messages of
	// views this replica has not entered yet that it keeps for when it
	// does (besides 3L+8 messages per sender). Default 2*MaxBatchBytes:
	// room for the pre-prepare of a full batch with its votes, which is
	// what a new primary sends first; what does not fit is dropped and
	// recovered by retransmission, at the cost of a few ticks.
	MaxFutureBytes int

	// Persist makes Ready list what the driver must make durable before
	// it sends (Ready.Persist, Ready.Snapshot), so a replica that
	// restarts recovers its view, votes, log and state (Recover). Without
	// it a replica keeps nothing across a restart and rejoins empty,
	// through state transfer.
	Persist bool
	// StateChunkBytes is the chunk size of state transfer: a checkpoint's
	// digest covers the SHA-256 of every StateChunkBytes-byte chunk of the
	// checkpointed state, and a replica catching up fetches and checks
	// the state one chunk at a time. At most 8 MiB, so that a chunk fits
	// a 16 MiB frame. Default 1 MiB.
	StateChunkBytes int
	// MaxStateBytes bounds the state (reply cache and application
	// snapshot, encoded) this replica fetches and so allocates: a
	// certified state above it is refused with ErrTooLarge and the
	// replica cannot catch up by state transfer. At most 65536 chunks.
	// Default 1 GiB.
	MaxStateBytes int

	// Clock is this replica's clock, read when it proposes a batch as
	// primary and when it judges a primary's proposed time. Default
	// time.Now. The core reads no other clock: time is otherwise ticks.
	Clock func() time.Time
	// MaxClockSkew bounds how far the time of a pre-prepare may be from
	// this replica's clock, either way, for the replica to accept it (a
	// primary also may not propose a time before the previous batch's).
	// A primary whose clock is further off, or that lies, is not prepared
	// and so is replaced by a view change; the agreed time stays within
	// this bound of the correct replicas' clocks. It must cover the
	// clocks' mutual skew plus the delay of a pre-prepare from the
	// primary's clock reading to a backup's; a slot that f+1 other
	// replicas already voted for is accepted outside it (a correct one
	// checked the time). Default 2 s: well above the skew of
	// NTP-synchronized hosts and a pre-prepare's delay on a loaded
	// cluster, and small against timeouts measured in seconds (sessions,
	// leases) that applications base on the agreed time.
	MaxClockSkew time.Duration

	App  App
	Auth Authenticator
}

// maxBackoff caps the doubling of RequestTicks and ViewChangeTicks at
// 16 times their base. Doubling without a cap lets a client that keeps
// forcing view changes (an authenticator valid at some replicas only)
// push the timeouts so high that the cluster takes minutes to recover
// once it stops; 16 times the 250 ms default is 4 s, more than a view
// change takes even on an emulated CPU.
const maxBackoff = 4

func (c *Config) fill() error {
	if c.N < 4 {
		return fmt.Errorf("bft: config: N = %d, need at least 4", c.N)
	}
	if uint64(c.ID) >= uint64(c.N) {
		return fmt.Errorf("bft: config: ID %d not below N = %d", c.ID, c.N)
	}
	if c.App == nil || c.Auth == nil {
		return errors.New("bft: config: App and Auth are required")
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = 128
	}
	if c.WatermarkWindow == 0 {
		c.WatermarkWindow = 2 * c.CheckpointInterval
	}
	if c.WatermarkWindow < c.CheckpointInterval || c.WatermarkWindow%c.CheckpointInterval != 0 {
		return fmt.Errorf("bft: config: WatermarkWindow %d is not a positive multiple of CheckpointInterval %d", c.WatermarkWindow, c.CheckpointInterval)
	}
	if c.WatermarkWindow > 1<<20 {
		return fmt.Errorf("bft: config: WatermarkWindow %d too large", c.WatermarkWindow)
	}
	def(&c.MaxBatch, 512)
	def(&c.MaxBatchBytes, 1<<20)
	def(&c.MaxInFlight, 1)
	def(&c.BatchTicks, 1)
	def(&c.RequestTicks, 50)
	def(&c.ViewChangeTicks, 50)
	def(&c.FetchTicks, 10)
	def(&c.MaxOpSize, 64<<10)
	def(&c.MaxPending, 4*c.MaxBatch)
	def(&c.MaxPendingBytes, 4*c.MaxBatchBytes)
	def(&c.ClientWindow, 16)
	def(&c.MaxPendingPerClient, min(2*c.ClientWindow, max(4, c.MaxPending/4)))
	def(&c.MaxFutureBytes, 2*c.MaxBatchBytes)
	def(&c.MaxReads, 4*c.MaxBatch)
	def(&c.NoteRetain, 64)
	def(&c.NoteRetainBytes, 256<<10)
	def(&c.MaxNoteBytes, 64<<10)
	def(&c.StateChunkBytes, 1<<20)
	def(&c.MaxStateBytes, 1<<30)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.MaxClockSkew <= 0 {
		c.MaxClockSkew = 2 * time.Second
	}
	if c.StateChunkBytes > maxChunkBytes {
		return fmt.Errorf("bft: config: StateChunkBytes %d exceeds %d", c.StateChunkBytes, maxChunkBytes)
	}
	if chunks := (c.MaxStateBytes + c.StateChunkBytes - 1) / c.StateChunkBytes; chunks > maxChunks {
		return fmt.Errorf("bft: config: MaxStateBytes %d is %d chunks of %d bytes, more than %d", c.MaxStateBytes, chunks, c.StateChunkBytes, maxChunks)
	}
	if c.MaxOpSize > c.MaxBatchBytes {
		return fmt.Errorf("bft: config: MaxOpSize %d exceeds MaxBatchBytes %d", c.MaxOpSize, c.MaxBatchBytes)
	}
	return nil
}

func (c *Config) f() int { return quorum.Faults(c.N) }
func (c *Config) q() int { return quorum.Quorum(c.N) }
