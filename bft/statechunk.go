package bft

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// A checkpointed state is one byte string, the state bytes: the agreed
// time (a uvarint); the reply cache, a uvarint count and, for each reply
// in increasing order of client and timestamp (a client's last
// ClientWindow executed requests), the client's ID, the timestamp, the
// notification count and the result (a uvarint length and the bytes); the notifications, a uvarint count and, for each client in
// increasing order, its ID, the number its next notification gets and the
// notifications kept for it (a count, then each one's number and its
// payload, length-prefixed); then the application snapshot, the rest.
// Every uvarint is minimal, so a state has one encoding. A reply's View
// and Replica differ
// between replicas (a batch may commit in different views at different
// replicas), so they are not part of it.
//
// The state is cut into chunks of Config.StateChunkBytes (the last may be
// shorter), and the checkpoint digest replicas sign is the digest of the
// state's manifest: the chunk size, the length and the SHA-256 of every
// chunk (see manifestDigest). A replica fetching a certified state checks
// the manifest against the certified digest, then every chunk against
// the manifest as it arrives, so the whole state it installs hashes to the
// certified digest.

const (
	// maxChunkBytes bounds Config.StateChunkBytes: a chunk and its
	// header fit a 16 MiB frame with room to spare.
	maxChunkBytes = 8 << 20
	// maxChunks bounds the chunks of a state, so a manifest (32 bytes a
	// chunk) fits a frame and the codec's default list limit.
	maxChunks = 1 << 16
)

// coreState is the replicated state the core keeps besides the
// application's: the agreed time, the reply cache and the notifications
// kept per client, each sorted by client.
type coreState struct {
	time    uint64
	replies []Reply
	notes   []clientNotes
}

// clientNotes is one client's notification numbering and the
// notifications kept for it (see notify.go).
type clientNotes struct {
	client ClientID
	next   uint64
	kept   []keptNote
}

// encodeState returns the state bytes of cs and an application snapshot.
func encodeState(cs *coreState, snap []byte) []byte {
	n := 3*binary.MaxVarintLen64 + len(snap)
	for i := range cs.replies {
		n += 4*binary.MaxVarintLen64 + len(cs.replies[i].Result)
	}
	for i := range cs.notes {
		n += 3 * binary.MaxVarintLen64
		for _, k := range cs.notes[i].kept {
			n += 2*binary.MaxVarintLen64 + len(k.payload)
		}
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, cs.time)
	b = binary.AppendUvarint(b, uint64(len(cs.replies)))
	for i := range cs.replies {
		rp := &cs.replies[i]
		b = binary.AppendUvarint(b, uint64(rp.Client))
		b = binary.AppendUvarint(b, rp.Timestamp)
		b = binary.AppendUvarint(b, rp.Notes)
		b = binary.AppendUvarint(b, uint64(len(rp.Result)))
		b = append(b, rp.Result...)
	}
	b = binary.AppendUvarint(b, uint64(len(cs.notes)))
	for i := range cs.notes {
		cn := &cs.notes[i]
		b = binary.AppendUvarint(b, uint64(cn.client))
		b = binary.AppendUvarint(b, cn.next)
		b = binary.AppendUvarint(b, uint64(len(cn.kept)))
		for _, k := range cn.kept {
			b = binary.AppendUvarint(b, k.num)
			b = binary.AppendUvarint(b, uint64(len(k.payload)))
			b = append(b, k.payload...)
		}
	}
	return append(b, snap...)
}

// decodeState splits state bytes into the core's state and the
// application snapshot; byte slices alias b. The replies carry no View
// and no Replica.
func decodeState(b []byte) (*coreState, []byte, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: state: "+format, append([]any{ErrInvalid}, args...)...)
	}
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 || n > 1 && b[n-1] == 0 {
			// Truncated, or padded: every state has one encoding.
			return 0, bad("bad varint")
		}
		b = b[n:]
		return v, nil
	}
	bytes := func() ([]byte, error) {
		l, err := next()
		if err != nil {
			return nil, err
		}
		if l > uint64(len(b)) {
			return nil, bad("%d bytes, %d left", l, len(b))
		}
		p := b[:l:l]
		if l == 0 {
			p = nil
		}
		b = b[l:]
		return p, nil
	}
	// count reads a list's length, each element at least min bytes.
	count := func(min int) (uint64, error) {
		c, err := next()
		if err == nil && c > uint64(len(b)/min) {
			err = bad("%d entries in %d bytes", c, len(b))
		}
		return c, err
	}
	cs := new(coreState)
	var err error
	if cs.time, err = next(); err != nil {
		return nil, nil, err
	}
	nr, err := count(4)
	if err != nil {
		return nil, nil, err
	}
	cs.replies = make([]Reply, nr)
	for i := range cs.replies {
		rp := &cs.replies[i]
		var c uint64
		if c, err = next(); err != nil {
			return nil, nil, err
		}
		rp.Client = ClientID(c)
		if rp.Timestamp, err = next(); err != nil {
			return nil, nil, err
		}
		if prev := &cs.replies[max(i, 1)-1]; i > 0 && (rp.Client < prev.Client || rp.Client == prev.Client && rp.Timestamp <= prev.Timestamp) {
			return nil, nil, bad("replies not sorted by client and timestamp")
		}
		if rp.Notes, err = next(); err != nil {
			return nil, nil, err
		}
		if rp.Result, err = bytes(); err != nil {
			return nil, nil, err
		}
	}
	nn, err := count(3)
	if err != nil {
		return nil, nil, err
	}
	cs.notes = make([]clientNotes, nn)
	for i := range cs.notes {
		cn := &cs.notes[i]
		var c, k uint64
		if c, err = next(); err != nil {
			return nil, nil, err
		}
		cn.client = ClientID(c)
		if i > 0 && cn.client <= cs.notes[i-1].client {
			return nil, nil, bad("notifications not sorted by client")
		}
		if cn.next, err = next(); err != nil {
			return nil, nil, err
		}
		if k, err = count(2); err != nil {
			return nil, nil, err
		}
		cn.kept = make([]keptNote, k)
		for j := range cn.kept {
			kn := &cn.kept[j]
			if kn.num, err = next(); err != nil {
				return nil, nil, err
			}
			if kn.num == 0 || kn.num >= cn.next || j > 0 && kn.num <= cn.kept[j-1].num {
				return nil, nil, bad("notification %d of client %d out of order", kn.num, cn.client)
			}
			if kn.payload, err = bytes(); err != nil {
				return nil, nil, err
			}
		}
	}
	if len(cs.replies) == 0 {
		cs.replies = nil
	}
	if len(cs.notes) == 0 {
		cs.notes = nil
	}
	return cs, b, nil
}

// chunkCount is the number of chunks of a state of length bytes.
func chunkCount(length, size uint64) uint64 {
	return (length + size - 1) / size
}

// chunkOf returns chunk i of state.
func chunkOf(state []byte, size, i uint64) []byte {
	lo := i * size
	hi := min(lo+size, uint64(len(state)))
	return state[lo:hi:hi]
}

// chunkDigests returns the SHA-256 of every chunk of state.
func chunkDigests(state []byte, size uint64) []Digest {
	ds := make([]Digest, chunkCount(uint64(len(state)), size))
	for i := range ds {
		ds[i] = sha256.Sum256(chunkOf(state, size, uint64(i)))
	}
	return ds
}

// manifestDigest is the checkpoint digest of a state: SHA-256 over a
// domain tag, the chunk size, the length and the chunk digests.
func manifestDigest(size, length uint64, chunks []Digest) Digest {
	h := sha256.New()
	h.Write([]byte("rubin-bft state manifest\x00"))
	var b [2 * binary.MaxVarintLen64]byte
	n := binary.PutUvarint(b[:], size)
	n += binary.PutUvarint(b[n:], length)
	h.Write(b[:n])
	for i := range chunks {
		h.Write(chunks[i][:])
	}
	var d Digest
	h.Sum(d[:0])
	return d
}

// checkManifest checks a State's manifest for a state of at most max
// bytes against the certified digest d.
func checkManifest(m *State, d Digest, max int) error {
	switch {
	case m.ChunkSize == 0 || m.ChunkSize > maxChunkBytes:
		return fmt.Errorf("%w: state at %d: chunk size %d", ErrInvalid, m.Seq, m.ChunkSize)
	case uint64(len(m.Chunks)) != chunkCount(m.Length, m.ChunkSize):
		return fmt.Errorf("%w: state at %d: %d chunk digests for %d bytes", ErrInvalid, m.Seq, len(m.Chunks), m.Length)
	case manifestDigest(m.ChunkSize, m.Length, m.Chunks) != d:
		return fmt.Errorf("%w: state at %d: manifest does not match its certified digest", ErrForged, m.Seq)
	case m.Length > uint64(max):
		return fmt.Errorf("%w: state at %d is %d bytes, above MaxStateBytes %d", ErrTooLarge, m.Seq, m.Length, max)
	}
	return nil
}
