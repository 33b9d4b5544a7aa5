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
	return path, n.clientStat(), nil
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
	return n.clientStat(), nil
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
	return n.clientStat(), nil
}
