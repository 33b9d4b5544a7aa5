package bft

import "time"

// App is the replicated application. Every method is deterministic: the
// same calls in the same order give the same results and the same state on
// every correct replica.
type App interface {
	// Execute runs one operation of ctx.Client and returns its result.
	// Everything in ctx is the same on every correct replica, and the
	// same again when a replica replays its log after a restart, so the
	// application may base its state on it (the time especially: it must
	// never read a clock of its own). Execute may keep op only for the
	// duration of the call.
	Execute(ctx ExecContext, op []byte) (result []byte)
	// Snapshot returns the encoded application state; two replicas in the
	// same state return the same bytes.
	Snapshot() []byte
	// Restore replaces the state with a snapshot taken by Snapshot.
	Restore(snapshot []byte) error
}

// Querier is an App that answers read-only requests (Request.ReadOnly)
// from its current state, without their being ordered: PBFT's read-only
// optimization, one round trip instead of three phases.
//
// Query must not change the state, and must be deterministic like
// Execute: two replicas in the same state give the same result, since
// the client accepts a result only from 2f+1 replicas that gave it
// identically (see Client.ProposeRead). A replica answers only once it
// executed every batch it prepared, or saw prepared, and is behind no
// stable checkpoint it knows of; that makes the reads linearizable: an
// ordered request whose result a client accepted was executed by a
// correct replica, so committed, so prepared by 2f+1 replicas, f+1 of
// them correct; any 2f+1 replicas include one of those, which answers a
// read that reaches it later only once it executed that request, and the
// 2f+1 results agree. That takes answers computed for this very read (a
// reply names it by Request.Nonce): one computed for an earlier read may
// come from before the request executed. A read concurrent with writes,
// or answered by a replica that lags, may not find 2f+1 equal results;
// the client then orders it like any request.
type Querier interface {
	// Query answers op for ctx.Client. It may keep op only for the
	// duration of the call.
	Query(ctx QueryContext, op []byte) (result []byte)
}

// Validator is an App that refuses some requests before they are
// ordered, by a check that depends on the request alone, that every
// correct replica answers alike, and that costs too much to repeat at
// every replica when the request executes: a signature inside the op,
// say. A replica asks Valid of every ordered request that arrives at it
// (from a client or forwarded; a request refused is dropped, so a correct
// primary proposes only requests it found valid) and, as a backup, of
// every request of each pre-prepare before it accepts it (a pre-prepare
// holding a request refused is rejected, as one holding a forged
// authenticator is). A batch is prepared only by 2f+1 replicas, f+1 of
// them correct, each of which accepted its pre-prepare, so the App may
// skip the check at execution: what executes passed Valid at a correct
// replica. (A new view re-proposes a batch only if f+1 replicas claim to
// have accepted it, one of them correct, which asked then.)
//
// For a request in a pre-prepare, Valid may answer true without checking
// when the check is known to have been made by a correct party: see
// ValidContext.
type Validator interface {
	// Valid reports whether op of ctx.Client may be ordered. It must not
	// change the state, and may keep op only for the duration of the
	// call.
	Valid(ctx ValidContext, op []byte) bool
}

// ValidContext is what a replica tells Validator.Valid about a request.
type ValidContext struct {
	// Client is the client whose authenticator the request carries,
	// checked before Valid is asked.
	Client ClientID
	// Proposed: the request is in a pre-prepare that Proposer, the
	// primary of its view, sent. Proposer, if correct, asked Valid of the
	// request when it arrived there, unproposed; so an App that knows the
	// client checked the op itself (a client that is one of the
	// replicas' own processes, say) knows two parties checked it, one
	// correct if f = 1 and the two differ. Otherwise the request arrived
	// at this replica on its own and must be checked.
	Proposed bool
	Proposer ReplicaID
}

// QueryContext is what a replica tells Query about a read-only request.
type QueryContext struct {
	// Client is the client whose authenticator the request carries.
	Client ClientID
	// Time is the agreed time of the last batch the replica executed
	// (zero before the first): replicas in the same state agree on it.
	Time time.Time
}

// ExecContext is what the replicas agreed on about one request, besides
// its operation.
type ExecContext struct {
	// Client is the client whose authenticator the request carries.
	Client ClientID
	// Seq is the sequence number of the batch holding the request, and
	// Index the request's position in it (from 0). (Seq, Index) orders
	// every executed request of the cluster.
	Seq   uint64
	Index int
	// Time is the agreed time of the batch, in UTC: the time its primary
	// proposed, which at least 2f+1 replicas (f+1 of them correct) found
	// within Config.MaxClockSkew of their own clocks when they accepted
	// it. It never decreases from one batch to the next (a batch proposed
	// with an earlier time executes at its predecessor's), and is the
	// same for every request of a batch.
	Time time.Time

	r *Replica // for Notify, only while Execute runs
}

// Authenticator signs and checks the signatures carried by forwardable
// messages (PrePrepare, Prepare, Checkpoint, ViewChange, NewView), and
// checks client requests' authenticators. It is the core's only view of
// keys; package bft/auth implements it.
//
// Messages between two replicas travel on a link that authenticates every
// frame with the pair's MAC key, so the core trusts the sender a driver
// passes to Step. Signatures are for messages that one replica forwards
// as proof of what another said.
type Authenticator interface {
	// Sign returns this replica's signature over m's signed content
	// (everything but its Sig field).
	Sign(m Message) []byte
	// Verify reports whether sig is replica id's signature over m's
	// signed content.
	Verify(id ReplicaID, m Message, sig []byte) bool
	// VerifyRequest reports whether r's authenticator holds a valid MAC
	// for this replica from r.Client.
	VerifyRequest(r *Request) bool
}

// Target is where a message goes: a replica or a client.
type Target struct {
	Client bool   // the ID is a ClientID, not a ReplicaID
	ID     uint64 // a ReplicaID or a ClientID
}

// ToReplica targets replica id.
func ToReplica(id ReplicaID) Target { return Target{ID: uint64(id)} }

// ToClient targets client id.
func ToClient(id ClientID) Target { return Target{Client: true, ID: uint64(id)} }

// Envelope is a message to send.
type Envelope struct {
	To  Target
	Msg Message
}
