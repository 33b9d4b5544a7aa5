package bft

// App is the replicated application. Every method is deterministic: the
// same calls in the same order give the same results and the same state on
// every correct replica.
type App interface {
	// Execute runs one operation and returns its result. Execute may keep
	// op only for the duration of the call.
	Execute(op []byte) (result []byte)
	// Snapshot returns the encoded application state; two replicas in the
	// same state return the same bytes.
	Snapshot() []byte
	// Restore replaces the state with a snapshot taken by Snapshot.
	Restore(snapshot []byte) error
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
