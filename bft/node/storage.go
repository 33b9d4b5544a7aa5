package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/wal"
	"github.com/rubin-go/rubin/bft/wire"
)

// storage keeps a replica's durable records in a wal.Log: one frame, one
// sync, per Ready with Persist records (group commit), and a snapshot at
// every stable checkpoint, which truncates the log behind it. A Ready's
// Deferred records (the slots that committed) wait for the next frame,
// so a Ready with nothing else, the one that sends replies, waits for no
// sync; a crash may lose them, which bft.RecCommitted says is safe.
//
// A record is its kind byte followed by its message's wire encoding. A
// snapshot is the length-prefixed wire encoding of its State followed by
// its length-prefixed records.
type storage struct {
	log  *wal.Log
	lim  wire.Limits
	recs [][]byte
	buf  []byte
	// deferred holds the Deferred records not yet written, in order.
	deferred []bft.Record
}

// storageLimits bounds decoding our own records: generous, since they
// were checked when they arrived, but a snapshot may exceed a frame.
func storageLimits(n int) wire.Limits {
	return wire.Limits{MaxMessage: wal.DefaultMaxFrame, MaxReplicas: n}
}

// openStorage opens dir and decodes what it holds.
func openStorage(dir string, n int) (*storage, *bft.Snapshot, []bft.Record, *wal.Recovered, error) {
	l, rec, err := wal.Open(dir, wal.Options{})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	s := &storage{log: l, lim: storageLimits(n)}
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

// save makes rd's records durable: its snapshot (which holds every
// deferred record), or its Persist records, with the deferred records
// before them and its own Deferred after them in the same frame. A Ready
// with Deferred records alone writes nothing yet.
func (s *storage) save(rd *bft.Ready) error {
	if rd.Snapshot != nil {
		s.deferred = s.deferred[:0]
		return s.log.Snapshot(s.encodeSnapshot(rd.Snapshot))
	}
	if len(rd.Persist) == 0 {
		s.deferred = append(s.deferred, rd.Deferred...)
		return nil
	}
	return s.write(rd.Persist, rd.Deferred)
}

// write appends the deferred records, recs and then more as one frame.
func (s *storage) write(recs, more []bft.Record) error {
	s.buf = s.buf[:0]
	ends := make([]int, 0, len(s.deferred)+len(recs)+len(more))
	for _, list := range [][]bft.Record{s.deferred, recs, more} {
		for _, r := range list {
			s.buf = appendRecord(s.buf, r)
			ends = append(ends, len(s.buf))
		}
	}
	clear(s.deferred)
	s.deferred = s.deferred[:0]
	s.recs = s.recs[:0]
	start := 0
	for _, end := range ends {
		s.recs = append(s.recs, s.buf[start:end])
		start = end
	}
	err := s.log.Append(s.recs)
	clear(s.recs)
	return err
}

// close writes the deferred records, so a replica stopped in order
// recovers every slot it committed, and closes the log.
func (s *storage) close() error {
	var err error
	if len(s.deferred) > 0 {
		err = s.write(nil, nil)
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
	s, snap, recs, rec, err := openStorage(dir, n)
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
