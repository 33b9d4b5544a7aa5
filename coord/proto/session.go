package proto

// This file holds the records of a connection rather than of one
// operation: the handshake, the headers, authentication, watch events and
// the re-registration of watches.

// ConnectRequest is the first frame a client sends, without a request
// header: it asks for a new session (SessionID 0) or to resume one.
type ConnectRequest struct {
	ProtocolVersion int32
	LastZxidSeen    int64 // the last zxid the client saw, 0 for a new session
	TimeOut         int32 // the session timeout the client asks for, in milliseconds
	SessionID       int64 // the session to resume, or 0
	Passwd          []byte
	// ReadOnly says the client accepts a read-only server.
	ReadOnly bool
	// OmitReadOnly says the record ends before ReadOnly, as clients older
	// than ZooKeeper 3.4 and some third-party clients (go-zookeeper/zk)
	// send it; a server answers such a client with a ConnectResponse that
	// omits it too.
	OmitReadOnly bool
}

// Encode implements Record.
func (r *ConnectRequest) Encode(e *Encoder) {
	e.Int32(r.ProtocolVersion)
	e.Int64(r.LastZxidSeen)
	e.Int32(r.TimeOut)
	e.Int64(r.SessionID)
	e.Buffer(r.Passwd)
	if !r.OmitReadOnly {
		e.Bool(r.ReadOnly)
	}
}

// Decode implements Record; the trailing ReadOnly is read if present.
func (r *ConnectRequest) Decode(d *Decoder) {
	r.ProtocolVersion = d.Int32()
	r.LastZxidSeen = d.Int64()
	r.TimeOut = d.Int32()
	r.SessionID = d.Int64()
	r.Passwd = d.Buffer()
	r.OmitReadOnly = d.Err() == nil && d.Len() == 0
	r.ReadOnly = !r.OmitReadOnly && d.Bool()
}

// ConnectResponse is the server's answer to a ConnectRequest, without a
// reply header. A SessionID of 0 tells the client its session expired.
type ConnectResponse struct {
	ProtocolVersion int32
	TimeOut         int32 // the negotiated session timeout, in milliseconds
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool // the server is read-only
	// OmitReadOnly says the record ends before ReadOnly: the answer to a
	// ConnectRequest that omitted it.
	OmitReadOnly bool
}

// Encode implements Record.
func (r *ConnectResponse) Encode(e *Encoder) {
	e.Int32(r.ProtocolVersion)
	e.Int32(r.TimeOut)
	e.Int64(r.SessionID)
	e.Buffer(r.Passwd)
	if !r.OmitReadOnly {
		e.Bool(r.ReadOnly)
	}
}

// Decode implements Record; the trailing ReadOnly is read if present.
func (r *ConnectResponse) Decode(d *Decoder) {
	r.ProtocolVersion = d.Int32()
	r.TimeOut = d.Int32()
	r.SessionID = d.Int64()
	r.Passwd = d.Buffer()
	r.OmitReadOnly = d.Err() == nil && d.Len() == 0
	r.ReadOnly = !r.OmitReadOnly && d.Bool()
}

// RequestHeader starts every frame a client sends after the handshake.
type RequestHeader struct {
	Xid  int32 // the client's number for the request, or a reserved xid (XidPing, XidAuth, XidSetWatches)
	Type OpCode
}

// requestHeaderSize and replyHeaderSize are the headers' encoded lengths.
const (
	requestHeaderSize = 4 + 4
	replyHeaderSize   = 4 + 8 + 4
	multiHeaderSize   = 4 + 1 + 4
)

// Encode implements Record.
func (r *RequestHeader) Encode(e *Encoder) {
	e.Int32(r.Xid)
	e.Int32(int32(r.Type))
}

// Decode implements Record.
func (r *RequestHeader) Decode(d *Decoder) {
	r.Xid = d.Int32()
	r.Type = OpCode(d.Int32())
}

// ReplyHeader starts every frame a server sends after the handshake. A
// reply whose Err is not CodeOK carries no body.
type ReplyHeader struct {
	Xid  int32 // the request's xid, or a reserved xid (XidWatchEvent, XidPing, XidAuth, XidSetWatches)
	Zxid int64 // the last zxid the server has seen; -1 on a watch event
	Err  Code
}

// Encode implements Record.
func (r *ReplyHeader) Encode(e *Encoder) {
	e.Int32(r.Xid)
	e.Int64(r.Zxid)
	e.Int32(int32(r.Err))
}

// Decode implements Record.
func (r *ReplyHeader) Decode(d *Decoder) {
	r.Xid = d.Int32()
	r.Zxid = d.Int64()
	r.Err = Code(d.Int32())
}

// AuthPacket is the body of an OpAuth request (xid XidAuth): credentials
// in a scheme, such as "digest" with "user:password". The server answers
// with a bare reply header, CodeAuthFailed if it rejects them.
type AuthPacket struct {
	Type   int32 // unused; clients send 0
	Scheme string
	Auth   []byte
}

// Encode implements Record.
func (r *AuthPacket) Encode(e *Encoder) {
	e.Int32(r.Type)
	e.String(r.Scheme)
	e.Buffer(r.Auth)
}

// Decode implements Record.
func (r *AuthPacket) Decode(d *Decoder) {
	r.Type = d.Int32()
	r.Scheme = d.String()
	r.Auth = d.Buffer()
}

// WatcherEvent is the body of a watch notification, which a server sends
// unasked under a ReplyHeader with xid XidWatchEvent and zxid -1
// (AppendEvent writes both).
type WatcherEvent struct {
	Type  EventType
	State State
	Path  string
}

// Encode implements Record.
func (r *WatcherEvent) Encode(e *Encoder) {
	e.Int32(int32(r.Type))
	e.Int32(int32(r.State))
	e.String(r.Path)
}

// Decode implements Record.
func (r *WatcherEvent) Decode(d *Decoder) {
	r.Type = EventType(d.Int32())
	r.State = State(d.Int32())
	r.Path = d.String()
}

// SetWatches is the body of an OpSetWatches request (xid XidSetWatches),
// which a client sends on reconnecting to register again the one-shot
// watches it holds. The server fires at once every watch whose node
// changed after RelativeZxid. The answer has no body.
type SetWatches struct {
	RelativeZxid int64
	DataWatches  []string
	ExistWatches []string
	ChildWatches []string
}

// Encode implements Record.
func (r *SetWatches) Encode(e *Encoder) {
	e.Int64(r.RelativeZxid)
	e.Strings(r.DataWatches)
	e.Strings(r.ExistWatches)
	e.Strings(r.ChildWatches)
}

// Decode implements Record.
func (r *SetWatches) Decode(d *Decoder) {
	r.RelativeZxid = d.Int64()
	r.DataWatches = d.Strings()
	r.ExistWatches = d.Strings()
	r.ChildWatches = d.Strings()
}

// SetWatches2 is SetWatches (OpSetWatches2) with the persistent watches
// of addWatch as well.
type SetWatches2 struct {
	RelativeZxid               int64
	DataWatches                []string
	ExistWatches               []string
	ChildWatches               []string
	PersistentWatches          []string
	PersistentRecursiveWatches []string
}

// Encode implements Record.
func (r *SetWatches2) Encode(e *Encoder) {
	e.Int64(r.RelativeZxid)
	e.Strings(r.DataWatches)
	e.Strings(r.ExistWatches)
	e.Strings(r.ChildWatches)
	e.Strings(r.PersistentWatches)
	e.Strings(r.PersistentRecursiveWatches)
}

// Decode implements Record.
func (r *SetWatches2) Decode(d *Decoder) {
	r.RelativeZxid = d.Int64()
	r.DataWatches = d.Strings()
	r.ExistWatches = d.Strings()
	r.ChildWatches = d.Strings()
	r.PersistentWatches = d.Strings()
	r.PersistentRecursiveWatches = d.Strings()
}

// Empty is a body with no fields: the requests of OpPing, OpCloseSession
// and OpWhoAmI, and the answers to OpDelete, OpSetWatches, OpSetWatches2,
// OpCheckWatches, OpRemoveWatches, OpAuth, OpCloseSession and OpPing.
type Empty struct{}

// Encode implements Record.
func (*Empty) Encode(*Encoder) {}

// Decode implements Record.
func (*Empty) Decode(*Decoder) {}
