package bft

// Pipelined requests. A client may have up to Config.ClientWindow ordered
// requests outstanding; their timestamps are consecutive, and a replica
// executes a client's request only right after the client's request
// Timestamp-1, or, for a request flagged Restart (the first of a client
// that starts afresh, whose earlier timestamps it no longer knows), after
// any lower one. A request that a batch holds out of that order is not
// executed there: it stays held, leaves the log's bookkeeping and is
// proposed again, after its predecessor; a correct primary proposes each
// client's requests in timestamp order in the first place. The reply
// cache keeps each client's last ClientWindow replies, so any request of
// the window that the client retransmits is answered again, not run again.

// lastReply returns client c's latest cached reply, nil if none.
func (r *Replica) lastReply(c ClientID) *Reply {
	rs := r.replies[c]
	if len(rs) == 0 {
		return nil
	}
	return rs[len(rs)-1]
}

// lastTS is the timestamp of c's last executed request, 0 if none.
func (r *Replica) lastTS(c ClientID) uint64 {
	if rp := r.lastReply(c); rp != nil {
		return rp.Timestamp
	}
	return 0
}

// cachedReply returns c's cached reply for ts, nil if it is not cached.
func (r *Replica) cachedReply(c ClientID, ts uint64) *Reply {
	for _, rp := range r.replies[c] {
		if rp.Timestamp == ts {
			return rp
		}
	}
	return nil
}

// cacheReply adds rep, its client's newest reply, to the cache, dropping
// the client's replies beyond the window. A full window shifts in place:
// the slice is the cache's alone (takeCheckpoint copies the replies), and
// a new one for every reply was a quarter of the bytes a request
// allocated.
func (r *Replica) cacheReply(rep *Reply) {
	rs := r.replies[rep.Client]
	if over := len(rs) + 1 - r.cfg.ClientWindow; over > 0 {
		n := copy(rs, rs[over:])
		clear(rs[n:])
		rs = rs[:n]
	}
	r.replies[rep.Client] = append(rs, rep)
}

// inOrder reports whether req may execute now: it follows its client's
// last executed request, directly or as a Restart.
func inOrder(req *Request, last uint64) bool {
	return req.Timestamp == last+1 || req.Restart && req.Timestamp > last
}

// nextProposable reports whether the primary may propose req after
// what its client has executed and has in the log: its predecessor is
// there (or it is a Restart above them all).
func (r *Replica) nextProposable(req *Request, top map[ClientID]uint64) bool {
	base, ok := top[req.Client]
	if !ok {
		base = max(r.lastTS(req.Client), r.propTop[req.Client])
	}
	if !inOrder(req, base) {
		return false
	}
	top[req.Client] = req.Timestamp
	return true
}

// noteProposed records that the current view's log holds req at seq.
func (r *Replica) noteProposed(req *Request, seq uint64) {
	r.proposed[reqKey{req.Client, req.Timestamp}] = seq
	if req.Timestamp > r.propTop[req.Client] {
		r.propTop[req.Client] = req.Timestamp
	}
}

// installReplies replaces the reply cache with a checkpoint's, sorted by
// client and timestamp; the replies become this replica's, in its view.
func (r *Replica) installReplies(replies []Reply) {
	clear(r.replies)
	for i := range replies {
		rp := replies[i]
		rp.View, rp.Replica = r.view, r.id
		r.replies[rp.Client] = append(r.replies[rp.Client], &rp)
	}
}
