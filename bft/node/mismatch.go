package node

import (
	"bytes"
	"errors"
	"slices"

	"github.com/rubin-go/rubin/bft"
)

// dissent finds, for one identity, the replicas whose reply to an ordered
// request differs from the result f+1 replicas agreed on: correct
// replicas execute the same requests in the same order and reply alike,
// so such a reply is a fault of its sender (a lie, or a replica whose
// state diverged). Replies to read-only requests are not compared: a
// correct replica that lags answers those from an older state.
//
// It sees the replies the core took before the result, and those the
// core drops as late that answer a request whose result is not out yet
// (heard), and compares those that come after it with the last few
// results (done). It keeps one reply per replica and request, and only
// for requests the identity sent: what it holds is bounded as the
// core's replies are.
type dissent struct {
	heard map[uint64][]*bft.Reply // by timestamp, until the result
	done  []bft.Result            // the last results, oldest first
}

// dissentResults is how many results an identity keeps to compare late
// replies with.
const dissentResults = 8

// reply checks a reply the core took (err nil) or refused, to a request
// of a timestamp up to last, the identity's highest; it returns the
// replica that sent it if it differs from the result.
func (d *dissent) reply(from bft.ReplicaID, rep *bft.Reply, err error, last uint64) (bft.ReplicaID, bool) {
	if rep.ReadOnly || err != nil && !errors.Is(err, bft.ErrStale) {
		return 0, false
	}
	if err != nil {
		i := slices.IndexFunc(d.done, func(r bft.Result) bool { return r.Timestamp == rep.Timestamp })
		if i >= 0 {
			if sameReply(rep, d.done[i]) {
				return 0, false
			}
			return from, true
		}
		// Late for the core, which has the result, but before the
		// result came out of it; or for no request at all.
		if rep.Timestamp > last || len(d.done) > 0 && rep.Timestamp <= d.done[len(d.done)-1].Timestamp {
			return 0, false
		}
	}
	if d.heard == nil {
		d.heard = make(map[uint64][]*bft.Reply)
	}
	h := d.heard[rep.Timestamp]
	if i := slices.IndexFunc(h, func(r *bft.Reply) bool { return r.Replica == from }); i >= 0 {
		h[i] = rep
	} else {
		d.heard[rep.Timestamp] = append(h, rep)
	}
	return 0, false
}

// result takes a result of the core and returns the replicas that
// replied otherwise before it came.
func (d *dissent) result(r bft.Result) []bft.ReplicaID {
	var liars []bft.ReplicaID
	for _, rep := range d.heard[r.Timestamp] {
		if !r.ReadOnly && !sameReply(rep, r) {
			liars = append(liars, rep.Replica)
		}
	}
	delete(d.heard, r.Timestamp)
	if r.ReadOnly {
		return liars
	}
	// Replies to requests before this one that the core no longer waits
	// for (their result came, or they were abandoned) are of no use.
	for ts := range d.heard {
		if ts < r.Timestamp {
			delete(d.heard, ts)
		}
	}
	if len(d.done) == dissentResults {
		d.done = slices.Delete(d.done, 0, 1)
	}
	d.done = append(d.done, r)
	return liars
}

// reset forgets the replies heard for a core that was replaced.
func (d *dissent) reset() { clear(d.heard) }

func sameReply(rep *bft.Reply, r bft.Result) bool {
	return rep.Notes == r.Notes && bytes.Equal(rep.Result, r.Result)
}
