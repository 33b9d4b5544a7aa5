package bft

import (
	"fmt"
	"slices"
)

// pendingQueue holds verified client requests not yet executed, in arrival
// order. The primary proposes from it the requests its log does not hold;
// backups keep it to time the primary and to hand it to a new primary.
// Its memory is bounded: MaxPending requests, MaxPendingBytes (as reqMem
// counts), MaxPendingPerClient requests per client, and an arrival order
// at most about twice as long as what is held.
type pendingQueue struct {
	byKey map[reqKey]*Request
	// since is the tick each held request arrived at: the request timer
	// runs from it (see tickRequestTimer).
	since map[reqKey]uint64
	// byClient lists each client's held timestamps (at most
	// MaxPendingPerClient).
	byClient map[ClientID][]uint64
	order    []reqKey // arrival order; may name removed keys
	bytes    int      // sum of the held requests' op sizes
	mem      int      // sum of the held requests' reqMem
}

func (p *pendingQueue) init() {
	p.byKey = make(map[reqKey]*Request)
	p.since = make(map[reqKey]uint64)
	p.byClient = make(map[ClientID][]uint64)
}

// add holds req, which it does not hold yet.
func (p *pendingQueue) add(k reqKey, req *Request, now uint64) {
	p.compact()
	p.byKey[k] = req
	p.since[k] = now
	p.byClient[k.client] = append(p.byClient[k.client], k.ts)
	p.bytes += len(req.Op)
	p.mem += reqMem(req)
	p.order = append(p.order, k)
}

func (p *pendingQueue) remove(k reqKey) {
	old, ok := p.byKey[k]
	if !ok {
		return
	}
	p.bytes -= len(old.Op)
	p.mem -= reqMem(old)
	delete(p.byKey, k)
	delete(p.since, k)
	ts := p.byClient[k.client]
	for i, t := range ts {
		if t == k.ts {
			ts = append(ts[:i], ts[i+1:]...)
			break
		}
	}
	if len(ts) == 0 {
		delete(p.byClient, k.client)
	} else {
		p.byClient[k.client] = ts
	}
	if len(p.byKey) == 0 {
		p.order = p.order[:0]
	}
}

// removeUpTo drops client's held requests with timestamps up to ts: once
// one executes, no older one ever will.
func (p *pendingQueue) removeUpTo(client ClientID, ts uint64) {
	for _, t := range slices.Clone(p.byClient[client]) {
		if t <= ts {
			p.remove(reqKey{client, t})
		}
	}
}

// memory is the queue's accounted size in bytes.
func (p *pendingQueue) memory() int { return p.mem + len(p.order)*orderSlot }

// compact drops removed keys from order once they dominate it, keeping the
// queue's memory proportional to what it holds. It runs before every add
// (never while order is being iterated), at the primary and the backups
// alike, so order holds at most max(64, 2*held)+1 keys.
func (p *pendingQueue) compact() {
	if len(p.order) < 64 || len(p.order) < 2*len(p.byKey) {
		return
	}
	k := 0
	for _, key := range p.order {
		if _, ok := p.byKey[key]; ok {
			p.order[k] = key
			k++
		}
	}
	clear(p.order[k:])
	p.order = p.order[:k]
}

// oldestUnproposed returns the arrival tick of the oldest held request
// that the current view's log does not hold, dropping on the way those a
// state transfer or a later request of their client made stale; ok is
// false if there is none. (A request in the log is the log timer's: it
// waits for the slots before it, which execute in order.) waitSince is
// the arrival tick of the oldest held request that waits for an earlier
// request of its client this replica does not hold; waiting is false if
// there is none.
func (r *Replica) oldestUnproposed() (since uint64, ok bool, waitSince uint64, waiting bool) {
	p := &r.pending
	for _, k := range p.order {
		if _, held := p.byKey[k]; !held {
			continue
		}
		last := r.lastTS(k.client)
		if k.ts <= last {
			p.remove(k)
			continue
		}
		if _, in := r.proposed[k]; in {
			continue
		}
		if !inOrder(p.byKey[k], max(last, r.propTop[k.client])) {
			// It waits for its client's earlier request, which is the
			// one to time: a client cannot make the primary look slow
			// with a request no primary may propose yet.
			if !waiting {
				waitSince, waiting = p.since[k], true
			}
			continue
		}
		return p.since[k], true, waitSince, waiting
	}
	return 0, false, waitSince, waiting
}

// hasUnproposed reports whether a held request is not in the current
// view's log. The primary proposes oldest first, so it looks from the
// newest end of the arrival order and usually stops at the first key.
func (p *pendingQueue) hasUnproposed(r *Replica) bool {
	for i := len(p.order) - 1; i >= 0; i-- {
		k := p.order[i]
		if _, ok := p.byKey[k]; !ok {
			continue
		}
		if _, ok := r.proposed[k]; !ok {
			return true
		}
	}
	return false
}

// onRequest handles a client request, sent by a client link or forwarded
// by a replica. authFirst checks the request's authenticator before
// anything else (the link does not vouch for its client); otherwise it is
// checked only for a request this replica does not already hold.
func (r *Replica) onRequest(req *Request, fromClient, authFirst bool) error {
	if len(req.Op) > r.cfg.MaxOpSize {
		return fmt.Errorf("%w: op of %d bytes exceeds %d", ErrInvalid, len(req.Op), r.cfg.MaxOpSize)
	}
	if req.ReadOnly {
		return r.onRead(req, fromClient)
	}
	if authFirst && !r.cfg.Auth.VerifyRequest(req) {
		return fmt.Errorf("%w: request %d of client %d: bad authenticator", ErrForged, req.Timestamp, req.Client)
	}
	if last := r.lastTS(req.Client); req.Timestamp <= last {
		if cached := r.cachedReply(req.Client, req.Timestamp); cached != nil {
			// The client missed our reply: send it again, in our view so
			// the client learns the current primary. Not re-executed.
			rep := *cached
			// In our view and under our name: a cached reply may come
			// from another replica's state (a state transfer).
			rep.View, rep.Replica = r.view, r.id
			r.out = append(r.out, Envelope{To: ToClient(req.Client), Msg: &rep})
			return nil
		}
		return fmt.Errorf("%w: request %d of client %d, executed up to %d", ErrStale, req.Timestamp, req.Client, last)
	}
	k := reqKey{req.Client, req.Timestamp}
	held, inPending := r.pending.byKey[k]
	_, inLog := r.proposed[k]
	if inPending || inLog {
		// A retransmission: the client got no result in time. A backup
		// forwards it again (the primary may have missed it); its timer
		// is already running since the request is pending.
		if fromClient && inPending && !r.viewChanging && !r.isPrimary() {
			r.send(r.primary(r.view), held)
			return nil
		}
		return fmt.Errorf("%w: request %d of client %d already held", ErrDuplicate, req.Timestamp, req.Client)
	}
	if !authFirst && !r.cfg.Auth.VerifyRequest(req) {
		return fmt.Errorf("%w: request %d of client %d: bad authenticator", ErrForged, req.Timestamp, req.Client)
	}
	if r.validator != nil && !r.validator.Valid(ValidContext{Client: req.Client}, req.Op) {
		return fmt.Errorf("%w: request %d of client %d: refused by the application", ErrForged, req.Timestamp, req.Client)
	}
	if last := r.lastTS(req.Client); last != 0 {
		r.pending.removeUpTo(req.Client, last)
	}
	// At its quota, a client's request replaces the client's oldest held
	// one, if it is newer. A correct client sends a request only once its
	// previous one completed, so the oldest executed elsewhere already, or
	// the client is faulty; kept, requests that never execute here (an
	// authenticator valid at this replica only) would hold the quota, and
	// through it the client's later requests, for good.
	count, mem := len(r.pending.byKey), r.pending.mem+reqMem(req)
	evict := reqKey{client: req.Client}
	if ts := r.pending.byClient[req.Client]; len(ts) >= r.cfg.MaxPendingPerClient {
		evict.ts = slices.Min(ts)
		if req.Timestamp < evict.ts {
			return fmt.Errorf("%w: client %d has %d newer requests pending", ErrFull, req.Client, len(ts))
		}
		count, mem = count-1, mem-reqMem(r.pending.byKey[evict])
	}
	if count >= r.cfg.MaxPending || mem > r.cfg.MaxPendingBytes {
		return fmt.Errorf("%w: %d requests of %d bytes pending", ErrFull, len(r.pending.byKey), r.pending.mem)
	}
	if evict.ts != 0 {
		r.pending.remove(evict)
	}
	r.pending.add(k, req, r.now)
	switch {
	case r.viewChanging:
		// Held for the next primary.
	case r.isPrimary():
		// Proposed when the driver takes the Ready, with every request
		// it stepped before: a client's request that finds the primary
		// idle waits for no timer, and requests that arrive together
		// (several clients, a multiplexing link, one read of the
		// driver's) share a batch, where proposing each at once made a
		// batch of the first alone, and the rest wait a whole slot for
		// the next.
		r.proposeDue = true
	case fromClient:
		r.send(r.primary(r.view), req)
	}
	return nil
}

// tickRequestTimer runs the timers by which a replica judges the
// primary, and reports whether one expired: the log timer, while slots
// above lastExec wait (reset whenever a batch executes), and the timer of
// each held request the log does not hold, from when it arrived or the
// view was entered, whichever is later (not reset by the execution of
// other requests, so a primary that serves every client but one is
// replaced, as in PBFT; a request in the log is covered by the log timer,
// so a replica that executes more slowly than the others does not time
// requests the primary did propose). A
// primary whose own log stalls votes for a new view too: without it, a
// view where fewer than a quorum still take part (the others moved on)
// would wait forever. A replica behind a known stable checkpoint waits for
// state, not for the primary, so its requests are not timed meanwhile, nor
// its log while a state transfer brings chunks (one came within the
// timeout): a state that takes longer than the timeout to arrive must not
// make it leave, alone, the view the others are in. Its log is timed
// otherwise: a laggard that cannot fetch the state it knows of (only a
// liar made it stable for it) must still be able to vote for a view
// change the others need.
// Both timeouts are RequestTicks, doubled for each view change a timeout
// started, up to 16 times, and halved again after CheckpointInterval
// batches executed at one level (see backOff).
//
// A held request that waits that long for an earlier request of its
// client that this replica never saw is not timed against the primary
// either, but it hints that the replica missed slots the others executed
// (a client sends its next request once f+1 replicas answered the
// previous one): the replica asks its peers for them (FetchState), at
// most once per timeout. What they send puts the slots in its log, where
// the log timer judges the primary as usual. If it cannot take what they
// send, because it refused a pre-prepare of its view for the time it
// proposes within the last timeout (an old slot resent, too far from its
// clock, that too few peers vouch for), the waiting request is timed
// after all: only a view change, whose re-proposals need no clock, brings
// those slots.
func (r *Replica) tickRequestTimer() bool {
	if r.view != r.timedView {
		r.timedView, r.viewSince = r.view, r.now
	}
	limit := uint64(r.cfg.RequestTicks) << r.vcBackoff
	if f := r.fetch; f != nil && r.now-f.lastChunk < limit {
		// A state transfer that makes progress: the log waits for it.
		r.reqTimer = 0
		return false
	}
	if r.nextSeq > r.lastExec {
		r.reqTimer++
		if uint64(r.reqTimer) >= limit {
			return true
		}
	} else {
		r.reqTimer = 0
	}
	if r.target > r.lastExec {
		return false
	}
	since, ok, waitSince, waiting := r.oldestUnproposed()
	if waiting && r.now-max(waitSince, r.viewSince, r.lagFetch) >= limit {
		r.lagFetch = r.now
		r.stats.Fetches++
		r.broadcast(&FetchState{Seq: r.lastExec, Replica: r.id})
	}
	if ok && r.now-max(since, r.viewSince) >= limit {
		return true
	}
	// The slots it lacks came, but with times it refused.
	untimely := r.untimely != 0 && r.now-r.untimely < limit
	return waiting && untimely && r.now-max(waitSince, r.viewSince) >= limit
}

// propose assigns sequence numbers to held requests. With fewer than
// MaxInFlight batches outstanding it proposes whatever it holds at once;
// beyond that it waits for a full batch, or for force (the batch timer).
func (r *Replica) propose(force bool) {
	if r.viewChanging || r.installing || !r.isPrimary() || r.view < r.votesFrom {
		return
	}
	for {
		seq := r.nextSeq + 1
		if seq <= r.low || seq-r.low > r.cfg.WatermarkWindow || seq <= r.viewMinS {
			return // window full: wait for a stable checkpoint
		}
		if !force && r.nextSeq-r.lastExec >= uint64(r.cfg.MaxInFlight) &&
			len(r.pending.byKey) < r.cfg.MaxBatch && r.pending.bytes <= r.cfg.MaxBatchBytes {
			// Held back, and all that is held cannot fill a batch: do
			// not scan it (this runs for every request that arrives).
			return
		}
		batch, full := r.collectBatch()
		if len(batch) == 0 {
			r.batchTimer = 0
			return
		}
		if !full && !force && r.nextSeq-r.lastExec >= uint64(r.cfg.MaxInFlight) {
			return
		}
		force = false
		r.batchTimer = 0
		t := r.proposeTime(seq)
		pp := &PrePrepare{View: r.view, Seq: seq, Time: t, Digest: BatchDigest(t, batch), Batch: batch}
		r.broadcast(pp)
		r.acceptPrePrepare(r.entryFor(seq), pp)
	}
}

// collectBatch takes held requests, oldest first, that the log does not
// hold, up to the batch bounds; full reports that a bound stopped it.
func (r *Replica) collectBatch() (batch []Request, full bool) {
	bytes := 0
	r.pending.compact()
	top := make(map[ClientID]uint64)
	for _, k := range r.pending.order {
		req, ok := r.pending.byKey[k]
		if !ok {
			continue
		}
		if _, ok := r.proposed[k]; ok {
			continue
		}
		if k.ts <= r.lastTS(k.client) {
			r.pending.remove(k)
			continue
		}
		if len(batch) == r.cfg.MaxBatch || bytes+len(req.Op) > r.cfg.MaxBatchBytes {
			return batch, true
		}
		if !r.nextProposable(req, top) {
			continue // after its predecessor, in a later batch
		}
		bytes += len(req.Op)
		batch = append(batch, *req)
		if len(batch) == r.cfg.MaxBatch {
			full = true
		}
	}
	return batch, full
}

// checkBatch applies the batch bounds every replica shares.
func (r *Replica) checkBatch(b []Request) error {
	if len(b) > r.cfg.MaxBatch {
		return fmt.Errorf("%w: batch of %d requests exceeds %d", ErrInvalid, len(b), r.cfg.MaxBatch)
	}
	total := 0
	for i := range b {
		if len(b[i].Op) > r.cfg.MaxOpSize {
			return fmt.Errorf("%w: op of %d bytes in batch", ErrInvalid, len(b[i].Op))
		}
		if b[i].ReadOnly {
			return fmt.Errorf("%w: read-only request %d of client %d in a batch", ErrInvalid, b[i].Timestamp, b[i].Client)
		}
		total += len(b[i].Op)
	}
	if total > r.cfg.MaxBatchBytes {
		return fmt.Errorf("%w: batch of %d bytes exceeds %d", ErrInvalid, total, r.cfg.MaxBatchBytes)
	}
	return nil
}
