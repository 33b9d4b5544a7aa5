package tree

import (
	"maps"
	"slices"
)

// Sweep deletes, as ZooKeeper's ContainerManager does, the empty
// container nodes that have had a child (cversion above 0) and the empty
// TTL nodes whose time since their last change (w.Time minus mtime) is
// past their TTL, in path order, all with w.Zxid; w.Session is not used.
// A container emptied by the sweep goes in the next one. It returns the
// deleted paths and the watch events.
func (t *Tree) Sweep(w Write) ([]string, []Event, error) {
	if w.Zxid <= t.lastZxid {
		return nil, nil, ErrZxid
	}
	t.lastZxid = w.Zxid
	t.triggers = t.triggers[:0]
	var gone []string
	for _, p := range slices.Sorted(maps.Keys(t.containers)) {
		if n := t.nodes[p]; len(n.children) == 0 && n.stat.Cversion > 0 {
			gone = append(gone, p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(t.ttls)) {
		n := t.nodes[p]
		if ttl := n.stat.EphemeralOwner &^ ttlOwner; len(n.children) == 0 && w.Time-n.stat.Mtime > ttl {
			gone = append(gone, p)
		}
	}
	slices.Sort(gone)
	for _, p := range gone {
		t.removeNode(p, w.Zxid)
	}
	return gone, t.fire(), nil
}
