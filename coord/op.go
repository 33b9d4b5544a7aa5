package coord

import (
	"errors"
	"fmt"

	"github.com/rubin-go/rubin/coord/proto"
	"github.com/rubin-go/rubin/coord/tree"
)

// An op's kind: what a gateway asks for a session.
const (
	kindConnect int32 = 1 // open a session or resume one
	kindRequest int32 = 2 // one ZooKeeper request of a session
	kindPoll    int32 = 3 // renew sessions and collect their events
	kindClaim   int32 = 4 // claim a gateway ID and client identities
	kindStats   int32 = 5 // read the tree's counts
)

// Status says what a gateway does with a session's connection after it
// wrote the frames of a result.
type Status int32

const (
	// StatusOK: keep serving the session.
	StatusOK Status = 0
	// StatusClose: write the frames, then close the connection. The
	// session closed (closeSession), the client failed to authenticate,
	// the session moved to another gateway, or events were lost because
	// the client did not collect them (the client reconnects and sets its
	// watches again). To a ConnectOp: no session could be opened, the
	// session table being full (tree.Config.MaxSessions); the gateway
	// closes the connection unanswered, as ZooKeeper closes one it cannot
	// take, and the client tries again.
	StatusClose Status = 1
	// StatusExpired: the session is gone (expired, closed, or never was,
	// or the password is wrong); close the connection. A connect that
	// gets it answers the client with session id 0, which tells it so.
	StatusExpired Status = 2
	// StatusMalformed: the request did not decode; close the connection,
	// as a ZooKeeper server closes one that sends garbage.
	StatusMalformed Status = 3
	// StatusOrder: the answer to a read-only request (App.Query) that
	// cannot be answered without ordering: send the same op again with
	// Invoke. Nothing was written to the client.
	StatusOrder Status = 4
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusClose:
		return "close"
	case StatusExpired:
		return "expired"
	case StatusMalformed:
		return "malformed"
	case StatusOrder:
		return "order"
	case StatusHeld:
		return "held"
	}
	return fmt.Sprintf("status(%d)", int32(s))
}

// MaxOpSize bounds every op and every result: the bft wire format's bound
// on a request's op and a reply's result (wire.DefaultLimits().MaxOp),
// which the driver decodes with. The replicas' bft.Config.MaxOpSize must
// be at least this, and MaxBatchBytes too. It is a little below what a
// ZooKeeper client may send (proto.MaxPacket): see MaxRequestFrame and
// MaxDataSize.
const MaxOpSize = 1 << 20

// requestOverhead is what RequestOp adds to a frame, and resultOverhead
// what a request's result adds to its frames.
const (
	requestOverhead = 24
	resultOverhead  = 8
)

// MaxRequestFrame is the longest request frame a RequestOp can carry; a
// gateway answers a longer one itself, with CodeMarshallingError.
const MaxRequestFrame = MaxOpSize - requestOverhead

// ErrResult is wrapped by the errors of the Parse functions: the bytes are
// not a result of the kind asked for.
var ErrResult = errors.New("coord: malformed result")

// ConnectOp is the op that opens a session (session 0) with the password
// passwd the gateway chose for it, or resumes session with the password
// its client gave, asking for a timeout in milliseconds. gateway names
// the gateway; a session belongs to the gateway that last connected it.
// The op carries tree.HashPassword of passwd, never passwd: a replica
// that keeps it cannot resume the session through a gateway.
func ConnectOp(gateway, session int64, passwd []byte, timeout int32) []byte {
	e := proto.NewEncoder(make([]byte, 0, 32+tree.PasswordHashSize))
	e.Int32(kindConnect)
	e.Int64(gateway)
	e.Int64(session)
	e.Int32(timeout)
	e.Buffer(tree.HashPassword(passwd))
	return e.Bytes()
}

// SealAuth replaces what an auth packet carries by what the replicas
// check, before the gateway puts it in a RequestOp: for scheme "digest",
// the identity tree.Digest makes of the client's "user:password", so
// that no replica learns the password; for "ip", host, the address the
// gateway vouches for as the client's, as ZooKeeper's ip provider takes
// the connection's whatever the client sends; for any other scheme,
// which the replicas refuse, nothing.
func SealAuth(a *proto.AuthPacket, host string) {
	switch a.Scheme {
	case "digest":
		a.Auth = []byte(tree.Digest(string(a.Auth)))
	case "ip":
		a.Auth = []byte(host)
	default:
		a.Auth = nil
	}
}

// RequestOp is the op that runs one ZooKeeper request of session: frame
// is the request as its client sent it, the header and body without the
// length prefix, but for an auth packet, which SealAuth has changed. conn
// is the connection's number (ConnectResult.Conn): a request of an
// earlier connection of the session is refused (ZooKeeper's session
// moved), so that one the client gave up on when its connection broke
// can never be ordered after those of its next connection, whatever order
// a lying primary proposes.
func RequestOp(gateway, session int64, conn int32, frame []byte) []byte {
	e := proto.NewEncoder(make([]byte, 0, 28+len(frame)))
	e.Int32(kindRequest)
	e.Int64(gateway)
	e.Int64(session)
	e.Int32(conn)
	e.Buffer(frame)
	return e.Bytes()
}

// PollOp is the op that renews sessions, as their clients' pings would,
// and collects the watch events waiting for them.
func PollOp(gateway int64, sessions []int64) []byte {
	e := proto.NewEncoder(make([]byte, 0, 20+8*len(sessions)))
	e.Int32(kindPoll)
	e.Int64(gateway)
	e.Int32(int32(len(sessions)))
	for _, s := range sessions {
		e.Int64(s)
	}
	return e.Bytes()
}

// op is a decoded op.
type op struct {
	kind     int32
	gateway  int64
	session  int64
	timeout  int32
	conn     int32  // kindRequest: the connection's number
	passwd   []byte // kindConnect: tree.HashPassword of the password
	frame    []byte
	sessions []int64
	holder   int64       // kindClaim
	ranges   [][2]uint32 // kindClaim
}

// maxPollSessions bounds the sessions of one poll op.
const maxPollSessions = 1 << 16

func decodeOp(b []byte) (op, error) {
	d := proto.NewDecoder(b)
	o := op{kind: d.Int32(), gateway: d.Int64()}
	switch o.kind {
	case kindConnect:
		o.session = d.Int64()
		o.timeout = d.Int32()
		o.passwd = d.Buffer()
	case kindRequest:
		o.session = d.Int64()
		o.conn = d.Int32()
		o.frame = d.Buffer()
	case kindPoll:
		n := d.Int32()
		if n < 0 || n > maxPollSessions || int(n)*8 > d.Len() {
			d.Fail(fmt.Errorf("poll of %d sessions", n))
			break
		}
		o.sessions = make([]int64, n)
		for i := range o.sessions {
			o.sessions[i] = d.Int64()
		}
	case kindClaim:
		o.holder = d.Int64()
		o.ranges = decodeRanges(d)
	case kindStats:
	default:
		d.Fail(fmt.Errorf("unknown kind %d", o.kind))
	}
	if d.Err() == nil && d.Len() != 0 {
		d.Fail(fmt.Errorf("%d bytes after the op", d.Len()))
	}
	return o, d.Err()
}

// ConnectResult is the answer to a ConnectOp.
type ConnectResult struct {
	Status  Status
	Session int64 // the session, new or resumed; 0 unless Status is StatusOK
	Timeout int32 // the negotiated timeout in milliseconds
	// Conn numbers the connection among the session's connects; the
	// connection's RequestOps carry it, and the App refuses those of an
	// earlier connection (see RequestOp).
	Conn int32
}

// ParseConnectResult decodes the result of a ConnectOp.
func ParseConnectResult(b []byte) (ConnectResult, error) {
	d := proto.NewDecoder(b)
	r := ConnectResult{Status: Status(d.Int32()), Session: d.Int64(), Timeout: d.Int32(), Conn: d.Int32()}
	return r, finish(d, "connect")
}

func appendConnectResult(b []byte, r ConnectResult) []byte {
	e := proto.NewEncoder(b)
	e.Int32(int32(r.Status))
	e.Int64(r.Session)
	e.Int32(r.Timeout)
	e.Int32(r.Conn)
	return e.Bytes()
}

// SessionResult is what a result says to one session: the frames to write
// to its client, in order (watch events, then the reply to the request if
// there is one), and what to do next.
type SessionResult struct {
	Session int64
	Status  Status
	// Frames are whole ZooKeeper frames, length prefixes included, ready
	// to be written to the client as they are.
	Frames []byte
}

// ParseRequestResult decodes the result of a RequestOp.
func ParseRequestResult(b []byte) (SessionResult, error) {
	d := proto.NewDecoder(b)
	r := SessionResult{Status: Status(d.Int32()), Frames: d.Buffer()}
	return r, finish(d, "request")
}

// ParsePollResult decodes the result of a PollOp: one SessionResult per
// session of the op, in its order.
func ParsePollResult(b []byte) ([]SessionResult, error) {
	d := proto.NewDecoder(b)
	n := d.Int32()
	if n < 0 || int(n)*16 > d.Len() {
		return nil, fmt.Errorf("%w: poll: %d sessions in %d bytes", ErrResult, n, len(b))
	}
	rs := make([]SessionResult, n)
	for i := range rs {
		rs[i] = SessionResult{Session: d.Int64(), Status: Status(d.Int32()), Frames: d.Buffer()}
	}
	return rs, finish(d, "poll")
}

func finish(d *proto.Decoder, what string) error {
	if err := d.Err(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrResult, what, err)
	}
	if d.Len() != 0 {
		return fmt.Errorf("%w: %s: %d bytes too many", ErrResult, what, d.Len())
	}
	return nil
}
