package bft

import (
	"bytes"
	"fmt"
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

// verifyPreparedCert checks a prepared certificate for a view below
// below: the primary's signed pre-prepare, without a batch (its digest
// stands for it), and 2f signed matching prepares from distinct backups.
func (r *Replica) verifyPreparedCert(c *PreparedCert, below uint64) error {
	pp := &c.PrePrepare
	if pp.View >= below {
		return fmt.Errorf("%w: prepared certificate of view %d in a view change to %d", ErrForged, pp.View, below)
	}
	if len(c.Prepares) < r.q-1 || len(c.Prepares) > r.n {
		return fmt.Errorf("%w: prepared certificate with %d prepares", ErrForged, len(c.Prepares))
	}
	if len(pp.Batch) != 0 {
		return fmt.Errorf("%w: prepared certificate for seq %d carries a batch", ErrInvalid, pp.Seq)
	}
	prim := r.primary(pp.View)
	seen := map[ReplicaID]bool{}
	for i := range c.Prepares {
		p := &c.Prepares[i]
		if p.View != pp.View || p.Seq != pp.Seq || p.Digest != pp.Digest || uint64(p.Replica) >= uint64(r.n) || p.Replica == prim || seen[p.Replica] {
			return fmt.Errorf("%w: prepared certificate for seq %d holds a mismatched prepare", ErrForged, pp.Seq)
		}
		seen[p.Replica] = true
	}
	if !r.cfg.Auth.Verify(prim, pp, pp.Sig) {
		return fmt.Errorf("%w: prepared certificate pre-prepare signature", ErrForged)
	}
	for i := range c.Prepares {
		p := &c.Prepares[i]
		if !r.cfg.Auth.Verify(p.Replica, p, p.Sig) {
			return fmt.Errorf("%w: prepared certificate prepare signature of replica %d", ErrForged, p.Replica)
		}
	}
	return nil
}

// verifyViewChange checks everything a view change claims: its signature,
// its stable checkpoint certificate and every prepared certificate. A
// replica that lies anywhere in it has the whole message ignored.
func (r *Replica) verifyViewChange(vc *ViewChange) error {
	if vc.View == 0 || uint64(vc.Replica) >= uint64(r.n) {
		return fmt.Errorf("%w: view change to view %d by replica %d", ErrInvalid, vc.View, vc.Replica)
	}
	L := r.cfg.WatermarkWindow
	if uint64(len(vc.Prepared)) > L {
		return fmt.Errorf("%w: view change with %d prepared certificates", ErrInvalid, len(vc.Prepared))
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
	seen := make(map[uint64]bool, len(vc.Prepared))
	for i := range vc.Prepared {
		s := vc.Prepared[i].PrePrepare.Seq
		if s <= vc.StableSeq || s-vc.StableSeq > L || seen[s] {
			return fmt.Errorf("%w: view change of replica %d: prepared certificate for seq %d outside (%d, %d] or repeated", ErrInvalid, vc.Replica, s, vc.StableSeq, vc.StableSeq+L)
		}
		seen[s] = true
		if err := r.verifyPreparedCert(&vc.Prepared[i], vc.View); err != nil {
			return fmt.Errorf("view change of replica %d: %w", vc.Replica, err)
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
		!bytes.Equal(held.Sig, vc.Sig) || len(held.Stable) != len(vc.Stable) || len(held.Prepared) != len(vc.Prepared) {
		return false
	}
	for i := range vc.Stable {
		a, b := &held.Stable[i], &vc.Stable[i]
		if a.Seq != b.Seq || a.State != b.State || a.Replica != b.Replica || !bytes.Equal(a.Sig, b.Sig) {
			return false
		}
	}
	for i := range vc.Prepared {
		a, b := &held.Prepared[i], &vc.Prepared[i]
		if !samePrePrepare(&a.PrePrepare, &b.PrePrepare) || len(a.Prepares) != len(b.Prepares) {
			return false
		}
		for j := range b.Prepares {
			p, q := &a.Prepares[j], &b.Prepares[j]
			if p.View != q.View || p.Seq != q.Seq || p.Digest != q.Digest || p.Replica != q.Replica || !bytes.Equal(p.Sig, q.Sig) {
				return false
			}
		}
	}
	return true
}

// samePrePrepare compares two pre-prepares without batches.
func samePrePrepare(a, b *PrePrepare) bool {
	return a.View == b.View && a.Seq == b.Seq && a.Time == b.Time && a.Digest == b.Digest && bytes.Equal(a.Sig, b.Sig) &&
		len(a.Batch) == 0 && len(b.Batch) == 0
}
