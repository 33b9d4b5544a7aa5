package bft

import (
	"fmt"
	"sort"
)

// ownCheckpoint is this replica's state at a checkpoint: kept from the
// moment it is taken until a later checkpoint is stable, so it can serve
// state transfer and prove its digest. state holds the whole checkpointed
// state, reply cache and application snapshot (see encodeState), in one
// byte string: it is what a chunk is served from, what a driver persists,
// and what installState takes back.
type ownCheckpoint struct {
	seq    uint64
	digest Digest   // manifestDigest of state
	state  []byte   // never modified
	chunks []Digest // the SHA-256 of each chunk of state
}

// newOwnCheckpoint digests state for a checkpoint at seq.
func (r *Replica) newOwnCheckpoint(seq uint64, state []byte) *ownCheckpoint {
	size := uint64(r.cfg.StateChunkBytes)
	chunks := chunkDigests(state, size)
	return &ownCheckpoint{seq: seq, digest: manifestDigest(size, uint64(len(state)), chunks), state: state, chunks: chunks}
}

// takeCheckpoint captures the current state as of seq.
func (r *Replica) takeCheckpoint(seq uint64) *ownCheckpoint {
	var replies []Reply
	for _, rs := range r.replies {
		for _, rp := range rs {
			replies = append(replies, *rp)
		}
	}
	sort.Slice(replies, func(i, j int) bool {
		a, b := &replies[i], &replies[j]
		return a.Client < b.Client || a.Client == b.Client && a.Timestamp < b.Timestamp
	})
	return r.newOwnCheckpoint(seq, encodeState(&coreState{time: r.agreedTime, replies: replies, notes: r.noteState()}, r.cfg.App.Snapshot()))
}

// checkpoint runs after executing seq, a multiple of K.
func (r *Replica) checkpoint(seq uint64) {
	own := r.takeCheckpoint(seq)
	r.ckpts[seq] = own
	c := &Checkpoint{Seq: seq, State: own.digest, Replica: r.id}
	c.Sig = r.cfg.Auth.Sign(c)
	r.persist(RecCheckpoint, c)
	r.broadcast(c)
	_ = r.recordCheckpoint(c)
	// The checkpoint may already be certified, learned while we lagged.
	if r.target == seq && r.low < seq {
		r.learnStable(seq, r.targetDigest, r.targetCert)
	}
}

func (r *Replica) onCheckpoint(c *Checkpoint) error {
	if c.Seq <= r.low {
		return fmt.Errorf("%w: checkpoint %d, stable at %d", ErrStale, c.Seq, r.low)
	}
	if c.Seq%r.cfg.CheckpointInterval != 0 {
		return fmt.Errorf("%w: checkpoint at %d, not a multiple of %d", ErrInvalid, c.Seq, r.cfg.CheckpointInterval)
	}
	if v := r.ckVotes[c.Seq]; v != nil && v[c.Replica] != nil {
		return fmt.Errorf("%w: checkpoint %d of replica %d", ErrDuplicate, c.Seq, c.Replica)
	}
	if !r.cfg.Auth.Verify(c.Replica, c, c.Sig) {
		return fmt.Errorf("%w: checkpoint signature of replica %d", ErrForged, c.Replica)
	}
	return r.recordCheckpoint(c)
}

// recordCheckpoint counts a verified checkpoint vote. Votes far above the
// window are kept too (that is how a lagging replica learns it lags), but
// only the latest few per sender, so memory stays bounded.
func (r *Replica) recordCheckpoint(c *Checkpoint) error {
	votes := r.ckVotes[c.Seq]
	if votes == nil {
		votes = make(map[ReplicaID]*Checkpoint)
		r.ckVotes[c.Seq] = votes
	}
	if votes[c.Replica] != nil {
		return fmt.Errorf("%w: checkpoint %d of replica %d", ErrDuplicate, c.Seq, c.Replica)
	}
	seqs := r.ckBySender[c.Replica]
	if limit := int(r.cfg.WatermarkWindow/r.cfg.CheckpointInterval) + 2; len(seqs) >= limit {
		lo := 0
		for i := range seqs {
			if seqs[i] < seqs[lo] {
				lo = i
			}
		}
		if old := r.ckVotes[seqs[lo]]; old != nil {
			delete(old, c.Replica)
			if len(old) == 0 {
				delete(r.ckVotes, seqs[lo])
			}
		}
		seqs = append(seqs[:lo], seqs[lo+1:]...)
	}
	r.ckBySender[c.Replica] = append(seqs, c.Seq)
	votes[c.Replica] = c
	var cert []Checkpoint
	for _, v := range votes {
		if v.State == c.State {
			cert = append(cert, *v)
		}
	}
	if len(cert) >= r.q {
		sort.Slice(cert, func(i, j int) bool { return cert[i].Replica < cert[j].Replica })
		r.learnStable(c.Seq, c.State, cert[:r.q])
	}
	return nil
}

// learnStable takes note of a certified stable checkpoint, from checkpoint
// votes, a view change, a new view or a state transfer. If this replica
// holds that state, the checkpoint becomes its stable one; if it is
// behind, the checkpoint becomes the target it executes toward, or fetches.
func (r *Replica) learnStable(seq uint64, d Digest, cert []Checkpoint) {
	if seq <= r.low {
		return
	}
	if own := r.ckpts[seq]; own != nil {
		if own.digest == d {
			r.makeStable(seq, cert)
		} else {
			r.diverged(seq, d, cert)
		}
		return
	}
	if r.resync && seq > r.target {
		// Diverged and waiting for a certified state: fetch the latest.
		r.learnTarget(seq, d, cert)
		return
	}
	if seq <= r.lastExec || seq <= r.target {
		return
	}
	r.learnTarget(seq, d, cert)
}

// learnTarget makes seq, whose state this replica does not hold, the
// stable checkpoint it knows of, and persists it (RecStable).
func (r *Replica) learnTarget(seq uint64, d Digest, cert []Checkpoint) {
	r.target, r.targetDigest, r.targetCert = seq, d, cert
	r.persist(RecStable, &State{Seq: seq, Stable: cert, Replica: r.id})
	r.prune()
}

// diverged handles a certified stable checkpoint whose digest differs
// from this replica's own at seq: its state diverged from a quorum's
// (a bug, a corrupted disk, a non-deterministic application), so it is
// wrong from seq on. The replica stops executing, drops its checkpoints
// from seq on (they must not be served or made stable) and fetches the
// certified state; it re-executes its committed log above it once the
// state is installed.
func (r *Replica) diverged(seq uint64, d Digest, cert []Checkpoint) {
	r.stats.Divergences++
	r.resync = true
	for s := range r.ckpts {
		if s >= seq {
			delete(r.ckpts, s)
		}
	}
	if r.target <= seq {
		r.target, r.targetDigest, r.targetCert = seq, d, cert
	}
	r.fetch = nil
	r.fetchTimer = r.cfg.FetchTicks // fetch at the next tick
}

func (r *Replica) makeStable(seq uint64, cert []Checkpoint) {
	r.low = seq
	r.lowCert = cert
	if r.target <= seq {
		r.target, r.targetDigest, r.targetCert = seq, r.ckpts[seq].digest, cert
	}
	r.prune()
	r.propose(false) // the window moved
}
