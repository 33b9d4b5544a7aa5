package tree

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/rubin-go/rubin/coord/proto"
)

// The test here runs one scenario against a Tree and against a real
// Apache ZooKeeper server, through go-zookeeper/zk, and compares what
// each answers: results, error codes, Stats (zxids and times only as
// relations, which differ) and watch events. The server runs with TTL
// nodes enabled, the tree with Config.ExtendedTypes. It needs the Debian package
// zookeeper (and Java), and skips without it.

// A side is one of the two: it runs an operation as one of the
// scenario's sessions and describes the answer as text.
type side interface {
	open(i int)
	create(i int, p, data string, mode proto.CreateMode, acl []proto.ACL) string
	createTTL(i int, p string, mode proto.CreateMode, ttl int64) string
	del(i int, p string, v int32) string
	set(i int, p, data string, v int32) string
	get(i int, p string, w bool) string
	exists(i int, p string, w bool) string
	children(i int, p string, w bool) string
	getACL(i int, p string) string
	setACL(i int, p string, acl []proto.ACL, v int32) string
	addAuth(i int, scheme, auth string) string
	multi(i int, ops []Op) string
	close(i int) string
	events() []string
}

// statStr describes a Stat with the owner named by session number.
func statStr(st proto.Stat, owners map[int64]int) string {
	o := fmt.Sprint(st.EphemeralOwner)
	if i, ok := owners[st.EphemeralOwner]; ok {
		o = fmt.Sprintf("s%d", i)
	}
	return fmt.Sprintf("v%d cv%d av%d n%d len%d owner=%s pz=cz:%v pz=mz:%v mz=cz:%v", st.Version, st.Cversion, st.Aversion,
		st.NumChildren, st.DataLength, o, st.Pzxid == st.Czxid, st.Pzxid == st.Mzxid, st.Mzxid == st.Czxid)
}

// treeSide runs the scenario on a Tree.
type treeSide struct {
	h      *harness
	ids    map[int]int64
	owners map[int64]int
	evs    []Event
}

func codeStr(err error) string {
	if err == nil {
		return "ok"
	}
	var c proto.Code
	if errors.As(err, &c) {
		return fmt.Sprint(int32(c))
	}
	return err.Error()
}
func (t *treeSide) open(i int) {
	id := int64(1000 + i)
	t.ids[i] = id
	t.owners[id] = i
	t.h.session(id)
}
func (t *treeSide) create(i int, p, data string, mode proto.CreateMode, acl []proto.ACL) string {
	r, st, evs, err := t.h.tr.Create(t.h.w(t.ids[i]), p, []byte(data), acl, mode)
	t.evs = append(t.evs, evs...)
	if err != nil {
		return codeStr(err)
	}
	_ = st
	return r
}
func (t *treeSide) createTTL(i int, p string, mode proto.CreateMode, ttl int64) string {
	r, _, evs, err := t.h.tr.CreateTTL(t.h.w(t.ids[i]), p, nil, proto.OpenACL, mode, ttl)
	t.evs = append(t.evs, evs...)
	if err != nil {
		return codeStr(err)
	}
	return r
}
func (t *treeSide) del(i int, p string, v int32) string {
	evs, err := t.h.tr.Delete(t.h.w(t.ids[i]), p, v)
	t.evs = append(t.evs, evs...)
	return codeStr(err)
}
func (t *treeSide) set(i int, p, data string, v int32) string {
	st, evs, err := t.h.tr.SetData(t.h.w(t.ids[i]), p, []byte(data), v)
	t.evs = append(t.evs, evs...)
	if err != nil {
		return codeStr(err)
	}
	return statStr(st, t.owners)
}
func (t *treeSide) get(i int, p string, w bool) string {
	d, st, err := t.h.tr.GetData(t.ids[i], p, w)
	if err != nil {
		return codeStr(err)
	}
	return fmt.Sprintf("%q %s", d, statStr(st, t.owners))
}
func (t *treeSide) exists(i int, p string, w bool) string {
	st, err := t.h.tr.Exists(t.ids[i], p, w)
	if err != nil {
		return codeStr(err)
	}
	return statStr(st, t.owners)
}
func (t *treeSide) children(i int, p string, w bool) string {
	c, st, err := t.h.tr.GetChildren(t.ids[i], p, w)
	if err != nil {
		return codeStr(err)
	}
	return fmt.Sprintf("%v %s", c, statStr(st, t.owners))
}
func (t *treeSide) getACL(i int, p string) string {
	a, st, err := t.h.tr.GetACL(t.ids[i], p)
	if err != nil {
		return codeStr(err)
	}
	return fmt.Sprintf("%v %s", a, statStr(st, t.owners))
}
func (t *treeSide) setACL(i int, p string, acl []proto.ACL, v int32) string {
	st, err := t.h.tr.SetACL(t.h.w(t.ids[i]), p, acl, v)
	if err != nil {
		return codeStr(err)
	}
	return statStr(st, t.owners)
}
func (t *treeSide) addAuth(i int, scheme, auth string) string {
	if scheme == "digest" {
		auth = Digest(auth) // as a gateway hands it on
	}
	return codeStr(t.h.tr.AddAuth(t.ids[i], scheme, []byte(auth)))
}
func (t *treeSide) multi(i int, ops []Op) string {
	res, evs, err := t.h.tr.Multi(t.h.w(t.ids[i]), ops)
	t.evs = append(t.evs, evs...)
	var out []string
	for _, r := range res {
		if r.Type == proto.OpError {
			out = append(out, fmt.Sprint(int32(r.Err)))
		} else {
			out = append(out, "ok:"+r.Path)
		}
	}
	return fmt.Sprintf("%v %s", out, codeStr(err))
}
func (t *treeSide) close(i int) string {
	evs, err := t.h.tr.CloseSession(t.h.w(t.ids[i]))
	t.evs = append(t.evs, evs...)
	return codeStr(err)
}
func (t *treeSide) events() []string {
	var lines []string
	for _, e := range t.evs {
		lines = append(lines, fmt.Sprintf("s%d %d %s", t.owners[e.Session], e.Type, e.Path))
	}
	t.evs = nil
	return lines
}

// zkSide runs the scenario on a ZooKeeper server.
type zkSide struct {
	addr   string
	conns  map[int]*zk.Conn
	owners map[int64]int
	mu     sync.Mutex
	evs    []string
}

var zkErrs = map[error]int32{zk.ErrNoNode: -101, zk.ErrNoAuth: -102, zk.ErrBadVersion: -103, zk.ErrNoChildrenForEphemerals: -108,
	zk.ErrNodeExists: -110, zk.ErrNotEmpty: -111, zk.ErrSessionExpired: -112, zk.ErrInvalidACL: -114, zk.ErrAuthFailed: -115,
	zk.ErrBadArguments: -8, zk.ErrAPIError: -100}

// zkCode names an error of go-zookeeper/zk by its ZooKeeper code.
func zkCode(err error) string {
	if err == nil {
		return "ok"
	}
	if c, ok := zkErrs[err]; ok {
		return fmt.Sprint(c)
	}
	var code int32
	if _, scanErr := fmt.Sscanf(err.Error(), "unknown error: %d", &code); scanErr == nil {
		return fmt.Sprint(code)
	}
	return err.Error()
}
func toZKACL(acl []proto.ACL) []zk.ACL {
	var out []zk.ACL
	for _, a := range acl {
		out = append(out, zk.ACL{Perms: int32(a.Perms), Scheme: a.ID.Scheme, ID: a.ID.ID})
	}
	return out
}
func zstat(st *zk.Stat) proto.Stat {
	return proto.Stat{Czxid: st.Czxid, Mzxid: st.Mzxid, Ctime: st.Ctime, Mtime: st.Mtime, Version: st.Version, Cversion: st.Cversion,
		Aversion: st.Aversion, EphemeralOwner: st.EphemeralOwner, DataLength: st.DataLength, NumChildren: st.NumChildren, Pzxid: st.Pzxid}
}
func (z *zkSide) open(i int) {
	c, _, err := zk.Connect([]string{z.addr}, 30*time.Second, zk.WithLogger(quiet{}), zk.WithEventCallback(func(e zk.Event) {
		if e.Type == zk.EventSession {
			return
		}
		z.mu.Lock()
		z.evs = append(z.evs, fmt.Sprintf("s%d %d %s", i, e.Type, e.Path))
		z.mu.Unlock()
	}))
	if err != nil {
		panic(err)
	}
	for c.State() != zk.StateHasSession {
		time.Sleep(10 * time.Millisecond)
	}
	z.conns[i] = c
	z.owners[c.SessionID()] = i
}
func (z *zkSide) create(i int, p, data string, mode proto.CreateMode, acl []proto.ACL) string {
	var r string
	var err error
	if mode == proto.ModeContainer {
		r, err = z.conns[i].CreateContainer(p, []byte(data), int32(mode), toZKACL(acl))
	} else {
		r, err = z.conns[i].Create(p, []byte(data), int32(mode), toZKACL(acl))
	}
	if err != nil {
		return zkCode(err)
	}
	return r
}
func (z *zkSide) createTTL(i int, p string, mode proto.CreateMode, ttl int64) string {
	r, err := z.conns[i].CreateTTL(p, nil, int32(mode), toZKACL(proto.OpenACL), time.Duration(ttl)*time.Millisecond)
	if err != nil {
		return zkCode(err)
	}
	return r
}
func (z *zkSide) del(i int, p string, v int32) string { return zkCode(z.conns[i].Delete(p, v)) }
func (z *zkSide) set(i int, p, data string, v int32) string {
	st, err := z.conns[i].Set(p, []byte(data), v)
	if err != nil {
		return zkCode(err)
	}
	return statStr(zstat(st), z.owners)
}
func (z *zkSide) get(i int, p string, w bool) string {
	var d []byte
	var st *zk.Stat
	var err error
	if w {
		d, st, _, err = z.conns[i].GetW(p)
	} else {
		d, st, err = z.conns[i].Get(p)
	}
	if err != nil {
		return zkCode(err)
	}
	if d == nil {
		d = []byte{}
	}
	return fmt.Sprintf("%q %s", d, statStr(zstat(st), z.owners))
}
func (z *zkSide) exists(i int, p string, w bool) string {
	var ok bool
	var st *zk.Stat
	var err error
	if w {
		ok, st, _, err = z.conns[i].ExistsW(p)
	} else {
		ok, st, err = z.conns[i].Exists(p)
	}
	if err != nil {
		return zkCode(err)
	}
	if !ok {
		return "-101"
	}
	return statStr(zstat(st), z.owners)
}
func (z *zkSide) children(i int, p string, w bool) string {
	var c []string
	var st *zk.Stat
	var err error
	if w {
		c, st, _, err = z.conns[i].ChildrenW(p)
	} else {
		c, st, err = z.conns[i].Children(p)
	}
	if err != nil {
		return zkCode(err)
	}
	slices.Sort(c)
	return fmt.Sprintf("%v %s", c, statStr(zstat(st), z.owners))
}
func (z *zkSide) getACL(i int, p string) string {
	a, st, err := z.conns[i].GetACL(p)
	if err != nil {
		return zkCode(err)
	}
	var acl []proto.ACL
	for _, x := range a {
		acl = append(acl, proto.ACL{Perms: proto.Perms(x.Perms), ID: proto.ID{Scheme: x.Scheme, ID: x.ID}})
	}
	return fmt.Sprintf("%v %s", acl, statStr(zstat(st), z.owners))
}
func (z *zkSide) setACL(i int, p string, acl []proto.ACL, v int32) string {
	st, err := z.conns[i].SetACL(p, toZKACL(acl), v)
	if err != nil {
		return zkCode(err)
	}
	return statStr(zstat(st), z.owners)
}
func (z *zkSide) addAuth(i int, scheme, auth string) string {
	return zkCode(z.conns[i].AddAuth(scheme, []byte(auth)))
}
func (z *zkSide) multi(i int, ops []Op) string {
	var req []interface{}
	for _, op := range ops {
		switch op.Type {
		case proto.OpCreate:
			req = append(req, &zk.CreateRequest{Path: op.Path, Data: op.Data, Acl: toZKACL(op.ACL), Flags: int32(op.Mode)})
		case proto.OpDelete:
			req = append(req, &zk.DeleteRequest{Path: op.Path, Version: op.Version})
		case proto.OpSetData:
			req = append(req, &zk.SetDataRequest{Path: op.Path, Data: op.Data, Version: op.Version})
		case proto.OpCheck:
			req = append(req, &zk.CheckVersionRequest{Path: op.Path, Version: op.Version})
		}
	}
	res, err := z.conns[i].Multi(req...)
	var out []string
	for _, r := range res {
		if r.Error != nil {
			out = append(out, zkCode(r.Error))
		} else if err != nil {
			out = append(out, "0")
		} else {
			out = append(out, "ok:"+r.String)
		}
	}
	return fmt.Sprintf("%v %s", out, zkCode(err))
}
func (z *zkSide) close(i int) string {
	z.conns[i].Close()
	return "ok"
}

// quiet drops go-zookeeper/zk's log lines.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

func (z *zkSide) events() []string {
	time.Sleep(300 * time.Millisecond) // the events of the last step arrive
	z.mu.Lock()
	defer z.mu.Unlock()
	lines := z.evs
	z.evs = nil
	return lines
}

// scenario runs the same steps on a side and returns its answers.
// Events of different sessions arrive over different connections, so
// they are compared per session; after a session closes, ZooKeeper
// deletes its ephemerals in hash order, so those are compared as a set.
func scenario(s side) []string {
	var out []string
	o := func(v string) { out = append(out, v) }
	events := func(anyOrder bool) {
		lines := s.events()
		if anyOrder {
			slices.Sort(lines)
		} else {
			slices.SortStableFunc(lines, func(a, b string) int { return strings.Compare(a[:2], b[:2]) })
		}
		o("events: " + strings.Join(lines, "; "))
	}
	e := func() { events(false) }
	open := proto.OpenACL
	s.open(1)
	s.open(2)
	s.open(3)
	o(s.exists(1, "/", false))
	o(s.children(1, "/zookeeper", false))
	o(s.getACL(1, "/zookeeper/config"))
	o(s.get(1, "/zookeeper/config", false))
	o(s.getACL(1, "/zookeeper"))
	o(s.set(1, "/zookeeper/config", "x", -1))
	o(s.del(1, "/zookeeper", -1))
	o(s.del(1, "/zookeeper/quota", -1))
	o(s.create(1, "/zookeeper/mine", "", 0, open))
	o(s.create(1, "/d", "data", 0, open))
	o(s.create(1, "/d/s-", "", proto.ModePersistentSequential, open))
	o(s.create(1, "/d/s-", "", proto.ModeEphemeralSequential, open))
	o(s.del(1, "/d/s-0000000000", -1))
	o(s.create(1, "/d/s-", "", proto.ModePersistentSequential, open))
	o(s.create(1, "/d/", "", proto.ModePersistentSequential, open))
	o(s.children(1, "/d", false))
	o(s.create(1, "/d/s-0000000001/x", "", 0, open))
	// watches
	o(s.exists(2, "/d/x", true))
	o(s.get(2, "/d", true))
	o(s.exists(2, "/d", true))
	o(s.children(2, "/d", true))
	o(s.children(3, "/d", true))
	o(s.set(1, "/d", "new", 0))
	e()
	o(s.create(1, "/d/x", "", 0, open))
	e()
	o(s.get(2, "/d/x", true))
	o(s.children(2, "/d/x", true))
	o(s.children(2, "/d", true))
	o(s.del(1, "/d/x", -1))
	e()
	// ephemerals and close
	o(s.create(1, "/e1", "", proto.ModeEphemeral, open))
	o(s.create(1, "/e2", "", proto.ModeEphemeral, open))
	o(s.exists(2, "/e2", true))
	o(s.exists(3, "/e1", true))
	o(s.children(2, "/", true))
	o(s.children(3, "/d", true))
	o(s.close(1))
	events(true)
	o(s.exists(2, "/e1", false))
	o(s.children(2, "/d", false))
	// multi
	o(s.multi(2, []Op{
		{Type: proto.OpCreate, Path: "/m", ACL: open},
		{Type: proto.OpSetData, Path: "/m", Data: []byte("x"), Version: -1},
		{Type: proto.OpCheck, Path: "/m", Version: 5},
		{Type: proto.OpDelete, Path: "/nonexistent", Version: -1},
	}))
	o(s.exists(2, "/m", false))
	o(s.multi(2, []Op{
		{Type: proto.OpCreate, Path: "/m", ACL: open},
		{Type: proto.OpCreate, Path: "/m/s", ACL: open, Mode: proto.ModePersistentSequential},
		{Type: proto.OpSetData, Path: "/m", Data: []byte("x"), Version: 0},
		{Type: proto.OpCheck, Path: "/m", Version: 1},
	}))
	o(s.get(2, "/m", false))
	// ACLs
	o(s.addAuth(2, "digest", "alice:secret"))
	o(s.create(2, "/acl", "", 0, []proto.ACL{{Perms: proto.PermRead, ID: proto.WorldAnyone},
		{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: Digest("alice:secret")}}}))
	o(s.getACL(3, "/acl"))
	o(s.getACL(2, "/acl"))
	o(s.set(3, "/acl", "x", -1))
	o(s.create(3, "/acl/c", "", 0, open))
	o(s.create(2, "/acl/c", "", 0, open))
	o(s.create(3, "/auth", "", 0, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "auth"}}}))
	o(s.create(2, "/auth", "", 0, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "auth", ID: "whatever"}}}))
	o(s.getACL(2, "/auth"))
	o(s.create(2, "/w", "", 0, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "world", ID: "everyone"}}}))
	o(s.create(2, "/w", "", 0, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: "nocolon"}}}))
	o(s.create(2, "/w", "", 0, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "ip", ID: "10.0.0.0/8"}}}))
	o(s.create(2, "/w2", "", 0, []proto.ACL{{Perms: proto.PermAll, ID: proto.ID{Scheme: "ip", ID: "10.0.0.0/40"}}}))
	o(s.create(2, "/nd", "", 0, []proto.ACL{{Perms: proto.PermAll &^ proto.PermDelete, ID: proto.WorldAnyone}}))
	o(s.del(3, "/nd/zz", -1))
	o(s.create(3, "/nd/c", "", 0, open))
	o(s.del(3, "/nd/c", 0))
	o(s.setACL(3, "/nd", nil, -1))
	o(s.setACL(3, "/nonexistent", open, -1))
	o(s.setACL(2, "/acl", open, 3))
	o(s.setACL(2, "/acl", open, 0))
	o(s.exists(3, "/acl", true))
	o(s.setACL(2, "/acl", []proto.ACL{{Perms: proto.PermWrite, ID: proto.WorldAnyone}}, 1))
	o(s.set(2, "/acl", "y", -1))
	e()
	o(s.get(3, "/acl", false))
	o(s.exists(3, "/acl", false))
	// ephemeral parent, containers
	o(s.create(3, "/eph", "", proto.ModeEphemeral, open))
	o(s.create(3, "/eph/c", "", 0, open))
	o(s.create(3, "/c", "", proto.ModeContainer, open))
	o(s.exists(3, "/c", false))
	o(s.del(3, "/d", -1))
	o(s.del(3, "/d", 7))
	// multi events
	o(s.exists(2, "/mm", true))
	o(s.children(2, "/", true))
	o(s.exists(3, "/m", true))
	o(s.children(3, "/m", true))
	o(s.multi(1+2, []Op{
		{Type: proto.OpCreate, Path: "/mm", ACL: open},
		{Type: proto.OpDelete, Path: "/m/s0000000000", Version: -1},
		{Type: proto.OpDelete, Path: "/m", Version: -1},
		{Type: proto.OpCreate, Path: "/mm/q", ACL: open, Mode: proto.ModeEphemeralSequential},
	}))
	e()
	o(s.children(2, "/mm", false))
	o(s.exists(2, "/mm/q0000000000", false))
	o(s.create(2, "/s", "", proto.ModePersistentSequential, open))
	o(s.create(2, "/mm/q0000000000/x", "", 0, open))
	o(s.set(2, "/mm/q0000000000", "x", 0))
	o(s.exists(3, "/", false))
	// TTL nodes
	o(s.createTTL(2, "/ttl", proto.ModePersistentWithTTL, 0))
	o(s.createTTL(2, "/ttl", proto.ModePersistentWithTTL, 1<<40))
	o(s.createTTL(2, "/ttl", proto.ModePersistentWithTTL, 5000))
	o(s.createTTL(2, "/ttl-", proto.ModePersistentSequentialWithTTL, 5000))
	o(s.exists(2, "/ttl", false))
	o(s.create(2, "/ttl/c", "", 0, open))
	return out
}

func TestAgainstZooKeeper(t *testing.T) {
	addr := startZooKeeper(t)
	server := &zkSide{addr: addr, conns: map[int]*zk.Conn{}, owners: map[int64]int{}}
	t.Cleanup(func() {
		for _, c := range server.conns {
			c.Close()
		}
	})
	want := scenario(server)
	got := scenario(&treeSide{h: newHarness(t, Config{ExtendedTypes: true}), ids: map[int]int64{}, owners: map[int64]int{}})
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d:\n  tree:      %s\n  ZooKeeper: %s", i, got[i], want[i])
		}
	}
}

// startZooKeeper runs a standalone ZooKeeper server from the Debian
// package on a free loopback port until the test ends, and returns its
// address. It skips the test if the package or Java is missing.
func startZooKeeper(t *testing.T) string {
	const script = "/usr/share/zookeeper/bin/zkServer.sh"
	if _, err := os.Stat(script); err != nil {
		t.Skip("Apache ZooKeeper is not installed (Debian package zookeeper)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java to run Apache ZooKeeper")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "zoo.cfg")
	conf := fmt.Sprintf("tickTime=2000\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n",
		filepath.Join(dir, "data"), port)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, "start-foreground", cfg)
	cmd.Env = append(os.Environ(), "ZOO_LOG_DIR="+dir, "SERVER_JVMFLAGS=-Xmx256m -Dzookeeper.extendedTypesEnabled=true")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logFile.Close()
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("ZooKeeper did not listen on %s within a minute:\n%s", addr, log)
		}
	}
}
