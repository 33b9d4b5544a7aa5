package tree

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"maps"
	"slices"

	"github.com/rubin-go/rubin/coord/proto"
)

// A session's password never reaches the tree: the gateway that holds it
// gives HashPassword of it, and the tree keeps and compares that alone.

// PasswordHashSize is the size of what HashPassword returns.
const PasswordHashSize = sha256.Size

// HashPassword returns what the tree keeps of a session's password, and
// what a reconnect gives to be checked against it: SHA-256 of a label
// and the password. A gateway draws a session's password at random, 16
// bytes as ZooKeeper's, so the hash cannot be turned back into it.
func HashPassword(passwd []byte) []byte {
	h := sha256.New()
	h.Write([]byte("rubin coord session password\x00"))
	h.Write(passwd)
	return h.Sum(nil)
}

// maxPasswordLen bounds the password of a session in a snapshot of
// version 1, which held passwords themselves.
const maxPasswordLen = 64

// ErrSession is returned by CreateSession for an id that is taken or
// cannot name a session (see ValidSessionID), or a password hash that is
// not PasswordHashSize bytes: the caller chooses both, so it is the
// caller's mistake, and the call changes nothing.
var ErrSession = errors.New("tree: session id taken or invalid, or password hash of the wrong size")

// A session is a client's session: its negotiated timeout and the agreed
// time it expires at, the identities addauth gave it, its ephemeral nodes
// and its watches.
type session struct {
	id         int64
	passwdHash []byte // HashPassword of its password
	timeout    int32
	deadline   int64
	auth       []proto.ID
	authBytes  int
	ephemerals map[string]struct{}
	watches    map[string]watchBits
	watchBytes int
}

// SessionInfo is what the tree knows of a session.
type SessionInfo struct {
	ID           int64
	PasswordHash []byte     // HashPassword of its password
	Timeout      int32      // negotiated, in milliseconds
	Deadline     int64      // the agreed time it expires at unless touched (Config.ExpiryGrace included)
	Auth         []proto.ID // identities added by AddAuth, in order
}

// CreateSession opens session w.Session, whose password has the hash
// passwdHash (HashPassword), with a timeout (milliseconds) the client
// asks for, clamped into the configured bounds as ZooKeeper negotiates
// it, and returns the negotiated timeout. The session expires at w.Time plus that timeout
// and Config.ExpiryGrace unless touched. Past Config.MaxSessions it
// fails with CodeThrottled.
func (t *Tree) CreateSession(w Write, passwdHash []byte, timeout int32) (int32, error) {
	if w.Zxid <= t.lastZxid {
		return 0, ErrZxid
	}
	if !ValidSessionID(w.Session) || t.sessions[w.Session] != nil || len(passwdHash) != PasswordHashSize {
		return 0, ErrSession
	}
	t.lastZxid = w.Zxid
	if len(t.sessions) >= t.cfg.MaxSessions {
		return 0, proto.CodeThrottled
	}
	timeout = max(timeout, t.cfg.MinSessionTimeout)
	timeout = min(timeout, t.cfg.MaxSessionTimeout)
	t.sessions[w.Session] = &session{
		id:         w.Session,
		passwdHash: slices.Clone(passwdHash),
		timeout:    timeout,
		deadline:   t.deadline(w.Time, timeout),
		ephemerals: map[string]struct{}{},
		watches:    map[string]watchBits{},
	}
	return timeout, nil
}

// Session returns what the tree knows of a session.
func (t *Tree) Session(id int64) (SessionInfo, bool) {
	s := t.sessions[id]
	if s == nil {
		return SessionInfo{}, false
	}
	return SessionInfo{ID: s.id, PasswordHash: slices.Clone(s.passwdHash), Timeout: s.timeout,
		Deadline: s.deadline, Auth: slices.Clone(s.auth)}, true
}

// Sessions returns the ids of the open sessions in order.
func (t *Tree) Sessions() []int64 { return slices.Sorted(maps.Keys(t.sessions)) }

// Touch renews a session at agreed time now, as any request or ping from
// its client does: it then expires at now plus its timeout and
// Config.ExpiryGrace.
func (t *Tree) Touch(session int64, now int64) error {
	s, err := t.reader(session)
	if err != nil {
		return err
	}
	s.deadline = t.deadline(now, s.timeout)
	return nil
}

// deadline is when a session with timeout, touched at now, expires.
func (t *Tree) deadline(now int64, timeout int32) int64 {
	return now + int64(timeout) + int64(t.cfg.ExpiryGrace)
}

// Postpone adds d milliseconds to every session's deadline: agreed time
// in which the service could order nothing, so that no client could renew
// its session (see coord.Config.Outage).
func (t *Tree) Postpone(d int64) {
	for _, s := range t.sessions {
		s.deadline += d
	}
}

// Reconnect checks a client's reconnect to a session with the hash of the
// password it gave (HashPassword) and touches the session. A wrong
// password or a session that is gone fails with CodeSessionExpired,
// ZooKeeper's answer to both.
func (t *Tree) Reconnect(session int64, passwdHash []byte, now int64) (int32, error) {
	s := t.sessions[session]
	if s == nil || subtle.ConstantTimeCompare(s.passwdHash, passwdHash) != 1 {
		return 0, proto.CodeSessionExpired
	}
	s.deadline = t.deadline(now, s.timeout)
	return s.timeout, nil
}

// CloseSession ends session w.Session: its watches go, then its ephemeral
// nodes are deleted (in path order, all with w.Zxid) and the watch events
// that causes for other sessions are returned.
func (t *Tree) CloseSession(w Write) ([]Event, error) {
	s, err := t.begin(w)
	if err != nil {
		return nil, err
	}
	t.kill(s, w.Zxid)
	return t.fire(), nil
}

// Expired returns, in order, the sessions whose deadline is at or before
// the agreed time now.
func (t *Tree) Expired(now int64) []int64 {
	var ids []int64
	for id, s := range t.sessions {
		if s.deadline <= now {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Expire ends, as CloseSession does, every session Expired(w.Time)
// returns, in order, all with w.Zxid (w.Session is not used). It returns
// the sessions it ended and the watch events for the others.
func (t *Tree) Expire(w Write) ([]int64, []Event, error) {
	if w.Zxid <= t.lastZxid {
		return nil, nil, ErrZxid
	}
	t.lastZxid = w.Zxid
	t.triggers = t.triggers[:0]
	ids := t.Expired(w.Time)
	for _, id := range ids {
		t.kill(t.sessions[id], w.Zxid)
	}
	return ids, t.fire(), nil
}

// kill removes a session: its watches first, so that it is sent nothing
// of its own ending, then its ephemeral nodes.
func (t *Tree) kill(s *session, zxid int64) {
	for _, p := range slices.Sorted(maps.Keys(s.watches)) {
		t.dropWatch(s, p, watchAll)
	}
	for _, p := range slices.Sorted(maps.Keys(s.ephemerals)) {
		t.removeNode(p, zxid)
	}
	delete(t.sessions, s.id)
}
