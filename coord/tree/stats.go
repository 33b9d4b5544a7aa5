package tree

import "math/bits"

// Stats are the tree's counts, which ZooKeeper's four-letter words report
// (mntr, srvr, wchs). Every replica holding the same tree has the same.
type Stats struct {
	Nodes    int64 // znodes, the root and /zookeeper's included
	Sessions int64 // open sessions
	// Watches counts each kind of watch (data, child, persistent,
	// persistent recursive) a session has on a path once, as ZooKeeper
	// counts a data and a child watch on one path as two.
	Watches          int64
	WatchedPaths     int64 // paths with a watch
	WatchingSessions int64 // sessions with a watch
	Ephemerals       int64 // ephemeral nodes
	// DataSize is the bytes of the nodes' paths and data, ZooKeeper's
	// approximate data size.
	DataSize int64
}

// Stats returns the tree's counts. It takes time in the number of nodes
// and watches.
func (t *Tree) Stats() Stats {
	st := Stats{Nodes: int64(len(t.nodes)), Sessions: int64(len(t.sessions)), WatchedPaths: int64(len(t.watches))}
	for path, n := range t.nodes {
		st.DataSize += int64(len(path) + len(n.data))
	}
	for _, s := range t.sessions {
		st.Ephemerals += int64(len(s.ephemerals))
		if len(s.watches) > 0 {
			st.WatchingSessions++
		}
		for _, b := range s.watches {
			st.Watches += int64(bits.OnesCount8(uint8(b)))
		}
	}
	return st
}
