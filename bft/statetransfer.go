package bft

import "fmt"

// tickFetch paces catching up. A replica that knows a stable checkpoint
// beyond what it executed, and made no execution progress for FetchTicks,
// fetches the state from the checkpoint's signers; one that sees a quorum
// of evidence of a higher view fetches from everyone, which also brings it
// the new view (see onFetchState).
func (r *Replica) tickFetch() {
	behindState := r.target > r.lastExec
	behindView := r.viewBehind()
	if !behindState && !behindView {
		r.fetchTimer = 0
		return
	}
	r.fetchTimer++
	if r.fetchTimer < r.cfg.FetchTicks {
		return
	}
	r.fetchTimer = 0
	f := &FetchState{Seq: r.lastExec, Replica: r.id}
	r.stats.Fetches++
	if behindState && !behindView {
		for i := range r.targetCert {
			r.send(r.targetCert[i].Replica, f)
		}
		return
	}
	r.broadcast(f)
}

// onFetchState answers a replica that is behind: with our stable
// checkpoint if it is beyond what the requester executed, with the new
// view of our view, so a replica that missed view changes (or restarted)
// learns the view with proof, and with our messages for the slots above
// what it executed that we committed in this view (see tickResend). At
// most once per tick per peer.
func (r *Replica) onFetchState(m *FetchState) error {
	if last, ok := r.lastServe[m.Replica]; ok && last == r.now {
		return fmt.Errorf("%w: second fetch of replica %d in one tick", ErrDuplicate, m.Replica)
	}
	r.lastServe[m.Replica] = r.now
	if r.low > m.Seq {
		if own := r.ckpts[r.low]; own != nil {
			r.send(m.Replica, &State{Seq: r.low, Stable: r.lowCert, Snapshot: own.snap, Replies: own.replies, Replica: r.id})
		}
	}
	if r.lastNewView != nil && !r.viewChanging {
		r.send(m.Replica, r.lastNewView)
	}
	if m.Seq < r.lastExec && !r.viewChanging {
		r.resendCommitted(m.Replica, m.Seq)
	}
	return nil
}

// onState installs a certified stable checkpoint beyond what this replica
// executed.
func (r *Replica) onState(m *State) error {
	if m.Seq <= r.lastExec {
		return fmt.Errorf("%w: state at %d, executed up to %d", ErrStale, m.Seq, r.lastExec)
	}
	d, err := r.verifyCheckpointCert(m.Seq, m.Stable)
	if err != nil {
		return fmt.Errorf("state at %d: %w", m.Seq, err)
	}
	for i := 1; i < len(m.Replies); i++ {
		if m.Replies[i].Client <= m.Replies[i-1].Client {
			return fmt.Errorf("%w: state replies not sorted by client", ErrInvalid)
		}
	}
	if stateDigest(m.Snapshot, m.Replies) != d {
		return fmt.Errorf("%w: state at %d does not match its certified digest", ErrForged, m.Seq)
	}
	if err := r.cfg.App.Restore(m.Snapshot); err != nil {
		return fmt.Errorf("%w: state at %d: restore: %v", ErrInvalid, m.Seq, err)
	}
	clear(r.replies)
	for i := range m.Replies {
		rp := m.Replies[i]
		rp.Replica = r.id // the sender's cache, now ours: our replies carry our name
		r.replies[rp.Client] = &rp
	}
	r.lastExec = m.Seq
	cert := append([]Checkpoint(nil), m.Stable...)
	r.ckpts[m.Seq] = &ownCheckpoint{seq: m.Seq, digest: d, snap: m.Snapshot, replies: m.Replies}
	r.low, r.lowCert = m.Seq, cert
	if r.target <= m.Seq {
		r.target, r.targetDigest, r.targetCert = m.Seq, d, cert
	}
	if r.nextSeq < m.Seq {
		r.nextSeq = m.Seq
	}
	for k := range r.pending.byKey {
		if last := r.replies[k.client]; last != nil && k.ts <= last.Timestamp {
			r.pending.remove(k)
		}
	}
	r.prune()
	r.rebuildProposed()
	r.stats.StateTransfers++
	r.fetchTimer, r.reqTimer = 0, 0
	// Committed slots above the checkpoint, logged while we lagged, can
	// run now.
	r.tryExecute()
	r.propose(false)
	return nil
}
