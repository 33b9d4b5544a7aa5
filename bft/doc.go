// Package bft is the protocol core of PBFT (Castro and Liskov, OSDI'99 and
// TOCS 2002) for n = 3f+1 replicas, with signatures for forwarded
// messages: normal case (pre-prepare, prepare, commit), request batching,
// checkpoints and log truncation, view changes, and state transfer; and
// the client side.
//
// # Model
//
// Replica and Client are deterministic state machines in the style of
// etcd raft's RawNode: no goroutines, no I/O, no randomness, not safe for
// concurrent use. Time is an abstract tick (Replica.Tick); all timeouts in
// Config count ticks. The one clock a replica reads, Config.Clock, dates
// the batches it proposes and judges the dates of the batches it accepts
// (see "Execution context and agreed time"). The driver:
//
//  1. feeds every message that arrives to Step, with the sender its
//     authenticated link names (replica links carry a pairwise MAC, client
//     links the client's identity);
//  2. calls Tick at a fixed period (a few to tens of milliseconds: with the
//     default BatchTicks of 1 the tick is the batching delay, and
//     RequestTicks and ViewChangeTicks of 50 are the view-change timeouts);
//  3. after Step or Tick, when HasReady, calls Ready and handles it in
//     etcd raft's order: persist, then send, then apply. With
//     Config.Persist it first makes Ready.Snapshot, or else
//     Ready.Persist, durable (written and synced); it sends
//     Ready.Messages in order only after that, and stops without
//     sending if it cannot persist. Ready.Deferred it writes after
//     Persist, now or with a later Persist, synced or not. Ready.Committed reports batches
//     already executed through App (synchronously, inside Step or Tick),
//     in sequence order; after a state transfer it skips the sequence
//     numbers the restored checkpoint covers. Execution before the
//     records are durable is safe: the application state is as volatile
//     as the core's, and the replies that make a result visible are
//     Messages;
//  4. on restart, with Config.Persist, calls Recover on a fresh replica
//     with the latest Snapshot and the Persist (and Deferred) records
//     since, in the order they were given, before
//     anything else. Without Config.Persist a replica that restarts
//     empty recovers by state transfer, which works while at most f
//     replicas lose their state at once.
//
// Step's error, when non-nil, says why the message was dropped; it wraps
// one of the Err sentinels (see errors.go). Stale, duplicate and
// out-of-watermark drops are normal; forged ones point at a Byzantine peer.
// Step never panics on any input and keeps references to the messages it
// is given (they must not be modified afterwards); messages in Ready may
// share pointers between envelopes and with the replica's state and must
// not be modified either.
//
// # Trust
//
// The driver's sender identity is trusted: it comes from the link's MAC.
// A replica message whose Replica field differs from it is forged
// (ErrForged); the exception is NewView, which any replica may forward
// because its primary's signature and the signatures inside prove it.
// Signatures (Authenticator.Sign and Verify) are made and checked only on
// what is forwarded as proof: checkpoints, view changes and new views, and
// the checkpoint certificates inside them. Pre-prepares, prepares,
// commits and fetch requests are never forwarded and rely on the link: a
// view change reports, under its sender's signature, what the sender
// prepared and accepted, and the new-view rule needs no proof of it
// (docs/bft.md, "View change"). A client link may carry the requests of several
// clients, e.g. a proxy or a multiplexing client process; each request's
// authenticator proves its client (a request of a client other than the
// link's is verified before anything else is done with it, even resending
// a reply). Requests are checked with Authenticator.VerifyRequest when
// they arrive and inside every pre-prepare (a pre-prepare holding a
// request whose authenticator fails for this replica is rejected), except
// the pre-prepares of a new view, which re-propose a batch only if f+1
// view changes claim to have accepted it, so a correct replica accepted
// it and checked its requests then. An App that is a Validator is asked
// the same way, at the same places, whether it refuses a request (see
// Validator). Batches are checked against
// BatchDigest (time included) and state against the certified checkpoint
// digest (agreed time, reply cache and application snapshot).
//
// # Execution context and agreed time
//
// App.Execute gets an ExecContext: the request's authenticated client,
// the batch's sequence number, the request's index in it, and the batch's
// agreed time. The primary proposes a time with every pre-prepare, from
// Config.Clock (the core's only clock); a backup prepares it only if the
// time is not before the nearest earlier slot's (nor after the nearest
// later one's) and within Config.MaxClockSkew of its own clock, so a
// primary with a wrong clock, or one that lies, is not prepared and the
// request timers replace it. The time is part of the batch digest (so
// prepares and commits agree on it), so of every claim a view change
// makes (a re-proposed batch keeps its time: a new view's pre-prepares
// carry 0, and the batch, held or fetched, brings the time its digest
// binds; null batches leave the agreed time as it was), of
// the durable records (recovery replays the same times) and of every
// checkpoint (the agreed time is replicated state: a batch executes at
// the larger of its time and the one before).
//
// # Read-only requests
//
// A request flagged ReadOnly (Client.ProposeRead) goes to every replica
// and is answered from its state by the App's Querier, without being
// ordered; the client accepts a result that 2f+1 replicas returned
// identically, and otherwise, after RetransmitTicks or as soon as the
// answers cannot agree, orders the request. A replica answers a read
// only once it executed every slot it prepared (its own execution is
// never tentative) and is behind no stable checkpoint it knows of, which
// makes reads linearizable (see Querier for the argument); reads wait in
// a bounded queue until then (Config.MaxReads, one per client). An answer
// names its read by timestamp and Request.Nonce, and counts for that read
// only: consecutive reads share a timestamp, and an answer computed for an
// earlier one may predate a write the later one must see.
//
// # Pipelined requests
//
// A Client may have up to ClientConfig.Window ordered requests
// outstanding (at most the replicas' Config.ClientWindow), with
// consecutive timestamps. A replica executes a client's request only
// right after the client's previous timestamp (or, for the first request
// of a client that starts afresh, flagged Restart, after any lower one),
// so the requests execute in the client's order, each once, whatever
// order a primary proposes them in: one out of order is not executed but
// held and proposed again after its predecessor, and a correct primary
// proposes them in order to begin with. Replicas cache each client's last
// ClientWindow replies, so a retransmitted request of the window is
// answered from the cache; the client delivers the results in timestamp
// order. A held request that waits for its client's earlier one is not
// timed against the primary.
//
// # Notifications
//
// During Execute the application may emit notifications for any client
// (ExecContext.Notify). Replicas number each client's notifications from
// 1 in execution order, so every correct replica numbers them alike, and
// send them to the client at once (a Notify message, routed like a reply);
// each keeps the last Config.NoteRetain per client as replicated state,
// in every checkpoint. Client.StepNotify takes them; the client delivers
// number k once f+1 replicas sent it with the same payload, in number
// order (ClientReady.Notes), buffering at most NoteWindow numbers ahead
// and NoteBuffer bytes per replica. A reply tells its client the number
// of its last notification at execution (Reply.Notes): a client that
// knows of notifications it has not delivered asks the replicas for them
// (FetchNotes, every RetransmitTicks), and delivers a Note with Lost set
// for the ones f+1 replicas no longer keep.
//
// # Beyond the paper
//
// These choices keep the core live over links that lose messages and with
// replicas that restart, without changing PBFT's safety argument:
//
//   - Retransmission: a replica whose execution stalls resends its own
//     pre-prepare/prepare/commit for uncommitted slots every FetchTicks; a
//     replica that committed such a slot answers the resender with its
//     messages for all committed slots of the view (throttled per peer). A
//     replica in a view change resends its view change every FetchTicks; a
//     replica already in that view answers with its new view.
//   - The view-change timer starts when a quorum of replicas asks for this
//     view or a later one, and a primary whose own log stalls for
//     RequestTicks also starts a view change.
//   - View synchronization: a replica that sees f+1 replicas active in a
//     higher view (by their pre-prepares, prepares, commits or new views)
//     sends FetchState to all; replicas answer with their stable
//     checkpoint's manifest (if newer; the state follows in chunks, see
//     statetransfer.go) and their latest NewView, which the replica verifies like any
//     new view and enters. A restarted replica learns the view this way.
//   - A replica behind a known stable checkpoint accepts messages in the
//     window above that checkpoint too, so what it needs after the state
//     transfer is already logged.
//
// # Memory
//
// Everything a peer or a client can make a replica hold is bounded, in
// bytes where its size depends on the sender; docs/bft.md ("Memory
// bounds") has the table. Per-sequence state exists only in the windows
// (low, low+L] and (known stable, known stable+L]. Checkpoint votes: at
// most L/K+2 sequence numbers per sender. View changes: the highest one
// per replica, views at most 64 above the current one. Future-view
// normal-case messages: checked (a pre-prepare's batch bounds, digest and
// signature, a prepare's signature) before they are buffered, at most
// 3L+8 and MaxFutureBytes per sender, views at most 64 ahead. Pending
// requests: MaxPending, MaxPendingBytes, MaxPendingPerClient per client,
// and an arrival order at most about twice as long as what is held;
// read-only requests waiting: MaxReads, one per client. Notifications:
// NoteRetain and NoteRetainBytes per client, replicated state like the
// reply cache.
// Status reports the accounted bytes (PendingBytes, BufferedBytes). The
// reply cache holds the last ClientWindow replies of every client that
// ever had a request executed; it is replicated state, so it is not
// trimmed further. State
// transfer: at most one fetch, its buffer at most MaxStateBytes; per peer,
// at most 4 MiB (and 64 chunks) served and a tick's worth of chunk
// requests waiting per tick; served chunks alias the state bytes of the replica's
// own checkpoints.
package bft
