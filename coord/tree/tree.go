package tree

import (
	"errors"
	"maps"
	"slices"

	"github.com/rubin-go/rubin/coord/proto"
)

// Config is what every replica's tree must agree on. A zero field takes
// its default.
type Config struct {
	// TickTime is ZooKeeper's tickTime in milliseconds, from which the
	// session timeout bounds default (2000).
	TickTime int32
	// MinSessionTimeout and MaxSessionTimeout bound the timeout a session
	// negotiates, in milliseconds (2 and 20 ticks: 4000 and 40000).
	MinSessionTimeout int32
	MaxSessionTimeout int32
	// ExpiryGrace is how long, in milliseconds, a session outlives its
	// timeout: a touch puts its deadline that much past the time plus the
	// timeout (default 0). The caller adds what the agreed time may be
	// off by (see coord.Config.ClockSkew); clients are told the timeout
	// alone.
	ExpiryGrace int32
	// MaxDataSize is the most data a znode holds, in bytes (0xfffff, one
	// byte short of 1 MiB: ZooKeeper's jute.maxbuffer).
	MaxDataSize int
	// MaxSessions bounds the open sessions (65536).
	MaxSessions int
	// MaxWatchBytes bounds one session's watches: the sum of its watched
	// paths' lengths plus 32 bytes a path (4 MiB).
	MaxWatchBytes int
	// MaxWatchTotal bounds all sessions' watches together, counted as
	// for MaxWatchBytes (256 MiB).
	MaxWatchTotal int64
	// MaxAuthBytes bounds one session's authenticated identities: the sum
	// of their schemes' and ids' lengths plus 32 bytes an identity (4 KiB).
	MaxAuthBytes int
	// MaxTreeBytes bounds the znodes' size in all: paths, data and ACLs,
	// plus 128 bytes a node (1 GiB). A create, setData or setACL that
	// would pass it fails with CodeQuotaExceeded, as a write past an
	// enforced quota does in ZooKeeper.
	MaxTreeBytes int64
	// SuperDigest, if set, is a digest identity "super:base64(sha1(...))";
	// a session that adds it with addauth digest may do anything, as
	// ZooKeeper's zookeeper.DigestAuthenticationProvider.superDigest.
	SuperDigest string
	// ExtendedTypes enables TTL nodes, as ZooKeeper's
	// zookeeper.extendedTypesEnabled; without it creating one fails with
	// CodeUnimplemented.
	ExtendedTypes bool
}

func (c Config) withDefaults() Config {
	if c.TickTime <= 0 {
		c.TickTime = 2000
	}
	if c.MinSessionTimeout <= 0 {
		c.MinSessionTimeout = 2 * c.TickTime
	}
	if c.MaxSessionTimeout <= 0 {
		c.MaxSessionTimeout = 20 * c.TickTime
	}
	if c.MaxSessionTimeout < c.MinSessionTimeout {
		c.MaxSessionTimeout = c.MinSessionTimeout
	}
	if c.MaxDataSize <= 0 {
		c.MaxDataSize = 0xfffff
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 1 << 16
	}
	if c.MaxWatchBytes <= 0 {
		c.MaxWatchBytes = 4 << 20
	}
	if c.MaxWatchTotal <= 0 {
		c.MaxWatchTotal = 256 << 20
	}
	if c.MaxTreeBytes <= 0 {
		c.MaxTreeBytes = 1 << 30
	}
	if c.MaxAuthBytes <= 0 {
		c.MaxAuthBytes = 4 << 10
	}
	c.ExpiryGrace = max(c.ExpiryGrace, 0)
	return c
}

// A Write is what the caller has agreed on for one write: the session
// that asks, the zxid the write takes (above every zxid before it) and the
// agreed time in milliseconds since the epoch.
type Write struct {
	Session int64
	Zxid    int64
	Time    int64
}

// An Event is a watch event for a session: what happened at a path.
type Event struct {
	Session int64
	Type    proto.EventType
	Path    string
}

// ErrZxid is returned by a write whose zxid is not above the tree's last
// zxid; the write changes nothing. It is the caller's mistake, not a
// client's, and has no ZooKeeper code.
var ErrZxid = errors.New("tree: zxid not above the last zxid")

// A node is a znode. Its stat is ZooKeeper's StatPersisted: Cversion
// counts the creations of children (the sequence number), and
// EphemeralOwner may be a container's or TTL node's; clientStat turns it
// into what clients see. DataLength and NumChildren are kept current.
type node struct {
	data     []byte
	acl      []proto.ACL
	stat     proto.Stat
	children map[string]struct{}
}

// clientStat returns the node's Stat as ZooKeeper's DataNode.copyStat
// gives it to clients: cversion counts every change to the children, a
// deletion for each creation whose child is gone (twice the creations
// less the children left), and only a session shows as ephemeral owner.
func (n *node) clientStat() proto.Stat {
	st := n.stat
	st.Cversion = st.Cversion*2 - st.NumChildren
	if !sessionOwner(st.EphemeralOwner) {
		st.EphemeralOwner = 0
	}
	return st
}

// Tree is the coordination service's state. It is not safe for
// concurrent use.
type Tree struct {
	cfg        Config
	nodes      map[string]*node
	sessions   map[int64]*session
	watches    map[string]map[int64]struct{} // path → sessions watching it
	recursive  int                           // recursive watches in all
	watchTotal int64                         // all sessions' watchBytes
	containers map[string]struct{}
	ttls       map[string]struct{}
	lastZxid   int64
	size       int64 // the nodes' nodeSize in all

	// While a write runs: the watch triggers it caused, fired when it
	// commits, and (inside a multi) how to undo each change.
	triggers []trigger
	undo     []func()
	inMulti  bool
}

// New returns a tree holding what a fresh ZooKeeper server holds: the root
// and /zookeeper with its children quota and config (config readable by
// anyone and writable by none).
func New(cfg Config) *Tree {
	t := empty(cfg)
	open := slices.Clone(proto.OpenACL)
	t.put("/", &node{acl: open})
	t.put(procPath, &node{acl: open})
	t.put(quotaPath, &node{acl: open})
	t.put(configPath, &node{
		acl:  []proto.ACL{{Perms: proto.PermRead, ID: proto.WorldAnyone}},
		stat: proto.Stat{Aversion: -1},
	})
	t.link("/", "zookeeper")
	t.link(procPath, "quota")
	t.link(procPath, "config")
	return t
}

func empty(cfg Config) *Tree {
	return &Tree{
		cfg:        cfg.withDefaults(),
		nodes:      map[string]*node{},
		sessions:   map[int64]*session{},
		watches:    map[string]map[int64]struct{}{},
		containers: map[string]struct{}{},
		ttls:       map[string]struct{}{},
	}
}

// nodeOverhead is what a node costs beyond its path, data and ACL, in
// Config.MaxTreeBytes.
const nodeOverhead = 128

// nodeSize is what a node counts for in Config.MaxTreeBytes.
func nodeSize(path string, dataLen int, acl []proto.ACL) int64 {
	return int64(len(path)+dataLen+nodeOverhead) + aclSize(acl)
}

func aclSize(acl []proto.ACL) int64 {
	var n int64
	for _, a := range acl {
		n += int64(len(a.ID.Scheme) + len(a.ID.ID) + 8)
	}
	return n
}

// fits returns CodeQuotaExceeded unless the tree can grow by delta bytes.
func (t *Tree) fits(delta int64) error {
	if t.size+delta > t.cfg.MaxTreeBytes {
		return proto.CodeQuotaExceeded
	}
	return nil
}

// put adds a node to the map of nodes and counts its size.
func (t *Tree) put(path string, n *node) {
	t.nodes[path] = n
	t.size += nodeSize(path, len(n.data), n.acl)
}

// drop removes a node from the map of nodes and its size from the count.
func (t *Tree) drop(path string) {
	n := t.nodes[path]
	t.size -= nodeSize(path, len(n.data), n.acl)
	delete(t.nodes, path)
}

// link makes name a child of parent, changing no version.
func (t *Tree) link(parent, name string) {
	p := t.nodes[parent]
	if p.children == nil {
		p.children = map[string]struct{}{}
	}
	p.children[name] = struct{}{}
	p.stat.NumChildren = int32(len(p.children))
}

// unlink removes name from parent's children.
func (t *Tree) unlink(parent, name string) {
	p := t.nodes[parent]
	delete(p.children, name)
	p.stat.NumChildren = int32(len(p.children))
}

// LastZxid returns the zxid of the last write, whether it succeeded or
// not (ZooKeeper logs failed writes too).
func (t *Tree) LastZxid() int64 { return t.lastZxid }

// Config returns the tree's configuration, defaults filled in.
func (t *Tree) Config() Config { return t.cfg }

// begin starts a write: it checks and takes the zxid, then finds the
// session.
func (t *Tree) begin(w Write) (*session, error) {
	if w.Zxid <= t.lastZxid {
		return nil, ErrZxid
	}
	t.lastZxid = w.Zxid
	t.triggers = t.triggers[:0]
	s := t.sessions[w.Session]
	if s == nil {
		return nil, proto.CodeSessionExpired
	}
	return s, nil
}

// reader finds the session of a read.
func (t *Tree) reader(session int64) (*session, error) {
	s := t.sessions[session]
	if s == nil {
		return nil, proto.CodeSessionExpired
	}
	return s, nil
}

// onUndo records how to undo a change made inside a multi.
func (t *Tree) onUndo(f func()) {
	if t.inMulti {
		t.undo = append(t.undo, f)
	}
}

// get returns the node at path, or CodeNoNode.
func (t *Tree) get(path string) (*node, error) {
	n := t.nodes[path]
	if n == nil {
		return nil, proto.CodeNoNode
	}
	return n, nil
}

// sortedChildren returns n's children's names in order.
func sortedChildren(n *node) []string {
	return slices.Sorted(maps.Keys(n.children))
}
