package tree

import (
	"slices"
	"strings"

	"github.com/rubin-go/rubin/coord/proto"
)

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
	return n.clientStat(), nil
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
	return n.data, n.clientStat(), nil
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
	return sortedChildren(n), n.clientStat(), nil
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
	return acl, n.clientStat(), nil
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
