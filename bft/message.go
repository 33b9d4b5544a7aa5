package bft

import (
	"crypto/sha256"
	"encoding/binary"
)

// ReplicaID names a replica: 0 to n-1, its index in the cluster
// configuration. The primary of view v is replica v mod n.
type ReplicaID uint32

// ClientID names a client. Client identities come from the cluster
// configuration, like replicas'.
type ClientID uint64

// Digest is a SHA-256 hash: of a batch of requests, or of the application
// state at a checkpoint.
type Digest [sha256.Size]byte

// Message is one protocol message. The concrete types are the pointer
// types below; the set is closed.
type Message interface {
	// Type names the message kind; codecs write it first.
	Type() MessageType
}

// MessageType is the kind of a Message, as the codec writes it.
type MessageType uint8

// The message types. The values are part of the wire format.
const (
	TypeRequest MessageType = iota + 1
	TypeReply
	TypePrePrepare
	TypePrepare
	TypeCommit
	TypeCheckpoint
	TypeViewChange
	TypeNewView
	TypeFetchState
	TypeState
	TypeFetchBatch
	TypeBatch
	// 11 and 12 are taken; the values below are fixed.
	TypeFetchChunk MessageType = 13
	TypeChunk      MessageType = 14
	TypeNotify     MessageType = 15
	TypeFetchNotes MessageType = 16
)

// Request is a client's operation. Auth is the client's authenticator:
// one MAC per replica, computed with the key the client shares with that
// replica (see Authenticator.VerifyRequest), so a primary cannot forge a
// request it forwards in a pre-prepare. Timestamp orders a client's
// requests: a replica executes a client's request at most once, and only
// if its timestamp is greater than the last one executed.
//
// A ReadOnly request is not ordered: the client sends it to every replica,
// which answers it from its state through the App's Querier (see
// Querier and Client.ProposeRead); its Timestamp and Nonce only name it in
// the replies, and no pre-prepare may hold it. Consecutive reads share a
// timestamp (a read answered without ordering leaves it unused), so the
// client numbers its reads in Nonce, a later one higher, and counts an
// answer only for the read whose nonce it names: an answer computed for
// an earlier read may predate a write that completed before the later
// one was issued. Nonce is 0 in an ordered request. The authenticator
// covers ReadOnly and Nonce, so nobody can turn a client's read into an
// ordered request or back, or one read into another.
//
// A client's ordered requests execute in timestamp order, each at most
// once: a request executes only right after the client's request
// Timestamp-1, unless it is flagged Restart, the first request of a
// client that starts afresh, which may follow any lower timestamp (see
// window.go).
type Request struct {
	Client    ClientID
	Timestamp uint64
	ReadOnly  bool
	Restart   bool
	Nonce     uint64
	Op        []byte
	Auth      []byte
}

// requestFlags encodes a request's flags as the codec, its authenticator
// and BatchDigest take them: bit 0 is ReadOnly, bit 1 Restart.
func requestFlags(r *Request) uint64 {
	var f uint64
	if r.ReadOnly {
		f |= 1
	}
	if r.Restart {
		f |= 2
	}
	return f
}

// RequestFlags returns the flag bits of r, for codecs and authenticators:
// bit 0 is ReadOnly, bit 1 Restart; the others are 0.
func RequestFlags(r *Request) uint64 { return requestFlags(r) }

// SetRequestFlags sets r's flags from their bits, as RequestFlags gives
// them, and reports false if a bit it does not know is set.
func SetRequestFlags(r *Request, f uint64) bool {
	r.ReadOnly, r.Restart = f&1 != 0, f&2 != 0
	return f&^3 == 0
}

// Reply is a replica's answer to a request. The client accepts a result
// once f+1 replicas sent matching replies (same timestamp and result), or
// for a ReadOnly request 2f+1; ReadOnly marks the answers to those, so
// they never count for an ordered request of the same timestamp, and
// Nonce is the nonce of the read answered (0 for an ordered request), so
// they count only for that read. Notes is
// the number of the last notification the client had been sent (see
// Notify) when the request executed, or when the read was answered: part
// of the result, so the client learns which notifications precede it.
type Reply struct {
	View      uint64
	Timestamp uint64
	Client    ClientID
	Replica   ReplicaID
	ReadOnly  bool
	Nonce     uint64
	Notes     uint64
	Result    []byte
}

// Notify is a notification for a client that the application emitted
// while it executed a request (ExecContext.Notify), or that a replica
// sends again on FetchNotes. Every correct replica numbers a client's
// notifications alike, from 1, in execution order; the client delivers
// notification Number once f+1 replicas sent it with the same Payload.
// Oldest is the lowest number the sender still keeps for the client (a
// replica keeps the last few, see Config.NoteRetain): the ones below it
// are gone from the sender's state.
type Notify struct {
	Client  ClientID
	Number  uint64
	Oldest  uint64
	Replica ReplicaID
	Payload []byte
}

// FetchNotes asks a replica for the notifications of Client it keeps from
// number From on: sent by a client that missed some. A replica takes it
// only from the link of Client itself.
type FetchNotes struct {
	Client ClientID
	From   uint64
}

// PrePrepare is the primary's proposal to bind a batch of requests, and
// the time they execute at, to a sequence number in a view. Time is the
// proposed agreed time in nanoseconds since the Unix epoch (see
// ExecContext.Time): the primary's clock, never below the time of the
// slot before; 0 in the pre-prepares of a new view, whose batches bring
// their times (Digest binds them). Digest is BatchDigest(Time, Batch),
// so prepares and commits agree on the time as well as the batch. It
// carries no signature: it is never forwarded as proof, and the link's
// MAC authenticates its sender (see ViewChange for what a view change
// reports instead).
type PrePrepare struct {
	View   uint64
	Seq    uint64
	Time   uint64
	Digest Digest
	Batch  []Request
}

// Prepare is a backup's agreement with a pre-prepare. Like a commit it
// is never forwarded, so the link's MAC authenticates it.
type Prepare struct {
	View    uint64
	Seq     uint64
	Digest  Digest
	Replica ReplicaID
}

// Commit says a replica has prepared the batch. It is not forwarded, so
// the link's MAC authenticates it and it carries no signature.
type Commit struct {
	View    uint64
	Seq     uint64
	Digest  Digest
	Replica ReplicaID
}

// Checkpoint announces the digest of a replica's application state after
// executing every batch up to Seq. 2f+1 matching signed checkpoints make
// a stable checkpoint, whose certificate is forwarded in view changes and
// state transfers.
type Checkpoint struct {
	Seq     uint64
	State   Digest
	Replica ReplicaID
	Sig     []byte
}

// Claim is one line of a view change's report on a sequence number: the
// batch with digest Digest at sequence number Seq, in view View.
type Claim struct {
	View   uint64
	Seq    uint64
	Digest Digest
}

// ViewChange is a replica's vote to move to view View. It carries the
// proof of the highest stable checkpoint it knows and, signed by the
// replica, what the replica itself did at every sequence number above
// it (within the watermark window), so the new primary can re-propose
// what may have committed:
//
//   - Prepared (P): for each sequence number at which this replica
//     prepared a batch (sent a commit), the one of the highest view, at
//     most one claim a sequence number, in increasing sequence order;
//   - PrePrepared (Q): for each sequence number, the pre-prepares it
//     accepted (as primary: sent), one claim per digest with the highest
//     view it accepted that digest in, at most MaxPrePrepared a sequence
//     number (those of the highest views, never the digest of its P
//     claim), in increasing sequence order and, within one, decreasing
//     view order (then increasing digest order).
//
// These are claims, not certificates: a Byzantine replica can claim
// anything, and the new-view rule (see docs/bft.md) needs 2f+1 view
// changes to agree before it drops a claim and f+1 to support one
// before it re-proposes it.
type ViewChange struct {
	View        uint64
	StableSeq   uint64
	Stable      []Checkpoint
	Prepared    []Claim
	PrePrepared []Claim
	Replica     ReplicaID
	Sig         []byte
}

// MaxPrePrepared bounds a view change's Q claims per sequence number.
// Dropping claims is always safe; what it can cost liveness, and when,
// is in docs/bft.md ("Why a correct primary decides every slot").
const MaxPrePrepared = 4

// NewView is the new primary's announcement of view View: the view
// changes it is based on (at least 2f+1, at most n), and the pre-prepares
// for the new view that every replica can recompute from them and check. The pre-prepares carry
// digests, not batches: a replica that lacks a batch fetches it from the
// replicas that vouched for it (see FetchBatch).
type NewView struct {
	View        uint64
	ViewChanges []ViewChange
	PrePrepares []PrePrepare
	Replica     ReplicaID
	Sig         []byte
}

// FetchState asks a replica for its latest stable checkpoint: sent by a
// replica whose log is behind a stable checkpoint it learned of.
type FetchState struct {
	Seq     uint64 // the requester's last executed sequence number
	Replica ReplicaID
}

// State answers FetchState with the manifest of a stable checkpoint: the
// certificate of 2f+1 signed checkpoints for Seq, and the state's length
// and the SHA-256 digest of each of its ChunkSize-byte chunks (the last
// may be shorter). The manifest's digest (see StateDigest) must equal the
// certified state digest; the chunks themselves come one at a time, each
// checked against its digest, in Chunk answers to FetchChunk.
type State struct {
	Seq       uint64
	Stable    []Checkpoint
	ChunkSize uint64
	Length    uint64
	Chunks    []Digest
	Replica   ReplicaID
}

// FetchChunk asks a replica for chunk Index of its checkpointed state at
// Seq, whose manifest the requester learned from a State.
type FetchChunk struct {
	Seq     uint64
	Index   uint64
	Replica ReplicaID
}

// Chunk answers FetchChunk: bytes [Index*ChunkSize, (Index+1)*ChunkSize)
// of the state at Seq (fewer for the last chunk).
type Chunk struct {
	Seq     uint64
	Index   uint64
	Data    []byte
	Replica ReplicaID
}

// FetchBatch asks a replica for the batch with digest Digest at sequence
// number Seq: sent by a replica that entered a new view whose pre-prepare
// for Seq names a batch it does not hold, to a replica that vouched for
// that batch (its view change claimed to have prepared or accepted it).
type FetchBatch struct {
	Seq     uint64
	Digest  Digest
	Replica ReplicaID
}

// Batch answers FetchBatch with the time and requests whose BatchDigest
// is Digest. The receiver checks the digest, so the answer needs no
// signature.
type Batch struct {
	Seq      uint64
	Time     uint64
	Digest   Digest
	Requests []Request
	Replica  ReplicaID
}

func (*Request) Type() MessageType    { return TypeRequest }
func (*Reply) Type() MessageType      { return TypeReply }
func (*PrePrepare) Type() MessageType { return TypePrePrepare }
func (*Prepare) Type() MessageType    { return TypePrepare }
func (*Commit) Type() MessageType     { return TypeCommit }
func (*Checkpoint) Type() MessageType { return TypeCheckpoint }
func (*ViewChange) Type() MessageType { return TypeViewChange }
func (*NewView) Type() MessageType    { return TypeNewView }
func (*FetchState) Type() MessageType { return TypeFetchState }
func (*State) Type() MessageType      { return TypeState }
func (*FetchChunk) Type() MessageType { return TypeFetchChunk }
func (*Chunk) Type() MessageType      { return TypeChunk }
func (*FetchBatch) Type() MessageType { return TypeFetchBatch }
func (*Batch) Type() MessageType      { return TypeBatch }
func (*Notify) Type() MessageType     { return TypeNotify }
func (*FetchNotes) Type() MessageType { return TypeFetchNotes }

// BatchDigest is the digest a pre-prepare binds: SHA-256 over the
// proposed time and each request's client, timestamp, flags, nonce (if
// ReadOnly, as the codec writes it; a valid batch holds no read) and
// operation, uvarints and length-prefixed. The authenticators are not part of it:
// each replica checks its own entry, and a request is the same request
// whatever MACs it carries. The null batch of a new view is
// BatchDigest(0, nil).
func BatchDigest(time uint64, batch []Request) Digest {
	h := sha256.New()
	var b [5 * binary.MaxVarintLen64]byte
	h.Write(b[:binary.PutUvarint(b[:], time)])
	for i := range batch {
		r := &batch[i]
		n := binary.PutUvarint(b[:], uint64(r.Client))
		n += binary.PutUvarint(b[n:], r.Timestamp)
		n += binary.PutUvarint(b[n:], requestFlags(r))
		if r.ReadOnly {
			n += binary.PutUvarint(b[n:], r.Nonce)
		}
		n += binary.PutUvarint(b[n:], uint64(len(r.Op)))
		h.Write(b[:n])
		h.Write(r.Op)
	}
	var d Digest
	h.Sum(d[:0])
	return d
}

// nullDigest is the digest of the null batch a new view puts in the slots
// where nothing can have committed.
var nullDigest = BatchDigest(0, nil)
