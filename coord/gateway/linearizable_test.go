package gateway_test

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/go-zookeeper/zk"
)

// znodeKind is an operation of the linearizability test.
type znodeKind int

const (
	zGet    znodeKind = iota // getData without a watch: the read-only path
	zSet                     // setData, with an expected version or -1
	zCreate                  // create, persistent
	zDelete                  // delete, any version
	zMulti                   // multi: check the version, then setData with -1
)

var znodeKindNames = [...]string{"get", "set", "create", "delete", "multi"}

// znodeStatus is how an operation ended.
type znodeStatus int

const (
	zOK znodeStatus = iota
	zNoNode
	zNodeExists
	zBadVersion
	zUnknown // the request may or may not have taken effect
)

var znodeStatusNames = [...]string{"ok", "noNode", "nodeExists", "badVersion", "unknown"}

// znodeInput and znodeOutput are a history operation as the model sees it.
// Every write's data is unique in the history.
type znodeInput struct {
	kind    znodeKind
	path    string
	data    string
	version int32 // expected, for set (-1: any) and multi's check
}

type znodeOutput struct {
	status  znodeStatus
	data    string // get's
	version int32  // the version get read, or set or multi wrote
}

// znode is one path's state in the model.
type znode struct {
	exists  bool
	data    string
	version int32
}

// znodeStep is the sequential specification: what in does to z and what
// it answers.
func znodeStep(z znode, in znodeInput) (znode, znodeOutput) {
	switch {
	case in.kind == zCreate && z.exists:
		return z, znodeOutput{status: zNodeExists}
	case in.kind == zCreate:
		return znode{exists: true, data: in.data}, znodeOutput{}
	case !z.exists:
		return z, znodeOutput{status: zNoNode}
	}
	switch in.kind {
	case zGet:
		return z, znodeOutput{data: z.data, version: z.version}
	case zDelete:
		return znode{}, znodeOutput{}
	}
	if (in.kind == zMulti || in.version != -1) && in.version != z.version {
		return z, znodeOutput{status: zBadVersion}
	}
	z = znode{exists: true, data: in.data, version: z.version + 1}
	return z, znodeOutput{version: z.version}
}

// znodeModel is znodeStep for porcupine, partitioned by path: every
// operation touches one path, so each path's history must be linearizable
// on its own. A path starts absent. An operation of unknown outcome
// (which returns at the end of time) takes effect as its step says, if
// porcupine places it before the operations that can see it, or never.
func znodeModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byPath := map[string][]porcupine.Operation{}
			for _, op := range history {
				p := op.Input.(znodeInput).path
				byPath[p] = append(byPath[p], op)
			}
			return slices.Collect(maps.Values(byPath))
		},
		Init: func() any { return znode{} },
		Step: func(state, input, output any) (bool, any) {
			next, want := znodeStep(state.(znode), input.(znodeInput))
			got := output.(znodeOutput)
			return got.status == zUnknown || got == want, next
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(znodeInput), output.(znodeOutput)
			s := fmt.Sprintf("%s(%s", znodeKindNames[in.kind], in.path)
			switch in.kind {
			case zSet, zMulti:
				s += fmt.Sprintf(", %s, v%d", in.data, in.version)
			case zCreate:
				s += ", " + in.data
			}
			s += ") -> " + znodeStatusNames[out.status]
			if out.status == zOK && in.kind == zGet {
				s += fmt.Sprintf(" %s v%d", out.data, out.version)
			} else if out.status == zOK && (in.kind == zSet || in.kind == zMulti) {
				s += fmt.Sprintf(" v%d", out.version)
			}
			return s
		},
		DescribeState: func(state any) string {
			z := state.(znode)
			if !z.exists {
				return "absent"
			}
			return fmt.Sprintf("%s v%d", z.data, z.version)
		},
	}
}

// znodeOp is one operation of a history; ret is -1 if its outcome is
// unknown.
type znodeOp struct {
	client    int
	in        znodeInput
	out       znodeOutput
	call, ret int64
}

// checkZnodeHistory checks hist with porcupine and, if it is not
// linearizable, writes the visualization to dir (a new directory that
// outlives the test if dir is "") and returns an error naming it.
func checkZnodeHistory(hist []znodeOp, dir string) error {
	ops := make([]porcupine.Operation, len(hist))
	for i, op := range hist {
		ret := op.ret
		if ret < 0 {
			ret = math.MaxInt64
		}
		ops[i] = porcupine.Operation{ClientId: op.client, Input: op.in, Call: op.call, Output: op.out, Return: ret}
	}
	m := znodeModel()
	res, info := porcupine.CheckOperationsVerbose(m, ops, time.Minute)
	if res == porcupine.Ok {
		return nil
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "coord-linearizable-"); err != nil {
			return fmt.Errorf("history of %d operations: %s", len(hist), res)
		}
	}
	path := filepath.Join(dir, "history.html")
	if err := porcupine.VisualizePath(m, info, path); err != nil {
		return fmt.Errorf("history of %d operations: %s (no visualization: %v)", len(hist), res, err)
	}
	return fmt.Errorf("history of %d operations: %s; visualization in %s", len(hist), res, path)
}

// TestZnodeModel shows that the model can fail a history: stale data,
// a version that does not advance, a check that should have failed, a
// create of a node that exists; and that it allows what overlaps and what
// is of unknown outcome.
func TestZnodeModel(t *testing.T) {
	op := func(client int, kind znodeKind, data string, version int32, call, ret int64, st znodeStatus, outData string, outVersion int32) znodeOp {
		return znodeOp{client: client, in: znodeInput{kind: kind, path: "/a", data: data, version: version},
			out: znodeOutput{status: st, data: outData, version: outVersion}, call: call, ret: ret}
	}
	create := op(0, zCreate, "c", 0, 0, 10, zOK, "", 0)
	for _, tc := range []struct {
		name string
		hist []znodeOp
		ok   bool
	}{
		{"read after write", []znodeOp{create, op(0, zSet, "x", -1, 20, 30, zOK, "", 1), op(1, zGet, "", 0, 40, 50, zOK, "x", 1)}, true},
		{"stale read", []znodeOp{create, op(0, zSet, "x", -1, 20, 30, zOK, "", 1), op(1, zGet, "", 0, 40, 50, zOK, "c", 0)}, false},
		{"right data, wrong version", []znodeOp{create, op(0, zSet, "x", -1, 20, 30, zOK, "", 1), op(1, zGet, "", 0, 40, 50, zOK, "x", 0)}, false},
		{"concurrent read", []znodeOp{create, op(0, zSet, "x", -1, 20, 50, zOK, "", 1), op(1, zGet, "", 0, 30, 40, zOK, "c", 0)}, true},
		{"version does not advance", []znodeOp{create, op(0, zSet, "x", -1, 20, 30, zOK, "", 1), op(1, zSet, "y", -1, 40, 50, zOK, "", 1)}, false},
		{"set with a stale version succeeds", []znodeOp{create, op(0, zSet, "x", 0, 20, 30, zOK, "", 1), op(1, zSet, "y", 0, 40, 50, zOK, "", 2)}, false},
		{"set with a stale version fails", []znodeOp{create, op(0, zSet, "x", 0, 20, 30, zOK, "", 1), op(1, zSet, "y", 0, 40, 50, zBadVersion, "", 0)}, true},
		{"multi's check should fail", []znodeOp{create, op(0, zSet, "x", -1, 20, 30, zOK, "", 1), op(1, zMulti, "y", 0, 40, 50, zOK, "", 2)}, false},
		{"multi after its check", []znodeOp{create, op(0, zSet, "x", -1, 20, 30, zOK, "", 1), op(1, zMulti, "y", 1, 40, 50, zOK, "", 2)}, true},
		{"create over a node", []znodeOp{create, op(1, zCreate, "d", 0, 20, 30, zOK, "", 0)}, false},
		{"read after delete", []znodeOp{create, op(0, zDelete, "", -1, 20, 30, zOK, "", 0), op(1, zGet, "", 0, 40, 50, zOK, "c", 0)}, false},
		{"unknown set seen", []znodeOp{create, op(0, zSet, "x", -1, 20, -1, zUnknown, "", 0), op(1, zGet, "", 0, 40, 50, zOK, "x", 1)}, true},
		{"unknown set not seen", []znodeOp{create, op(0, zSet, "x", -1, 20, -1, zUnknown, "", 0), op(1, zGet, "", 0, 40, 50, zOK, "c", 0)}, true},
		{"unknown set seen, then lost", []znodeOp{create, op(0, zSet, "x", -1, 20, -1, zUnknown, "", 0),
			op(1, zGet, "", 0, 40, 50, zOK, "x", 1), op(1, zGet, "", 0, 60, 70, zOK, "c", 0)}, false},
		{"unknown set before its call", []znodeOp{create, op(1, zGet, "", 0, 20, 30, zOK, "x", 1), op(0, zSet, "x", -1, 40, -1, zUnknown, "", 0)}, false},
	} {
		err := checkZnodeHistory(tc.hist, t.TempDir())
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// cutter is a zk.Dialer whose connections the test can cut, all at once.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (c *cutter) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	conn, err := net.DialTimeout(network, address, timeout)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// znodeResult maps a zk call's error to the model's status: the errors
// the service answers are definite, anything else (a connection lost, a
// session expired) leaves the outcome unknown.
func znodeResult(err error) znodeStatus {
	switch {
	case err == nil:
		return zOK
	case errors.Is(err, zk.ErrNoNode):
		return zNoNode
	case errors.Is(err, zk.ErrNodeExists):
		return zNodeExists
	case errors.Is(err, zk.ErrBadVersion):
		return zBadVersion
	}
	return zUnknown
}

// TestLinearizable runs several ZooKeeper sessions, each its own client,
// on a few znodes at once: getData, setData with and without an expected
// version, multi of a version check and a setData, create and delete.
// A third of the way in, the primary crashes and every client's
// connection to the gateway is cut (the requests in flight have unknown
// outcomes; the sessions resume); two thirds in, the primary comes back
// empty. The history of every operation, with its call and return times,
// must be linearizable against a model of znodes (data and version).
func TestLinearizable(t *testing.T) { linearizable(t, newTestCluster(t)) }

// linearizable is TestLinearizable on the cluster tc.
func linearizable(t *testing.T, tc *testCluster) {
	const clients, opsPerClient = 5, 80
	var cut cutter
	conns := make([]*zk.Conn, clients)
	for i := range conns {
		conns[i] = tc.session(zk.Connect([]string{tc.addr}, 10*time.Second, zk.WithLogger(quietLogger{}), zk.WithDialer(cut.dial)))
	}
	h := newZnodeHistory(conns[0])
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() { h.client(i, c, func(n int) bool { return n < opsPerClient }) })
	}
	const total = clients * opsPerClient
	waitFor(t, 20*time.Second, "a third of the operations", func() bool { return h.done.Load() >= total/3 })
	tc.crash(0) // the primary of view 0
	cut.cut()
	waitFor(t, 20*time.Second, "two thirds of the operations", func() bool { return h.done.Load() >= 2*total/3 })
	tc.restart(0)
	wg.Wait()

	if v := tc.reps[1].Status().View; v == 0 {
		t.Fatal("no view change after the primary crashed")
	}
	h.check(t)
}

// znodePaths are the znodes of a history: setData and multi run on the
// first two, which exist from the start; create and delete on the last.
var znodePaths = []string{"/lin-a", "/lin-b", "/lin-k"}

// znodeHistory runs the operations of a linearizability test and records
// them, timed from its start.
type znodeHistory struct {
	start time.Time
	done  atomic.Int64 // operations done, recorded or not
	mu    sync.Mutex
	ops   []znodeOp
}

// newZnodeHistory starts a history, creating the znodes it needs through
// c (the history's first operations, of client 0).
func newZnodeHistory(c *zk.Conn) *znodeHistory {
	h := &znodeHistory{start: time.Now()}
	for _, p := range znodePaths[:2] {
		h.run(0, c, znodeInput{kind: zCreate, path: p, data: p + "-init"})
	}
	return h
}

func (h *znodeHistory) now() int64 { return int64(time.Since(h.start)) }

// run does one operation on c and records it; it returns the version it
// saw the node at, or -1.
func (h *znodeHistory) run(client int, c *zk.Conn, in znodeInput) int32 {
	op := znodeOp{client: client, in: in, call: h.now()}
	var err error
	switch in.kind {
	case zGet:
		var data []byte
		var st *zk.Stat
		if data, st, err = c.Get(in.path); err == nil {
			op.out.data, op.out.version = string(data), st.Version
		}
	case zSet:
		var st *zk.Stat
		if st, err = c.Set(in.path, []byte(in.data), in.version); err == nil {
			op.out.version = st.Version
		}
	case zCreate:
		_, err = c.Create(in.path, []byte(in.data), 0, open)
	case zDelete:
		err = c.Delete(in.path, -1)
	case zMulti:
		var res []zk.MultiResponse
		res, err = c.Multi(&zk.CheckVersionRequest{Path: in.path, Version: in.version},
			&zk.SetDataRequest{Path: in.path, Data: []byte(in.data), Version: -1})
		if err == nil {
			op.out.version = res[1].Stat.Version
		}
	}
	op.ret = h.now()
	if op.out.status = znodeResult(err); op.out.status == zUnknown {
		op.ret = -1
		if in.kind == zGet {
			return -1 // a read of unknown outcome says nothing
		}
	}
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
	if op.out.status == zOK && in.kind != zCreate && in.kind != zDelete {
		return op.out.version
	}
	return -1
}

// client runs client i's operations on c, chosen at random, while more
// says so of the number done. Every write's data is unique, and tells
// the truth (which a coordtest.Liar would falsify).
func (h *znodeHistory) client(i int, c *zk.Conn, more func(n int) bool) {
	rng := rand.New(rand.NewPCG(1, uint64(i)))
	seen := map[string]int32{}
	for n := 0; more(n); n++ {
		p := znodePaths[rng.IntN(len(znodePaths))]
		in := znodeInput{path: p, data: fmt.Sprintf("truth-c%d-%d", i, n), version: -1}
		switch r := rng.IntN(10); {
		case r < 4:
			in.kind = zGet
		case r < 6:
			in.kind = zSet
		case r < 7:
			in.kind = zSet
			in.version = seen[p]
		case r < 8:
			in.kind = zMulti
			in.version = seen[p]
		case p == znodePaths[2] && r < 9:
			in.kind = zCreate
		case p == znodePaths[2]:
			in.kind = zDelete
		default:
			in.kind = zGet
		}
		if v := h.run(i, c, in); v >= 0 {
			seen[p] = v
		}
		h.done.Add(1)
	}
}

// check fails t unless every kind of operation succeeded, a version
// check failed, and the history is linearizable.
func (h *znodeHistory) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	hist := slices.Clone(h.ops)
	h.mu.Unlock()
	var counts [len(znodeKindNames)][len(znodeStatusNames)]int
	for _, op := range hist {
		counts[op.in.kind][op.out.status]++
	}
	for k, byStatus := range counts {
		t.Logf("%-6s %v", znodeKindNames[k], byStatus)
		if byStatus[zOK] == 0 {
			t.Errorf("no %s succeeded", znodeKindNames[k])
		}
	}
	if counts[zSet][zBadVersion]+counts[zMulti][zBadVersion] == 0 {
		t.Error("no version check failed")
	}
	checked := time.Now()
	if err := checkZnodeHistory(hist, ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("linearizable: %d operations in %v, checked in %v", len(hist), checked.Sub(h.start).Round(time.Millisecond), time.Since(checked).Round(time.Millisecond))
}
