package bft

import "sort"

// RecordKind says what a Record makes durable.
type RecordKind uint8

// The record kinds. The values are part of the storage format.
const (
	// RecPrePrepare: a pre-prepare this replica accepted in its view,
	// batch included (as primary: one it proposed). Msg is *PrePrepare.
	RecPrePrepare RecordKind = iota + 1
	// RecPrepare: this replica's prepare, or one of the 2f prepares of a
	// prepared certificate it formed. Msg is *Prepare.
	RecPrepare
	// RecCommit: this replica's commit. Msg is *Commit.
	RecCommit
	// RecCommitted: the slot committed here, in Msg's view with Msg's
	// digest (its batch is that of the slot's pre-prepare). Msg is
	// *Commit.
	RecCommitted
	// RecViewChange: this replica's view change, which moved it to that
	// view. Msg is *ViewChange.
	RecViewChange
	// RecNewView: the new view this replica entered. Msg is *NewView.
	RecNewView
)

// Record is one fact a replica must not forget across a restart: a vote
// it sent, what it accepted, what committed, which view it is in.
type Record struct {
	Kind RecordKind
	Msg  Message
}

// Snapshot is a replica's whole durable state at a stable checkpoint: the
// checkpoint (its sequence number, its certificate and the state bytes:
// reply cache and application snapshot, the bytes state transfer serves
// in chunks), and the records that still matter above it, in the order
// Recover takes them. It replaces everything persisted before. State is
// shared with the replica: treat it as immutable.
type Snapshot struct {
	Seq     uint64
	Stable  []Checkpoint
	State   []byte
	Records []Record
}

// persist queues rec for the next Ready, when the driver persists.
func (r *Replica) persist(k RecordKind, m Message) {
	if r.cfg.Persist {
		r.durable = append(r.durable, Record{Kind: k, Msg: m})
	}
}

// persistVotes records what forming slot e's prepared certificate made
// this replica send and rely on: the certificate's prepares and its
// commit.
func (r *Replica) persistVotes(e *entry, c *Commit) {
	if !r.cfg.Persist {
		return
	}
	for i := range e.cert.Prepares {
		if p := &e.cert.Prepares[i]; p.Replica != r.id {
			r.persist(RecPrepare, p)
		}
	}
	r.persist(RecCommit, c)
}

// takeDurable returns what Ready must make durable and clears it: the
// records since the last Ready, or, when the stable checkpoint moved, a
// snapshot that replaces them all.
func (r *Replica) takeDurable() ([]Record, *Snapshot) {
	recs := r.durable
	r.durable = nil
	if !r.cfg.Persist || r.low == r.lastStable {
		return recs, nil
	}
	own := r.ckpts[r.low]
	if own == nil {
		return recs, nil
	}
	return nil, &Snapshot{Seq: r.low, Stable: r.lowCert, State: own.state, Records: r.liveRecords()}
}

// liveRecords lists the records that describe this replica's state above
// its stable checkpoint: its view, then per slot the prepared certificate
// of an earlier view, the current view's pre-prepare and votes, and
// whether it committed.
func (r *Replica) liveRecords() []Record {
	var recs []Record
	add := func(k RecordKind, m Message) { recs = append(recs, Record{Kind: k, Msg: m}) }
	if r.lastNewView != nil {
		add(RecNewView, r.lastNewView)
	}
	if vc := r.vcs[r.id]; vc != nil && r.viewChanging {
		add(RecViewChange, vc)
	}
	for _, s := range r.sortedSeqs(r.low) {
		e := r.log[s]
		if c := e.cert; c != nil && (e.pp == nil || c.PrePrepare.View != e.view) {
			add(RecPrePrepare, &c.PrePrepare)
			for i := range c.Prepares {
				add(RecPrepare, &c.Prepares[i])
			}
		}
		if e.pp != nil {
			add(RecPrePrepare, e.pp)
			ids := make([]int, 0, len(e.prepares))
			for id, p := range e.prepares {
				if p != nil {
					ids = append(ids, int(id))
				}
			}
			sort.Ints(ids)
			for _, id := range ids {
				add(RecPrepare, e.prepares[ReplicaID(id)])
			}
			if e.sentCommit {
				add(RecCommit, &Commit{View: e.view, Seq: s, Digest: e.pp.Digest, Replica: r.id})
			}
		}
		if e.committed {
			add(RecCommitted, &Commit{View: e.cView, Seq: s, Digest: e.cDigest, Replica: r.id})
		}
	}
	return recs
}
