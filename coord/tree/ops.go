package tree

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rubin-go/rubin/coord/proto"
)

// Ephemeral owners that are not sessions (ZooKeeper's EphemeralType): a
// container's, and a TTL node's, whose low 40 bits hold its TTL.
const (
	containerOwner int64 = math.MinInt64
	ttlOwner       int64 = -1 << 56 // 0xff00000000000000
	maxTTL         int64 = 1<<40 - 1
)

// sessionOwner reports whether an ephemeral owner is a session: not 0,
// not a container's, not a TTL node's.
func sessionOwner(owner int64) bool {
	return owner != 0 && owner != containerOwner && owner&ttlOwner != ttlOwner
}

// ValidSessionID reports whether id can name a session: an ephemeral
// owner that is neither 0 nor taken by containers and TTL nodes (whose
// owners have all of the top byte set).
func ValidSessionID(id int64) bool { return sessionOwner(id) }

// checkData checks data's length against the limit. ZooKeeper cannot
// decode a request with more than jute.maxbuffer bytes of data and
// answers a request it cannot decode with CodeMarshallingError.
func (t *Tree) checkData(data []byte) error {
	if len(data) > t.cfg.MaxDataSize {
		return proto.CodeMarshallingError
	}
	return nil
}

// Create makes a znode at path (with mode's sequence number appended) and
// returns its path and Stat. The path, after the sequence number, must be
// valid by ZooKeeper's rules: it starts with "/", has no empty, "." or
// ".." names, no trailing "/" and none of the characters ZooKeeper
// rejects (controls, U+007F–U+009F, U+D800–U+F8FF, U+FFF0 and above);
// else the create fails with CodeBadArguments. acl may name the scheme
// "auth", which stands for the session's digest identities. Create in a
// TTL mode fails with CodeBadArguments: use CreateTTL.
func (t *Tree) Create(w Write, path string, data []byte, acl []proto.ACL, mode proto.CreateMode) (string, proto.Stat, []Event, error) {
	return t.CreateTTL(w, path, data, acl, mode, -1)
}

// CreateTTL is Create with a time to live in milliseconds, which a TTL
// mode needs (1 to 2^40-1) and every other mode must leave negative.
func (t *Tree) CreateTTL(w Write, path string, data []byte, acl []proto.ACL, mode proto.CreateMode, ttl int64) (string, proto.Stat, []Event, error) {
	s, err := t.begin(w)
	if err != nil {
		return "", proto.Stat{}, nil, err
	}
	p, st, err := t.create(s, w, path, data, acl, mode, ttl)
	if err != nil {
		return "", proto.Stat{}, nil, err
	}
	return p, st, t.fire(), nil
}

func ttlMode(m proto.CreateMode) bool {
	return m == proto.ModePersistentWithTTL || m == proto.ModePersistentSequentialWithTTL
}

// create checks a create as ZooKeeper's PrepRequestProcessor does, in its
// order, and applies it.
func (t *Tree) create(s *session, w Write, path string, data []byte, acl []proto.ACL, mode proto.CreateMode, ttl int64) (string, proto.Stat, error) {
	if mode < proto.ModePersistent || mode > proto.ModePersistentSequentialWithTTL {
		return "", proto.Stat{}, proto.CodeBadArguments
	}
	if err := t.checkData(data); err != nil {
		return "", proto.Stat{}, err
	}
	if ttlMode(mode) {
		if !t.cfg.ExtendedTypes {
			return "", proto.Stat{}, proto.CodeUnimplemented
		}
		if ttl <= 0 || ttl > maxTTL {
			return "", proto.Stat{}, proto.CodeBadArguments
		}
	} else if ttl >= 0 {
		return "", proto.Stat{}, proto.CodeBadArguments
	}
	last := strings.LastIndexByte(path, '/')
	if last < 0 || strings.IndexByte(path, 0) >= 0 {
		return "", proto.Stat{}, proto.CodeBadArguments
	}
	parentPath := path[:last]
	if parentPath == "" {
		parentPath = "/"
	}
	acl, err := t.fixupACL(s, acl)
	if err != nil {
		return "", proto.Stat{}, err
	}
	parent, err := t.get(parentPath)
	if err != nil {
		return "", proto.Stat{}, err
	}
	if err := t.checkACL(s, parent.acl, proto.PermCreate); err != nil {
		return "", proto.Stat{}, err
	}
	if mode.Sequential() {
		path += fmt.Sprintf("%010d", parent.stat.Cversion)
	}
	if !validPath(path) {
		return "", proto.Stat{}, proto.CodeBadArguments
	}
	if t.nodes[path] != nil {
		return "", proto.Stat{}, proto.CodeNodeExists
	}
	if sessionOwner(parent.stat.EphemeralOwner) {
		return "", proto.Stat{}, proto.CodeNoChildrenForEphemerals
	}
	if err := t.fits(nodeSize(path, len(data), acl)); err != nil {
		return "", proto.Stat{}, err
	}
	var owner int64
	switch {
	case mode == proto.ModeContainer:
		owner = containerOwner
	case ttlMode(mode):
		owner = ttlOwner | ttl
	case mode.Ephemeral():
		owner = s.id
	}
	n := &node{
		data: slices.Clone(data),
		acl:  acl,
		stat: proto.Stat{
			Czxid: w.Zxid, Mzxid: w.Zxid, Pzxid: w.Zxid,
			Ctime: w.Time, Mtime: w.Time,
			EphemeralOwner: owner,
			DataLength:     int32(len(data)),
		},
	}
	if n.data == nil {
		n.data = []byte{}
	}
	t.addNode(path, n, w.Zxid)
	return path, n.stat, nil
}

// addNode links a new node under its parent, counting the change in the
// parent's cversion and pzxid, and queues its watch triggers.
func (t *Tree) addNode(path string, n *node, zxid int64) {
	parentPath, name := parentOf(path)
	parent := t.nodes[parentPath]
	old := parent.stat
	t.put(path, n)
	t.link(parentPath, name)
	parent.stat.Cversion++
	parent.stat.Pzxid = zxid
	t.index(path, n.stat.EphemeralOwner, true)
	t.onUndo(func() {
		t.index(path, n.stat.EphemeralOwner, false)
		t.unlink(parentPath, name)
		t.drop(path)
		parent.stat = old
	})
	t.triggers = append(t.triggers, trigger{kind: created, path: path, acl: n.acl, parentACL: parent.acl})
}

// index adds path to (or removes it from) the set its owner puts it in:
// its session's ephemerals, the containers, or the TTL nodes.
func (t *Tree) index(path string, owner int64, add bool) {
	var set map[string]struct{}
	switch {
	case owner == 0:
		return
	case owner == containerOwner:
		set = t.containers
	case !sessionOwner(owner):
		set = t.ttls
	default:
		s := t.sessions[owner]
		if s == nil {
			return
		}
		set = s.ephemerals
	}
	if add {
		set[path] = struct{}{}
	} else {
		delete(set, path)
	}
}

// Delete removes the znode at path if its version is version (-1 matches
// any) and it has no children.
func (t *Tree) Delete(w Write, path string, version int32) ([]Event, error) {
	s, err := t.begin(w)
	if err != nil {
		return nil, err
	}
	if err := t.delete(s, w, path, version); err != nil {
		return nil, err
	}
	return t.fire(), nil
}

func (t *Tree) delete(s *session, w Write, path string, version int32) error {
	if !validPath(path) || specialPath(path) {
		return proto.CodeBadArguments
	}
	parentPath, _ := parentOf(path)
	parent, err := t.get(parentPath)
	if err != nil {
		return err
	}
	if err := t.checkACL(s, parent.acl, proto.PermDelete); err != nil {
		return err
	}
	n, err := t.get(path)
	if err != nil {
		return err
	}
	if version != -1 && version != n.stat.Version {
		return proto.CodeBadVersion
	}
	if len(n.children) > 0 {
		return proto.CodeNotEmpty
	}
	t.removeNode(path, w.Zxid)
	return nil
}

// removeNode unlinks a childless node from its parent, counting the change
// in the parent's pzxid (not its cversion, as in ZooKeeper), and queues
// its watch triggers.
func (t *Tree) removeNode(path string, zxid int64) {
	parentPath, name := parentOf(path)
	parent := t.nodes[parentPath]
	n := t.nodes[path]
	old := parent.stat
	t.unlink(parentPath, name)
	t.drop(path)
	if zxid > parent.stat.Pzxid {
		parent.stat.Pzxid = zxid
	}
	t.index(path, n.stat.EphemeralOwner, false)
	t.onUndo(func() {
		t.put(path, n)
		t.link(parentPath, name)
		parent.stat = old
		t.index(path, n.stat.EphemeralOwner, true)
	})
	t.triggers = append(t.triggers, trigger{kind: deleted, path: path, acl: n.acl, parentACL: parent.acl})
}

// SetData replaces the data of the znode at path if its version is
// version (-1 matches any), and returns its new Stat.
func (t *Tree) SetData(w Write, path string, data []byte, version int32) (proto.Stat, []Event, error) {
	s, err := t.begin(w)
	if err != nil {
		return proto.Stat{}, nil, err
	}
	st, err := t.setData(s, w, path, data, version)
	if err != nil {
		return proto.Stat{}, nil, err
	}
	return st, t.fire(), nil
}

func (t *Tree) setData(s *session, w Write, path string, data []byte, version int32) (proto.Stat, error) {
	if err := t.checkData(data); err != nil {
		return proto.Stat{}, err
	}
	if !validPath(path) {
		return proto.Stat{}, proto.CodeBadArguments
	}
	n, err := t.get(path)
	if err != nil {
		return proto.Stat{}, err
	}
	if err := t.checkACL(s, n.acl, proto.PermWrite); err != nil {
		return proto.Stat{}, err
	}
	if err := t.fits(int64(len(data) - len(n.data))); err != nil {
		return proto.Stat{}, err
	}
	if version != -1 && version != n.stat.Version {
		return proto.Stat{}, proto.CodeBadVersion
	}
	oldData, oldStat := n.data, n.stat
	t.size += int64(len(data) - len(n.data))
	n.data = slices.Clone(data)
	if n.data == nil {
		n.data = []byte{}
	}
	n.stat.Version++
	n.stat.Mtime = w.Time
	n.stat.Mzxid = w.Zxid
	n.stat.DataLength = int32(len(data))
	t.onUndo(func() {
		t.size += int64(len(oldData) - len(n.data))
		n.data, n.stat = oldData, oldStat
	})
	t.triggers = append(t.triggers, trigger{kind: changed, path: path, acl: n.acl})
	return n.stat, nil
}

// Check succeeds if the znode at path exists, the session may read it,
// and its version is version (-1 matches any). It is a write, as in
// ZooKeeper: it takes a zxid and changes nothing else.
func (t *Tree) Check(w Write, path string, version int32) error {
	s, err := t.begin(w)
	if err != nil {
		return err
	}
	return t.check(s, path, version)
}

func (t *Tree) check(s *session, path string, version int32) error {
	if !validPath(path) {
		return proto.CodeBadArguments
	}
	n, err := t.get(path)
	if err != nil {
		return err
	}
	if err := t.checkACL(s, n.acl, proto.PermRead); err != nil {
		return err
	}
	if version != -1 && version != n.stat.Version {
		return proto.CodeBadVersion
	}
	return nil
}

// SetACL replaces the ACL of the znode at path if its aversion is version
// (-1 matches any), and returns its new Stat. It fires no watch.
func (t *Tree) SetACL(w Write, path string, acl []proto.ACL, version int32) (proto.Stat, error) {
	s, err := t.begin(w)
	if err != nil {
		return proto.Stat{}, err
	}
	if !validPath(path) {
		return proto.Stat{}, proto.CodeBadArguments
	}
	acl, err = t.fixupACL(s, acl)
	if err != nil {
		return proto.Stat{}, err
	}
	n, err := t.get(path)
	if err != nil {
		return proto.Stat{}, err
	}
	if err := t.checkACL(s, n.acl, proto.PermAdmin); err != nil {
		return proto.Stat{}, err
	}
	if version != -1 && version != n.stat.Aversion {
		return proto.Stat{}, proto.CodeBadVersion
	}
	grow := aclSize(acl) - aclSize(n.acl)
	if err := t.fits(grow); err != nil {
		return proto.Stat{}, err
	}
	t.size += grow
	n.acl = acl
	n.stat.Aversion++
	return n.stat, nil
}

// Exists returns the Stat of the znode at path, or CodeNoNode. With watch
// it leaves a watch for the session that fires when the node is created,
// changed or deleted, whether or not it exists now. As in ZooKeeper it
// checks no ACL; unlike ZooKeeper, which only rejects a NUL, it rejects
// every invalid path with CodeBadArguments, so no watch is left on one.
func (t *Tree) Exists(session int64, path string, watch bool) (proto.Stat, error) {
	s, err := t.reader(session)
	if err != nil {
		return proto.Stat{}, err
	}
	if !validPath(path) {
		return proto.Stat{}, proto.CodeBadArguments
	}
	if watch {
		if err := t.addWatch(s, path, watchData); err != nil {
			return proto.Stat{}, err
		}
	}
	n, err := t.get(path)
	if err != nil {
		return proto.Stat{}, err
	}
	return n.stat, nil
}

// readable returns the node at path if the session has perm on it.
func (t *Tree) readable(s *session, path string, perm proto.Perms) (*node, error) {
	n, err := t.get(path)
	if err != nil {
		return nil, err
	}
	if err := t.checkACL(s, n.acl, perm); err != nil {
		return nil, err
	}
	return n, nil
}

// GetData returns the data and Stat of the znode at path. With watch it
// leaves a watch that fires when the node changes or is deleted. The data
// is the tree's own: the caller must not modify it.
func (t *Tree) GetData(session int64, path string, watch bool) ([]byte, proto.Stat, error) {
	n, err := t.read(session, path, watch, watchData)
	if err != nil {
		return nil, proto.Stat{}, err
	}
	return n.data, n.stat, nil
}

// GetChildren returns the names of the children of the znode at path in
// byte order, and the node's Stat (which getChildren2 returns). With
// watch it leaves a watch that fires when a child is created or deleted,
// or the node is deleted.
func (t *Tree) GetChildren(session int64, path string, watch bool) ([]string, proto.Stat, error) {
	n, err := t.read(session, path, watch, watchChild)
	if err != nil {
		return nil, proto.Stat{}, err
	}
	return sortedChildren(n), n.stat, nil
}

// read returns the node at path for a read by session, which needs read
// permission, and with watch leaves a watch of kind bit.
func (t *Tree) read(session int64, path string, watch bool, bit watchBits) (*node, error) {
	s, err := t.reader(session)
	if err != nil {
		return nil, err
	}
	n, err := t.readable(s, path, proto.PermRead)
	if err != nil {
		return nil, err
	}
	if watch {
		if err := t.addWatch(s, path, bit); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// GetACL returns the ACL and Stat of the znode at path. It needs read or
// admin permission; without admin, digest identities come back with
// their password hash replaced by "x", as ZooKeeper does.
func (t *Tree) GetACL(session int64, path string) ([]proto.ACL, proto.Stat, error) {
	s, err := t.reader(session)
	if err != nil {
		return nil, proto.Stat{}, err
	}
	n, err := t.readable(s, path, proto.PermRead|proto.PermAdmin)
	if err != nil {
		return nil, proto.Stat{}, err
	}
	acl := slices.Clone(n.acl)
	if t.checkACL(s, n.acl, proto.PermAdmin) != nil {
		for i, a := range acl {
			if a.ID.Scheme == "digest" {
				user, _, _ := strings.Cut(a.ID.ID, ":")
				acl[i].ID.ID = user + ":x"
			}
		}
	}
	return acl, n.stat, nil
}

// GetAllChildrenNumber returns how many znodes are beneath path, at any
// depth. Beneath the root that counts /zookeeper and its children, as
// ZooKeeper does.
func (t *Tree) GetAllChildrenNumber(session int64, path string) (int32, error) {
	s, err := t.reader(session)
	if err != nil {
		return 0, err
	}
	if _, err := t.readable(s, path, proto.PermRead); err != nil {
		return 0, err
	}
	var c int32
	for stack := []string{path}; len(stack) > 0; {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for name := range t.nodes[p].children {
			c++
			stack = append(stack, childPath(p, name))
		}
	}
	return c, nil
}

// GetEphemerals returns the session's ephemeral nodes whose paths start
// with prefix (all of them for "" or "/"), in byte order.
func (t *Tree) GetEphemerals(session int64, prefix string) ([]string, error) {
	s, err := t.reader(session)
	if err != nil {
		return nil, err
	}
	all := strings.TrimSpace(prefix) == "" || strings.TrimSpace(prefix) == "/"
	var out []string
	for p := range s.ephemerals {
		if all || strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}
