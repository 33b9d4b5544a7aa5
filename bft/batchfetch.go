package bft

import (
	"fmt"
	"maps"
	"slices"
)

// View changes and new views carry digests, not batches, so that their
// size does not depend on the batches' (see docs/bft.md). A replica that
// enters a new view whose pre-prepare names a batch it does not hold
// fetches it by (seq, digest) from the replicas that vouched for it, and
// meanwhile prepares and commits the slot on the digest; it executes the
// slot only once the batch is present. Bounds:
//
//   - at most one outstanding fetch per slot, and only for slots in the
//     window, so at most 2L fetches are held;
//   - a fetch that gets no valid answer within FetchTicks goes to the
//     next replica that vouched for the batch;
//   - an answer is used only if it matches an outstanding fetch and its
//     digest, and passes the batch bounds every replica shares;
//   - a replica answers each peer with at most MaxBatchBytes of
//     operations per tick, plus the one batch that crosses that line.

// batchFetch is an outstanding fetch of one slot's batch.
type batchFetch struct {
	digest  Digest
	sources []ReplicaID // who vouched for the batch, in the order asked
	next    int         // index in sources of the replica asked last
	ticks   int         // ticks since it was asked
}

// serveBudget is what this replica sent one peer in answers this tick.
type serveBudget struct {
	tick  uint64
	bytes int
}

// batchMissing reports whether a slot bound to digest d lacks its batch
// b: the null batch is empty, any other is not.
func batchMissing(d Digest, b []Request) bool {
	return len(b) == 0 && d != nullDigest
}

// heldBatch returns the batch with digest d this replica holds for seq,
// and its time: from the slot's pre-prepare (of any view), the
// pre-prepare it prepared with the highest view, or what it committed;
// the null batch is always held.
func (r *Replica) heldBatch(seq uint64, d Digest) ([]Request, uint64, bool) {
	if !batchMissing(d, nil) {
		return nil, 0, true
	}
	e := r.log[seq]
	if e == nil {
		return nil, 0, false
	}
	switch {
	case e.pp != nil && e.pp.Digest == d && len(e.pp.Batch) > 0:
		return e.pp.Batch, e.pp.Time, true
	case e.prep != nil && e.prep.Digest == d && len(e.prep.Batch) > 0:
		return e.prep.Batch, e.prep.Time, true
	case e.committed && e.cDigest == d && len(e.batch) > 0:
		return e.batch, e.cTime, true
	}
	return nil, 0, false
}

// needsBatch reports whether seq's slot is bound to digest d, by a
// pre-prepare of the current view or by a commit, without its batch.
func (r *Replica) needsBatch(seq uint64, d Digest) bool {
	e := r.log[seq]
	if e == nil || seq <= r.lastExec {
		return false
	}
	return (e.pp != nil && e.view == r.view && e.pp.Digest == d && batchMissing(d, e.pp.Batch)) ||
		(e.committed && e.cDigest == d && batchMissing(d, e.batch))
}

// vouchers lists the replicas that vouched, in nv, for digest d at seq:
// those whose view change claims to have prepared it (P) first, then
// those that claim to have accepted its pre-prepare (Q); each once, this
// replica left out. A new view re-proposes a batch only if f+1 of its
// view changes claim to have accepted it, so a correct one did (and
// holds it still if it prepared it or it is its slot's current one).
func (r *Replica) vouchers(nv *NewView, seq uint64, d Digest) []ReplicaID {
	seen := map[ReplicaID]bool{r.id: true}
	var prepared, accepted []ReplicaID
	add := func(list *[]ReplicaID, id ReplicaID) {
		if !seen[id] {
			seen[id] = true
			*list = append(*list, id)
		}
	}
	for i := range nv.ViewChanges {
		vc := &nv.ViewChanges[i]
		for _, c := range vc.Prepared {
			if c.Seq == seq && c.Digest == d {
				add(&prepared, vc.Replica)
			}
		}
	}
	for i := range nv.ViewChanges {
		vc := &nv.ViewChanges[i]
		for _, c := range vc.PrePrepared {
			if c.Seq == seq && c.Digest == d {
				add(&accepted, vc.Replica)
			}
		}
	}
	return append(prepared, accepted...)
}

// fetchSources is whom to ask for seq's batch d: the replicas that
// vouched for it in the current view's new view, then every other one.
// A replica that accepted a pre-prepare keeps its batch only while the
// pre-prepare is its slot's current one or the one it prepared, so a
// voucher may have dropped it while another replica still holds it.
func (r *Replica) fetchSources(seq uint64, d Digest) []ReplicaID {
	var sources []ReplicaID
	if nv := r.lastNewView; nv != nil && nv.View == r.view {
		v := r.vouchers(nv, seq, d)
		if len(v) > 0 {
			// Slots start at different vouchers, spreading the load.
			k := int(seq % uint64(len(v)))
			sources = slices.Concat(v[k:], v[:k])
		}
	}
	for i := range r.n {
		if id := ReplicaID(i); id != r.id && !slices.Contains(sources, id) {
			sources = append(sources, id)
		}
	}
	return sources
}

// fetchBatch starts fetching seq's batch d from sources, unless a fetch
// of it is outstanding.
func (r *Replica) fetchBatch(seq uint64, d Digest, sources []ReplicaID) {
	if f := r.fetching[seq]; (f != nil && f.digest == d) || len(sources) == 0 {
		return
	}
	if r.fetching == nil {
		r.fetching = make(map[uint64]*batchFetch)
	}
	f := &batchFetch{digest: d, sources: sources}
	r.fetching[seq] = f
	r.askBatch(seq, f)
}

func (r *Replica) askBatch(seq uint64, f *batchFetch) {
	f.ticks = 0
	r.stats.BatchFetches++
	r.send(f.sources[f.next], &FetchBatch{Seq: seq, Digest: f.digest, Replica: r.id})
}

// tickBatchFetch drops the fetches no longer needed and moves each one
// that timed out to the next source. Every FetchTicks it also starts a
// fetch for each slot that needs a batch and has none outstanding (a
// replica that recovered such a slot from its storage, where the fetch
// was not recorded), from fetchSources.
func (r *Replica) tickBatchFetch() {
	if r.now%uint64(r.cfg.FetchTicks) == 0 {
		for _, s := range slices.Sorted(maps.Keys(r.log)) {
			e := r.log[s]
			if r.fetching[s] != nil || s <= r.lastExec {
				continue
			}
			var d Digest
			switch {
			case e.committed && batchMissing(e.cDigest, e.batch):
				d = e.cDigest
			case e.pp != nil && e.view == r.view && batchMissing(e.pp.Digest, e.pp.Batch):
				d = e.pp.Digest
			default:
				continue
			}
			r.fetchBatch(s, d, r.fetchSources(s, d))
		}
	}
	for _, s := range slices.Sorted(maps.Keys(r.fetching)) {
		f := r.fetching[s]
		if !r.needsBatch(s, f.digest) {
			delete(r.fetching, s)
			continue
		}
		f.ticks++
		if f.ticks >= r.cfg.FetchTicks {
			f.next = (f.next + 1) % len(f.sources)
			r.askBatch(s, f)
		}
	}
}

// onFetchBatch answers a peer's fetch with the batch, if this replica
// holds it and the peer's budget for this tick allows.
func (r *Replica) onFetchBatch(m *FetchBatch) error {
	b, t, ok := r.heldBatch(m.Seq, m.Digest)
	if !ok || len(b) == 0 {
		return fmt.Errorf("%w: no batch %x at seq %d to answer replica %d", ErrStale, m.Digest[:4], m.Seq, m.Replica)
	}
	if r.batchServe == nil {
		r.batchServe = make(map[ReplicaID]serveBudget)
	}
	s := r.batchServe[m.Replica]
	if s.tick != r.now {
		s = serveBudget{tick: r.now}
	}
	if s.bytes >= r.cfg.MaxBatchBytes {
		return fmt.Errorf("%w: batch answers to replica %d this tick", ErrFull, m.Replica)
	}
	for i := range b {
		s.bytes += len(b[i].Op)
	}
	s.bytes = max(s.bytes, 1) // an answer of empty ops still counts
	r.batchServe[m.Replica] = s
	r.send(m.Replica, &Batch{Seq: m.Seq, Time: t, Digest: m.Digest, Requests: b, Replica: r.id})
	return nil
}

// onBatch installs a fetched batch: in the slot's pre-prepare and, if the
// slot committed, for execution.
func (r *Replica) onBatch(m *Batch) error {
	f := r.fetching[m.Seq]
	if f == nil || f.digest != m.Digest {
		return fmt.Errorf("%w: batch for seq %d not asked for", ErrStale, m.Seq)
	}
	if err := r.checkBatch(m.Requests); err != nil {
		return err
	}
	if BatchDigest(m.Time, m.Requests) != m.Digest || len(m.Requests) == 0 {
		return fmt.Errorf("%w: batch for seq %d does not match digest %x", ErrForged, m.Seq, m.Digest[:4])
	}
	delete(r.fetching, m.Seq)
	e := r.log[m.Seq]
	if e == nil {
		return nil
	}
	if e.pp != nil && e.pp.Digest == m.Digest && len(e.pp.Batch) == 0 {
		full := *e.pp // the new view's pre-prepare is shared: never modified
		full.Batch, full.Time = m.Requests, m.Time
		if e.prep == e.pp {
			e.prep = &full
		}
		e.pp = &full
		if e.view == r.view && m.Seq > r.lastExec {
			for i := range full.Batch {
				r.noteProposed(&full.Batch[i], m.Seq)
			}
		}
	}
	if e.prep != nil && e.prep.Digest == m.Digest && len(e.prep.Batch) == 0 {
		c := *e.prep
		c.Batch, c.Time = m.Requests, m.Time
		e.prep = &c
	}
	if e.committed && e.cDigest == m.Digest && len(e.batch) == 0 {
		e.batch, e.cTime = m.Requests, m.Time
		r.tryExecute()
	}
	return nil
}
