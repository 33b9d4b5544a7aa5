package bft

import (
	"fmt"
	"sort"
)

// Recover restores what a replica persisted before it stopped: snap (nil
// if it never reached a stable checkpoint) and the records persisted
// after it, in order. It must be called on a replica fresh from
// NewReplica, before any Step or Tick. It restores the checkpoint's
// application state and reply cache, the view (entered, or being changed
// to), the accepted pre-prepares (its Q claims), the votes this replica
// sent (its commits are its P claims), then executes the committed slots
// above the checkpoint in order; the replica catches up on the rest over the
// network. Having its votes back, it never votes differently for a
// slot of a view it already voted in. Records are trusted (they are this
// replica's own); an error means they contradict each other and the
// storage cannot be used.
func (r *Replica) Recover(snap *Snapshot, recs []Record) error {
	if r.now != 0 || r.lastExec != 0 || len(r.log) != 0 {
		return fmt.Errorf("%w: Recover on a replica already running", ErrInvalid)
	}
	if snap != nil {
		if err := r.restoreCheckpoint(snap); err != nil {
			return err
		}
		recs = append(append([]Record(nil), snap.Records...), recs...)
	}
	for i, rec := range recs {
		if err := r.replay(rec); err != nil {
			return fmt.Errorf("recover: record %d: %w", i, err)
		}
	}
	r.nextSeq = max(r.nextSeq, r.lastExec, r.viewMinS)
	if snap != nil || len(recs) > 0 {
		// Votes sent in this view may not have reached the disk: vote
		// again only from the next view on (see lazyVotes). A replica
		// changing views sent none in the view it changes to.
		r.synced = true
		r.votesFrom = r.view + 1
		if r.viewChanging {
			r.votesFrom = r.view
		}
	}
	// A slot is prepared here exactly when its commit was recorded
	// (replay): the prepares that made it so are not persisted, and the
	// commit record is durable before the commit is sent.
	for s := range r.log {
		if s <= r.low {
			delete(r.log, s)
		}
	}
	r.lastStable = r.low
	r.rebuildProposed()
	r.tryExecute()
	return nil
}

// restoreCheckpoint installs a persisted stable checkpoint.
func (r *Replica) restoreCheckpoint(sn *Snapshot) error {
	if sn.Seq == 0 {
		return nil
	}
	d, err := r.verifyCheckpointCert(sn.Seq, sn.Stable)
	if err != nil {
		return fmt.Errorf("recover: checkpoint %d: %w", sn.Seq, err)
	}
	own := r.newOwnCheckpoint(sn.Seq, sn.State)
	if own.digest != d {
		return fmt.Errorf("%w: recover: checkpoint %d does not match its certified digest", ErrInvalid, sn.Seq)
	}
	cs, snap, err := decodeState(sn.State)
	if err != nil {
		return fmt.Errorf("recover: checkpoint %d: %w", sn.Seq, err)
	}
	if err := r.cfg.App.Restore(snap); err != nil {
		return fmt.Errorf("%w: recover: restore checkpoint %d: %v", ErrInvalid, sn.Seq, err)
	}
	r.installReplies(cs.replies)
	r.agreedTime = cs.time
	r.installNotes(cs.notes)
	delete(r.ckpts, 0)
	r.ckpts[sn.Seq] = own
	r.lastExec, r.low, r.lowCert = sn.Seq, sn.Seq, sn.Stable
	r.target, r.targetDigest, r.targetCert = sn.Seq, d, sn.Stable
	return nil
}

// replay applies one record.
func (r *Replica) replay(rec Record) error {
	switch m := rec.Msg.(type) {
	case *ViewChange:
		if rec.Kind != RecViewChange || m.Replica != r.id {
			break
		}
		if m.View > r.view {
			r.view, r.viewChanging = m.View, true
			r.vcs[r.id] = m
		}
		return nil
	case *NewView:
		if rec.Kind != RecNewView {
			break
		}
		if m.View >= r.view {
			r.view, r.viewChanging = m.View, false
			r.lastNewView = m
			r.viewMinS = 0
			for i := range m.ViewChanges {
				r.viewMinS = max(r.viewMinS, m.ViewChanges[i].StableSeq)
			}
			if vc := r.vcs[r.id]; vc != nil && vc.View <= m.View {
				delete(r.vcs, r.id)
			}
		}
		return nil
	case *Checkpoint:
		if rec.Kind != RecCheckpoint || m.Replica != r.id {
			break
		}
		return nil // re-execution rebuilds it
	case *State:
		if rec.Kind != RecStable || len(m.Stable) == 0 {
			break
		}
		if m.Seq > r.target {
			r.target, r.targetDigest, r.targetCert = m.Seq, m.Stable[0].State, m.Stable
		}
		return nil
	case *PrePrepare:
		if rec.Kind != RecPrePrepare {
			break
		}
		if e := r.replayEntry(m.Seq, m.View); e != nil {
			e.pp = m
			if m.View == r.view {
				r.nextSeq = max(r.nextSeq, m.Seq)
			}
		}
		if e := r.log[m.Seq]; e != nil {
			noteAccepted(e, m.View, m.Digest)
		}
		return nil
	case *Prepare:
		if rec.Kind != RecPrepare {
			break
		}
		if e := r.replayEntry(m.Seq, m.View); e != nil {
			e.prepares[m.Replica] = m
		}
		return nil
	case *Commit:
		if m.Replica != r.id {
			break
		}
		switch rec.Kind {
		case RecCommit:
			if e := r.replayEntry(m.Seq, m.View); e != nil {
				e.commits[r.id] = m.Digest
				e.sentCommit = true
				r.readTop = max(r.readTop, m.Seq)
				if e.pp != nil && e.pp.Digest == m.Digest && (e.prep == nil || e.prep.View <= m.View) {
					r.markPrepared(e)
				}
			}
			return nil
		case RecCommitted:
			return r.replayCommitted(m)
		}
	}
	return fmt.Errorf("%w: record kind %d holds %T", ErrInvalid, rec.Kind, rec.Msg)
}

// replayEntry returns seq's slot for a record of view v: a record of a
// later view than the slot's starts the new view's votes; a record of an
// earlier view is obsolete (nil).
func (r *Replica) replayEntry(seq, v uint64) *entry {
	e := r.log[seq]
	if e == nil {
		e = &entry{seq: seq, view: v}
		r.log[seq] = e
	}
	if e.prepares != nil && e.view > v {
		return nil
	}
	if e.prepares == nil || e.view < v {
		e.view, e.pp = v, nil
		e.prepares = make(map[ReplicaID]*Prepare)
		e.commits = make(map[ReplicaID]Digest)
		e.prepared, e.sentCommit = false, false
	}
	return e
}

// replayCommitted marks a slot committed, with the batch of its
// pre-prepare or prepared pre-prepare of that digest.
func (r *Replica) replayCommitted(c *Commit) error {
	e := r.log[c.Seq]
	var batch []Request
	var t uint64
	switch {
	case e == nil:
	case e.pp != nil && e.pp.Digest == c.Digest && (len(e.pp.Batch) > 0 || e.prep == nil || e.prep.Digest != c.Digest):
		batch, t = e.pp.Batch, e.pp.Time
	case e.prep != nil && e.prep.Digest == c.Digest:
		batch, t = e.prep.Batch, e.prep.Time
	default:
		e = nil
	}
	if e == nil {
		return fmt.Errorf("%w: seq %d committed with no pre-prepare of its digest", ErrInvalid, c.Seq)
	}
	e.committed, e.cView, e.cDigest, e.cTime, e.batch = true, c.View, c.Digest, t, batch
	r.readTop = max(r.readTop, c.Seq)
	return nil
}

// sortedSeqs returns the log's sequence numbers above from, ascending.
func (r *Replica) sortedSeqs(from uint64) []uint64 {
	seqs := make([]uint64, 0, len(r.log))
	for s := range r.log {
		if s > from {
			seqs = append(seqs, s)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	return seqs
}
