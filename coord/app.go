package coord

import (
	"encoding/binary"
	"errors"
	"maps"
	"math"
	"slices"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord/proto"
	"github.com/rubin-go/rubin/coord/tree"
)

// Config is what every replica's App must agree on. A zero field takes its
// default.
type Config struct {
	// Tree configures the data model (timeouts, sizes, superDigest).
	// Its MaxDataSize defaults to MaxDataSize(MaxQueuedBytes), below
	// ZooKeeper's, so that any node's data fits a result; larger data
	// could be written but not read (CodeMarshallingError).
	Tree tree.Config
	// MaxQueuedBytes bounds the watch events waiting for one session,
	// in frame bytes (default 64 KiB, at most MaxOpSize/4: a result holds
	// them and a reply). Past it the session's later
	// events are dropped and the gateway is told to close the client's
	// connection, so that the client reconnects and sets its watches
	// again.
	MaxQueuedBytes int
	// MaxQueuedTotal bounds the watch events waiting for all sessions
	// together, in frame bytes (default 64 MiB); an event past it is
	// dropped as if its session's queue were full.
	MaxQueuedTotal int
	// ExpireInterval is how often, in agreed milliseconds, the App looks
	// for sessions whose deadline passed (default 100): ZooKeeper's
	// expiry is as coarse, by its tick.
	ExpireInterval int64
	// SweepInterval is how often, in agreed milliseconds, empty container
	// nodes and expired TTL nodes are deleted (default 1000).
	SweepInterval int64
	// Outage is the longest gap, in agreed milliseconds, between two
	// executed ops that the App takes for a quiet service (default half
	// of Tree.MinSessionTimeout). A longer gap is an outage, in which no
	// client could renew its session: as ZooKeeper gives every session a
	// fresh timeout when a new leader takes over, the part of the gap
	// beyond 2*ClockSkew, which a lying primary cannot have made up, is
	// added to every session's deadline. A gateway keeps the gaps shorter
	// while it serves sessions (see coord/gateway), so that a quiet
	// service still expires its dead clients' sessions on time.
	Outage int64
	// ClockSkew is the replicas' bft.Config.MaxClockSkew in milliseconds
	// (default 2000, bft's default): how far from a correct replica's
	// clock the agreed time of a batch may be. A lying primary may hold
	// the agreed time that far behind while a session renews and then
	// push it that far ahead, so a session expires only 2*ClockSkew after
	// its timeout ran out in agreed time (Tree.ExpiryGrace is set to
	// that), and outages are counted short by as much (see Outage).
	ClockSkew int64
	// Clients are the cluster's client identities. A gateway whose number
	// is one of them is notified (bft.ExecContext.Notify) when events wait
	// for its sessions; the others only find them by polling. Only the
	// cluster's identities: the replicas keep notifications for each.
	Clients []bft.ClientID
	// ClaimLease is how long, in agreed milliseconds, a gateway's claim
	// of its ID and identities (ClaimOp) lasts unless renewed (default
	// 5000; a gateway renews every second).
	ClaimLease int64
}

func (c Config) normalized() Config {
	if c.MaxQueuedBytes <= 0 {
		c.MaxQueuedBytes = 64 << 10
	}
	c.MaxQueuedBytes = min(c.MaxQueuedBytes, MaxOpSize/4)
	if c.Tree.MaxDataSize <= 0 {
		c.Tree.MaxDataSize = MaxDataSize(c.MaxQueuedBytes)
	}
	if c.MaxQueuedTotal <= 0 {
		c.MaxQueuedTotal = 64 << 20
	}
	if c.ExpireInterval <= 0 {
		c.ExpireInterval = 100
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 1000
	}
	if c.ClaimLease <= 0 {
		c.ClaimLease = 5000
	}
	if c.ClockSkew <= 0 {
		c.ClockSkew = 2000
	}
	c.Tree.ExpiryGrace = int32(min(2*c.ClockSkew, math.MaxInt32))
	return c
}

// MaxDataSize is the most data a znode may hold so that reading it fits a
// result with queued events up to maxQueued bytes before it: MaxOpSize
// less those, the reply's header and Stat, and room to spare.
func MaxDataSize(maxQueued int) int { return MaxOpSize - maxQueued - 1024 }

// App is the coordination service as a replicated application: a
// bft.App whose state is a coord/tree.Tree and the watch events waiting
// for each session. It is not safe for concurrent use; a bft replica
// calls it from one goroutine.
type App struct {
	cfg      Config
	tree     *tree.Tree
	sessions map[int64]*session // the tree's open sessions
	queued   int                // the bytes of all sessions' events
	notified map[int64]bool     // the gateways that are notified: Config.Clients
	claims   map[int64]*claim   // the gateways' claims, by gateway ID
	// woken are the sessions of notified gateways that got events during
	// the current Execute.
	woken []*session
	// nextExpire and nextSweep are the agreed times of the next look for
	// expired sessions and of the next sweep; last is the agreed time of
	// the last op executed (0: none yet).
	nextExpire, nextSweep, last int64
}

// session is what the App keeps of a session besides the tree's view.
type session struct {
	id      int64
	gateway int64  // the gateway that last connected it
	conn    int32  // its connects so far: the current connection's number
	events  []byte // watch event frames not yet collected
	lost    bool   // events were dropped since the last collection
}

var (
	_ bft.App     = (*App)(nil)
	_ bft.Querier = (*App)(nil)
)

// New returns an App holding a fresh tree.
func New(cfg Config) *App {
	cfg = cfg.normalized()
	a := &App{cfg: cfg, tree: tree.New(cfg.Tree), sessions: make(map[int64]*session), notified: make(map[int64]bool), claims: make(map[int64]*claim)}
	if a.cfg.Outage <= 0 {
		a.cfg.Outage = int64(a.tree.Config().MinSessionTimeout / 2)
	}
	for _, id := range cfg.Clients {
		a.notified[int64(id)] = true
	}
	return a
}

// Tree returns the App's tree, for reading between calls to Execute (a
// replica's tests and tools); the caller must not write to it.
func (a *App) Tree() *tree.Tree { return a.tree }

// Execute runs one op a gateway built with ConnectOp, RequestOp, PollOp,
// ClaimOp or StatsOp and returns its result for the matching Parse function. Before the op
// it postpones every session's deadline if the gap since the last op was
// an outage (Config.Outage), ends the sessions whose deadline
// passed at ctx.Time and sweeps
// container and TTL nodes (see Config). Each write takes the zxid after
// the tree's last, so zxids follow the agreed order of (ctx.Seq,
// ctx.Index) without gaps; ctime, mtime and session deadlines come from
// ctx.Time.
func (a *App) Execute(ctx bft.ExecContext, b []byte) []byte {
	now := ctx.Time.UnixMilli()
	defer a.notify(ctx)
	a.housekeep(now)
	o, err := decodeOp(b)
	if err != nil {
		return appendSessionResult(nil, StatusMalformed, nil)
	}
	switch o.kind {
	case kindConnect:
		return appendConnectResult(nil, a.connect(o, now))
	case kindRequest:
		return a.request(o, now)
	case kindClaim:
		return appendClaimResult(nil, a.claim(o, now))
	case kindStats:
		return a.stats()
	default:
		return a.poll(o, now)
	}
}

// maxNoteSessions bounds the sessions a notification names; a gateway
// told of more gets an empty one, which means all of its sessions.
const maxNoteSessions = 4096

// notify tells each notified gateway which of its sessions got events
// during this Execute and still hold them (the op's own result did not
// take them): one notification per gateway, naming the sessions in
// order, 8 bytes each, or none at all if there are too many.
func (a *App) notify(ctx bft.ExecContext) {
	if len(a.woken) == 0 {
		return
	}
	byGateway := make(map[int64][]int64)
	for _, s := range a.woken {
		if a.sessions[s.id] == s && (len(s.events) > 0 || s.lost) {
			byGateway[s.gateway] = append(byGateway[s.gateway], s.id)
		}
	}
	a.woken = a.woken[:0]
	for _, gw := range slices.Sorted(maps.Keys(byGateway)) {
		ids := slices.Compact(slices.Sorted(slices.Values(byGateway[gw])))
		var payload []byte
		if len(ids) <= maxNoteSessions {
			for _, id := range ids {
				payload = binary.BigEndian.AppendUint64(payload, uint64(id))
			}
		}
		ctx.Notify(bft.ClientID(gw), payload)
	}
}

// NotedSessions decodes a notification's payload: the sessions that have
// events waiting, or nil for all of the gateway's.
func NotedSessions(payload []byte) []int64 {
	if len(payload) == 0 || len(payload)%8 != 0 {
		return nil
	}
	ids := make([]int64, 0, len(payload)/8)
	for ; len(payload) > 0; payload = payload[8:] {
		ids = append(ids, int64(binary.BigEndian.Uint64(payload)))
	}
	return ids
}

// ReadOnly reports whether a request only reads the state: no write,
// no watch left, nothing to renew but the session. A gateway may send it
// as a read-only request (node.Client.InvokeRead), which Query answers.
func ReadOnly(op proto.OpCode, req proto.Record) bool {
	switch r := req.(type) {
	case *proto.ExistsRequest:
		return !r.Watch
	case *proto.GetDataRequest:
		return !r.Watch
	case *proto.GetChildrenRequest:
		return !r.Watch
	case *proto.GetChildren2Request:
		return !r.Watch
	case *proto.GetACLRequest, *proto.GetAllChildrenNumberRequest, *proto.GetEphemeralsRequest, *proto.CheckWatchesRequest:
		return true
	case *proto.MultiRequest:
		return op == proto.OpMultiRead
	case *proto.Empty:
		return op == proto.OpWhoAmI
	}
	return false
}

// Query answers a RequestOp whose request is ReadOnly from the current
// state, without changing it: the bft core's read-only path, one round
// trip instead of an ordered request. It answers a ClaimOp as Execute
// would, recording nothing and taking lapsed claims as held (their
// ClaimResult.Renewed tells), and a StatsOp as Execute does. It answers StatusOrder, asking for
// the op to be ordered, for any other op, and for a session that is gone,
// belongs to another gateway, or has watch events waiting: those must
// reach the client before an answer that may show their change.
func (a *App) Query(_ bft.QueryContext, b []byte) []byte {
	order := appendSessionResult(nil, StatusOrder, nil)
	o, err := decodeOp(b)
	if err == nil && o.kind == kindClaim {
		// Read-only, a claim is answered from the claims as they are,
		// lapsed ones too: whether a holder runs shows in its renewals.
		return appendClaimResult(nil, a.checkClaim(o, 0, false))
	}
	if err == nil && o.kind == kindStats {
		return a.stats()
	}
	if err != nil || o.kind != kindRequest {
		return order
	}
	hdr, body, err := proto.SplitRequest(o.frame)
	if err != nil {
		return order
	}
	req, err := proto.DecodeRequest(hdr.Type, body)
	if err != nil || !ReadOnly(hdr.Type, req) {
		return order
	}
	s := a.sessions[o.session]
	if s == nil || s.gateway != o.gateway || s.conn != o.conn || len(s.events) > 0 || s.lost {
		return order
	}
	r := a.run(o.session, 0, hdr, body)
	if r.code == proto.CodeOK && r.resp == nil {
		r.resp = &proto.Empty{}
	}
	return appendSessionResult(nil, StatusOK, a.reply(nil, hdr, r.code, r.resp))
}

// nextZxid is the zxid of the next write.
func (a *App) nextZxid() int64 { return a.tree.LastZxid() + 1 }

func (a *App) housekeep(now int64) {
	if gap := now - a.last; a.last != 0 && gap > a.cfg.Outage {
		// A lying primary may have dated the op before the gap up to
		// ClockSkew late and this one up to ClockSkew early: only the
		// rest surely passed with nothing ordered. Counting that alone,
		// it cannot keep a dead client's session alive by making up
		// outages (TestLyingPrimaryCannotKeepADeadSessionAlive); the
		// sessions' ExpiryGrace covers what a real outage is counted
		// short.
		if d := gap - 2*a.cfg.ClockSkew; d > 0 {
			a.tree.Postpone(d)
		}
	}
	a.last = now
	if now >= a.nextExpire {
		a.nextExpire = now + a.cfg.ExpireInterval
		if len(a.tree.Expired(now)) > 0 {
			gone, evs, _ := a.tree.Expire(tree.Write{Zxid: a.nextZxid(), Time: now})
			for _, id := range gone {
				a.drop(id)
			}
			a.queue(evs)
		}
	}
	switch {
	case a.nextSweep == 0:
		// The first op schedules the first sweep.
		a.nextSweep = now + a.cfg.SweepInterval
	case now >= a.nextSweep:
		a.nextSweep = now + a.cfg.SweepInterval
		_, evs, _ := a.tree.Sweep(tree.Write{Zxid: a.nextZxid(), Time: now})
		a.queue(evs)
	}
}

// queue appends watch events to their sessions' queues.
func (a *App) queue(evs []tree.Event) {
	for _, ev := range evs {
		s := a.sessions[ev.Session]
		if s == nil || s.lost {
			continue
		}
		b, err := proto.AppendEvent(s.events, &proto.WatcherEvent{Type: ev.Type, State: proto.StateSyncConnected, Path: ev.Path})
		added := len(b) - len(s.events)
		if err != nil || len(b) > a.cfg.MaxQueuedBytes || a.queued+added > a.cfg.MaxQueuedTotal {
			s.lost = true
			if a.notified[s.gateway] {
				a.woken = append(a.woken, s)
			}
			continue
		}
		s.events = b
		a.queued += added
		if a.notified[s.gateway] {
			a.woken = append(a.woken, s)
		}
	}
}

// collect takes the session's queued events: the frames to send, and
// StatusClose if some were lost.
func (a *App) collect(s *session, frames []byte) ([]byte, Status) {
	frames = append(frames, s.events...)
	st := StatusOK
	if s.lost {
		st = StatusClose
	}
	a.clear(s)
	return frames, st
}

// clear empties a session's queue.
func (a *App) clear(s *session) {
	a.queued -= len(s.events)
	s.events, s.lost = nil, false
}

// drop forgets a session that ended.
func (a *App) drop(id int64) {
	if s := a.sessions[id]; s != nil {
		a.clear(s)
		delete(a.sessions, id)
	}
}

func (a *App) connect(o op, now int64) ConnectResult {
	if o.session == 0 {
		id := a.nextZxid()
		timeout, err := a.tree.CreateSession(tree.Write{Session: id, Zxid: id, Time: now}, o.passwd, o.timeout)
		if err != nil {
			return ConnectResult{Status: StatusClose}
		}
		a.sessions[id] = &session{id: id, gateway: o.gateway, conn: 1}
		return ConnectResult{Status: StatusOK, Session: id, Timeout: timeout, Conn: 1}
	}
	s := a.sessions[o.session]
	if s == nil {
		return ConnectResult{Status: StatusExpired}
	}
	timeout, err := a.tree.Reconnect(o.session, o.passwd, now)
	if err != nil {
		return ConnectResult{Status: StatusExpired}
	}
	// The events not yet delivered went to a connection that is gone. As
	// in ZooKeeper, whose watches live with the connection, the client
	// sends its watches again (setWatches), and those whose node changed
	// since the last zxid it saw fire then: queued, they would fire twice.
	s.gateway = o.gateway
	s.conn++
	a.clear(s)
	return ConnectResult{Status: StatusOK, Session: o.session, Timeout: timeout, Conn: s.conn}
}

func (a *App) request(o op, now int64) []byte {
	hdr, body, err := proto.SplitRequest(o.frame)
	if err != nil {
		return appendSessionResult(nil, StatusMalformed, nil)
	}
	s := a.sessions[o.session]
	if s == nil {
		frames := a.reply(nil, hdr, proto.CodeSessionExpired, nil)
		return appendSessionResult(nil, StatusExpired, frames)
	}
	if s.gateway != o.gateway || s.conn != o.conn {
		// Another gateway took the session over, or the client connected
		// again: this request's connection is gone, and its client gave
		// up on it (TestStaleConnectionRefused).
		frames := a.reply(nil, hdr, proto.CodeSessionMoved, nil)
		return appendSessionResult(nil, StatusClose, frames)
	}
	_ = a.tree.Touch(o.session, now)
	r := a.run(o.session, now, hdr, body)
	if r.malformed {
		return appendSessionResult(nil, StatusMalformed, nil)
	}
	if r.code == proto.CodeOK && r.resp == nil {
		r.resp = &proto.Empty{}
	}
	frames, st := a.collect(s, nil)
	frames = a.reply(frames, hdr, r.code, r.resp)
	if r.close {
		st = StatusClose
	}
	if hdr.Type == proto.OpCloseSession && r.code == proto.CodeOK {
		a.drop(o.session)
	}
	return appendSessionResult(nil, st, frames)
}

// reply appends the frame answering hdr.
func (a *App) reply(b []byte, hdr proto.RequestHeader, code proto.Code, resp proto.Record) []byte {
	h := proto.ReplyHeader{Xid: hdr.Xid, Zxid: a.tree.LastZxid(), Err: code}
	out, err := proto.AppendReply(b, h, hdr.Type, resp)
	if err != nil || len(out)+resultOverhead > MaxOpSize {
		// The answer does not fit a frame, or with the events before it
		// a result (a multiRead of large nodes): the client could not
		// have it from ZooKeeper either.
		h.Err = proto.CodeMarshallingError
		out, _ = proto.AppendReply(b, h, hdr.Type, nil)
	}
	return out
}

func (a *App) poll(o op, now int64) []byte {
	e := proto.NewEncoder(nil)
	e.Int32(int32(len(o.sessions)))
	// The result must stay within MaxOpSize: a session whose events do not
	// fit keeps them for its next result.
	room := MaxOpSize - 4 - 16*len(o.sessions)
	for _, id := range o.sessions {
		e.Int64(id)
		s := a.sessions[id]
		switch {
		case s == nil:
			e.Int32(int32(StatusExpired))
			e.Buffer(nil)
		case s.gateway != o.gateway:
			e.Int32(int32(StatusClose))
			e.Buffer(nil)
		case len(s.events) > room:
			_ = a.tree.Touch(id, now)
			e.Int32(int32(StatusOK))
			e.Buffer(nil)
		default:
			_ = a.tree.Touch(id, now)
			frames, st := a.collect(s, nil)
			room -= len(frames)
			e.Int32(int32(st))
			e.Buffer(frames)
		}
	}
	return e.Bytes()
}

func appendSessionResult(b []byte, st Status, frames []byte) []byte {
	e := proto.NewEncoder(b)
	e.Int32(int32(st))
	e.Buffer(frames)
	return e.Bytes()
}

// codeOf returns err's ZooKeeper code. The tree returns codes, and its
// own errors (ErrZxid, ErrSession) only for the caller's mistakes, which
// the App does not make.
func codeOf(err error) proto.Code {
	var c proto.Code
	if errors.As(err, &c) {
		return c
	}
	if err == nil {
		return proto.CodeOK
	}
	return proto.CodeSystemError
}
