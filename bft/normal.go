package bft

import (
	"bytes"
	"fmt"
	"sort"
)

// errBuffered tells a handler's caller that a message for a view this
// replica has not entered yet was kept for later; Step reports success.
var errBuffered = fmt.Errorf("buffered")

// admitView decides what to do with a normal-case message of view v:
// process it (nil), drop it (error), or keep it until the replica enters
// view v (errBuffered).
func (r *Replica) admitView(src ReplicaID, v uint64, m Message) error {
	if v < r.view {
		return fmt.Errorf("%w: view %d, replica in view %d", ErrStale, v, r.view)
	}
	if v == r.view && !r.viewChanging {
		return nil
	}
	if v-r.view > viewHorizon {
		return fmt.Errorf("%w: view %d beyond horizon of view %d", ErrWatermark, v, r.view)
	}
	if err := r.checkBatchOf(m); err != nil {
		return err
	}
	size := msgMem(m)
	if len(r.future[src]) >= r.maxFuture() || r.futureBytes[src]+size > r.cfg.MaxFutureBytes {
		return fmt.Errorf("%w: %d messages of %d bytes of future views from replica %d", ErrFull, len(r.future[src]), r.futureBytes[src], src)
	}
	r.future[src] = append(r.future[src], m)
	r.futureBytes[src] += size
	return errBuffered
}

// checkBatchOf checks what a normal-case message can be checked for in
// any view: a pre-prepare's batch bounds and digest. (Normal-case
// messages carry no signatures: the link authenticates their sender.)
// Future-view messages pass it before they are buffered, so that a
// Byzantine sender cannot fill the buffer with what would be rejected
// anyway; a batch's request authenticators are checked when the
// pre-prepare is used.
func (r *Replica) checkBatchOf(m Message) error {
	if m, ok := m.(*PrePrepare); ok {
		if len(m.Batch) == 0 {
			// Null batches come only in new views; an empty one with a
			// time would never execute (its batch looks missing).
			return fmt.Errorf("%w: pre-prepare for seq %d with an empty batch", ErrInvalid, m.Seq)
		}
		if err := r.checkBatch(m.Batch); err != nil {
			return err
		}
		if BatchDigest(m.Time, m.Batch) != m.Digest {
			return fmt.Errorf("%w: pre-prepare digest does not match its batch", ErrForged)
		}
	}
	return nil
}

// maxFuture bounds the future-view messages buffered per sender: enough
// for a pre-prepare, prepare and commit at every sequence number of a
// window. MaxFutureBytes bounds them in bytes.
func (r *Replica) maxFuture() int { return 3*int(r.cfg.WatermarkWindow) + 8 }

// setFuture replaces src's buffered future-view messages by buf, keeping
// their byte count.
func (r *Replica) setFuture(src ReplicaID, buf []Message) {
	if len(buf) == 0 {
		delete(r.future, src)
		delete(r.futureBytes, src)
		return
	}
	n := 0
	for _, m := range buf {
		n += msgMem(m)
	}
	r.future[src], r.futureBytes[src] = buf, n
}

func buffered(err error) error {
	if err == errBuffered {
		return nil
	}
	return err
}

func (r *Replica) notePeerView(src ReplicaID, v uint64) {
	if v > r.peerView[src] {
		r.peerView[src] = v
	}
}

func (r *Replica) onPrePrepare(src ReplicaID, pp *PrePrepare) error {
	if src != r.primary(pp.View) {
		return fmt.Errorf("%w: pre-prepare for view %d sent by replica %d, not its primary", ErrForged, pp.View, src)
	}
	r.notePeerView(src, pp.View)
	if err := r.admitView(src, pp.View, pp); err != nil {
		return buffered(err)
	}
	if pp.Seq <= r.lastExec || pp.Seq <= r.viewMinS {
		return fmt.Errorf("%w: pre-prepare for seq %d, executed up to %d", ErrStale, pp.Seq, r.lastExec)
	}
	if !r.inWindow(pp.Seq) {
		return r.windowErr(pp.Seq)
	}
	if e := r.log[pp.Seq]; e != nil && e.view == r.view && e.pp != nil {
		if e.pp.Digest == pp.Digest {
			return fmt.Errorf("%w: pre-prepare for seq %d", ErrDuplicate, pp.Seq)
		}
		return fmt.Errorf("%w: view %d seq %d", ErrEquivocation, pp.View, pp.Seq)
	}
	if err := r.checkBatchOf(pp); err != nil {
		return err
	}
	for i := range pp.Batch {
		if !r.cfg.Auth.VerifyRequest(&pp.Batch[i]) {
			return fmt.Errorf("%w: pre-prepare holds request %d of client %d with a bad authenticator", ErrForged, pp.Batch[i].Timestamp, pp.Batch[i].Client)
		}
	}
	if r.validator != nil {
		for i := range pp.Batch {
			req := &pp.Batch[i]
			if !r.validator.Valid(ValidContext{Client: req.Client, Proposed: true, Proposer: src}, req.Op) {
				return fmt.Errorf("%w: pre-prepare holds request %d of client %d, which the application refuses", ErrForged, req.Timestamp, req.Client)
			}
		}
	}
	e := r.entryFor(pp.Seq)
	if e.committed && e.cDigest != pp.Digest {
		return fmt.Errorf("%w: pre-prepare conflicts with the batch committed at seq %d", ErrForged, pp.Seq)
	}
	if err := r.checkTime(e, pp); err != nil {
		r.untimely = r.now
		return err
	}
	r.acceptPrePrepare(e, pp)
	return nil
}

// acceptPrePrepare binds pp to its slot in the current view; a backup
// then prepares it. The record persisted here is what Recover rebuilds
// the slot's accepted claims from (see noteAccepted), durable before the
// prepare that promises them is sent.
func (r *Replica) acceptPrePrepare(e *entry, pp *PrePrepare) {
	e.pp, e.ppAt = pp, r.now
	noteAccepted(e, pp.View, pp.Digest)
	r.persist(RecPrePrepare, pp)
	if pp.Seq > r.nextSeq {
		r.nextSeq = pp.Seq
	}
	if pp.Seq > r.lastExec {
		for i := range pp.Batch {
			r.noteProposed(&pp.Batch[i], pp.Seq)
		}
	}
	if !r.isPrimary() && r.view >= r.votesFrom { // see lazyVotes
		p := &Prepare{View: pp.View, Seq: pp.Seq, Digest: pp.Digest, Replica: r.id}
		e.prepares[r.id] = p
		r.persist(RecPrepare, p)
		r.broadcast(p)
	}
	r.checkPrepared(e)
}

func (r *Replica) onPrepare(src ReplicaID, p *Prepare) error {
	if src == r.primary(p.View) {
		return fmt.Errorf("%w: prepare from the primary of view %d", ErrInvalid, p.View)
	}
	r.notePeerView(src, p.View)
	if err := r.admitView(src, p.View, p); err != nil {
		return buffered(err)
	}
	if p.Seq <= r.low || !r.inWindow(p.Seq) {
		return r.windowErr(p.Seq)
	}
	e := r.entryFor(p.Seq)
	if _, ok := e.prepares[src]; ok {
		r.answerLaggard(src, e)
		return fmt.Errorf("%w: prepare of replica %d for seq %d", ErrDuplicate, src, p.Seq)
	}
	e.prepares[src] = p
	if e.prepared {
		r.lateVote(src, e)
		return nil
	}
	r.checkPrepared(e)
	return nil
}

// checkPrepared: a pre-prepare and 2f matching prepares from distinct
// backups make the slot prepared; the replica then commits.
func (r *Replica) checkPrepared(e *entry) {
	if !r.sealPrepared(e) {
		return
	}
	c := &Commit{View: e.view, Seq: e.seq, Digest: e.pp.Digest, Replica: r.id}
	e.commits[r.id] = c.Digest
	e.sentCommit = true
	r.persist(RecCommit, c)
	r.broadcast(c)
	r.checkCommitted(e)
}

// sealPrepared makes slot e prepared if its pre-prepare has 2f matching
// prepares from distinct backups; it reports whether the slot just
// prepared. The slot's P claim (prep) becomes this pre-prepare: its
// view is the highest yet, since a slot prepares at most once a view
// and views only grow. No prepare is kept as proof: the view change
// reports the claim under this replica's own signature.
func (r *Replica) sealPrepared(e *entry) bool {
	if e.prepared || e.pp == nil {
		return false
	}
	prim := r.primary(e.view)
	match := 0
	for id, p := range e.prepares {
		if id != prim && p.Digest == e.pp.Digest {
			match++
		}
	}
	if match < r.q-1 {
		return false
	}
	r.markPrepared(e)
	return true
}

// markPrepared records that slot e's pre-prepare prepared here.
func (r *Replica) markPrepared(e *entry) {
	e.prepared = true
	e.prep = e.pp
	r.readTop = max(r.readTop, e.seq)
}

// noteAccepted adds to slot e's accepted claims the pre-prepare of view
// v for digest d: one claim per digest, with the highest view it was
// accepted in, at most MaxPrePrepared of them, those of the highest
// views (the digest of the slot's P claim is never dropped; it is the
// one a view change needs most, see docs/bft.md). Dropping a claim never
// endangers safety: a claim only ever helps a digest be re-proposed.
func noteAccepted(e *entry, v uint64, d Digest) {
	found := false
	for i := range e.accepted {
		if e.accepted[i].Digest == d {
			e.accepted[i].View = max(e.accepted[i].View, v)
			found = true
		}
	}
	if !found {
		e.accepted = append(e.accepted, Claim{View: v, Seq: e.seq, Digest: d})
	}
	sort.Slice(e.accepted, func(i, j int) bool {
		a, b := &e.accepted[i], &e.accepted[j]
		return a.View > b.View || (a.View == b.View && bytes.Compare(a.Digest[:], b.Digest[:]) < 0)
	})
	for len(e.accepted) > MaxPrePrepared {
		drop := len(e.accepted) - 1
		if e.prep != nil && e.accepted[drop].Digest == e.prep.Digest {
			drop--
		}
		e.accepted = append(e.accepted[:drop], e.accepted[drop+1:]...)
	}
}

func (r *Replica) onCommit(src ReplicaID, c *Commit) error {
	r.notePeerView(src, c.View)
	if err := r.admitView(src, c.View, c); err != nil {
		return buffered(err)
	}
	if c.Seq <= r.low || !r.inWindow(c.Seq) {
		return r.windowErr(c.Seq)
	}
	e := r.entryFor(c.Seq)
	if _, ok := e.commits[src]; ok {
		r.answerLaggard(src, e)
		return fmt.Errorf("%w: commit of replica %d for seq %d", ErrDuplicate, src, c.Seq)
	}
	e.commits[src] = c.Digest
	r.lateVote(src, e)
	r.checkCommitted(e)
	return nil
}

// lateVote answers a first vote for a slot that committed here at least
// FetchTicks ago: it comes from a replica that missed the slot's traffic
// (its links were down when it went by) and is resending its own votes
// because its execution stalls. A retransmission of a vote we already
// counted is answered by the duplicate paths; this one is not a
// duplicate, since its first sending never arrived. A vote that is merely
// late (the slowest replica's, moments after the quorum) gets no answer,
// nor one for a slot that committed here in an earlier view: a new view
// that proposes it again draws a first vote of that view from every
// peer, which says nothing of its links.
func (r *Replica) lateVote(src ReplicaID, e *entry) {
	if e.committed && e.cView == r.view && r.now-e.committedAt >= uint64(r.cfg.FetchTicks) {
		r.answerLaggard(src, e)
	}
}

// checkCommitted: prepared plus 2f+1 matching commits (own included) make
// the slot committed-local; execution follows in sequence order.
func (r *Replica) checkCommitted(e *entry) {
	if !e.prepared || e.committed {
		return
	}
	n := 0
	for _, d := range e.commits {
		if d == e.pp.Digest {
			n++
		}
	}
	if n < r.q {
		return
	}
	e.committed = true
	e.committedAt = r.now
	r.readTop = max(r.readTop, e.seq)
	e.cView = e.view
	e.cDigest = e.pp.Digest
	e.cTime = e.pp.Time
	e.batch = e.pp.Batch
	r.persist(RecCommitted, &Commit{View: e.cView, Seq: e.seq, Digest: e.cDigest, Replica: r.id})
	r.tryExecute()
}

// tryExecute executes committed batches in sequence order.
func (r *Replica) tryExecute() {
	if r.resync {
		return // the state is wrong: nothing runs on it
	}
	progressed := false
	for {
		e := r.log[r.lastExec+1]
		if e == nil || !e.committed || batchMissing(e.cDigest, e.batch) {
			break // a slot committed on its digest waits for the batch
		}
		r.execute(e)
		progressed = true
	}
	if progressed {
		r.serveReads()
		if r.isPrimary() {
			r.propose(false)
		}
	}
}

func (r *Replica) execute(e *entry) {
	r.agreedTime = max(r.agreedTime, e.cTime)
	ctx := ExecContext{Seq: e.seq, Time: agreedAt(r.agreedTime), r: r}
	for i := range e.batch {
		req := &e.batch[i]
		k := reqKey{req.Client, req.Timestamp}
		delete(r.proposed, k)
		if r.propTop[req.Client] <= req.Timestamp {
			delete(r.propTop, req.Client)
		}
		// Every replica skips the same requests: the reply cache is
		// replicated state, so this is deterministic. One that does not
		// follow its client's last stays held, to be proposed again.
		last := r.lastTS(req.Client)
		if req.Timestamp <= last {
			r.pending.removeUpTo(req.Client, last)
			continue
		}
		if !inOrder(req, last) {
			continue
		}
		r.pending.removeUpTo(req.Client, req.Timestamp)
		ctx.Client, ctx.Index = req.Client, i
		r.executing = true
		res := r.cfg.App.Execute(ctx, req.Op)
		r.executing = false
		rep := &Reply{View: r.view, Timestamp: req.Timestamp, Client: req.Client, Replica: r.id, Notes: r.lastNote(req.Client), Result: res}
		r.cacheReply(rep)
		r.out = append(r.out, Envelope{To: ToClient(req.Client), Msg: rep})
	}
	r.lastExec = e.seq
	r.calmDown()
	r.committed = append(r.committed, Committed{View: e.cView, Seq: e.seq, Digest: e.cDigest, Batch: e.batch, Time: ctx.Time, Proposed: e.cTime})
	r.reqTimer = 0
	r.fetchTimer = 0
	r.stallTimer = 0
	r.settleResend(e)
	if e.seq%r.cfg.CheckpointInterval == 0 {
		r.checkpoint(e.seq)
	}
}

// tickResend retransmits this replica's own normal-case messages for the
// slots that have not committed when execution stalls: the links may
// lose messages, and without this every loss would cost a view change.
// Receivers drop what they already counted (ErrDuplicate). Each
// execution restarts the wait, so a replica whose slots keep executing,
// however long each takes, resends nothing; each resend without an
// execution since doubles it, up to 16 times FetchTicks, and it comes
// down again only as slots commit well within it (settleResend). A slot
// that merely takes longer than FetchTicks is queued, not lost:
// resending every uncommitted slot (the primary's pre-prepares with
// their batches) at a fixed period then only lengthened the queues, and
// so the wait, until a loaded cluster on a slow network changed views
// over and over and executed almost nothing
// (TestSlowNetworkLoadedViewChange, TestSlowNetworkHeavyLoad).
func (r *Replica) tickResend() {
	if !r.stalled() {
		r.stallTimer = 0
		return
	}
	r.stallTimer++
	if r.stallTimer < r.cfg.FetchTicks<<r.resendBackoff {
		return
	}
	r.stallTimer = 0
	r.resendBackoff = min(r.resendBackoff+1, maxBackoff)
	resent := false
	for s := r.lastExec + 1; s <= r.nextSeq && s-r.lastExec <= r.cfg.WatermarkWindow; s++ {
		e := r.log[s]
		if e == nil || e.view != r.view || e.pp == nil {
			continue
		}
		e.resent = true
		if r.isPrimary() {
			if !batchMissing(e.pp.Digest, e.pp.Batch) {
				r.broadcast(e.pp)
				resent = true
			}
		} else if p := e.prepares[r.id]; p != nil {
			r.broadcast(p)
			resent = true
		}
		if e.sentCommit {
			r.broadcast(&Commit{View: e.view, Seq: s, Digest: e.pp.Digest, Replica: r.id})
			resent = true
		}
	}
	if !resent {
		// Votes of others but no pre-prepare: we have nothing of our own
		// whose retransmission would make the others answer, so we ask.
		r.broadcast(&FetchState{Seq: r.lastExec, Replica: r.id})
	}
}

// settleResend lowers tickResend's wait after slot e executed, halving
// it while it stays above twice the ticks e took from its pre-prepare to
// its commit here; a slot resent, or prepared in another view, says
// nothing of the links. Reset at every execution instead, the wait stayed
// at FetchTicks on links where each slot took longer: every gap of
// FetchTicks between two executions resent every uncommitted slot, and a
// cluster loaded near what its links carry collapsed
// (TestSlowNetworkHeavyLoad).
func (r *Replica) settleResend(e *entry) {
	if e.resent || e.view != e.cView || e.committedAt < e.ppAt {
		return
	}
	took := e.committedAt - e.ppAt
	for r.resendBackoff > 0 && 2*took < uint64(r.cfg.FetchTicks)<<(r.resendBackoff-1) {
		r.resendBackoff--
	}
}

// stalled reports whether this replica holds slots above what it
// executed: pre-prepared ones, or only others' votes for them (it missed
// the pre-prepare).
func (r *Replica) stalled() bool {
	if r.nextSeq > r.lastExec {
		return true
	}
	for s, e := range r.log {
		if s > r.lastExec && e.view == r.view {
			return true
		}
	}
	return false
}

// answerLaggard responds to a peer retransmitting votes for a slot we
// committed: it stalls there, probably for lost messages, so we send it
// our own messages of this view for the slots we committed, from the
// first one it has not sent us its commit for. Not the whole log: the
// slots it committed it has, and answering every resend with the whole
// log made the traffic grow with its length on a network merely slower
// than FetchTicks (TestSlowNetworkTraffic). Not only from the resent slot
// either: a peer that missed an earlier slot's pre-prepare has no vote of
// its own to resend for it (TestLaggardMissingTheFrontSlot). At most
// once per FetchTicks per peer, which also ends any echo between two
// replicas.
//
// Also for a slot that committed here in an earlier view: the new view
// proposed it again, and a peer that missed its commits in both views
// needs ours of this one. Answered only for slots committed in this
// view, such a peer resent its votes in vain until the next stable
// checkpoint; in a cluster gone quiet its request timer fired first, and
// it sat alone in a view change (TestLaggardMissingCommitsAcrossViewChange).
//
// Nor to a peer that is slow rather than stuck: if the first slot we
// lack its commit for moved up since we last looked (at most once per
// tickResend's wait, which is longer on links where slots take longer),
// its votes still come, only late, and what we would send is already on
// its way to it. Answered anyway, the primary's answers (pre-prepares
// with their batches, for every slot the peer is behind) queued up ahead
// of what the peer needed, so it fell further behind and drew longer
// answers, until a loaded cluster that had lost a replica could not
// commit (TestSlowNetworkLoadedViewChange); looking every FetchTicks
// while slots took longer, a cluster loaded near what its links carry
// did the same (TestSlowNetworkHeavyLoad). A peer that is stuck stops
// moving, and is answered the next time it resends.
func (r *Replica) answerLaggard(to ReplicaID, e *entry) {
	if !e.committed || r.answeredLately(to) {
		return
	}
	last, seen := r.lagMarks[to]
	if seen && r.now-last.at < uint64(r.cfg.FetchTicks)<<r.resendBackoff {
		return
	}
	from := e.seq
	for s, o := range r.log {
		if s < from && o.committed && o.view == r.view {
			if _, ok := o.commits[to]; !ok {
				from = s
			}
		}
	}
	r.lagMarks[to] = lagMark{view: r.view, from: from, at: r.now}
	if seen && last.view == r.view && from > last.from {
		return
	}
	r.resendCommitted(to, from-1)
}

// answeredLately reports whether resendCommitted answered replica within
// the last FetchTicks.
func (r *Replica) answeredLately(replica ReplicaID) bool {
	last, ok := r.lastAnswer[replica]
	return ok && r.now-last < uint64(r.cfg.FetchTicks)
}

// resendCommitted sends replica to this replica's own pre-prepare (if it
// was the slot's primary) or prepare, and commit, for every slot above
// seq that it sent a commit for, in the slot's view and sequence order:
// only what it sent before, so also while it changes views. A peer in
// another view drops them as stale. At most once per FetchTicks per peer.
func (r *Replica) resendCommitted(to ReplicaID, above uint64) {
	if r.answeredLately(to) {
		return
	}
	r.lastAnswer[to] = r.now
	seqs := make([]uint64, 0, len(r.log))
	for s, e := range r.log {
		if s > above && e.pp != nil && e.sentCommit {
			seqs = append(seqs, s)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, s := range seqs {
		e := r.log[s]
		if r.id == r.primary(e.view) {
			if !batchMissing(e.pp.Digest, e.pp.Batch) {
				r.send(to, e.pp)
			}
		} else if p := e.prepares[r.id]; p != nil {
			r.send(to, p)
		}
		r.send(to, &Commit{View: e.view, Seq: s, Digest: e.pp.Digest, Replica: r.id})
	}
}
