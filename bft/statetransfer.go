package bft

import (
	"crypto/sha256"
	"fmt"
)

// State transfer. A replica behind a certified stable checkpoint (or whose
// own state diverged from one) asks the checkpoint's signers for it with
// FetchState; each answers with a State: the certificate and the state's
// manifest, checked against the certified digest. The replica then holds
// one fetch in progress (stateFetch) and asks for the chunks in order,
// spread over its sources, each with up to a tick's worth of chunks
// (chunkBytesPerTick) outstanding; a chunk, from whichever source, is checked against the
// manifest on arrival and copied into a buffer of the state's length (at
// most MaxStateBytes, allocated once the manifest is verified). When no
// chunk arrives for FetchTicks, the chunks asked for and not received are
// asked for again, of the sources that sent something since the last
// time (all of them if none did); a source that sends a chunk that does
// not match is asked no more. With every chunk in, the whole state is the
// certified one, and it is installed.
//
// The transfer has to outrun the cluster: the others keep their log only
// above their stable checkpoint, so a replica that installs a state after
// the next checkpoint became stable has to fetch again. Hence several
// sources and several chunks in flight at once: a state arrives at up to
// chunkBytesPerTick a tick from each source.
//
// A replica serves chunks from the state bytes of its own checkpoints,
// which it holds anyway: a chunk is a slice of them, nothing is
// re-encoded. It sends each peer at most chunkBytesPerTick (at least one
// chunk, at most maxChunksPerTick) per tick; requests beyond that wait for the next tick, at most a
// tick's worth per peer (the latest).

// chunkBytesPerTick bounds the chunk bytes a replica sends one peer per
// tick (at least one chunk): 800 MiB/s at node's default 5 ms tick. A
// fetching replica has as many bytes outstanding at each source.
const chunkBytesPerTick = 4 << 20

// maxChunksPerTick bounds the chunks a tick's worth holds, so that small
// chunks do not make a peer's waiting requests, or the messages it can
// ask for per tick, many thousands.
const maxChunksPerTick = 64

// chunksPerTick is chunkBytesPerTick in chunks, at least one and at most
// maxChunksPerTick.
func (r *Replica) chunksPerTick() int {
	return min(maxChunksPerTick, max(1, chunkBytesPerTick/r.cfg.StateChunkBytes))
}

// stateFetch is the state transfer in progress: at most one.
type stateFetch struct {
	seq    uint64
	digest Digest
	cert   []Checkpoint
	m      *State // the verified manifest
	buf    []byte // the state
	have   []bool // the chunks in buf
	left   int    // the chunks not in buf
	next   uint64 // the lowest chunk never asked for
	// lastChunk is the tick the fetch started or last got a chunk.
	lastChunk uint64
	// retry holds chunks asked for and not received, to ask again.
	retry []uint64
	// asked maps the chunks outstanding to their source.
	asked   map[uint64]ReplicaID
	sources []fetchSource
	turn    int // the source asked first next time, an index into sources
}

// fetchSource is a replica a state fetch asks for chunks.
type fetchSource struct {
	id ReplicaID
	// answered: it sent a valid chunk since the fetch last stalled;
	// silent: it did not, while it had chunks outstanding; forged: it
	// sent a chunk that does not match the manifest.
	answered, silent, forged bool
	outstanding              int
}

func (f *stateFetch) addSource(id ReplicaID) {
	for _, s := range f.sources {
		if s.id == id {
			return
		}
	}
	f.sources = append(f.sources, fetchSource{id: id})
}

// took ends the outstanding request for chunk i, if any.
func (f *stateFetch) took(i uint64) {
	if from, ok := f.asked[i]; ok {
		delete(f.asked, i)
		if s := f.source(from); s != nil {
			s.outstanding--
		}
	}
}

// usable counts the sources to ask.
func (f *stateFetch) usable() int {
	n := 0
	for _, s := range f.sources {
		if !s.silent && !s.forged {
			n++
		}
	}
	return n
}

func (f *stateFetch) source(id ReplicaID) *fetchSource {
	for i := range f.sources {
		if f.sources[i].id == id {
			return &f.sources[i]
		}
	}
	return nil
}

// nextMissing returns a chunk to ask for: one to ask again, else one never
// asked for; ok is false when every chunk is in or outstanding.
func (f *stateFetch) nextMissing() (uint64, bool) {
	for len(f.retry) > 0 {
		i := f.retry[len(f.retry)-1]
		f.retry = f.retry[:len(f.retry)-1]
		if !f.have[i] {
			if _, out := f.asked[i]; !out {
				return i, true
			}
		}
	}
	if f.next < uint64(len(f.have)) {
		f.next++
		return f.next - 1, true
	}
	return 0, false
}

// progressed reports whether a source sent a valid chunk since the fetch
// last stalled.
func (f *stateFetch) progressed() bool {
	for _, s := range f.sources {
		if s.answered {
			return true
		}
	}
	return false
}

// stalled takes back every outstanding request, to ask again, and marks
// the sources that had some outstanding and sent nothing as silent.
func (f *stateFetch) stalled() {
	for i, from := range f.asked {
		f.retry = append(f.retry, i)
		delete(f.asked, i)
		if s := f.source(from); s != nil && !s.answered {
			s.silent = true
		}
	}
	for i := range f.sources {
		f.sources[i].outstanding, f.sources[i].answered = 0, false
	}
	f.revive()
	f.turn = (f.turn + 1) % len(f.sources)
}

// revive makes the silent sources usable again if no usable source is
// left, and then the forging ones if need be: a fetch never gives up.
func (f *stateFetch) revive() {
	for _, forged := range []bool{false, true} {
		if f.usable() > 0 {
			return
		}
		for i := range f.sources {
			f.sources[i].silent = false
			if forged {
				f.sources[i].forged = false
			}
		}
	}
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
	if f := r.fetch; f != nil && (f.seq == r.target || f.progressed()) {
		// The sources stopped answering: ask again, of those that
		// answered before.
		f.stalled()
		r.askChunks()
		if !behindView {
			return
		}
	} else {
		// A fetch of an older checkpoint that stalled with no chunk
		// since it last stalled is dropped: its servers have moved on.
		// (One whose sources answer goes on: a source that stopped,
		// a liar among them, must not cost the chunks the others
		// sent.)
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
// stable checkpoint if it is at or beyond what the requester executed (at
// it, the certificate may be news to it), with the
// new view of our view, so a replica that missed view changes (or
// restarted) learns the view with proof, and with our messages for the
// slots above what it executed that we sent commits for (resendCommitted),
// also while we change views: a replica that lags in the view we are
// leaving may need our pre-prepares to execute, and then to hold the
// requests it would time. At most once per tick per peer.
func (r *Replica) onFetchState(m *FetchState) error {
	if last, ok := r.lastServe[m.Replica]; ok && last == r.now {
		return fmt.Errorf("%w: second fetch of replica %d in one tick", ErrDuplicate, m.Replica)
	}
	r.lastServe[m.Replica] = r.now
	if r.low > 0 && r.low >= m.Seq {
		// Also at m.Seq: the requester holds that state, but the
		// certificate may be news to it.
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
	if m.Seq < r.lastExec {
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
		if m.Seq > r.low {
			// A checkpoint it executed without learning that it became
			// stable (it missed the votes): the certificate moves its
			// watermarks, which the primary's next slots need.
			d, err := r.verifyCheckpointCert(m.Seq, m.Stable)
			if err != nil {
				return fmt.Errorf("state at %d: %w", m.Seq, err)
			}
			r.learnStable(m.Seq, d, append([]Checkpoint(nil), m.Stable...))
			return nil
		}
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
	chunks := len(m.Chunks)
	f := &stateFetch{seq: m.Seq, digest: d, cert: cert, m: m, buf: make([]byte, m.Length),
		have: make([]bool, chunks), left: chunks, asked: make(map[uint64]ReplicaID), lastChunk: r.now}
	f.addSource(m.Replica)
	for i := range cert {
		if cert[i].Replica != r.id {
			f.addSource(cert[i].Replica)
		}
	}
	r.fetch = f
	r.fetchTimer = 0
	r.askChunks()
	return nil
}

// askChunks tops up the fetch's requests: up to a tick's worth outstanding
// at each usable source, taken in turn.
func (r *Replica) askChunks() {
	f := r.fetch
	for more := true; more; {
		more = false
		for k := range f.sources {
			s := &f.sources[(f.turn+k)%len(f.sources)]
			if s.silent || s.forged || s.outstanding >= r.chunksPerTick() {
				continue
			}
			i, ok := f.nextMissing()
			if !ok {
				return
			}
			f.asked[i] = s.id
			s.outstanding++
			more = true
			r.send(s.id, &FetchChunk{Seq: f.seq, Index: i, Replica: r.id})
		}
	}
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
	if !r.serveChunk(m.Replica, own, m.Index) {
		w := r.chunkWaiting[m.Replica]
		if len(w) == r.chunksPerTick() {
			w = append(w[:0], w[1:]...)
		}
		r.chunkWaiting[m.Replica] = append(w, m)
	}
	return nil
}

// serveChunk sends chunk i of own to a peer, unless it had a tick's worth
// this tick already.
func (r *Replica) serveChunk(to ReplicaID, own *ownCheckpoint, i uint64) bool {
	if r.chunkTick[to] != r.now {
		r.chunkTick[to], r.chunkSent[to] = r.now, 0
	}
	if r.chunkSent[to] == r.chunksPerTick() {
		return false
	}
	r.chunkSent[to]++
	r.send(to, &Chunk{Seq: own.seq, Index: i, Data: chunkOf(own.state, uint64(r.cfg.StateChunkBytes), i), Replica: r.id})
	return true
}

// serveDeferred serves, at a new tick, the chunk requests that waited
// for it.
func (r *Replica) serveDeferred() {
	for id, w := range r.chunkWaiting {
		for _, m := range w {
			if own := r.ckpts[m.Seq]; own != nil {
				r.serveChunk(ReplicaID(id), own, m.Index)
			}
		}
		clear(w)
		r.chunkWaiting[id] = w[:0]
	}
}

// onChunk takes a chunk of the fetch in progress, checked against the
// verified manifest; with the last one it installs the state.
func (r *Replica) onChunk(m *Chunk) error {
	f := r.fetch
	if f == nil || m.Seq != f.seq {
		return fmt.Errorf("%w: chunk of the state at %d, not being fetched", ErrStale, m.Seq)
	}
	if m.Index >= uint64(len(f.have)) {
		return fmt.Errorf("%w: chunk %d of a state of %d chunks", ErrInvalid, m.Index, len(f.have))
	}
	if f.have[m.Index] {
		return fmt.Errorf("%w: chunk %d of the state at %d", ErrDuplicate, m.Index, m.Seq)
	}
	src := f.source(m.Replica)
	want := chunkOf(f.buf, f.m.ChunkSize, m.Index)
	if len(m.Data) != len(want) || sha256.Sum256(m.Data) != f.m.Chunks[m.Index] {
		if src != nil {
			// Ask it no more; what it was asked goes to the others.
			src.forged = true
			for i, from := range f.asked {
				if from == m.Replica {
					f.took(i)
					f.retry = append(f.retry, i)
				}
			}
			f.revive()
			r.askChunks()
		}
		return fmt.Errorf("%w: chunk %d of the state at %d does not match its manifest", ErrForged, m.Index, m.Seq)
	}
	f.took(m.Index)
	copy(want, m.Data)
	f.have[m.Index] = true
	f.left--
	f.lastChunk = r.now
	r.stats.Chunks++
	r.fetchTimer = 0
	if src != nil {
		src.answered, src.silent = true, false
	}
	if f.left > 0 {
		r.askChunks()
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
