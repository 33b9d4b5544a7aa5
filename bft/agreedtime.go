package bft

import (
	"fmt"
	"math"
	"time"
)

// Agreed time. The primary proposes a time with every batch (its clock,
// never below the time of the slot before); a backup prepares the batch
// only if the time is not below the nearest earlier slot's it holds (nor
// above the nearest later one's) and within Config.MaxClockSkew of its
// own clock. 2f+1 replicas prepare a batch, f+1 of them correct, so an
// agreed time lies within the bound of some correct replica's clock. A
// batch executes at the larger of its time and the agreed time before it,
// which is replicated state (part of every checkpoint): the agreed time
// never decreases, and every correct replica executes every request with
// the same time. Pre-prepares that a new view re-proposes keep their
// times; its null pre-prepares carry 0, which leaves the agreed time at
// the last one.

// unixNanos converts a clock reading to the time a pre-prepare carries.
func unixNanos(t time.Time) uint64 {
	if n := t.UnixNano(); n > 0 {
		return uint64(n)
	}
	return 0
}

// agreedAt converts an agreed time to what ExecContext carries.
func agreedAt(t uint64) time.Time {
	return time.Unix(0, int64(min(t, math.MaxInt64))).UTC()
}

// slotTime returns the time a slot is bound to at this replica: its
// committed batch's, or the current view's pre-prepare's; ok is false
// for a slot without either, or a null one.
func (r *Replica) slotTime(s uint64) (t uint64, ok bool) {
	e := r.log[s]
	switch {
	case e == nil:
	case e.committed:
		t = e.cTime
	case e.pp != nil && e.view == r.view:
		t = e.pp.Time
	}
	return t, t != 0
}

// timeBefore is the time a proposal for seq may not go below: the
// nearest earlier slot's above what executed, or the agreed time.
func (r *Replica) timeBefore(seq uint64) uint64 {
	for s := seq - 1; s > r.lastExec && s < seq; s-- {
		if t, ok := r.slotTime(s); ok {
			return max(t, r.agreedTime)
		}
	}
	return r.agreedTime
}

// timeAfter is the time a proposal for seq may not go above: the nearest
// later slot's that this replica holds; ok is false if it holds none.
func (r *Replica) timeAfter(seq uint64) (uint64, bool) {
	for s := seq + 1; s <= r.nextSeq && s > seq; s++ {
		if t, ok := r.slotTime(s); ok {
			return t, true
		}
	}
	return 0, false
}

// proposeTime is the time the primary proposes for seq: its clock, or
// the previous slot's time if the clock is behind it.
func (r *Replica) proposeTime(seq uint64) uint64 {
	return max(unixNanos(r.cfg.Clock()), r.timeBefore(seq), 1)
}

// checkTime decides whether a backup accepts pp's time for slot e.
func (r *Replica) checkTime(e *entry, pp *PrePrepare) error {
	if r.vouched(e, pp.Digest) {
		// f+1 other replicas prepared or committed it: a correct one
		// found the time good when the pre-prepare was fresh.
		return nil
	}
	if prev := r.timeBefore(pp.Seq); pp.Time < prev {
		return fmt.Errorf("%w: pre-prepare for seq %d proposes %s, before the previous slot's %s", ErrTime, pp.Seq, agreedAt(pp.Time).Format(time.RFC3339Nano), agreedAt(prev).Format(time.RFC3339Nano))
	}
	if next, ok := r.timeAfter(pp.Seq); ok && pp.Time > next {
		return fmt.Errorf("%w: pre-prepare for seq %d proposes %s, after the next slot's %s", ErrTime, pp.Seq, agreedAt(pp.Time).Format(time.RFC3339Nano), agreedAt(next).Format(time.RFC3339Nano))
	}
	now, skew := unixNanos(r.cfg.Clock()), uint64(r.cfg.MaxClockSkew)
	if (pp.Time < now && now-pp.Time > skew) || (pp.Time > now && pp.Time-now > skew) {
		d := time.Duration(int64(min(max(pp.Time, now)-min(pp.Time, now), math.MaxInt64)))
		if pp.Time < now {
			d = -d
		}
		return fmt.Errorf("%w: pre-prepare for seq %d proposes a time %v from this replica's clock, beyond %v", ErrTime, pp.Seq, d, r.cfg.MaxClockSkew)
	}
	return nil
}

// vouched reports whether f+1 replicas other than this one sent slot e
// a prepare or a commit for digest d in the current view.
func (r *Replica) vouched(e *entry, d Digest) bool {
	n := 0
	for id := 0; id < r.n; id++ {
		rid := ReplicaID(id)
		if rid == r.id {
			continue
		}
		if p := e.prepares[rid]; p != nil && p.Digest == d {
			n++
		} else if c, ok := e.commits[rid]; ok && c == d {
			n++
		}
	}
	return n >= r.f+1
}
