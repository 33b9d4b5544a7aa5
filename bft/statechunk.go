package bft

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// A checkpointed state is one byte string, the state bytes: the agreed
// time (a uvarint), the reply cache, then the application snapshot. The
// reply cache is a uvarint count and, for each client in increasing order, its ID, the timestamp
// and the result (a uvarint length and the bytes) of its last executed
// request; the snapshot is the rest. A reply's View and Replica differ
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

// encodeState returns the state bytes of an agreed time, a reply cache
// (sorted by client) and an application snapshot.
func encodeState(time uint64, replies []Reply, snap []byte) []byte {
	n := 2*binary.MaxVarintLen64 + len(snap)
	for i := range replies {
		n += 3*binary.MaxVarintLen64 + len(replies[i].Result)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, time)
	b = binary.AppendUvarint(b, uint64(len(replies)))
	for i := range replies {
		rp := &replies[i]
		b = binary.AppendUvarint(b, uint64(rp.Client))
		b = binary.AppendUvarint(b, rp.Timestamp)
		b = binary.AppendUvarint(b, uint64(len(rp.Result)))
		b = append(b, rp.Result...)
	}
	return append(b, snap...)
}

// decodeState splits state bytes into the agreed time, the reply cache and
// the snapshot, which alias b. The replies carry no View and no Replica.
func decodeState(b []byte) (uint64, []Reply, []byte, error) {
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 || n > 1 && b[n-1] == 0 {
			// Truncated, or padded: every state has one encoding.
			return 0, fmt.Errorf("%w: state: bad varint in the reply cache", ErrInvalid)
		}
		b = b[n:]
		return v, nil
	}
	time, err := next()
	if err != nil {
		return 0, nil, nil, err
	}
	count, err := next()
	if err != nil {
		return 0, nil, nil, err
	}
	if count > uint64(len(b)/3) { // a reply takes at least 3 bytes
		return 0, nil, nil, fmt.Errorf("%w: state: %d replies in %d bytes", ErrInvalid, count, len(b))
	}
	replies := make([]Reply, count)
	for i := range replies {
		rp := &replies[i]
		var c, l uint64
		if c, err = next(); err != nil {
			return 0, nil, nil, err
		}
		if rp.Timestamp, err = next(); err != nil {
			return 0, nil, nil, err
		}
		if l, err = next(); err != nil {
			return 0, nil, nil, err
		}
		if l > uint64(len(b)) {
			return 0, nil, nil, fmt.Errorf("%w: state: reply of %d bytes, %d left", ErrInvalid, l, len(b))
		}
		rp.Client = ClientID(c)
		if i > 0 && rp.Client <= replies[i-1].Client {
			return 0, nil, nil, fmt.Errorf("%w: state: replies not sorted by client", ErrInvalid)
		}
		if l > 0 {
			rp.Result = b[:l:l]
		}
		b = b[l:]
	}
	return time, replies, b, nil
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
