package proto_test

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/coord/proto"
	"github.com/rubin-go/rubin/internal/leakcheck"
)

// This file drives a minimal in-memory ZooKeeper server, built on the
// codec alone, with the go-zookeeper/zk client: that the client gets
// through its handshake and every call proves the codec speaks the
// protocol as clients do. The server keeps a map of paths to nodes under
// one mutex; it has no ACL checks, no session expiry and no persistence.
// A session outlives its connection until the client closes it, so a
// client that reconnects resumes its session and sets its watches again.

// znode is a node of the test server: a value, so a map of them clones
// with maps.Clone.
type znode struct {
	data []byte // never modified, only replaced
	stat proto.Stat
}

// watchKind is the kind of a one-shot watch.
type watchKind int

const (
	dataWatch  watchKind = iota // getData, or exists on any node
	childWatch                  // getChildren
)

type watchKey struct {
	path string
	kind watchKind
}

// testServer is the in-memory server.
type testServer struct {
	t  *testing.T
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	closing  bool
	nodes    map[string]znode
	zxid     int64
	session  int64          // the last session id given out
	sessions map[int64]bool // the open sessions
	conns    map[*serverConn]bool
	watches  map[watchKey]map[*serverConn]bool
	ops      map[proto.OpCode]int // how many requests of each op were served
}

// serverConn is one client connection.
type serverConn struct {
	c       net.Conn
	session int64
	wmu     sync.Mutex // serializes writes: replies and other sessions' events
}

// an event is a watch event for a connection.
type event struct {
	to *serverConn
	ev proto.WatcherEvent
}

func startServer(t *testing.T) *testServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{
		t:        t,
		ln:       ln,
		nodes:    map[string]znode{"/": {}},
		sessions: map[int64]bool{},
		conns:    map[*serverConn]bool{},
		watches:  map[watchKey]map[*serverConn]bool{},
		ops:      map[proto.OpCode]int{},
	}
	s.wg.Go(s.accept)
	return s
}

// close stops the server and waits for its goroutines.
func (s *testServer) close() {
	s.ln.Close()
	s.mu.Lock()
	s.closing = true
	for c := range s.conns {
		c.c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *testServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Go(func() { s.serve(c) })
	}
}

// serve runs one connection: the handshake, then requests until the
// client closes its session or the connection.
func (s *testServer) serve(nc net.Conn) {
	defer nc.Close()
	c := &serverConn{c: nc}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.conns[c] = true
	s.mu.Unlock()
	defer s.drop(c)

	buf := make([]byte, 0, proto.MaxPacket)
	frame, err := proto.ReadFrame(nc, buf)
	if err != nil {
		return
	}
	var creq proto.ConnectRequest
	if err := proto.Unmarshal(frame, &creq); err != nil {
		s.t.Errorf("connect request: %v", err)
		return
	}
	s.mu.Lock()
	switch {
	case creq.SessionID == 0:
		s.session++
		c.session = s.session
		s.sessions[c.session] = true
	case s.sessions[creq.SessionID]:
		c.session = creq.SessionID // resumed
	default:
		// An unknown session: a response with session 0 says it expired.
	}
	s.mu.Unlock()
	resp := proto.ConnectResponse{
		TimeOut:      min(max(creq.TimeOut, 2000), 40000),
		SessionID:    c.session,
		Passwd:       make([]byte, 16),
		OmitReadOnly: creq.OmitReadOnly,
	}
	if err := proto.WriteFrame(nc, &resp); err != nil || c.session == 0 {
		return
	}

	var out []byte
	for {
		frame, err := proto.ReadFrame(nc, buf)
		if err != nil {
			if err != io.EOF && !errors.Is(err, net.ErrClosed) {
				s.t.Logf("session %d: %v", c.session, err)
			}
			return
		}
		hdr, body, err := proto.SplitRequest(frame)
		if err != nil {
			s.t.Errorf("session %d: %v", c.session, err)
			return
		}
		req, err := proto.DecodeRequest(hdr.Type, body)
		if err != nil {
			s.t.Errorf("session %d: %v: %v", c.session, hdr.Type, err)
			return
		}
		s.mu.Lock()
		s.ops[hdr.Type]++
		answer, code, events := s.handle(c, hdr.Type, req)
		zxid := s.zxid
		s.mu.Unlock()

		// Events first: a client sees the watch fire before the reply to
		// the change that fired it.
		for _, e := range events {
			e.to.write(func(b []byte) ([]byte, error) { return proto.AppendEvent(b, &e.ev) })
		}
		out, err = proto.AppendReply(out[:0], proto.ReplyHeader{Xid: hdr.Xid, Zxid: zxid, Err: code}, hdr.Type, answer)
		if err != nil {
			s.t.Errorf("session %d: %v reply: %v", c.session, hdr.Type, err)
			return
		}
		c.wmu.Lock()
		_, err = nc.Write(out)
		c.wmu.Unlock()
		if err != nil || hdr.Type == proto.OpCloseSession {
			return
		}
	}
}

// write writes the frame that appendFrame makes under the connection's
// write lock.
func (c *serverConn) write(appendFrame func([]byte) ([]byte, error)) {
	b, err := appendFrame(nil)
	if err != nil {
		panic(err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.c.Write(b) // an error here shows as the connection's next read failing
}

// drop forgets a connection and its watches.
func (s *testServer) drop(c *serverConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	for _, w := range s.watches {
		delete(w, c)
	}
}

// handle answers one request under s.mu: the response body, the error
// code and the events to send.
func (s *testServer) handle(c *serverConn, op proto.OpCode, req proto.Record) (proto.Record, proto.Code, []event) {
	switch op {
	case proto.OpPing, proto.OpAuth:
		return nil, proto.CodeOK, nil
	case proto.OpSetWatches:
		return nil, proto.CodeOK, s.setWatches(c, req.(*proto.SetWatches))
	case proto.OpCloseSession:
		delete(s.sessions, c.session)
		st := s.begin()
		var deleted []string
		for p, n := range st.nodes {
			if n.stat.EphemeralOwner == c.session {
				deleted = append(deleted, p)
			}
		}
		for _, p := range deleted {
			st.delete(p, -1)
		}
		return nil, proto.CodeOK, s.commit(st)
	case proto.OpSync:
		return &proto.SyncResponse{Path: req.(*proto.SyncRequest).Path}, proto.CodeOK, nil
	case proto.OpExists:
		r := req.(*proto.ExistsRequest)
		if r.Watch {
			s.watch(c, r.Path, dataWatch)
		}
		n, ok := s.nodes[r.Path]
		if !ok {
			return nil, proto.CodeNoNode, nil
		}
		return &proto.ExistsResponse{Stat: s.stat(r.Path, n)}, proto.CodeOK, nil
	case proto.OpGetData:
		r := req.(*proto.GetDataRequest)
		n, ok := s.nodes[r.Path]
		if !ok {
			return nil, proto.CodeNoNode, nil
		}
		if r.Watch {
			s.watch(c, r.Path, dataWatch)
		}
		return &proto.GetDataResponse{Data: n.data, Stat: s.stat(r.Path, n)}, proto.CodeOK, nil
	case proto.OpGetChildren2:
		r := req.(*proto.GetChildren2Request)
		n, ok := s.nodes[r.Path]
		if !ok {
			return nil, proto.CodeNoNode, nil
		}
		if r.Watch {
			s.watch(c, r.Path, childWatch)
		}
		return &proto.GetChildren2Response{Children: children(s.nodes, r.Path), Stat: s.stat(r.Path, n)}, proto.CodeOK, nil
	case proto.OpCreate, proto.OpCreateContainer, proto.OpCreateTTL, proto.OpSetData, proto.OpDelete:
		st := s.begin()
		resp, code := st.apply(c.session, op, req)
		if code != proto.CodeOK {
			return nil, code, nil
		}
		return resp, code, s.commit(st)
	case proto.OpMulti:
		st := s.begin()
		var res proto.MultiResponse
		failed := false
		for _, o := range req.(*proto.MultiRequest).Ops {
			resp, code := st.apply(c.session, o.Type, o.Request)
			if code != proto.CodeOK {
				failed = true
				// As ZooKeeper answers a failed multi: the ops before the
				// failure rolled back (ok), the failure, the ops after it
				// not run.
				for i := range res.Results {
					res.Results[i] = proto.MultiResult{Type: proto.OpError, Response: &proto.ErrorResponse{Err: proto.CodeOK}}
				}
				res.Results = append(res.Results, proto.MultiResult{Type: proto.OpError, Response: &proto.ErrorResponse{Err: code}})
				continue
			}
			if failed {
				res.Results = append(res.Results, proto.MultiResult{Type: proto.OpError, Response: &proto.ErrorResponse{Err: proto.CodeRuntimeInconsistency}})
				continue
			}
			res.Results = append(res.Results, proto.MultiResult{Type: o.Type, Response: resp})
		}
		if failed {
			return &res, proto.CodeOK, nil
		}
		return &res, proto.CodeOK, s.commit(st)
	}
	return nil, proto.CodeUnimplemented, nil
}

// stat returns n's Stat with the fields the tree derives.
func (s *testServer) stat(path string, n znode) proto.Stat {
	st := n.stat
	st.DataLength = int32(len(n.data))
	st.NumChildren = int32(len(children(s.nodes, path)))
	return st
}

// setWatches registers again the watches of a client that reconnected,
// and fires at once those whose node changed since the zxid the client
// last saw, as ZooKeeper does.
func (s *testServer) setWatches(c *serverConn, r *proto.SetWatches) []event {
	var events []event
	fire := func(ev proto.EventType, path string) {
		events = append(events, event{to: c, ev: proto.WatcherEvent{Type: ev, State: proto.StateSyncConnected, Path: path}})
	}
	again := func(paths []string, kind watchKind, changed func(znode) bool, ev proto.EventType) {
		for _, p := range paths {
			switch n, ok := s.nodes[p]; {
			case !ok:
				fire(proto.EventNodeDeleted, p)
			case changed(n):
				fire(ev, p)
			default:
				s.watch(c, p, kind)
			}
		}
	}
	again(r.DataWatches, dataWatch, func(n znode) bool { return n.stat.Mzxid > r.RelativeZxid }, proto.EventNodeDataChanged)
	again(r.ChildWatches, childWatch, func(n znode) bool { return n.stat.Pzxid > r.RelativeZxid }, proto.EventNodeChildrenChanged)
	for _, p := range r.ExistWatches {
		if _, ok := s.nodes[p]; ok {
			fire(proto.EventNodeCreated, p)
		} else {
			s.watch(c, p, dataWatch)
		}
	}
	return events
}

// kick closes the connections of a session, as a network failure would.
func (s *testServer) kick(session int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.session == session {
			c.c.Close()
		}
	}
}

// served returns how many requests of op the server has answered.
func (s *testServer) served(op proto.OpCode) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops[op]
}

// waitServed waits until the server has answered n requests of op.
func (s *testServer) waitServed(t *testing.T, op proto.OpCode, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); s.served(op) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the client sent %d %v requests in 5s, want %d", s.served(op), op, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *testServer) watch(c *serverConn, path string, kind watchKind) {
	k := watchKey{path, kind}
	if s.watches[k] == nil {
		s.watches[k] = map[*serverConn]bool{}
	}
	s.watches[k][c] = true
}

// tx is a change being made to a copy of the tree: all of it commits or
// none.
type tx struct {
	nodes   map[string]znode
	zxid    int64
	changes []change
}

// A change is what a committed tx fires watches for.
type change struct {
	path string
	ev   proto.EventType
}

func (s *testServer) begin() *tx {
	return &tx{nodes: maps.Clone(s.nodes), zxid: s.zxid + 1}
}

// commit installs st and returns the events of the watches it fires,
// each watch once.
func (s *testServer) commit(st *tx) []event {
	s.nodes = st.nodes
	s.zxid = st.zxid
	var events []event
	fire := func(k watchKey, ev proto.EventType, path string) {
		for c := range s.watches[k] {
			events = append(events, event{to: c, ev: proto.WatcherEvent{Type: ev, State: proto.StateSyncConnected, Path: path}})
		}
		delete(s.watches, k)
	}
	for _, ch := range st.changes {
		switch ch.ev {
		case proto.EventNodeChildrenChanged:
			fire(watchKey{ch.path, childWatch}, ch.ev, ch.path)
		case proto.EventNodeDeleted:
			fire(watchKey{ch.path, dataWatch}, ch.ev, ch.path)
			fire(watchKey{ch.path, childWatch}, ch.ev, ch.path)
		default:
			fire(watchKey{ch.path, dataWatch}, ch.ev, ch.path)
		}
	}
	return events
}

// apply runs one write op on st.
func (st *tx) apply(session int64, op proto.OpCode, req proto.Record) (proto.Record, proto.Code) {
	switch r := req.(type) {
	case *proto.CreateRequest:
		return st.create(session, op, r.Path, r.Data, r.Flags)
	case *proto.CreateTTLRequest:
		return st.create(session, op, r.Path, r.Data, r.Flags)
	case *proto.DeleteRequest:
		return nil, st.delete(r.Path, r.Version)
	case *proto.CheckVersionRequest:
		n, ok := st.nodes[r.Path]
		if !ok {
			return nil, proto.CodeNoNode
		}
		if r.Version != -1 && r.Version != n.stat.Version {
			return nil, proto.CodeBadVersion
		}
		return nil, proto.CodeOK
	case *proto.SetDataRequest:
		n, ok := st.nodes[r.Path]
		if !ok {
			return nil, proto.CodeNoNode
		}
		if r.Version != -1 && r.Version != n.stat.Version {
			return nil, proto.CodeBadVersion
		}
		n.data = r.Data
		n.stat.Version++
		n.stat.Mzxid = st.zxid
		n.stat.Mtime = st.zxid * 1000
		st.nodes[r.Path] = n
		st.changes = append(st.changes, change{r.Path, proto.EventNodeDataChanged})
		n.stat.DataLength = int32(len(n.data))
		n.stat.NumChildren = int32(len(children(st.nodes, r.Path)))
		return &proto.SetDataResponse{Stat: n.stat}, proto.CodeOK
	}
	return nil, proto.CodeUnimplemented
}

func (st *tx) create(session int64, op proto.OpCode, path string, data []byte, mode proto.CreateMode) (proto.Record, proto.Code) {
	parentPath := parent(path)
	p, ok := st.nodes[parentPath]
	if !ok {
		return nil, proto.CodeNoNode
	}
	if p.stat.EphemeralOwner != 0 {
		return nil, proto.CodeNoChildrenForEphemerals
	}
	if mode.Sequential() {
		path += fmt.Sprintf("%010d", p.stat.Cversion)
	}
	if _, ok := st.nodes[path]; ok {
		return nil, proto.CodeNodeExists
	}
	n := znode{data: data, stat: proto.Stat{
		Czxid: st.zxid, Mzxid: st.zxid, Pzxid: st.zxid, Ctime: st.zxid * 1000, Mtime: st.zxid * 1000,
	}}
	if mode.Ephemeral() {
		n.stat.EphemeralOwner = session
	}
	st.nodes[path] = n
	p.stat.Cversion++
	p.stat.Pzxid = st.zxid
	st.nodes[parentPath] = p
	st.changes = append(st.changes, change{path, proto.EventNodeCreated}, change{parentPath, proto.EventNodeChildrenChanged})
	if op == proto.OpCreate {
		return &proto.CreateResponse{Path: path}, proto.CodeOK
	}
	n.stat.DataLength = int32(len(data))
	return &proto.Create2Response{Path: path, Stat: n.stat}, proto.CodeOK
}

func (st *tx) delete(path string, version int32) proto.Code {
	n, ok := st.nodes[path]
	if !ok || path == "/" {
		return proto.CodeNoNode
	}
	if version != -1 && version != n.stat.Version {
		return proto.CodeBadVersion
	}
	if len(children(st.nodes, path)) > 0 {
		return proto.CodeNotEmpty
	}
	delete(st.nodes, path)
	parentPath := parent(path)
	p := st.nodes[parentPath]
	p.stat.Cversion++
	p.stat.Pzxid = st.zxid
	st.nodes[parentPath] = p
	st.changes = append(st.changes, change{path, proto.EventNodeDeleted}, change{parentPath, proto.EventNodeChildrenChanged})
	return proto.CodeOK
}

func parent(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

// children returns the sorted names of the children of path.
func children(nodes map[string]znode, path string) []string {
	var names []string
	for p := range nodes {
		if p != "/" && parent(p) == path {
			names = append(names, p[strings.LastIndexByte(p, '/')+1:])
		}
	}
	slices.Sort(names)
	return names
}

// testLogger sends the client's log to the test's.
type testLogger struct{ t *testing.T }

func (l testLogger) Printf(format string, args ...any) { l.t.Logf("zk: "+format, args...) }

// connect opens a session with the server at addr and returns the client
// with a channel of its session's state changes.
func connect(t *testing.T, addr string) (*zk.Conn, <-chan zk.State) {
	t.Helper()
	states := make(chan zk.State, 64)
	onEvent := func(ev zk.Event) {
		if ev.Type == zk.EventSession {
			select {
			case states <- ev.State:
			default:
				t.Errorf("session state %v dropped", ev.State)
			}
		}
	}
	// The same address twice, so that a reconnection does not wait for a
	// pass over the list of servers.
	c, _, err := zk.Connect([]string{addr, addr}, 2*time.Second,
		zk.WithLogger(testLogger{t}), zk.WithLogInfo(false), zk.WithEventCallback(onEvent), zk.WithDialer(dialOrdered))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, states, zk.StateHasSession)
	return c, states
}

// dialOrdered dials for go-zookeeper/zk with a connection whose reads
// are ordered after its earlier writes for the race detector, as any
// answer comes after its request. The client needs it: on reconnecting,
// v1.0.4 reads the session's last zxid for SetWatches in one goroutine
// while its receiving goroutine writes the zxid of the answer, with
// nothing between the two that the race detector sees, so -race could
// report a race in the client, not in the server these tests test.
func dialOrdered(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &orderedConn{Conn: c}, nil
}

// An orderedConn counts its writes under mu before each write, and takes
// mu after each read; it holds mu during neither, so it cannot deadlock.
type orderedConn struct {
	net.Conn
	mu     sync.Mutex
	writes int
}

func (c *orderedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *orderedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	_ = c.writes // every write begun before this read's data came
	c.mu.Unlock()
	return n, err
}

// waitState waits for a session to reach state.
func waitState(t *testing.T, states <-chan zk.State, state zk.State) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case s := <-states:
			if s == state {
				return
			}
		case <-deadline:
			t.Fatalf("no %v after 5s", state)
		}
	}
}

// waitEvent returns the event on ch, or fails after a while.
func waitEvent(t *testing.T, ch <-chan zk.Event, what string) zk.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no watch event after 5s", what)
		return zk.Event{}
	}
}

// TestRealClient drives the server above with go-zookeeper/zk through a
// session's life: the handshake, creates of every mode, reads, writes,
// children, conditional updates and their errors, multi, sync, auth,
// watches firing, a reconnection that resumes the session and sets its
// watches again, pings, and ephemeral nodes going with their session.
func TestRealClient(t *testing.T) {
	leakcheck.Check(t)
	s := startServer(t)
	defer s.close()
	addr := s.ln.Addr().String()
	acl := zk.WorldACL(zk.PermAll)

	a, _ := connect(t, addr)
	defer a.Close()
	b, bStates := connect(t, addr)
	defer b.Close()
	if a.SessionID() == b.SessionID() {
		t.Fatalf("two sessions share id %d", a.SessionID())
	}

	// Create, in the modes that need no ACL or session logic.
	if p, err := a.Create("/app", []byte("root"), zk.FlagPersistent, acl); err != nil || p != "/app" {
		t.Fatalf("create /app: %q, %v", p, err)
	}
	if _, err := a.Create("/app", nil, zk.FlagPersistent, acl); !errors.Is(err, zk.ErrNodeExists) {
		t.Fatalf("create /app again: err %v, want ErrNodeExists", err)
	}
	if _, err := a.Create("/missing/x", nil, zk.FlagPersistent, acl); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("create under a missing parent: err %v, want ErrNoNode", err)
	}
	var seq []string
	for range 3 {
		p, err := a.Create("/app/job-", []byte("j"), zk.FlagSequence, acl)
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, p)
	}
	if !slices.IsSorted(seq) || seq[0] == seq[1] || !strings.HasPrefix(seq[0], "/app/job-") || len(seq[0]) != len("/app/job-")+10 {
		t.Fatalf("sequential names %q", seq)
	}
	if p, err := a.CreateContainer("/app/box", nil, zk.FlagContainer, acl); err != nil || p != "/app/box" {
		t.Fatalf("create container: %q, %v", p, err)
	}
	if p, err := a.CreateTTL("/app/ttl", nil, zk.FlagTTL, acl, time.Minute); err != nil || p != "/app/ttl" {
		t.Fatalf("create with TTL: %q, %v", p, err)
	}

	// Ephemeral sequential nodes of session a, which b watches.
	lock, err := a.Create("/app/lock-", []byte("a"), zk.FlagEphemeralSequential, acl)
	if err != nil {
		t.Fatal(err)
	}
	ok, st, lockGone, err := b.ExistsW(lock)
	if err != nil || !ok || st.EphemeralOwner != a.SessionID() {
		t.Fatalf("exists %s: %v %+v %v", lock, ok, st, err)
	}

	// Exists, get and set with versions.
	ok, st, err = b.Exists("/app")
	if err != nil || !ok || st.NumChildren != 6 || st.DataLength != 4 {
		t.Fatalf("exists /app: %v %+v %v", ok, st, err)
	}
	if ok, _, err := b.Exists("/nope"); err != nil || ok {
		t.Fatalf("exists /nope: %v %v", ok, err)
	}
	data, st, dataChanged, err := b.GetW("/app")
	if err != nil || string(data) != "root" || st.Version != 0 {
		t.Fatalf("get /app: %q %+v %v", data, st, err)
	}
	if _, _, err := b.Get("/nope"); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("get /nope: err %v, want ErrNoNode", err)
	}
	if _, err := a.Set("/app", []byte("v1"), 5); !errors.Is(err, zk.ErrBadVersion) {
		t.Fatalf("set with a wrong version: err %v, want ErrBadVersion", err)
	}
	st, err = a.Set("/app", []byte("v1"), 0)
	if err != nil || st.Version != 1 {
		t.Fatalf("set /app: %+v %v", st, err)
	}
	if ev := waitEvent(t, dataChanged, "data watch"); ev.Type != zk.EventNodeDataChanged || ev.Path != "/app" {
		t.Fatalf("data watch: %+v", ev)
	}
	if data, _, err := b.Get("/app"); err != nil || string(data) != "v1" {
		t.Fatalf("get /app after set: %q %v", data, err)
	}

	// Children, and a child watch.
	kids, _, childChanged, err := b.ChildrenW("/app")
	if err != nil || len(kids) != 6 || !slices.Contains(kids, "box") {
		t.Fatalf("children of /app: %q %v", kids, err)
	}
	if _, err := a.Create("/app/new", nil, zk.FlagPersistent, acl); err != nil {
		t.Fatal(err)
	}
	if ev := waitEvent(t, childChanged, "child watch"); ev.Type != zk.EventNodeChildrenChanged || ev.Path != "/app" {
		t.Fatalf("child watch: %+v", ev)
	}

	// Delete, with its errors.
	if err := a.Delete("/app", -1); !errors.Is(err, zk.ErrNotEmpty) {
		t.Fatalf("delete /app: err %v, want ErrNotEmpty", err)
	}
	if err := a.Delete("/app/new", 3); !errors.Is(err, zk.ErrBadVersion) {
		t.Fatalf("delete with a wrong version: err %v, want ErrBadVersion", err)
	}
	if err := a.Delete("/app/new", 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete("/app/new", -1); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("delete twice: err %v, want ErrNoNode", err)
	}

	// Multi: all of it, or on a failed check none of it.
	res, err := a.Multi(
		&zk.CheckVersionRequest{Path: "/app", Version: 1},
		&zk.CreateRequest{Path: "/app/m", Data: []byte("m"), Acl: acl},
		&zk.SetDataRequest{Path: "/app/m", Data: []byte("m2"), Version: 0},
		&zk.DeleteRequest{Path: seq[0], Version: -1},
	)
	if err != nil || len(res) != 4 || res[1].String != "/app/m" || res[2].Stat == nil || res[2].Stat.Version != 1 {
		t.Fatalf("multi: %+v %v", res, err)
	}
	res, err = a.Multi(
		&zk.DeleteRequest{Path: "/app/m", Version: -1},
		&zk.CheckVersionRequest{Path: "/app", Version: 7},
		&zk.CreateRequest{Path: "/app/never", Acl: acl},
	)
	if !errors.Is(err, zk.ErrBadVersion) || len(res) != 3 || res[0].Error != nil || !errors.Is(res[1].Error, zk.ErrBadVersion) {
		t.Fatalf("failed multi: %+v %v", res, err)
	}
	if ok, _, err := b.Exists("/app/m"); err != nil || !ok {
		t.Fatalf("a failed multi deleted /app/m: %v %v", ok, err)
	}
	if data, _, err := b.Get("/app/m"); err != nil || string(data) != "m2" {
		t.Fatalf("get /app/m: %q %v", data, err)
	}

	// Sync and auth.
	if p, err := b.Sync("/app"); err != nil || p != "/app" {
		t.Fatalf("sync: %q %v", p, err)
	}
	// Session a authenticates, not b: on reconnecting, go-zookeeper/zk
	// v1.0.4 resends credentials while it reads the last zxid for
	// SetWatches, a data race in the client that -race would report.
	if err := a.AddAuth("digest", []byte("alice:secret")); err != nil {
		t.Fatalf("auth: %v", err)
	}

	// A lost connection: b reconnects, resumes its session, sets its
	// watches again, and a change made after that fires one of them.
	if _, _, mChanged, err := b.GetW("/app/m"); err != nil {
		t.Fatal(err)
	} else {
		id := b.SessionID()
		s.kick(id)
		waitState(t, bStates, zk.StateDisconnected)
		waitState(t, bStates, zk.StateHasSession)
		if b.SessionID() != id {
			t.Fatalf("b reconnected with session %d, not %d", b.SessionID(), id)
		}
		s.waitServed(t, proto.OpSetWatches, 1)
		if _, err := a.Set("/app/m", []byte("m3"), -1); err != nil {
			t.Fatal(err)
		}
		if ev := waitEvent(t, mChanged, "data watch set again"); ev.Type != zk.EventNodeDataChanged || ev.Path != "/app/m" {
			t.Fatalf("data watch after reconnecting: %+v", ev)
		}
	}

	// Pings keep an idle session; at a 2s timeout, one every 667ms.
	s.waitServed(t, proto.OpPing, 1)

	// Closing session a removes its ephemeral node and fires b's watch.
	a.Close()
	if ev := waitEvent(t, lockGone, "exists watch on an ephemeral node"); ev.Type != zk.EventNodeDeleted || ev.Path != lock {
		t.Fatalf("exists watch: %+v", ev)
	}
	if ok, _, err := b.Exists(lock); err != nil || ok {
		t.Fatalf("%s outlived its session: %v %v", lock, ok, err)
	}
	if ok, _, err := b.Exists(seq[1]); err != nil || !ok {
		t.Fatalf("%s, persistent, went with the session: %v %v", seq[1], ok, err)
	}
	b.Close()

	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("requests served: %v", s.ops)
	for _, op := range []proto.OpCode{proto.OpCreate, proto.OpCreateContainer, proto.OpCreateTTL, proto.OpDelete, proto.OpExists,
		proto.OpGetData, proto.OpSetData, proto.OpGetChildren2, proto.OpSync, proto.OpMulti, proto.OpAuth, proto.OpSetWatches,
		proto.OpPing, proto.OpCloseSession} {
		if s.ops[op] == 0 {
			t.Errorf("the client sent no %v", op)
		}
	}
}
