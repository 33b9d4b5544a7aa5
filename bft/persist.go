package bft

import "sort"

// RecordKind says what a Record makes durable.
type RecordKind uint8

// The record kinds. The values are part of the storage format.
const (
	// RecPrePrepare: a pre-prepare this replica accepted in its view,
	// batch included (as primary: one it proposed). Msg is *PrePrepare.
	// The records of a slot rebuild the Q claims of its view changes
	// (the digests it accepted, with the highest view of each); in a
	// snapshot, a claim whose pre-prepare is no longer the slot's
	// current one is a record without batch.
	RecPrePrepare RecordKind = iota + 1
	// RecPrepare: this replica's prepare. Msg is *Prepare.
	RecPrepare
	// RecCommit: this replica's commit, which it sends once the slot
	// prepared here: so the record of the highest view is the slot's P
	// claim. Msg is *Commit.
	RecCommit
	// RecCommitted: the slot committed here, in Msg's view with Msg's
	// digest (its batch is that of the slot's pre-prepare). Msg is
	// *Commit.
	//
	// It goes in Ready.Deferred: the reply need not wait for it to be
	// durable, and a crash may lose it. The reply is sent once 2f+1
	// replicas sent commits for the slot, and each persisted the
	// pre-prepare and its commit before sending that commit
	// (Ready.Persist). So f+1 correct replicas hold
	// their P claim for it on their disks: every view change quorum
	// includes one, and no other batch can commit at that sequence
	// number, however many replicas crash. A replica that lost the
	// record recovers the slot prepared, with its own commit, and
	// commits it again (on the commits that retransmission or the other
	// replicas' help brings, or in a later view that re-proposes it). It then executes the
	// same batches in the same order, and execution is deterministic:
	// the digest covers the batch and its proposed time, from which the
	// agreed time follows, and the reply cache is state built by
	// execution. So its state and replies agree with what clients were
	// told. Reads stay linearizable: a replica that sent a commit for
	// the slot answers no read before it executed the slot again
	// (Recover puts the slot's durable commit under readHorizon). What the record buys is
	// speed: a recovered replica re-executes the slot at once instead of
	// after the network; and the state a checkpoint of this replica
	// vouches for, which the sync before the checkpoint is sent makes
	// durable (RecCheckpoint).
	RecCommitted
	// RecViewChange: this replica's view change, which moved it to that
	// view. Msg is *ViewChange.
	RecViewChange
	// RecNewView: the new view this replica entered. Msg is *NewView.
	RecNewView
	// RecStable: a stable checkpoint this replica learned of above the
	// state it holds, by its certificate. Msg is *State, with Seq and
	// Stable only. The replica votes in the window above it, and its
	// view changes report it, so after a restart they must still: a
	// view change's claims must fit above the checkpoint it reports.
	RecStable
	// RecCheckpoint: this replica's own signed checkpoint. Msg is
	// *Checkpoint. Recover needs nothing of it: it is there so that the
	// Ready that sends the checkpoint syncs, with every RecCommitted
	// record before it, so the state the signature vouches for can be
	// rebuilt after a crash. Were it lost everywhere, 2f+1 signatures
	// would certify a checkpoint no replica can serve, and the replicas
	// behind it would wait for it forever.
	RecCheckpoint
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

// persist queues rec for the next Ready, when the driver persists:
// RecCommitted in Deferred, the rest in Persist.
func (r *Replica) persist(k RecordKind, m Message) {
	switch {
	case !r.cfg.Persist:
	case k == RecCommitted:
		r.deferred = append(r.deferred, Record{Kind: k, Msg: m})
	default:
		r.durable = append(r.durable, Record{Kind: k, Msg: m})
	}
}

// takeDurable returns what Ready must make durable and clears it: the
// records since the last Ready, those needed before it sends and the
// deferred ones, or, when the stable checkpoint moved, a snapshot that
// replaces them all.
//
// Records that only vote in the current view (see lazyVotes) go with the
// deferred ones when nothing else needs a sync: a pre-prepare and a
// prepare need not be durable before they are sent, only before the
// slot's commit is, and the commit's records follow them into the same
// sync.
func (r *Replica) takeDurable() (recs, deferred []Record, snap *Snapshot) {
	recs, deferred = r.durable, r.deferred
	r.durable, r.deferred = nil, nil
	if !r.cfg.Persist {
		return recs, deferred, nil
	}
	if own := r.ckpts[r.low]; r.low != r.lastStable && own != nil {
		r.synced = true
		return nil, nil, &Snapshot{Seq: r.low, Stable: r.lowCert, State: own.state, Records: r.liveRecords()}
	}
	if len(recs) > 0 && r.lazyVotes(recs) {
		return nil, append(recs, deferred...), nil
	}
	r.synced = r.synced || len(recs) > 0
	return recs, deferred, nil
}

// lazyVotes reports whether recs are all votes this replica may send
// before they are durable: pre-prepares of its current view and its own
// prepares in it, once something of this replica is on its disk (so that
// a restart finds it there and calls Recover, which mutes it, below).
//
// A replica that crashed may have sent such a vote and lost it, and
// would then be free to vote differently for the same slot of the same
// view: an equivocation, as if it were Byzantine. Recover therefore
// mutes it in the view it recovers in (votesFrom): it sends no
// pre-prepare and no prepare there, only commits, each for a prepared
// certificate of others' prepares that it made durable first, as always.
// Its votes in that view are then those it sent before the crash, at
// most one digest a slot, and quorum intersection holds: two prepared
// certificates for different digests of a slot would need a replica
// other than it, hence one that voted for both before any crash, to vote
// for both. It votes again from the next view on. The commit of a slot
// is durable before it is sent, with every record written before it (the
// driver writes Deferred records first in the next Persist's sync), so a
// committed slot's prepared certificate is still on f+1 correct disks
// (see RecCommitted).
//
// The driver must not send a Ready's Messages before the records of
// every earlier Ready with Persist records are durable (a Ready with
// only Deferred records waits behind them): otherwise a lazy vote could
// leave while the replica's first records, or the view it voted in, are
// not on its disk yet, and a restart would not mute it.
func (r *Replica) lazyVotes(recs []Record) bool {
	if !r.synced {
		return false
	}
	for _, rec := range recs {
		switch m := rec.Msg.(type) {
		case *PrePrepare:
			if rec.Kind != RecPrePrepare || m.View != r.view {
				return false
			}
		case *Prepare:
			if rec.Kind != RecPrepare || m.View != r.view || m.Replica != r.id {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// liveRecords lists the records that describe this replica's state above
// its stable checkpoint: its view, then per slot, in increasing view
// order, the pre-prepares it accepted in earlier views (without batch,
// except the one it prepared, followed by its commit), then the current
// view's pre-prepare and own votes, and whether it committed.
func (r *Replica) liveRecords() []Record {
	var recs []Record
	add := func(k RecordKind, m Message) { recs = append(recs, Record{Kind: k, Msg: m}) }
	if r.lastNewView != nil {
		add(RecNewView, r.lastNewView)
	}
	if r.target > r.low {
		add(RecStable, &State{Seq: r.target, Stable: r.targetCert, Replica: r.id})
	}
	if vc := r.vcs[r.id]; vc != nil && r.viewChanging {
		add(RecViewChange, vc)
	}
	for _, s := range r.sortedSeqs(r.low) {
		e := r.log[s]
		cur := e.pp != nil
		// Earlier views' pre-prepares: what the Q and P claims need.
		var old []*PrePrepare
		if p := e.prep; p != nil && (!cur || p.View != e.view) {
			old = append(old, p)
		}
		for _, c := range e.accepted {
			if (cur && c.View == e.view) || (e.prep != nil && c.View == e.prep.View && c.Digest == e.prep.Digest) {
				continue
			}
			old = append(old, &PrePrepare{View: c.View, Seq: s, Digest: c.Digest})
		}
		sort.Slice(old, func(i, j int) bool { return old[i].View < old[j].View })
		for _, p := range old {
			add(RecPrePrepare, p)
			if p == e.prep {
				add(RecCommit, &Commit{View: p.View, Seq: s, Digest: p.Digest, Replica: r.id})
			}
		}
		if cur {
			add(RecPrePrepare, e.pp)
			if p := e.prepares[r.id]; p != nil {
				add(RecPrepare, p)
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
