package tree

import (
	"maps"
	"slices"

	"github.com/rubin-go/rubin/coord/proto"
)

// watchBits are the kinds of watch a session has on a path. A session has
// each kind at most once a path; the one-shot kinds go when they fire, the
// persistent ones stay until removed.
type watchBits uint8

const (
	watchData       watchBits = 1 << iota // from getData or exists: fires once
	watchChild                            // from getChildren: fires once
	watchPersistent                       // addWatch persistent
	watchRecursive                        // addWatch persistent recursive
	watchAll        = watchData | watchChild | watchPersistent | watchRecursive
)

// The watcher types of removeWatches and checkWatches past those in
// proto: a persistent and a persistent recursive watch, as ZooKeeper 3.9
// numbers them.
const (
	WatcherPersistent          proto.WatcherType = 4
	WatcherPersistentRecursive proto.WatcherType = 5
)

// watchOverhead is what a watch costs beyond its path's length, in
// Config.MaxWatchBytes and MaxWatchTotal: a watch on any path costs at
// least this, so the bytes bound the count too.
const watchOverhead = 32

// addWatch gives the session a watch of kind bit on path.
func (t *Tree) addWatch(s *session, path string, bit watchBits) error {
	old := s.watches[path]
	if old&bit == bit {
		return nil
	}
	if old == 0 {
		add := len(path) + watchOverhead
		if s.watchBytes+add > t.cfg.MaxWatchBytes || t.watchTotal+int64(add) > t.cfg.MaxWatchTotal {
			return proto.CodeQuotaExceeded
		}
		s.watchBytes += add
		t.watchTotal += int64(add)
		idx := t.watches[path]
		if idx == nil {
			idx = map[int64]struct{}{}
			t.watches[path] = idx
		}
		idx[s.id] = struct{}{}
	}
	s.watches[path] = old | bit
	if bit&watchRecursive != 0 {
		t.recursive++
	}
	return nil
}

// dropWatch removes the kinds in bits from the session's watches on path
// and reports whether it had any of them.
func (t *Tree) dropWatch(s *session, path string, bits watchBits) bool {
	old := s.watches[path]
	if old&bits == 0 {
		return false
	}
	if old&bits&watchRecursive != 0 {
		t.recursive--
	}
	if left := old &^ bits; left != 0 {
		s.watches[path] = left
		return true
	}
	delete(s.watches, path)
	s.watchBytes -= len(path) + watchOverhead
	t.watchTotal -= int64(len(path) + watchOverhead)
	idx := t.watches[path]
	delete(idx, s.id)
	if len(idx) == 0 {
		delete(t.watches, path)
	}
	return true
}

// AddWatch gives the session a persistent watch on path, or with
// AddWatchPersistentRecursive a persistent recursive one, which stays
// until removed. A persistent watch fires for the node's creation,
// deletion, data and children; a recursive one for the creation,
// deletion and data of the node and of every node beneath it. The node
// need not exist. Events for nodes the session may not read are not sent
// (but count as fired).
func (t *Tree) AddWatch(session int64, path string, mode proto.AddWatchMode) error {
	s, err := t.reader(session)
	if err != nil {
		return err
	}
	if !validPath(path) {
		return proto.CodeBadArguments
	}
	switch mode {
	case proto.AddWatchPersistent:
		return t.addWatch(s, path, watchPersistent)
	case proto.AddWatchPersistentRecursive:
		return t.addWatch(s, path, watchRecursive)
	}
	return proto.CodeBadArguments
}

// watcherOf returns the session and the watch kinds a watcher type names:
// children and data name the one-shot watches; any names every kind.
func (t *Tree) watcherOf(session int64, typ proto.WatcherType) (*session, watchBits, error) {
	s, err := t.reader(session)
	if err != nil {
		return nil, 0, err
	}
	switch typ {
	case proto.WatcherChildren:
		return s, watchChild, nil
	case proto.WatcherData:
		return s, watchData, nil
	case proto.WatcherAny:
		return s, watchAll, nil
	case WatcherPersistent:
		return s, watchPersistent, nil
	case WatcherPersistentRecursive:
		return s, watchRecursive, nil
	}
	return nil, 0, proto.CodeBadArguments
}

// RemoveWatches removes the session's watches of type typ on path, or
// fails with CodeNoWatcher if it has none. ZooKeeper's server sends no
// event for it; the client raises its own.
func (t *Tree) RemoveWatches(session int64, path string, typ proto.WatcherType) error {
	s, mask, err := t.watcherOf(session, typ)
	if err != nil {
		return err
	}
	if !t.dropWatch(s, path, mask) {
		return proto.CodeNoWatcher
	}
	return nil
}

// CheckWatches succeeds if the session has a watch of type typ on path,
// and fails with CodeNoWatcher if not.
func (t *Tree) CheckWatches(session int64, path string, typ proto.WatcherType) error {
	s, mask, err := t.watcherOf(session, typ)
	if err != nil {
		return err
	}
	if s.watches[path]&mask == 0 {
		return proto.CodeNoWatcher
	}
	return nil
}

// SetWatches re-registers a reconnecting client's watches, as ZooKeeper's
// setWatches2: relZxid is the last zxid the client saw. A data watch on a
// node that is gone fires NodeDeleted at once, on one changed since
// relZxid NodeDataChanged; an exist watch on a node that now exists fires
// NodeCreated; a child watch fires NodeDeleted or, if the children
// changed since relZxid, NodeChildrenChanged. The rest are registered.
// An exist or persistent watch on an invalid path can never fire and is
// dropped. Past Config.MaxWatchBytes or MaxWatchTotal it stops with
// CodeQuotaExceeded, returning the events so far.
func (t *Tree) SetWatches(session int64, relZxid int64, data, exist, child, persistent, recursive []string) ([]Event, error) {
	s, err := t.reader(session)
	if err != nil {
		return nil, err
	}
	var evs []Event
	ev := func(typ proto.EventType, p string) { evs = append(evs, Event{Session: session, Type: typ, Path: p}) }
	for _, p := range data {
		switch n := t.nodes[p]; {
		case n == nil:
			ev(proto.EventNodeDeleted, p)
		case n.stat.Mzxid > relZxid:
			ev(proto.EventNodeDataChanged, p)
		default:
			if err := t.addWatch(s, p, watchData); err != nil {
				return evs, err
			}
		}
	}
	for _, p := range exist {
		switch {
		case t.nodes[p] != nil:
			ev(proto.EventNodeCreated, p)
		case validPath(p):
			if err := t.addWatch(s, p, watchData); err != nil {
				return evs, err
			}
		}
	}
	for _, p := range child {
		switch n := t.nodes[p]; {
		case n == nil:
			ev(proto.EventNodeDeleted, p)
		case n.stat.Pzxid > relZxid:
			ev(proto.EventNodeChildrenChanged, p)
		default:
			if err := t.addWatch(s, p, watchChild); err != nil {
				return evs, err
			}
		}
	}
	for i, list := range [][]string{persistent, recursive} {
		bit := []watchBits{watchPersistent, watchRecursive}[i]
		for _, p := range list {
			if !validPath(p) {
				continue
			}
			if err := t.addWatch(s, p, bit); err != nil {
				return evs, err
			}
		}
	}
	return evs, nil
}

// A trigger is a change that fires watches: a node created, deleted or
// given new data, with the ACLs that decide who may hear of it.
type trigger struct {
	kind      triggerKind
	path      string
	acl       []proto.ACL
	parentACL []proto.ACL
}

type triggerKind uint8

const (
	created triggerKind = iota
	deleted
	changed
)

// fire turns the write's triggers into events, as ZooKeeper's DataTree
// triggers its two watch managers: for a creation the node's data watches
// (NodeCreated) then its parent's child watches (NodeChildrenChanged); for
// a deletion the node's data watches, its child watches (NodeDeleted, once
// a session) and its parent's child watches; for new data the node's data
// watches. Within one step the sessions come in order of id.
func (t *Tree) fire() []Event {
	var evs []Event
	for _, tr := range t.triggers {
		parent := "/"
		if tr.path != "/" {
			parent, _ = parentOf(tr.path)
		}
		switch tr.kind {
		case created:
			evs = t.deliver(evs, t.dataWatchers(tr.path), nil, proto.EventNodeCreated, tr.path, tr.acl)
			evs = t.deliver(evs, t.childWatchers(parent), nil, proto.EventNodeChildrenChanged, parent, tr.parentACL)
		case deleted:
			heard := t.dataWatchers(tr.path)
			evs = t.deliver(evs, heard, nil, proto.EventNodeDeleted, tr.path, tr.acl)
			evs = t.deliver(evs, t.childWatchers(tr.path), heard, proto.EventNodeDeleted, tr.path, tr.acl)
			evs = t.deliver(evs, t.childWatchers(parent), nil, proto.EventNodeChildrenChanged, parent, tr.parentACL)
		case changed:
			evs = t.deliver(evs, t.dataWatchers(tr.path), nil, proto.EventNodeDataChanged, tr.path, tr.acl)
		}
	}
	t.triggers = t.triggers[:0]
	return evs
}

// dataWatchers returns the sessions whose watches on path's data side
// fire for a change at path: its data, persistent and recursive watches,
// and recursive watches on its ancestors. The one-shot ones go.
func (t *Tree) dataWatchers(path string) map[int64]bool {
	got := t.watchers(nil, path, watchData|watchPersistent|watchRecursive, watchData)
	if t.recursive == 0 {
		return got
	}
	for p := path; p != "/"; {
		p, _ = parentOf(p)
		got = t.watchers(got, p, watchRecursive, 0)
	}
	return got
}

// childWatchers returns the sessions whose child or persistent watches on
// path fire for a change of its children or its deletion. The one-shot
// ones go.
func (t *Tree) childWatchers(path string) map[int64]bool {
	return t.watchers(nil, path, watchChild|watchPersistent, watchChild)
}

// watchers adds to got the sessions with a watch of a kind in fires on
// path, and removes their watches of the kinds in spent.
func (t *Tree) watchers(got map[int64]bool, path string, fires, spent watchBits) map[int64]bool {
	for id := range t.watches[path] {
		s := t.sessions[id]
		bits := s.watches[path]
		if bits&fires == 0 {
			continue
		}
		if got == nil {
			got = map[int64]bool{}
		}
		got[id] = true
		if bits&spent != 0 {
			t.dropWatch(s, path, spent)
		}
	}
	return got
}

// deliver appends an event for each session in got but not in skip, in
// order of id, leaving out the sessions that may not read acl (the watch
// still counts as fired, as in ZooKeeper).
func (t *Tree) deliver(evs []Event, got, skip map[int64]bool, typ proto.EventType, path string, acl []proto.ACL) []Event {
	for _, id := range slices.Sorted(maps.Keys(got)) {
		if skip[id] || !allowed(t.sessions[id].auth, acl, proto.PermRead) {
			continue
		}
		evs = append(evs, Event{Session: id, Type: typ, Path: path})
	}
	return evs
}
