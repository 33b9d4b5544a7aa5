// Package gateway serves ZooKeeper's client protocol in front of the
// coordination service's replicas: unmodified ZooKeeper clients connect to
// a gateway as to a ZooKeeper server, and the gateway runs their requests
// through the bft protocol (package bft/node's Client, over TCP or RDMA)
// on the replicas of package coord.
//
// # Trust model
//
// The gateway is trusted by its clients and runs next to them: on the
// same machine, or one the clients' operators control. It answers a client
// only with a result that f+1 replicas returned identically (the bft
// client's rule), so at least one correct replica vouches for every
// reply and every watch event, which it computed from the agreed order of
// requests. With at most f Byzantine replicas of 3f+1:
//
//   - A Byzantine replica cannot make a client see a wrong answer, a
//     watch event that did not happen, a lost write, or answers out of
//     ZooKeeper's order: the f+1 matching results include a correct
//     replica's, and the correct replicas agree on the order.
//   - It cannot stop the service: 2f+1 correct replicas make progress
//     without it; a Byzantine primary is replaced by a view change.
//   - It can delay: a primary that stalls holds requests until its backups
//     time it out (bft.Config.RequestTicks), and a client whose session
//     timeout is shorter than that may see its connection lost and
//     reconnect, its session intact.
//   - It learns every znode and ACL: confidentiality of data against a
//     replica is not offered. It does not learn what would let it act as
//     a client through a gateway: a session's password reaches the
//     replicas hashed (coord.ConnectOp), and addauth digest's password as
//     its digest (coord.SealAuth); a gateway hashes whatever a client
//     gives, so neither opens a session or an identity to the replica.
//
// A client must not connect to a replica directly. A replica does not
// speak ZooKeeper's protocol, and if it did, a client that trusted one
// replica's answers would trust a machine that may be one of the f
// Byzantine ones: the guarantees above come from comparing f+1 answers,
// which only a party that talks to all replicas can do. A gateway is that
// party, with the cluster's client keys (its bft client identities), and
// it must be protected as a client's own process would be: whoever holds
// its keys can act for its sessions.
//
// # Sessions and ordering
//
// One gateway serves any number of client connections, each with one
// session. A session's requests run one at a time, in the order the client
// sent them, each a bft request, and their replies go back in that order,
// as ZooKeeper's clients require; the client may pipeline, its later
// requests wait in the gateway. Different sessions run at once: the bft
// client holds a pool of client identities (node.ClientConfig.IDs), and each
// request in flight takes one, so up to that many sessions have a request
// in flight together. A read that leaves no watch goes as a bft read-only
// request (Invoker.InvokeRead: one round trip, 2f+1 matching answers),
// and is ordered when the replicas disagree or ask for it (a session with
// watch events waiting). Pings are answered by the gateway itself; the
// gateway renews its sessions on the replicas and collects their watch
// events with polls (coord.PollOp): when the replicas notify it that
// events wait (Config.Notified, Server.Note), every Config.PollInterval
// for the sessions that may hold watches, and every third of its timeout
// for each session. A poll takes a session's turn, as a request does, so
// events and replies reach the client in the replicas' order. While it
// serves sessions the gateway has an op ordered at least every second, a
// poll of no session if nothing else, so that a longer gap in agreed time
// is an outage, which the replicas count against sessions only as far as
// a lying primary could have made it up (coord.Config.Outage).
//
// A gateway that uses cluster identities (Config.Notified or
// Config.Identities) claims them and its ID on the replicas when it
// starts and renews the claim every second (coord.ClaimOp): New fails
// with an error wrapping ErrHeld if another gateway's live claim holds
// them, and a gateway whose claim another took later stops, Serve
// returning such an error.
//
// Connections are bounded, from one client address (Config.MaxConnsPerHost,
// 60 by default, as ZooKeeper's maxClientCnxns) and in all
// (Config.MaxConns): a connection past either is closed at once, as
// ZooKeeper closes one, and counted in Stats. So are the sessions of one
// client address (Config.MaxSessionsPerHost, 120 by default), those whose
// connection ended counting until they may have expired: past it, a
// connect for a new session is closed unanswered. A frame's buffer grows
// with the bytes that arrive, not with the length the client announces;
// a connect request may be 4 KiB, and must arrive within
// Config.HandshakeTimeout.
//
// Memory is bounded per connection: the requests waiting
// (Config.MaxPending bytes; past it the gateway stops reading from the
// client) and the frames waiting to be written (Config.MaxOutput; past it,
// or when a write takes longer than Config.WriteTimeout, the client is too
// slow and its connection is closed). A client that sends a frame that
// does not decode, or nothing for its session timeout, has its connection
// closed; the others are not affected.
//
// # Four-letter words and metrics
//
// A connection whose first four bytes are one of ZooKeeper's four-letter
// words that Config.FourLetterWords lets through (ruok, isro, srvr and
// mntr by default) gets ZooKeeper's answer and is closed; it counts
// against the connection bounds. The tree's figures in the answers
// (node, watch and ephemeral counts, data size, zxid) come from the
// replicas through a read-only coord.StatsOp that 2f+1 must answer
// alike; the rest the gateway counts itself. With Config.Registerer the
// gateway exports Prometheus metrics: sessions, connections, outstanding
// requests, latency, four-letter words and refusals.
package gateway
