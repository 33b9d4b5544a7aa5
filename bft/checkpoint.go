package bft

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"
)

// ownCheckpoint is this replica's state at a checkpoint: kept from the
// moment it is taken until a later checkpoint is stable, so it can serve
// state transfer and prove its digest.
type ownCheckpoint struct {
	seq     uint64
	digest  Digest
	snap    []byte
	replies []Reply // sorted by client
}

// stateDigest is the checkpointed state's digest: the application
// snapshot and the reply cache, which is replicated state too (it decides
// which requests execute). A reply's View and Replica differ between
// replicas (a batch may commit in different views at different replicas),
// so only the client, timestamp and result are digested. replies must be
// sorted by client.
func stateDigest(snap []byte, replies []Reply) Digest {
	h := sha256.New()
	var b [3 * binary.MaxVarintLen64]byte
	n := binary.PutUvarint(b[:], uint64(len(snap)))
	h.Write(b[:n])
	h.Write(snap)
	n = binary.PutUvarint(b[:], uint64(len(replies)))
	h.Write(b[:n])
	for i := range replies {
		rp := &replies[i]
		n = binary.PutUvarint(b[:], uint64(rp.Client))
		n += binary.PutUvarint(b[n:], rp.Timestamp)
		n += binary.PutUvarint(b[n:], uint64(len(rp.Result)))
		h.Write(b[:n])
		h.Write(rp.Result)
	}
	var d Digest
	h.Sum(d[:0])
	return d
}

// takeCheckpoint captures the current state as of seq.
func (r *Replica) takeCheckpoint(seq uint64) *ownCheckpoint {
	snap := r.cfg.App.Snapshot()
	replies := make([]Reply, 0, len(r.replies))
	for _, rp := range r.replies {
		replies = append(replies, *rp)
	}
	sort.Slice(replies, func(i, j int) bool { return replies[i].Client < replies[j].Client })
	return &ownCheckpoint{seq: seq, digest: stateDigest(snap, replies), snap: snap, replies: replies}
}

// checkpoint runs after executing seq, a multiple of K.
func (r *Replica) checkpoint(seq uint64) {
	own := r.takeCheckpoint(seq)
	r.ckpts[seq] = own
	c := &Checkpoint{Seq: seq, State: own.digest, Replica: r.id}
	c.Sig = r.cfg.Auth.Sign(c)
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
		}
		// A different digest would mean this replica's state diverged
		// from a quorum's: not possible for a correct replica.
		return
	}
	if seq <= r.lastExec || seq <= r.target {
		return
	}
	r.target, r.targetDigest, r.targetCert = seq, d, cert
	r.prune()
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
