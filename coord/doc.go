// Package coord is the coordination service's replicated application: a
// bft.App that serves ZooKeeper's requests from a coord/tree.Tree, so that
// a cluster of bft replicas is a ZooKeeper ensemble that tolerates f
// Byzantine replicas of 3f+1. Clients reach it through a gateway (package
// coord/gateway), which speaks ZooKeeper's client protocol to them and
// sends the App ops.
//
// # Ops
//
// An op is what a gateway asks for one of its sessions, built with
// ConnectOp (open a session, or resume one with its password, of which
// the op carries only a hash), RequestOp (one ZooKeeper request, its
// header and body as the client sent them, an auth packet's credentials
// replaced by SealAuth)
// or PollOp (renew sessions and collect their watch events); with
// ClaimOp a gateway claims its number and client identities, so that a
// second gateway given the same ones learns it (see claim.go). A gateway
// names itself in every op with a number of its own choosing; a session
// belongs to the gateway that last connected it, and a request for it
// from another gateway is answered with ZooKeeper's sessionMoved. A
// replica trusts the ops of every authenticated client of the cluster:
// gateways hold client identities, and only they should.
//
// The result of an op is deterministic bytes, the same on every correct
// replica, so a bft client accepts it on f+1 matching copies: the frames
// to write to the client, exactly as a ZooKeeper server would write them
// (reply header with the request's xid, the zxid and the error code, then
// the body), and a Status saying whether the connection goes on.
//
// # Order, zxids and time
//
// Every request is answered from the state after all requests before it,
// reads included, so reads are linearizable and sync has nothing to wait
// for. A read that leaves no watch (ReadOnly) may take the bft core's
// read-only path: App.Query answers it from a replica's current state,
// the client accepts 2f+1 identical answers, and falls back to ordering
// it otherwise; Query itself asks for ordering when the session has watch
// events waiting, which must reach the client first. A write takes the zxid
// after the tree's last, so zxids follow the agreed order without gaps.
// ctime, mtime and session deadlines come from the batch's agreed time
// (bft.ExecContext.Time), never from a replica's clock; before each op the
// App ends the sessions whose deadline that time passed (see
// Config.ExpireInterval) and sweeps empty containers and expired TTL
// nodes. A session expires 2*Config.ClockSkew after its timeout ran out
// in agreed time, since a lying primary may date its renewal ClockSkew
// early and a later op ClockSkew late; a gap between two ops longer than
// Config.Outage is taken for an outage, and what of it a lying primary
// cannot have made up is added to every session's deadline.
//
// # Watch events
//
// A watch event waits in its session's queue, part of the replicated
// state, until the session's next result collects it: the reply to one of
// its requests (events first, as ZooKeeper sends them before the reply
// that follows the change) or a poll (PollOp). So events and replies reach
// the client in the replicas' order, whatever path each takes. A gateway
// whose number is one of Config.Clients is told when events wait: after
// an op that queued some for its sessions, the replicas notify that
// identity (bft.ExecContext.Notify), naming the sessions, and the gateway
// polls them at once, one ordered op for all. A gateway that is not
// notified polls the sessions that may hold watches every few
// milliseconds, which costs one ordered op per poll interval however many
// sessions it has, and delays an idle client's event by up to an
// interval.
//
// Queues are bounded, each (Config.MaxQueuedBytes) and all together
// (Config.MaxQueuedTotal); a session whose event does not fit loses it
// and later ones until it collects what it has, and is then told to
// reconnect, which registers its watches again.
package coord
