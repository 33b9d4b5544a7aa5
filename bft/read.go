package bft

import "fmt"

// Read-only requests (see Querier). A replica answers one from its state
// once it executed every slot it prepared (sent a commit for) or saw
// commit, and is not behind a stable checkpoint it knows of: the read's
// horizon, fixed when the read arrives. Until then the read waits, at most
// MaxReads of them, one per client (a client's later read, by timestamp
// then Nonce, replaces its earlier one, which it no longer waits for; an
// earlier one is dropped); their bytes count in Status.PendingBytes. The
// answer names the read by its timestamp and Nonce: the client counts it
// for no other read, since its horizon was fixed when that read arrived.

// heldRead is a read-only request waiting for its horizon.
type heldRead struct {
	req   *Request
	until uint64
}

// onRead handles a read-only request from a client link.
func (r *Replica) onRead(req *Request, fromClient bool) error {
	if !fromClient {
		return fmt.Errorf("%w: read-only request %d of client %d forwarded by a replica", ErrInvalid, req.Timestamp, req.Client)
	}
	q, ok := r.cfg.App.(Querier)
	if !ok {
		return fmt.Errorf("%w: read-only request %d of client %d: the application answers none", ErrInvalid, req.Timestamp, req.Client)
	}
	if !r.cfg.Auth.VerifyRequest(req) {
		return fmt.Errorf("%w: read-only request %d of client %d: bad authenticator", ErrForged, req.Timestamp, req.Client)
	}
	until := r.readHorizon()
	if r.canRead(until) {
		r.answerRead(q, req)
		return nil
	}
	for i := range r.reads {
		h := &r.reads[i]
		if h.req.Client != req.Client {
			continue
		}
		switch {
		case h.req.Timestamp == req.Timestamp && h.req.Nonce == req.Nonce:
			return fmt.Errorf("%w: read-only request %d (nonce %d) of client %d already held", ErrDuplicate, req.Timestamp, req.Nonce, req.Client)
		case req.Timestamp < h.req.Timestamp || req.Timestamp == h.req.Timestamp && req.Nonce < h.req.Nonce:
			return fmt.Errorf("%w: read-only request %d (nonce %d) of client %d: a later one is held", ErrStale, req.Timestamp, req.Nonce, req.Client)
		}
		r.readBytes += reqMem(req) - reqMem(h.req)
		*h = heldRead{req: req, until: until}
		return nil
	}
	if len(r.reads) >= r.cfg.MaxReads {
		return fmt.Errorf("%w: %d read-only requests held", ErrFull, len(r.reads))
	}
	r.reads = append(r.reads, heldRead{req: req, until: until})
	r.readBytes += reqMem(req)
	return nil
}

// readHorizon is the sequence number this replica must have executed to
// answer a read that arrives now: the highest slot that prepared or
// committed here (in any view), or the known stable checkpoint it has not
// reached.
func (r *Replica) readHorizon() uint64 {
	return max(r.lastExec, r.target, r.readTop)
}

func (r *Replica) canRead(until uint64) bool {
	return r.lastExec >= until && !r.resync
}

func (r *Replica) answerRead(q Querier, req *Request) {
	ctx := QueryContext{Client: req.Client}
	if r.agreedTime != 0 {
		ctx.Time = agreedAt(r.agreedTime)
	}
	rep := &Reply{View: r.view, Timestamp: req.Timestamp, Client: req.Client, Replica: r.id, ReadOnly: true, Nonce: req.Nonce, Notes: r.lastNote(req.Client), Result: q.Query(ctx, req.Op)}
	r.out = append(r.out, Envelope{To: ToClient(req.Client), Msg: rep})
}

// serveReads answers the held reads whose horizon execution reached, in
// arrival order.
func (r *Replica) serveReads() {
	if len(r.reads) == 0 {
		return
	}
	q := r.cfg.App.(Querier) // only held if the App is one
	k := 0
	for _, h := range r.reads {
		if r.canRead(h.until) {
			r.answerRead(q, h.req)
			r.readBytes -= reqMem(h.req)
			continue
		}
		r.reads[k] = h
		k++
	}
	clear(r.reads[k:])
	r.reads = r.reads[:k]
}
