package bft

import (
	"bytes"
	"fmt"
	"sort"
)

// backOff doubles the request and view-change timeouts, up to
// 2^maxBackoff times their base, after a timeout that starts a view
// change.
func (r *Replica) backOff() {
	// Capped here, not only where it is used: each level takes
	// CheckpointInterval batches to undo, so levels beyond the cap would
	// hold the timeouts at the cap long after a long outage.
	r.vcBackoff = min(r.vcBackoff+1, maxBackoff)
	r.calm = 0
}

// calmDown counts an executed batch, and halves the timeouts again after
// CheckpointInterval batches at one level. PBFT returns them to their
// base once a request executes; but on machines or networks slower than
// the base timeout now and then (an emulated CPU), that starts a view
// change at the next slow request, and the cluster changes views over and
// over with little done between them (TestSlowNetworkSettles). Kept a
// while, the doubled timeout covers the slow requests; a faulty primary
// is still replaced, within the doubled timeout.
func (r *Replica) calmDown() {
	if r.vcBackoff == 0 {
		return
	}
	if r.calm++; r.calm >= r.cfg.CheckpointInterval {
		r.vcBackoff--
		r.calm = 0
	}
}

// Suspect votes for a view change now, as an expired request timer does,
// unless a view change is under way: for a driver whose application sees
// the view stalled in a way the core's timers cannot (the ordering
// service's blocks that stay short of their signatures, say). It is
// always safe, since a correct replica may suspect any primary; a view
// change needs f+1 replicas that suspect to move the others.
func (r *Replica) Suspect() {
	if r.viewChanging {
		return
	}
	r.backOff()
	r.startViewChange(r.view + 1)
}

// startViewChange moves this replica to view w (> its view) and votes for
// it. From now on it takes no normal-case messages of older views.
func (r *Replica) startViewChange(w uint64) {
	if w <= r.view {
		return
	}
	r.view = w
	r.viewChanging = true
	r.nvSent = false
	r.reqTimer, r.vcTimer, r.batchTimer, r.vcResend, r.vcResendBackoff = 0, 0, 0, 0, 0
	// The stable checkpoint reported is the highest certified one this
	// replica knows (target), not the one it holds the state of (low):
	// it accepts and votes in (target, target+L] too, and every claim it
	// holds above target fits the window verifiers allow above the
	// reported checkpoint, which covers all below it. So every correct
	// member of a prepared quorum reports what it prepared (its P claim)
	// or a checkpoint above it, as the new-view rule's safety argument
	// needs (docs/bft.md). The checkpoint's certificate is proof enough;
	// a replica lacking its state fetches it.
	vc := &ViewChange{View: w, StableSeq: r.target, Stable: r.targetCert, Replica: r.id}
	for _, s := range r.sortedSeqs(r.target) {
		e := r.log[s]
		if e.prep != nil {
			vc.Prepared = append(vc.Prepared, Claim{View: e.prep.View, Seq: s, Digest: e.prep.Digest})
		}
		vc.PrePrepared = append(vc.PrePrepared, e.accepted...)
	}
	vc.Sig = r.cfg.Auth.Sign(vc)
	r.stats.ViewChanges++
	for id, old := range r.vcs {
		if old.View < w {
			delete(r.vcs, id)
		}
	}
	r.vcs[r.id] = vc
	r.persist(RecViewChange, vc)
	r.broadcast(vc)
	r.dropFuture(func(v uint64) bool { return v < w })
	r.checkViewChanges()
}

func (r *Replica) onViewChange(vc *ViewChange) error {
	if vc.View < r.view || (vc.View == r.view && !r.viewChanging) {
		// The sender is behind: our new view lets it catch up.
		r.help(vc.Replica)
		return fmt.Errorf("%w: view change to %d, replica in view %d", ErrStale, vc.View, r.view)
	}
	if vc.View-r.view > viewHorizon {
		return fmt.Errorf("%w: view change to %d beyond horizon of view %d", ErrWatermark, vc.View, r.view)
	}
	if old := r.vcs[vc.Replica]; old != nil && old.View >= vc.View {
		return fmt.Errorf("%w: view change to %d of replica %d", ErrDuplicate, vc.View, vc.Replica)
	}
	if err := r.verifyViewChange(vc); err != nil {
		return err
	}
	r.vcs[vc.Replica] = vc
	r.checkViewChanges()
	return nil
}

// checkViewChanges applies the two view-change rules that depend on the
// votes held: join the smallest higher view that f+1 replicas ask for
// (they include a correct one, so the view change is real), and as the
// new primary, announce the view once a quorum voted for it.
func (r *Replica) checkViewChanges() {
	higher, minView := 0, uint64(0)
	for _, vc := range r.vcs {
		if vc.View > r.view {
			higher++
			if minView == 0 || vc.View < minView {
				minView = vc.View
			}
		}
	}
	if higher >= r.f+1 {
		r.startViewChange(minView) // calls back here
		return
	}
	if r.viewChanging && r.primary(r.view) == r.id && !r.nvSent && r.vcCount() >= r.q {
		r.sendNewView()
	}
}

func (r *Replica) vcCount() int {
	c := 0
	for _, vc := range r.vcs {
		if vc.View == r.view {
			c++
		}
	}
	return c
}

// tickViewChange runs the view-change timer: it starts once a quorum
// voted for the view (before that, the view change may be this replica's
// alone), and each consecutive expiry doubles it.
func (r *Replica) tickViewChange() {
	// Our view change may have been lost; repeat it, waiting twice as
	// long each time, up to 16 times FetchTicks. A replica already in
	// the view answers it with the new view (help). Both carry a
	// certificate for every prepared slot above the stable checkpoint:
	// after a loaded primary crashed on links taking in 4000 B/tick, 26
	// KB view changes repeated every FetchTicks, each drawing an 87 KB
	// new view, took in more than the links carry, so no view change
	// completed (TestSlowNetworkHeavyLoadViewChange).
	r.vcResend++
	if r.vcResend >= r.cfg.FetchTicks<<r.vcResendBackoff {
		r.vcResend = 0
		r.vcResendBackoff = min(r.vcResendBackoff+1, maxBackoff)
		if vc := r.vcs[r.id]; vc != nil && vc.View == r.view {
			r.broadcast(vc)
		}
	}
	// Replicas asking for a later view support leaving this one too; a
	// replica that moved on counts, or its lost vote for this view could
	// leave us waiting forever.
	support := 0
	for _, vc := range r.vcs {
		if vc.View >= r.view {
			support++
		}
	}
	if support < r.q {
		return
	}
	r.vcTimer++
	if r.vcTimer >= r.cfg.ViewChangeTicks<<r.vcBackoff {
		r.backOff()
		r.startViewChange(r.view + 1)
	}
}

// computeNewView derives a new view's pre-prepares from a set of valid
// view changes, as both the new primary and every backup do (see
// docs/bft.md for why the rule is safe and live). q is the quorum (2f+1
// when n = 3f+1), f the faults tolerated. min-s is the highest stable
// checkpoint among the view changes, max-s the highest sequence number
// any of them claims. Each sequence number in (min-s, max-s] gets a
// digest d for which some view v satisfies
//
//   - A1: at least q of the view changes have no P claim for it, or one
//     of a view below v, or exactly (v, d);
//   - A2: at least f+1 of them claim to have accepted d in view v or a
//     later one (a Q claim, or a P claim, which implies one);
//
// the one with the highest such v if several do, the lowest digest among
// those. Failing that it gets the null batch if at least q of them have
// no P claim for it. ok is false if some sequence number gets neither:
// the view changes do not decide it, and a new primary waits for more.
//
// A1 only gets easier as v grows and A2 only harder, so for each digest
// the one v worth trying is the highest that A2 allows: the (f+1)-th
// highest view in which the view changes claim to have accepted it.
//
// The pre-prepares are unsigned and carry no batch, and time 0: the
// batch, when a replica holds or fetches it, brings its time, which the
// digest binds.
func computeNewView(view uint64, vcs []ViewChange, q, f int) (minS uint64, minCert []Checkpoint, pps []PrePrepare, ok bool) {
	for i := range vcs {
		if vcs[i].StableSeq > minS {
			minS, minCert = vcs[i].StableSeq, vcs[i].Stable
		}
	}
	maxS := minS
	for i := range vcs {
		for _, c := range vcs[i].Prepared {
			maxS = max(maxS, c.Seq)
		}
		for _, c := range vcs[i].PrePrepared {
			maxS = max(maxS, c.Seq)
		}
	}
	// Per sequence number, each view change's P claim (index by view
	// change) and, per digest, the highest view each view change claims
	// to have accepted it in.
	type slot struct {
		p       []*Claim
		support map[Digest][]uint64
	}
	slots := make(map[uint64]*slot)
	at := func(s uint64) *slot {
		if slots[s] == nil {
			slots[s] = &slot{p: make([]*Claim, len(vcs)), support: make(map[Digest][]uint64)}
		}
		return slots[s]
	}
	accept := func(sl *slot, i int, c *Claim) {
		sup := sl.support[c.Digest]
		if sup == nil {
			sup = make([]uint64, len(vcs))
			for k := range sup {
				sup[k] = noView
			}
			sl.support[c.Digest] = sup
		}
		if sup[i] == noView || c.View > sup[i] {
			sup[i] = c.View
		}
	}
	for i := range vcs {
		for j := range vcs[i].Prepared {
			if c := &vcs[i].Prepared[j]; c.Seq > minS {
				sl := at(c.Seq)
				sl.p[i] = c
				accept(sl, i, c)
			}
		}
		for j := range vcs[i].PrePrepared {
			if c := &vcs[i].PrePrepared[j]; c.Seq > minS {
				accept(at(c.Seq), i, c)
			}
		}
	}
	for s := minS + 1; s <= maxS && s > minS; s++ {
		pp := PrePrepare{View: view, Seq: s, Digest: nullDigest}
		sl := slots[s]
		if sl == nil {
			pps = append(pps, pp) // nobody claims anything: null
			continue
		}
		var best *Digest
		var bestView uint64
		for d, sup := range sl.support {
			views := make([]uint64, 0, len(sup))
			for _, v := range sup {
				if v != noView {
					views = append(views, v)
				}
			}
			if len(views) < f+1 {
				continue // A2 fails for every view
			}
			sort.Slice(views, func(i, j int) bool { return views[i] > views[j] })
			v := views[f]
			a1 := 0
			for _, p := range sl.p {
				if p == nil || p.View < v || (p.View == v && p.Digest == d) {
					a1++
				}
			}
			if a1 < q {
				continue
			}
			if best == nil || v > bestView || (v == bestView && bytes.Compare(d[:], best[:]) < 0) {
				d := d
				best, bestView = &d, v
			}
		}
		noP := 0
		for _, p := range sl.p {
			if p == nil {
				noP++
			}
		}
		switch {
		case best != nil:
			pp.Digest = *best
		case noP >= q:
		default:
			return 0, nil, nil, false
		}
		pps = append(pps, pp)
	}
	return minS, minCert, pps, true
}

// noView marks a view change that claims nothing for a digest.
const noView = ^uint64(0)

// sendNewView announces the view this replica is the primary of, based
// on every view change for it that it holds, once they decide every
// sequence number (computeNewView); until then it waits for more.
func (r *Replica) sendNewView() {
	ids := make([]int, 0, len(r.vcs))
	for id, vc := range r.vcs {
		if vc.View == r.view {
			ids = append(ids, int(id))
		}
	}
	sort.Ints(ids)
	nv := &NewView{View: r.view, Replica: r.id}
	for _, id := range ids {
		nv.ViewChanges = append(nv.ViewChanges, *r.vcs[ReplicaID(id)])
	}
	minS, minCert, pps, ok := computeNewView(r.view, nv.ViewChanges, r.q, r.f)
	if !ok {
		return
	}
	nv.PrePrepares = pps
	nv.Sig = r.cfg.Auth.Sign(nv)
	r.nvSent = true
	r.broadcast(nv)
	r.enterView(nv, minS, minCert)
}

func (r *Replica) onNewView(nv *NewView) error {
	if nv.View == 0 || nv.Replica != r.primary(nv.View) {
		return fmt.Errorf("%w: new view %d from replica %d, not its primary", ErrForged, nv.View, nv.Replica)
	}
	if nv.View < r.view || (nv.View == r.view && !r.viewChanging) {
		return fmt.Errorf("%w: new view %d, replica in view %d", ErrStale, nv.View, r.view)
	}
	// No horizon: a valid new view proves its view, however far ahead;
	// that is how a replica left behind rejoins.
	if len(nv.ViewChanges) < r.q || len(nv.ViewChanges) > r.n || uint64(len(nv.PrePrepares)) > r.cfg.WatermarkWindow {
		return fmt.Errorf("%w: new view with %d view changes and %d pre-prepares", ErrInvalid, len(nv.ViewChanges), len(nv.PrePrepares))
	}
	if !r.cfg.Auth.Verify(nv.Replica, nv, nv.Sig) {
		return fmt.Errorf("%w: new view signature", ErrForged)
	}
	seen := make(map[ReplicaID]bool)
	for i := range nv.ViewChanges {
		vc := &nv.ViewChanges[i]
		if vc.View != nv.View || seen[vc.Replica] {
			return fmt.Errorf("%w: new view %d holds a view change to %d or a repeated one", ErrForged, nv.View, vc.View)
		}
		seen[vc.Replica] = true
		if r.verifiedBefore(vc) {
			continue
		}
		if err := r.verifyViewChange(vc); err != nil {
			return fmt.Errorf("new view %d: %w", nv.View, err)
		}
	}
	minS, minCert, pps, ok := computeNewView(nv.View, nv.ViewChanges, r.q, r.f)
	if !ok {
		return fmt.Errorf("%w: new view %d: its view changes do not decide every sequence number", ErrForged, nv.View)
	}
	if len(pps) != len(nv.PrePrepares) {
		return fmt.Errorf("%w: new view %d has %d pre-prepares, view changes give %d", ErrForged, nv.View, len(nv.PrePrepares), len(pps))
	}
	for i := range pps {
		got := &nv.PrePrepares[i]
		if got.View != pps[i].View || got.Seq != pps[i].Seq || got.Time != pps[i].Time || got.Digest != pps[i].Digest || len(got.Batch) != 0 {
			return fmt.Errorf("%w: new view %d pre-prepare for seq %d differs from the recomputed one", ErrForged, nv.View, pps[i].Seq)
		}
	}
	// Only a verified new view shows where its primary is: a forged
	// claim recorded would leave this replica believing it is behind.
	r.notePeerView(nv.Replica, nv.View)
	r.enterView(nv, minS, minCert)
	return nil
}

// enterView installs a verified new view: its stable checkpoint, its
// pre-prepares (which backups prepare), then the messages buffered for it.
func (r *Replica) enterView(nv *NewView, minS uint64, minCert []Checkpoint) {
	r.persist(RecNewView, nv)
	r.view = nv.View
	r.viewChanging = false
	// vcBackoff stays (see backOff): a view that is entered but makes no
	// progress (peers still verifying a large new view on slow machines)
	// waits longer before the next view change.
	r.reqTimer, r.vcTimer, r.batchTimer = 0, 0, 0
	r.lastNewView = nv
	r.viewMinS = minS
	r.stats.NewViews++
	for id, vc := range r.vcs {
		if vc.View <= r.view {
			delete(r.vcs, id)
		}
	}
	// Until every pre-prepare of the new view is in place, the primary
	// must not assign sequence numbers: execution, and a checkpoint
	// becoming stable, trigger proposing, and a batch proposed before
	// nextSeq is set below would have its slot proposed again.
	r.installing = true
	if minS > r.low && len(minCert) > 0 {
		r.learnStable(minS, minCert[0].State, minCert)
	}
	r.nextSeq = max(minS, r.lastExec)
	for i := range nv.PrePrepares {
		pp := &nv.PrePrepares[i]
		if !r.inWindow(pp.Seq) {
			continue
		}
		// Before entryFor forgets the slot's old pre-prepare.
		b, t, held := r.heldBatch(pp.Seq, pp.Digest)
		e := r.entryFor(pp.Seq)
		if e.committed && e.cDigest != pp.Digest {
			// Cannot happen with at most f faults: a committed batch is
			// the only one a new view can choose (docs/bft.md).
			continue
		}
		if len(b) > 0 {
			full := *pp
			full.Batch, full.Time = b, t
			pp = &full
		}
		r.acceptPrePrepare(e, pp)
		if !held && pp.Seq > r.lastExec {
			r.fetchBatch(pp.Seq, pp.Digest, r.fetchSources(pp.Seq, pp.Digest))
		}
	}
	r.installing = false
	r.rebuildProposed()
	r.dropFuture(func(v uint64) bool { return v < r.view })
	r.replayFuture()
	if r.isPrimary() {
		r.propose(false)
		return
	}
	// Hand the new primary what we hold: the old primary may have dropped
	// it, and clients retransmit only after a while.
	r.pending.compact()
	for _, k := range r.pending.order {
		if req, ok := r.pending.byKey[k]; ok {
			if _, in := r.proposed[k]; !in {
				r.send(r.primary(r.view), req)
			}
		}
	}
}

func msgView(m Message) uint64 {
	switch m := m.(type) {
	case *PrePrepare:
		return m.View
	case *Prepare:
		return m.View
	case *Commit:
		return m.View
	}
	return 0
}

func (r *Replica) dropFuture(drop func(v uint64) bool) {
	for id, buf := range r.future {
		k := 0
		for _, m := range buf {
			if !drop(msgView(m)) {
				buf[k] = m
				k++
			}
		}
		clear(buf[k:])
		r.setFuture(id, buf[:k])
	}
}

// replayFuture steps the buffered messages of the view just entered, in
// sender order then arrival order.
func (r *Replica) replayFuture() {
	ids := make([]int, 0, len(r.future))
	for id := range r.future {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	for _, id := range ids {
		src := ReplicaID(id)
		var keep, now []Message
		for _, m := range r.future[src] {
			if msgView(m) == r.view {
				now = append(now, m)
			} else {
				keep = append(keep, m)
			}
		}
		r.setFuture(src, keep)
		for _, m := range now {
			if r.viewChanging {
				return // a replayed message cannot start a view change, but be safe
			}
			_ = r.Step(ToReplica(src), m)
		}
	}
}

// help sends a peer that shows it is behind our view the new view that
// proves it, at most once per FetchTicks.
func (r *Replica) help(to ReplicaID) {
	if r.lastNewView == nil || r.viewChanging {
		return
	}
	if last, ok := r.lastHelp[to]; ok && r.now-last < uint64(r.cfg.FetchTicks) {
		return
	}
	r.lastHelp[to] = r.now
	r.send(to, r.lastNewView)
}

// viewBehind reports whether f+1 replicas showed normal-case activity in
// a view above ours (or in our view while we wait for its new view): at
// least one correct replica is there, so we are missing a new view.
func (r *Replica) viewBehind() bool {
	c := 0
	for _, v := range r.peerView {
		if v > r.view || (r.viewChanging && v == r.view) {
			c++
		}
	}
	return c >= r.f+1
}
