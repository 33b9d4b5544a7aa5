package bft

import (
	"fmt"
	"sort"
	"time"
)

// viewHorizon bounds how far above its view a replica buffers messages
// and accepts view changes. A replica further behind learns the view by
// view synchronization (see doc.go).
const viewHorizon = 64

// Replica is one PBFT replica as a deterministic state machine. It is not
// safe for concurrent use: the driver calls Step, Tick, Ready and Status
// from one goroutine (or under one lock).
type Replica struct {
	cfg Config
	// validator is cfg.App as a Validator, or nil.
	validator Validator
	id        ReplicaID
	n         int
	q         int // quorum, 2f+1
	f         int
	now       uint64
	view      uint64
	// viewChanging: this replica sent a view change for view and has not
	// yet accepted its new view; it takes no normal-case messages.
	viewChanging bool

	lastExec uint64
	// agreedTime is the time the last executed batch ran at (see
	// agreedtime.go): replicated state, in every checkpoint.
	agreedTime uint64
	// low is the stable checkpoint this replica holds the state of: the
	// low watermark. lowCert proves it (empty for 0).
	low     uint64
	lowCert []Checkpoint
	// target is the highest stable checkpoint known (certified by a
	// quorum), at least low; above lastExec, the replica may have to fetch
	// it. Messages in (target, target+L] are accepted too, so a replica
	// catching up keeps what it needs right after the state arrives.
	target       uint64
	targetDigest Digest
	targetCert   []Checkpoint

	log map[uint64]*entry

	// Client bookkeeping: replies is the reply cache (replicated state),
	// pending the verified requests neither executed nor (at the primary)
	// proposed, proposed the requests in the current view's log.
	replies  map[ClientID][]*Reply // each client's last ClientWindow, oldest first
	pending  pendingQueue
	proposed map[reqKey]uint64
	// propTop is each client's highest timestamp in proposed.
	propTop map[ClientID]uint64
	// Read-only requests waiting to be answered (read.go), and their
	// accounted bytes.
	reads     []heldRead
	readBytes int
	// readTop is the highest sequence number that prepared or committed
	// here: a read waits until it executed (read.go).
	readTop uint64
	// notes is the notification state per client (notify.go):
	// replicated. executing is set while App.Execute runs, when
	// ExecContext.Notify may be called. noteServed: the clients whose
	// FetchNotes this tick (noteServeTick) answered.
	notes         map[ClientID]*noteLog
	executing     bool
	noteServed    map[ClientID]bool
	noteServeTick uint64

	// Primary state.
	nextSeq    uint64 // highest sequence number assigned in this view
	batchTimer int    // ticks a held-back batch has waited

	// Request timers: reqTimer counts the ticks the log has stalled
	// (slots above lastExec, no execution); viewSince is the tick the
	// replica entered timedView, from which held requests are timed.
	reqTimer  int
	timedView uint64
	viewSince uint64
	lagFetch  uint64 // tick a request held out of order last made us fetch
	// untimely is the tick this replica last refused a pre-prepare of its
	// view above what it executed for its time (0: never).
	untimely uint64
	// Retransmission timers: for slots that stall, and for our view
	// change; resendBackoff doubles the first for each resend without an
	// execution since (tickResend), and slots that commit well within
	// it lower it (settleResend); vcResendBackoff doubles the second for
	// each resend of the same view change (tickViewChange).
	stallTimer      int
	resendBackoff   uint
	vcResend        int
	vcResendBackoff uint

	// Checkpoints.
	ckpts      map[uint64]*ownCheckpoint // own, at seqs >= low
	ckVotes    map[uint64]map[ReplicaID]*Checkpoint
	ckBySender map[ReplicaID][]uint64

	// View change.
	vcs       map[ReplicaID]*ViewChange // each replica's highest valid one
	vcTimer   int
	vcBackoff uint // at most maxBackoff
	// calm counts the batches executed since vcBackoff last changed.
	calm        uint64
	nvSent      bool
	lastNewView *NewView
	viewMinS    uint64 // min-s of the current view's new view
	installing  bool   // enterView is installing the new view's pre-prepares
	future      map[ReplicaID][]Message
	futureBytes map[ReplicaID]int // msgMem of future's messages per sender
	peerView    map[ReplicaID]uint64
	lastHelp    map[ReplicaID]uint64  // tick a peer was last sent our new view
	lastAnswer  map[ReplicaID]uint64  // tick a lagging peer was last sent our votes
	lagMarks    map[ReplicaID]lagMark // where a lagging peer stood when we last looked (answerLaggard)

	// Batches a new view named that this replica lacks (batchfetch.go).
	fetching   map[uint64]*batchFetch
	batchServe map[ReplicaID]serveBudget

	// State transfer (see statetransfer.go). resync: this replica's state
	// diverged from a certified checkpoint (target); it executes nothing
	// until it installed the certified state.
	fetchTimer   int
	lastServe    map[ReplicaID]uint64
	fetch        *stateFetch
	resync       bool
	chunkTick    []uint64        // per peer, the tick chunkSent counts
	chunkSent    []int           // per peer, the chunks sent in that tick
	chunkWaiting [][]*FetchChunk // per peer, chunk requests waiting for the next tick

	// Output.
	durable  []Record // to persist before out is sent (see persist.go)
	deferred []Record // to persist, whenever (see persist.go)
	// synced: a Ready of this replica had records to sync, or Recover
	// found some. votesFrom: the first view in which it may pre-prepare
	// and prepare, above the view Recover found it in (see lazyVotes).
	synced     bool
	votesFrom  uint64
	out        []Envelope
	committed  []Committed
	lastStable uint64 // Stable reported in the last Ready
	proposeDue bool   // a request reached the primary: Ready proposes

	stats Status
}

// lagMark is where a lagging peer stood: the first slot of view we
// committed without its commit, at tick at.
type lagMark struct{ view, from, at uint64 }

type reqKey struct {
	client ClientID
	ts     uint64
}

// entry is the log slot of one sequence number.
type entry struct {
	seq  uint64
	view uint64 // the view the votes below are for
	pp   *PrePrepare
	// One vote per replica per view: the first one counts.
	prepares   map[ReplicaID]*Prepare
	commits    map[ReplicaID]Digest
	prepared   bool
	sentCommit bool
	ppAt       uint64 // the tick this replica took pp
	resent     bool   // tickResend resent our messages for it in this view
	// Kept across views, for view changes: prep is the pre-prepare of
	// the highest view that prepared here (this replica sent a commit
	// for it; its batch may be missing, see batchfetch.go), accepted the
	// pre-prepares it accepted or sent, one per digest with the highest
	// view, at most MaxPrePrepared of the highest views, highest first
	// (see noteAccepted). And, once committed, the batch to execute.
	prep        *PrePrepare
	accepted    []Claim
	committed   bool
	committedAt uint64 // the tick it committed at
	cView       uint64
	cDigest     Digest
	cTime       uint64
	batch       []Request
}

// Ready is what a replica accumulated since the last call to Ready.
//
// With Config.Persist the driver handles it in this order: persist, then
// send, then apply. It makes Snapshot (if set) or else Persist durable
// (written and synced to stable storage); only then does it send
// Messages; then it reports Committed. A driver that cannot persist
// (a full disk, a failed fsync) must stop without sending: Messages hold
// votes whose record would otherwise be lost, and a replica that forgot
// a vote could vote differently after a restart. On restart the driver
// gives Recover the latest Snapshot and every Persist since, in order.
type Ready struct {
	// Persist lists what must be durable before Messages are sent: the
	// view this replica moved to (its view change) or entered (the new
	// view), the pre-prepares it accepted, with their batches, and the
	// votes it sent (its commits say what it prepared). Empty without
	// Config.Persist. When a Ready's only such records are pre-prepares
	// and this replica's own prepares in its current view, they come in
	// Deferred instead: they must be durable before the slot's commit is
	// sent, not before they are (see lazyVotes).
	Persist []Record
	// Deferred lists the slots that committed here (RecCommitted), and
	// votes that need no sync yet (see Persist): to persist after
	// Persist's records and no later than the next Ready's, in the same
	// sync, but they need not be durable before Messages are sent: the
	// driver may keep them and write them with a later Persist, and a
	// crash may lose those not synced yet (see RecCommitted,
	// RecCheckpoint and lazyVotes). Empty without Config.Persist, and
	// when Snapshot is set (it holds them).
	Deferred []Record
	// Snapshot, set when the stable checkpoint moved (only with
	// Config.Persist), replaces everything persisted before: the stable
	// checkpoint with its certificate, application snapshot and reply
	// cache, and the records still needed above it. Persist is empty
	// then: Snapshot holds it.
	Snapshot *Snapshot
	// Messages to send, in order. The core expands broadcasts into one
	// envelope per other replica. Messages may share pointers; treat them
	// as immutable.
	Messages []Envelope
	// Committed lists the batches executed since the last Ready, in
	// sequence order. Execution already happened (through App); this is a
	// report.
	Committed []Committed
	// Stable is the latest stable checkpoint's sequence number, 0 if none.
	Stable uint64
}

// Committed reports one executed batch.
type Committed struct {
	View, Seq uint64
	Digest    Digest
	Batch     []Request
	// Time is the agreed time the batch executed at (ExecContext.Time);
	// Proposed the time its pre-prepare carried (Digest covers it),
	// which Time is unless that was below the previous batch's.
	Time     time.Time
	Proposed uint64
}

// Status is a snapshot of a replica's progress and counters.
type Status struct {
	View         uint64
	Primary      ReplicaID
	ViewChanging bool
	LowWatermark uint64
	LastExecuted uint64
	// Time is the agreed time of the last executed batch (zero before
	// the first).
	Time   time.Time
	Stable uint64
	// KnownStable is the highest stable checkpoint this replica knows of;
	// above LastExecuted while it catches up.
	KnownStable uint64

	ViewChanges    uint64 // view changes started (view-change messages sent)
	NewViews       uint64 // new views entered
	StateTransfers uint64 // states restored
	Fetches        uint64 // FetchState messages sent
	Chunks         uint64 // state chunks received and verified
	Divergences    uint64 // certified checkpoints that differed from this replica's own
	BatchFetches   uint64 // FetchBatch messages sent
	LogEntries     int    // sequence numbers with state in the log
	Pending        int    // requests held, not executed
	Reads          int    // read-only requests held, not answered
	Checkpoints    int    // own checkpoints (snapshots) held
	CheckpointSeqs int    // sequence numbers with checkpoint votes held
	Buffered       int    // future-view messages buffered

	// Memory the core accounts for (see docs/bft.md, "Memory bounds"):
	// the held requests and their arrival order (at most
	// MaxPendingBytes plus the order) and the held read-only requests
	// (at most MaxReads), the future-view messages buffered (at most
	// MaxFutureBytes per sender).
	PendingBytes  int
	BufferedBytes int
}

// NewReplica validates cfg, fills its defaults and returns a replica in
// view 0 with nothing executed.
func NewReplica(cfg Config) (*Replica, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	validator, _ := cfg.App.(Validator)
	r := &Replica{
		cfg:        cfg,
		validator:  validator,
		id:         cfg.ID,
		n:          cfg.N,
		q:          cfg.q(),
		f:          cfg.f(),
		log:        make(map[uint64]*entry),
		replies:    make(map[ClientID][]*Reply),
		propTop:    make(map[ClientID]uint64),
		notes:      make(map[ClientID]*noteLog),
		noteServed: make(map[ClientID]bool),
		proposed:   make(map[reqKey]uint64),
		ckpts:      make(map[uint64]*ownCheckpoint),
		ckVotes:    make(map[uint64]map[ReplicaID]*Checkpoint),
		ckBySender: make(map[ReplicaID][]uint64),
		vcs:        make(map[ReplicaID]*ViewChange),
		future:     make(map[ReplicaID][]Message),
		peerView:   make(map[ReplicaID]uint64),
		lastHelp:   make(map[ReplicaID]uint64),
		lastAnswer: make(map[ReplicaID]uint64),
		lagMarks:   make(map[ReplicaID]lagMark),
		lastServe:  make(map[ReplicaID]uint64),

		chunkTick:    make([]uint64, cfg.N),
		chunkSent:    make([]int, cfg.N),
		chunkWaiting: make([][]*FetchChunk, cfg.N),
	}
	r.pending.init()
	r.futureBytes = make(map[ReplicaID]int)
	// The state at seq 0 is a checkpoint every replica shares without a
	// certificate.
	r.ckpts[0] = r.takeCheckpoint(0)
	r.targetDigest = r.ckpts[0].digest
	return r, nil
}

func (r *Replica) primary(v uint64) ReplicaID { return ReplicaID(v % uint64(r.n)) }
func (r *Replica) isPrimary() bool            { return r.primary(r.view) == r.id }

// Step processes one message that arrived from from, the sender the
// driver's authenticated link names. From a client link Step takes only
// requests, of any client: the link may carry the requests of several
// clients (a proxy, or a multiplexing client process), and each request's
// authenticator proves its client. A nil error means the message was
// used (or buffered for a view this replica is about to enter); an error
// wraps one of the Err values and means it was dropped. Step never panics
// and never blocks. The replica keeps references to m: the caller must not
// modify it afterwards.
func (r *Replica) Step(from Target, m Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalid)
	}
	if from.Client {
		if fn, ok := m.(*FetchNotes); ok && fn != nil {
			return r.onFetchNotes(ClientID(from.ID), fn)
		}
		req, ok := m.(*Request)
		if !ok || req == nil {
			return fmt.Errorf("%w: %T from client %d", ErrInvalid, m, from.ID)
		}
		// A client link may carry the requests of several clients (a
		// proxy, or a process multiplexing many client identities over
		// one link per replica): each request's authenticator proves its
		// client. A request of the link's own client is vouched for by
		// the link's MAC as well, as before; any other is checked with
		// Auth.VerifyRequest before anything else, so a request it did
		// not sign cannot even make this replica resend a reply or
		// forward a pending request.
		return r.onRequest(req, true, uint64(req.Client) != from.ID)
	}
	if from.ID >= uint64(r.n) {
		return fmt.Errorf("%w: sender %d is not a replica", ErrInvalid, from.ID)
	}
	src := ReplicaID(from.ID)
	if src == r.id {
		return fmt.Errorf("%w: message from self", ErrInvalid)
	}
	switch m := m.(type) {
	case *Request:
		if m == nil {
			break
		}
		return r.onRequest(m, false, false)
	case *PrePrepare:
		if m == nil {
			break
		}
		return r.onPrePrepare(src, m)
	case *Prepare:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: prepare claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onPrepare(src, m)
	case *Commit:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: commit claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onCommit(src, m)
	case *Checkpoint:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: checkpoint claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onCheckpoint(m)
	case *ViewChange:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: view change claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onViewChange(m)
	case *NewView:
		if m == nil {
			break
		}
		// Any replica may forward a new view: its primary's signature, and
		// the signatures of everything inside, prove it.
		return r.onNewView(m)
	case *FetchState:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: fetch claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onFetchState(m)
	case *State:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: state claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onState(m)
	case *FetchChunk:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: chunk fetch claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onFetchChunk(m)
	case *Chunk:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: chunk claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onChunk(m)
	case *FetchBatch:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: batch fetch claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onFetchBatch(m)
	case *Batch:
		if m == nil {
			break
		}
		if m.Replica != src {
			return fmt.Errorf("%w: batch claims replica %d, sent by %d", ErrForged, m.Replica, src)
		}
		return r.onBatch(m)
	case *Reply, *Notify, *FetchNotes:
		return fmt.Errorf("%w: %T sent by a replica", ErrInvalid, m)
	default:
		return fmt.Errorf("%w: unknown message type %T", ErrInvalid, m)
	}
	return fmt.Errorf("%w: nil %T", ErrInvalid, m)
}

// Tick advances the replica's abstract clock by one tick. All timeouts in
// Config count ticks; the driver picks the tick length (a few milliseconds
// to tens of milliseconds: BatchTicks=1 makes it the batching delay).
func (r *Replica) Tick() {
	r.now++
	if r.viewChanging {
		r.tickViewChange()
	} else {
		r.tickResend()
	}
	if !r.viewChanging && r.isPrimary() {
		if r.pending.hasUnproposed(r) {
			r.batchTimer++
			if r.batchTimer >= r.cfg.BatchTicks {
				r.propose(true)
			}
		} else {
			r.batchTimer = 0
		}
	}
	if !r.viewChanging && r.tickRequestTimer() {
		r.backOff()
		r.startViewChange(r.view + 1)
	}
	r.tickFetch()
	r.tickBatchFetch()
}

// HasReady reports whether Ready has anything new.
func (r *Replica) HasReady() bool {
	return r.proposeDue || len(r.out) > 0 || len(r.committed) > 0 || r.low != r.lastStable || len(r.durable) > 0 || len(r.deferred) > 0
}

// Ready returns what accumulated since the last call and clears it. The
// driver persists Persist or Snapshot (with Config.Persist), then sends
// Messages in order, then may hand Committed to the application layer,
// e.g. to answer clients waiting on a local replica.
func (r *Replica) Ready() Ready {
	if r.proposeDue {
		r.proposeDue = false
		r.propose(false)
	}
	rd := Ready{Messages: r.out, Committed: r.committed, Stable: r.low}
	rd.Persist, rd.Deferred, rd.Snapshot = r.takeDurable()
	r.out, r.committed = nil, nil
	r.lastStable = r.low
	return rd
}

// Status reports the replica's progress.
func (r *Replica) Status() Status {
	s := r.stats
	s.View = r.view
	s.Primary = r.primary(r.view)
	s.ViewChanging = r.viewChanging
	s.LowWatermark = r.low
	s.LastExecuted = r.lastExec
	if r.agreedTime != 0 {
		s.Time = agreedAt(r.agreedTime)
	}
	s.Stable = r.low
	s.KnownStable = r.target
	s.LogEntries = len(r.log)
	s.Pending = len(r.pending.byKey)
	s.PendingBytes = r.pending.memory() + r.readBytes
	s.Reads = len(r.reads)
	s.Checkpoints = len(r.ckpts)
	s.CheckpointSeqs = len(r.ckVotes)
	for _, b := range r.future {
		s.Buffered += len(b)
	}
	for _, b := range r.futureBytes {
		s.BufferedBytes += b
	}
	return s
}

func (r *Replica) send(to ReplicaID, m Message) {
	if to == r.id {
		return
	}
	r.out = append(r.out, Envelope{To: ToReplica(to), Msg: m})
}

func (r *Replica) broadcast(m Message) {
	for i := 0; i < r.n; i++ {
		r.send(ReplicaID(i), m)
	}
}

// inWindow reports whether seq is one this replica keeps log state for.
func (r *Replica) inWindow(seq uint64) bool {
	L := r.cfg.WatermarkWindow
	if seq > r.low && seq-r.low <= L {
		return true
	}
	return seq > r.target && seq-r.target <= L
}

func (r *Replica) windowErr(seq uint64) error {
	return fmt.Errorf("%w: seq %d not in (%d, %d] nor (%d, %d]", ErrWatermark, seq, r.low, r.low+r.cfg.WatermarkWindow, r.target, r.target+r.cfg.WatermarkWindow)
}

// entryFor returns seq's log slot with votes for the current view,
// creating it; the caller checked inWindow.
func (r *Replica) entryFor(seq uint64) *entry {
	e := r.log[seq]
	if e == nil {
		e = &entry{seq: seq}
		r.log[seq] = e
	}
	if e.prepares == nil || e.view != r.view {
		e.view = r.view
		e.pp = nil
		e.prepares = make(map[ReplicaID]*Prepare)
		e.commits = make(map[ReplicaID]Digest)
		e.prepared, e.sentCommit, e.resent = false, false, false
	}
	return e
}

// prune drops log slots and checkpoint votes that no longer fit the
// windows, keeping memory bounded by about 2L slots.
func (r *Replica) prune() {
	for s := range r.log {
		if s <= r.low || !r.inWindow(s) {
			delete(r.log, s)
		}
	}
	for s := range r.ckVotes {
		if s <= r.low {
			delete(r.ckVotes, s)
		}
	}
	for id, seqs := range r.ckBySender {
		k := 0
		for _, s := range seqs {
			if s > r.low {
				seqs[k] = s
				k++
			}
		}
		r.ckBySender[id] = seqs[:k]
	}
	for s := range r.ckpts {
		if s < r.low {
			delete(r.ckpts, s)
		}
	}
}

// rebuildProposed recomputes which requests the current view's log holds,
// so the primary does not propose them twice.
func (r *Replica) rebuildProposed() {
	clear(r.proposed)
	clear(r.propTop)
	seqs := make([]uint64, 0, len(r.log))
	for s := range r.log {
		seqs = append(seqs, s)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for _, s := range seqs {
		e := r.log[s]
		if s <= r.lastExec {
			continue
		}
		var b []Request
		switch {
		case e.committed:
			b = e.batch
		case e.view == r.view && e.pp != nil:
			b = e.pp.Batch
		}
		for i := range b {
			r.noteProposed(&b[i], s)
		}
	}
}
