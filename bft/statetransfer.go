package bft

import (
	"crypto/sha256"
	"fmt"
)

// State transfer. A replica behind a certified stable checkpoint (or whose
// own state diverged from one) asks the checkpoint's signers for it with
// FetchState; each answers with a State: the certificate and the state's
// manifest, checked against the certified digest. The replica then holds
// one fetch in progress (stateFetch) and asks for the chunks in order, one
// at a time, from one source; a chunk is checked against the manifest on
// arrival and copied into a buffer of the state's length (at most
// MaxStateBytes, allocated once the manifest is verified). A source that
// sends nothing for FetchTicks, or a chunk that does not match, makes it
// move on to the next source where it stopped. With every chunk in, the
// whole state is the certified one, and it is installed.
//
// A replica serves chunks from the state bytes of its own checkpoints,
// which it holds anyway: a chunk is a slice of them, nothing is
// re-encoded. It sends each peer at most one chunk per tick; a request
// beyond that waits for the next tick, and only the latest one waiting
// per peer is kept.

// stateFetch is the state transfer in progress: at most one.
type stateFetch struct {
	seq     uint64
	digest  Digest
	cert    []Checkpoint
	m       *State // the verified manifest
	buf     []byte // the state, filled up to chunk next
	next    uint64 // the next chunk to fetch; the ones below are in buf
	sources []ReplicaID
	src     int // the source asked, an index into sources
}

func (f *stateFetch) addSource(id ReplicaID) {
	for _, s := range f.sources {
		if s == id {
			return
		}
	}
	f.sources = append(f.sources, id)
}

// tickFetch paces catching up. A replica that knows a stable checkpoint
// beyond what it executed (or that diverged from one), and made no
// progress (executing, or receiving chunks) for FetchTicks, fetches: the
// next chunk from the next source if a fetch of that checkpoint is under
// way, else the manifest from the checkpoint's signers. One that sees a
// quorum of evidence of a higher view fetches from everyone, which also
// brings it the new view (see onFetchState).
func (r *Replica) tickFetch() {
	r.serveDeferred()
	behindState := r.target > r.lastExec || r.resync
	if !behindState {
		r.fetch = nil
	}
	behindView := r.viewBehind()
	if !behindState && !behindView {
		r.fetchTimer = 0
		return
	}
	r.fetchTimer++
	if r.fetchTimer < r.cfg.FetchTicks {
		return
	}
	r.fetchTimer = 0
	if f := r.fetch; f != nil && f.seq == r.target {
		// The source stopped answering: resume from the next one.
		f.src = (f.src + 1) % len(f.sources)
		r.askChunk()
		if !behindView {
			return
		}
	} else {
		// A fetch of an older checkpoint that stalled is dropped: its
		// servers have moved on.
		r.fetch = nil
	}
	seq := r.lastExec
	if r.resync {
		seq = r.target - 1 // so that the signers answer
	}
	f := &FetchState{Seq: seq, Replica: r.id}
	r.stats.Fetches++
	if behindState && !behindView {
		for i := range r.targetCert {
			r.send(r.targetCert[i].Replica, f)
		}
		return
	}
	r.broadcast(f)
}

// onFetchState answers a replica that is behind: with the manifest of our
// stable checkpoint if it is beyond what the requester executed, with the
// new view of our view, so a replica that missed view changes (or
// restarted) learns the view with proof, and with our messages for the
// slots above what it executed that we committed in this view (see
// tickResend). At most once per tick per peer.
func (r *Replica) onFetchState(m *FetchState) error {
	if last, ok := r.lastServe[m.Replica]; ok && last == r.now {
		return fmt.Errorf("%w: second fetch of replica %d in one tick", ErrDuplicate, m.Replica)
	}
	r.lastServe[m.Replica] = r.now
	if r.low > m.Seq {
		if own := r.ckpts[r.low]; own != nil {
			r.send(m.Replica, &State{
				Seq:       r.low,
				Stable:    r.lowCert,
				ChunkSize: uint64(r.cfg.StateChunkBytes),
				Length:    uint64(len(own.state)),
				Chunks:    own.chunks,
				Replica:   r.id,
			})
		}
	}
	if r.lastNewView != nil && !r.viewChanging {
		r.send(m.Replica, r.lastNewView)
	}
	if m.Seq < r.lastExec && !r.viewChanging {
		r.resendCommitted(m.Replica, m.Seq)
	}
	return nil
}

// wantState reports whether this replica would install a certified state
// at seq.
func (r *Replica) wantState(seq uint64) bool {
	return seq > r.lastExec || r.resync && seq >= r.target
}

// onState starts fetching the certified stable checkpoint whose manifest
// m carries, if this replica needs it; for the checkpoint it is fetching
// already, it adds the sender as a source.
func (r *Replica) onState(m *State) error {
	if !r.wantState(m.Seq) {
		return fmt.Errorf("%w: state at %d, executed up to %d", ErrStale, m.Seq, r.lastExec)
	}
	if f := r.fetch; f != nil && f.seq >= m.Seq {
		if f.seq > m.Seq {
			return fmt.Errorf("%w: state at %d, fetching %d", ErrStale, m.Seq, f.seq)
		}
		// A sender that does not hold the state only costs a timeout
		// when its turn comes.
		f.addSource(m.Replica)
		return nil
	}
	d, err := r.verifyCheckpointCert(m.Seq, m.Stable)
	if err != nil {
		return fmt.Errorf("state at %d: %w", m.Seq, err)
	}
	if err := checkManifest(m, d, r.cfg.MaxStateBytes); err != nil {
		return err
	}
	cert := append([]Checkpoint(nil), m.Stable...)
	r.learnStable(m.Seq, d, cert)
	if !r.wantState(m.Seq) {
		return nil // learning it made this replica's own checkpoint stable
	}
	f := &stateFetch{seq: m.Seq, digest: d, cert: cert, m: m, buf: make([]byte, m.Length), sources: []ReplicaID{m.Replica}}
	for i := range cert {
		if cert[i].Replica != r.id {
			f.addSource(cert[i].Replica)
		}
	}
	r.fetch = f
	r.fetchTimer = 0
	r.askChunk()
	return nil
}

// askChunk asks the fetch's current source for the next chunk.
func (r *Replica) askChunk() {
	f := r.fetch
	r.send(f.sources[f.src], &FetchChunk{Seq: f.seq, Index: f.next, Replica: r.id})
}

// onFetchChunk serves a chunk of one of our checkpoints, at most one per
// tick per peer.
func (r *Replica) onFetchChunk(m *FetchChunk) error {
	own := r.ckpts[m.Seq]
	if own == nil {
		return fmt.Errorf("%w: chunk of the state at %d, which this replica does not hold", ErrStale, m.Seq)
	}
	if m.Index >= uint64(len(own.chunks)) {
		return fmt.Errorf("%w: chunk %d of a state of %d chunks", ErrInvalid, m.Index, len(own.chunks))
	}
	if r.chunkServed[m.Replica] == r.now+1 {
		r.chunkWaiting[m.Replica] = m
		return nil
	}
	r.serveChunk(m.Replica, own, m.Index)
	return nil
}

func (r *Replica) serveChunk(to ReplicaID, own *ownCheckpoint, i uint64) {
	r.chunkServed[to] = r.now + 1
	r.send(to, &Chunk{Seq: own.seq, Index: i, Data: chunkOf(own.state, uint64(r.cfg.StateChunkBytes), i), Replica: r.id})
}

// serveDeferred serves, at a new tick, the chunk requests that waited
// for it.
func (r *Replica) serveDeferred() {
	for id, m := range r.chunkWaiting {
		if m == nil {
			continue
		}
		r.chunkWaiting[id] = nil
		if own := r.ckpts[m.Seq]; own != nil {
			r.serveChunk(ReplicaID(id), own, m.Index)
		}
	}
}

// onChunk takes the next chunk of the fetch in progress, checked against
// the verified manifest; with the last one it installs the state.
func (r *Replica) onChunk(m *Chunk) error {
	f := r.fetch
	if f == nil || m.Seq != f.seq {
		return fmt.Errorf("%w: chunk of the state at %d, not being fetched", ErrStale, m.Seq)
	}
	if m.Index != f.next {
		return fmt.Errorf("%w: chunk %d of the state at %d, waiting for %d", ErrDuplicate, m.Index, m.Seq, f.next)
	}
	want := chunkOf(f.buf, f.m.ChunkSize, f.next)
	if len(m.Data) != len(want) || sha256.Sum256(m.Data) != f.m.Chunks[f.next] {
		if f.sources[f.src] == m.Replica {
			f.src = (f.src + 1) % len(f.sources)
			r.askChunk()
		}
		return fmt.Errorf("%w: chunk %d of the state at %d does not match its manifest", ErrForged, m.Index, m.Seq)
	}
	copy(want, m.Data)
	f.next++
	r.stats.Chunks++
	r.fetchTimer = 0
	if f.next < uint64(len(f.m.Chunks)) {
		for i, s := range f.sources {
			if s == m.Replica {
				f.src = i // it answers: keep asking it
			}
		}
		r.askChunk()
		return nil
	}
	r.fetch = nil
	own := &ownCheckpoint{seq: f.seq, digest: f.digest, state: f.buf, chunks: f.m.Chunks}
	return r.installState(own, f.cert)
}

// installState makes a certified checkpoint this replica's state: the
// application's and the reply cache, with own.state as its stable
// checkpoint, cert proving it. own.digest must be the digest of
// own.state, certified by cert.
func (r *Replica) installState(own *ownCheckpoint, cert []Checkpoint) error {
	cs, snap, err := decodeState(own.state)
	if err != nil {
		return fmt.Errorf("state at %d: %w", own.seq, err)
	}
	if err := r.cfg.App.Restore(snap); err != nil {
		return fmt.Errorf("%w: state at %d: restore: %v", ErrInvalid, own.seq, err)
	}
	r.agreedTime = cs.time
	r.installNotes(cs.notes)
	r.installReplies(cs.replies)
	seq := own.seq
	r.lastExec = seq
	r.resync = false
	r.ckpts[seq] = own
	r.low, r.lowCert = seq, cert
	if r.target <= seq {
		r.target, r.targetDigest, r.targetCert = seq, own.digest, cert
	}
	if r.nextSeq < seq {
		r.nextSeq = seq
	}
	for k := range r.pending.byKey {
		if k.ts <= r.lastTS(k.client) {
			r.pending.remove(k)
		}
	}
	r.prune()
	r.rebuildProposed()
	r.stats.StateTransfers++
	r.fetchTimer, r.reqTimer = 0, 0
	// Committed slots above the checkpoint, logged while we lagged (or
	// executed on a state that diverged), can run now.
	r.tryExecute()
	r.serveReads()
	r.propose(false)
	return nil
}
