// Package tree is the coordination service's data model: ZooKeeper's tree
// of znodes, its sessions, ACLs and watches, as the state of a replicated
// state machine.
//
// # Model
//
// A Tree is deterministic: the same calls in the same order give the same
// results, the same watch events and the same Snapshot on every replica.
// It reads no clock, no random source and no map order into anything it
// returns; what varies comes in as arguments. No goroutines, no I/O; not
// safe for concurrent use. The caller (the replicated application):
//
//  1. gives each write a Write: the session that asks, a zxid above every
//     zxid before it (a write that fails still takes it, as in ZooKeeper;
//     a multi's ops share one) and the agreed time in milliseconds, from
//     which ctime, mtime and session deadlines come;
//  2. touches a session (Touch) at the agreed time of each of its
//     requests and pings, and calls Expire at agreed times to end the
//     sessions whose deadline has passed;
//  3. sends the Events a call returns to their sessions' clients, in the
//     order given: they are the watch events ZooKeeper would deliver for
//     that change, one-shot watches already gone;
//  4. orders reads that leave watches like writes: a watch is state.
//
// Errors are proto.Code values, ZooKeeper's error codes, checked in the
// order ZooKeeper's PrepRequestProcessor and FinalRequestProcessor check
// them, so a client sees the code Apache ZooKeeper 3.8 would give it;
// ErrZxid and ErrSession are the caller's mistakes.
//
// # Znodes
//
// A new tree holds the root, /zookeeper, /zookeeper/quota and
// /zookeeper/config (readable by anyone, writable by none), all with a
// zero Stat; none can be deleted. Paths follow ZooKeeper's rules (see
// Create). Sequential nodes take the number of children ever created
// under the parent as a ten-digit suffix; the cversion clients see counts
// creations and deletions of children (so the root, whose only child
// /zookeeper was never created, shows -1, as in ZooKeeper), and pzxid is
// the last zxid that created or deleted one. Containers and TTL nodes
// show no ephemeral owner. Ephemeral nodes belong to their session
// and cannot have children. Container and TTL nodes are deleted by Sweep
// once empty (a container after it has had a child, a TTL node when its
// time since its last change passes its TTL); TTL nodes need
// Config.ExtendedTypes. Multi runs create, delete, setData and check ops
// as one write, all or nothing, reporting each op's result as ZooKeeper
// does; MultiRead runs reads, each on its own.
//
// # ACLs and sessions
//
// Every operation checks the permission ZooKeeper checks: create and
// delete on the parent, read for getData, getChildren, getACL (or
// admin), check and getAllChildrenNumber, write for setData, admin for
// setACL; exists checks none. Schemes: world:anyone, digest
// ("user:base64(sha1(user:password))", see Digest), ip, and auth, which
// stands for the session's digest identities. AddAuth gives a session
// identities: for digest, the identity Digest made of the client's
// password, never the password; a session keeps a hash of its password
// (HashPassword), never the password. A session's timeout is negotiated into
// [MinSessionTimeout, MaxSessionTimeout].
//
// # Watches
//
// getData and exists leave one-shot data watches, getChildren one-shot
// child watches; AddWatch leaves persistent and persistent recursive
// ones, and SetWatches restores a reconnecting client's. A session's
// kinds of watch on a path are independent, and one change reaches a
// session once however many of its watches it fires. A session is not
// sent an event for a node it may not read, but the watch counts as
// fired, as in ZooKeeper. The events of one change come in ZooKeeper's
// order (the node's data watches, its child watches, its parent's child
// watches), sessions in order of id within each.
//
// # Where it differs from ZooKeeper
//
// Where ZooKeeper leaves a choice to timing or hash order, or has a
// quirk, the tree decides:
//   - children, ephemerals and the sessions an event goes to come in
//     order; a closing or expiring session's ephemerals are deleted in
//     path order, after its own watches are gone;
//   - a one-shot watch added beside a persistent one on the same path
//     does not replace it (ZooKeeper 3.9's behaviour; 3.8 let the later
//     one win);
//   - exists with an invalid path fails with CodeBadArguments rather
//     than leaving a watch that could never fire;
//   - data over Config.MaxDataSize fails with CodeMarshallingError,
//     ZooKeeper's answer to a request it cannot decode (ZooKeeper's
//     server would drop the connection at jute.maxbuffer);
//   - the limits below, which ZooKeeper does not have, fail with
//     CodeQuotaExceeded (tree size, watches), CodeAuthFailed
//     (identities) and CodeThrottled (sessions);
//   - container and TTL nodes go when the caller calls Sweep, not on a
//     timer of the tree's own.
//
// # Memory
//
// What a client sends is bounded: data by Config.MaxDataSize, the whole
// tree by Config.MaxTreeBytes, a session's watches by
// Config.MaxWatchBytes and all sessions' by Config.MaxWatchTotal (a
// watch counts its path and 32 bytes, so the bytes bound the count,
// whether the path exists or not), identities by Config.MaxAuthBytes,
// sessions by Config.MaxSessions: a session holds its identities, its
// watches and its ephemeral nodes, which count in MaxTreeBytes, so the
// sessions' bytes are bounded too.
//
// # Snapshots
//
// Snapshot encodes the whole state (znodes, sessions with their
// identities, ephemerals and watches, the last zxid) canonically: equal
// trees give equal bytes, so replicas can compare digests of it. Restore
// checks every length against the bytes left before it allocates, checks
// everything a tree holds to be true, and accepts only canonical input.
package tree
