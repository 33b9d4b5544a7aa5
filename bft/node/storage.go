package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/wal"
	"github.com/rubin-go/rubin/bft/wire"
)

// storage keeps a replica's durable records in a wal.Log, written by a
// goroutine of its own so that the core goes on while a sync is under
// way:
//
//   - The core goroutine encodes each Ready's records into a job and
//     queues it with the Ready's messages (submit), then goes on stepping
//     messages; it routes a job's messages only once the writer has made
//     the job and every job before it durable (takeDurable). So no message
//     leaves before the records it promises, as bft.Ready asks, and
//     messages leave in the order of their Readies.
//   - The writer takes every job queued while it wrote the last ones and
//     appends their records as one frame with one sync (group commit
//     across Readies, so across slots and clients), or writes a snapshot,
//     which replaces everything before it.
//   - A Ready's Deferred records (the slots that committed) wait for the
//     next job with records, so a Ready with nothing else, the one that
//     sends replies, waits for no sync of its own (only for the jobs
//     ahead of it); a crash may lose them, which bft.RecCommitted says is
//     safe.
//   - The queue holds at most maxPipelinedBytes of records (or one job of
//     any size): past that, submit waits for the writer, so a disk slower
//     than the network slows the core instead of filling memory.
//   - A failed write or sync is sticky: no later job is written and no
//     message of a job that was not made durable is routed; the replica
//     stops (failure).
//
// A record is its kind byte followed by its message's wire encoding. A
// snapshot is the length-prefixed wire encoding of its State followed by
// its length-prefixed records.
type storage struct {
	lim wire.Limits

	// Core goroutine only.
	deferred []bft.Record // Deferred records not yet in a job, in order
	scratch  []byte       // encodeRecords' buffer, reused
	out      []*job       // takeDurable's result, reused

	// Shared with the writer, under mu. cond is signaled when a job is
	// queued, when the writer finishes a batch, and at close.
	mu      sync.Mutex
	cond    sync.Cond
	queue   []*job // submitted, not taken by the writer yet
	writing bool   // the writer holds a batch
	durable []*job // written and synced, messages not routed yet
	bytes   int    // record bytes in queue and in the writer's batch
	err     error  // the first write or sync failure, sticky
	closing bool
	started bool
	exited  chan struct{}
	wake    func() // tells the core goroutine that jobs became durable
	met     storageMetrics

	// The writer goroutine's (the core goroutine's before it starts and
	// after it exits).
	log  *wal.Log
	recs [][]byte
}

// job is one Ready's share of the storage's work.
type job struct {
	recs [][]byte // encoded records for the log, nil if none
	snap []byte   // an encoded snapshot, nil if none
	msgs []bft.Envelope
	size int
}

// storageMetrics are the writer's counters; zero values count nothing.
type storageMetrics struct {
	syncs    func()              // a frame or snapshot made durable
	syncTime func(time.Duration) // how long that took
	readies  func(int)           // Readies a sync carried
}

// maxPipelinedBytes bounds the records queued for the writer.
const maxPipelinedBytes = 64 << 20

// maxScratch bounds the encoding buffer the core keeps between Readies.
const maxScratch = 1 << 20

// maxMergedFrame bounds the frame the writer merges queued jobs into; a
// larger job is a frame of its own.
const maxMergedFrame = 16 << 20

// storageLimits bounds decoding our own records: generous, since they
// were checked when they arrived, but a snapshot may exceed a frame.
func storageLimits(n int) wire.Limits {
	return wire.Limits{MaxMessage: wal.DefaultMaxFrame, MaxReplicas: n}
}

// openStorage opens dir with opt and decodes what it holds.
func openStorage(dir string, n int, opt wal.Options) (*storage, *bft.Snapshot, []bft.Record, *wal.Recovered, error) {
	l, rec, err := wal.Open(dir, opt)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	s := &storage{log: l, lim: storageLimits(n), exited: make(chan struct{}), wake: func() {}}
	s.cond.L = &s.mu
	var snap *bft.Snapshot
	if rec.Snapshot != nil {
		if snap, err = s.decodeSnapshot(rec.Snapshot); err != nil {
			l.Close()
			return nil, nil, nil, nil, fmt.Errorf("%w: snapshot: %v", wal.ErrCorrupt, err)
		}
	}
	var recs []bft.Record
	for i, b := range rec.Batches {
		for j, raw := range b {
			r, err := s.decodeRecord(raw)
			if err != nil {
				l.Close()
				return nil, nil, nil, nil, fmt.Errorf("%w: batch %d record %d: %v", wal.ErrCorrupt, i, j, err)
			}
			recs = append(recs, r)
		}
	}
	return s, snap, recs, rec, nil
}

// start sets what the writer reports to: wake is called (from the
// writer's goroutine) whenever jobs became durable or the storage
// failed. Call it before the first submit.
func (s *storage) start(wake func(), met storageMetrics) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake, s.met = wake, met
}

// submit queues rd's records and messages. It reports now when rd has
// nothing to write and nothing is queued or being written ahead of it:
// the caller then routes rd's messages itself, after those that
// takeDurable returns. Otherwise the messages come back from takeDurable
// once durable. It waits while the queue is full, and returns the
// storage's failure, if any (nothing of rd will be sent then).
func (s *storage) submit(rd *bft.Ready) (now bool, err error) {
	j := s.encode(rd)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, s.err
	}
	if j == nil {
		if len(s.queue) == 0 && !s.writing {
			return true, nil
		}
		j = &job{}
	}
	if j.recs == nil && j.snap == nil && len(rd.Messages) == 0 {
		return false, nil
	}
	for s.bytes > 0 && s.bytes+j.size > maxPipelinedBytes && s.err == nil {
		s.cond.Wait()
	}
	if s.err != nil {
		return false, s.err
	}
	j.msgs = rd.Messages
	s.queue = append(s.queue, j)
	s.bytes += j.size
	if !s.started {
		s.started = true
		go s.write()
	}
	s.cond.Broadcast()
	return false, nil
}

// takeDurable returns the jobs made durable since the last call, in
// order (the slice is valid until the next call), and the write or sync
// failure that broke the storage, if any: the jobs returned were durable
// before it.
func (s *storage) takeDurable() ([]*job, error) {
	clear(s.out)
	s.out = s.out[:0]
	s.mu.Lock()
	s.out, s.durable = s.durable, s.out
	err := s.err
	s.mu.Unlock()
	return s.out, err
}

// encode makes rd's job: its snapshot (which holds every deferred
// record), or its Persist records with the deferred records before them
// and its own Deferred after them. A Ready with Deferred records alone
// writes nothing yet; nil means a job with nothing to write.
func (s *storage) encode(rd *bft.Ready) *job {
	if rd.Snapshot != nil {
		clear(s.deferred)
		s.deferred = s.deferred[:0]
		b := s.encodeSnapshot(rd.Snapshot)
		return &job{snap: b, size: len(b)}
	}
	if len(rd.Persist) == 0 {
		s.deferred = append(s.deferred, rd.Deferred...)
		return nil
	}
	j := &job{recs: s.encodeRecords(rd.Persist, rd.Deferred)}
	for _, r := range j.recs {
		j.size += len(r)
	}
	return j
}

// encodeRecords encodes the deferred records, recs and then more, and
// forgets the deferred ones. They are encoded into a scratch buffer the
// core keeps and copied into one allocation of their size, so that a
// Ready's records cost the garbage collector their own bytes only, not
// every buffer that growing to them would leave behind.
func (s *storage) encodeRecords(recs, more []bft.Record) [][]byte {
	buf := s.scratch[:0]
	ends := make([]int, 0, len(s.deferred)+len(recs)+len(more))
	for _, list := range [][]bft.Record{s.deferred, recs, more} {
		for _, r := range list {
			buf = appendRecord(buf, r)
			ends = append(ends, len(buf))
		}
	}
	if cap(buf) <= maxScratch {
		s.scratch = buf
	}
	clear(s.deferred)
	s.deferred = s.deferred[:0]
	b := make([]byte, len(buf))
	copy(b, buf)
	out := make([][]byte, len(ends))
	start := 0
	for i, end := range ends {
		out[i] = b[start:end:end]
		start = end
	}
	return out
}

// write is the writer goroutine: it writes the queued jobs in batches
// until the storage closes with nothing queued, or fails.
func (s *storage) write() {
	defer close(s.exited)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closing {
			s.cond.Wait()
		}
		batch := s.queue
		s.queue = nil
		s.writing = len(batch) > 0
		s.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		err := s.persist(batch)
		s.mu.Lock()
		s.writing = false
		for _, j := range batch {
			s.bytes -= j.size
		}
		if err != nil {
			s.err = err
			s.queue = nil
		} else {
			s.durable = append(s.durable, batch...)
		}
		s.cond.Broadcast()
		wake := s.wake
		s.mu.Unlock()
		wake()
		if err != nil {
			return
		}
	}
}

// persist writes a batch of jobs: the records of consecutive jobs as one
// frame (up to maxMergedFrame), a snapshot as itself.
func (s *storage) persist(batch []*job) error {
	size, readies := 0, 0
	flush := func() error {
		if len(s.recs) == 0 {
			return nil
		}
		err := s.sync(readies, func() error { return s.log.Append(s.recs) })
		clear(s.recs)
		s.recs, size, readies = s.recs[:0], 0, 0
		return err
	}
	for _, j := range batch {
		if j.snap != nil {
			if err := flush(); err != nil {
				return err
			}
			if err := s.sync(1, func() error { return s.log.Snapshot(j.snap) }); err != nil {
				return err
			}
			continue
		}
		if len(j.recs) == 0 {
			continue
		}
		if size > 0 && size+j.size > maxMergedFrame {
			if err := flush(); err != nil {
				return err
			}
		}
		s.recs = append(s.recs, j.recs...)
		size += j.size
		readies++
	}
	return flush()
}

// sync runs one durable write and counts it.
func (s *storage) sync(readies int, write func() error) error {
	t := time.Now()
	if err := write(); err != nil {
		return err
	}
	if s.met.syncs != nil {
		s.met.syncs()
		s.met.syncTime(time.Since(t))
		s.met.readies(readies)
	}
	return nil
}

// close writes what is queued and the deferred records, so a replica
// stopped in order recovers every slot it committed, and closes the log.
// The core goroutine calls it once, after its last submit.
func (s *storage) close() error {
	s.mu.Lock()
	s.closing = true
	started := s.started
	s.cond.Broadcast()
	s.mu.Unlock()
	if started {
		<-s.exited
	}
	err := s.err
	if err == nil && len(s.deferred) > 0 {
		err = s.log.Append(s.encodeRecords(nil, nil))
	}
	if cerr := s.log.Close(); err == nil {
		err = cerr
	}
	return err
}

func appendRecord(b []byte, r bft.Record) []byte {
	b = append(b, byte(r.Kind))
	return wire.Append(b, r.Msg)
}

func (s *storage) decodeRecord(b []byte) (bft.Record, error) {
	if len(b) < 1 {
		return bft.Record{}, errors.New("empty record")
	}
	m, err := wire.DecodeLimits(b[1:], s.lim)
	if err != nil {
		return bft.Record{}, err
	}
	return bft.Record{Kind: bft.RecordKind(b[0]), Msg: m}, nil
}

// A snapshot is its sequence number, its certificate (a count, then each
// checkpoint's encoding, length-prefixed), the state bytes
// (length-prefixed), then the records, each length-prefixed.
func (s *storage) encodeSnapshot(sn *bft.Snapshot) []byte {
	b := binary.AppendUvarint(nil, sn.Seq)
	b = binary.AppendUvarint(b, uint64(len(sn.Stable)))
	var rec []byte
	for i := range sn.Stable {
		rec = wire.Append(rec[:0], &sn.Stable[i])
		b = binary.AppendUvarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	b = binary.AppendUvarint(b, uint64(len(sn.State)))
	b = append(b, sn.State...)
	for _, r := range sn.Records {
		rec = appendRecord(rec[:0], r)
		b = binary.AppendUvarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	return b
}

func (s *storage) decodeSnapshot(b []byte) (*bft.Snapshot, error) {
	uv := func() (uint64, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, errors.New("bad varint")
		}
		b = b[k:]
		return n, nil
	}
	next := func() ([]byte, error) {
		n, err := uv()
		if err != nil || n > uint64(len(b)) {
			return nil, errors.New("bad length")
		}
		p := b[:n]
		b = b[n:]
		return p, nil
	}
	sn := &bft.Snapshot{}
	var err error
	if sn.Seq, err = uv(); err != nil {
		return nil, err
	}
	count, err := uv()
	if err != nil {
		return nil, err
	}
	if count > uint64(s.lim.MaxReplicas) {
		return nil, fmt.Errorf("certificate of %d checkpoints", count)
	}
	for range count {
		p, err := next()
		if err != nil {
			return nil, err
		}
		m, err := wire.DecodeLimits(p, s.lim)
		if err != nil {
			return nil, err
		}
		c, ok := m.(*bft.Checkpoint)
		if !ok {
			return nil, fmt.Errorf("snapshot certificate holds a %T, not a checkpoint", m)
		}
		sn.Stable = append(sn.Stable, *c)
	}
	if sn.State, err = next(); err != nil {
		return nil, err
	}
	for len(b) > 0 {
		p, err := next()
		if err != nil {
			return nil, err
		}
		r, err := s.decodeRecord(p)
		if err != nil {
			return nil, err
		}
		sn.Records = append(sn.Records, r)
	}
	return sn, nil
}

// recoverCore opens dir (if set) and recovers the fresh core cr from it.
// Without dir it says the replica keeps its state in memory only.
func recoverCore(cr *bft.Replica, dir string, n int, log *slog.Logger) (*storage, error) {
	if dir == "" {
		log.Warn("no data directory: state is kept in memory only and lost when the process stops")
		return nil, nil
	}
	s, snap, recs, rec, err := openStorage(dir, n, wal.Options{})
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	if err := cr.Recover(snap, recs); err != nil {
		s.close()
		return nil, fmt.Errorf("data directory %s: %w", dir, err)
	}
	st := cr.Status()
	log.Info("recovered from the data directory", "dir", dir, "view", st.View, "stable", st.Stable, "last_executed", st.LastExecuted, "records", len(recs), "torn_tail_bytes", rec.Cut)
	return s, nil
}
