package bft

import (
	"bytes"
	"fmt"
	"slices"
)

// verifyCheckpointCert checks a stable checkpoint certificate: a quorum
// of distinct replicas' valid signed checkpoints for seq, all with the
// same state digest, which it returns.
func (r *Replica) verifyCheckpointCert(seq uint64, cert []Checkpoint) (Digest, error) {
	if len(cert) < r.q || len(cert) > r.n {
		return Digest{}, fmt.Errorf("%w: checkpoint certificate of %d signatures", ErrForged, len(cert))
	}
	d := cert[0].State
	seen := make(map[ReplicaID]bool, len(cert))
	for i := range cert {
		c := &cert[i]
		if c.Seq != seq || c.State != d || uint64(c.Replica) >= uint64(r.n) {
			return Digest{}, fmt.Errorf("%w: checkpoint certificate for %d holds a mismatched checkpoint", ErrForged, seq)
		}
		if seen[c.Replica] {
			return Digest{}, fmt.Errorf("%w: checkpoint certificate repeats replica %d", ErrForged, c.Replica)
		}
		seen[c.Replica] = true
		if !r.cfg.Auth.Verify(c.Replica, c, c.Sig) {
			return Digest{}, fmt.Errorf("%w: checkpoint certificate signature of replica %d", ErrForged, c.Replica)
		}
	}
	return d, nil
}

// verifyViewChange checks everything a view change claims that can be
// checked: its signature, its stable checkpoint certificate, and that its
// claims are well formed: of views below its own, above its checkpoint
// and within L of it, P claims one per sequence number, Q claims at most
// MaxPrePrepared per sequence number with distinct digests, both in the
// order ViewChange documents (so that one set of claims has one
// encoding). A replica that lies anywhere it can be caught has the whole
// message ignored; what it claims to have prepared or accepted cannot be
// checked, and the new-view rule does not need it to be.
func (r *Replica) verifyViewChange(vc *ViewChange) error {
	if vc.View == 0 || uint64(vc.Replica) >= uint64(r.n) {
		return fmt.Errorf("%w: view change to view %d by replica %d", ErrInvalid, vc.View, vc.Replica)
	}
	L := r.cfg.WatermarkWindow
	if uint64(len(vc.Prepared)) > L || uint64(len(vc.PrePrepared)) > MaxPrePrepared*L {
		return fmt.Errorf("%w: view change with %d P and %d Q claims", ErrInvalid, len(vc.Prepared), len(vc.PrePrepared))
	}
	if err := r.checkClaims(vc); err != nil {
		return fmt.Errorf("view change of replica %d: %w", vc.Replica, err)
	}
	if !r.cfg.Auth.Verify(vc.Replica, vc, vc.Sig) {
		return fmt.Errorf("%w: view change signature of replica %d", ErrForged, vc.Replica)
	}
	if vc.StableSeq == 0 {
		if len(vc.Stable) != 0 {
			return fmt.Errorf("%w: view change proves a checkpoint at 0", ErrInvalid)
		}
	} else if _, err := r.verifyCheckpointCert(vc.StableSeq, vc.Stable); err != nil {
		return fmt.Errorf("view change of replica %d: %w", vc.Replica, err)
	}
	return nil
}

// checkClaims checks the form of a view change's claims (see
// verifyViewChange).
func (r *Replica) checkClaims(vc *ViewChange) error {
	L := r.cfg.WatermarkWindow
	in := func(c *Claim) bool {
		return c.View < vc.View && c.Seq > vc.StableSeq && c.Seq-vc.StableSeq <= L
	}
	for i := range vc.Prepared {
		c := &vc.Prepared[i]
		if !in(c) || (i > 0 && c.Seq <= vc.Prepared[i-1].Seq) {
			return fmt.Errorf("%w: P claim for view %d seq %d outside views below %d and (%d, %d], repeated or out of order", ErrInvalid, c.View, c.Seq, vc.View, vc.StableSeq, vc.StableSeq+L)
		}
	}
	run := 0
	for i := range vc.PrePrepared {
		c := &vc.PrePrepared[i]
		if !in(c) {
			return fmt.Errorf("%w: Q claim for view %d seq %d outside views below %d and (%d, %d]", ErrInvalid, c.View, c.Seq, vc.View, vc.StableSeq, vc.StableSeq+L)
		}
		if i == 0 || c.Seq != vc.PrePrepared[i-1].Seq {
			if i > 0 && c.Seq < vc.PrePrepared[i-1].Seq {
				return fmt.Errorf("%w: Q claims out of sequence order at seq %d", ErrInvalid, c.Seq)
			}
			run = 0
		} else if p := &vc.PrePrepared[i-1]; c.View > p.View || (c.View == p.View && bytes.Compare(c.Digest[:], p.Digest[:]) <= 0) {
			return fmt.Errorf("%w: Q claims for seq %d out of view order", ErrInvalid, c.Seq)
		}
		for j := i - run; j < i; j++ {
			if vc.PrePrepared[j].Digest == c.Digest {
				return fmt.Errorf("%w: Q claims repeat a digest at seq %d", ErrInvalid, c.Seq)
			}
		}
		if run++; run > MaxPrePrepared {
			return fmt.Errorf("%w: more than %d Q claims for seq %d", ErrInvalid, MaxPrePrepared, c.Seq)
		}
	}
	return nil
}

// verifiedBefore reports whether vc is, field for field, the view change
// of its replica this replica holds, which it verified when it arrived
// (or made itself): a new view then need not verify it again. At most one
// is held per replica, so remembering costs nothing more.
func (r *Replica) verifiedBefore(vc *ViewChange) bool {
	held := r.vcs[vc.Replica]
	if held == nil || held.View != vc.View || held.StableSeq != vc.StableSeq || held.Replica != vc.Replica ||
		!bytes.Equal(held.Sig, vc.Sig) || len(held.Stable) != len(vc.Stable) ||
		!slices.Equal(held.Prepared, vc.Prepared) || !slices.Equal(held.PrePrepared, vc.PrePrepared) {
		return false
	}
	for i := range vc.Stable {
		a, b := &held.Stable[i], &vc.Stable[i]
		if a.Seq != b.Seq || a.State != b.State || a.Replica != b.Replica || !bytes.Equal(a.Sig, b.Sig) {
			return false
		}
	}
	return true
}
