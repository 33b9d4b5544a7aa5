// Package node is the driver of the PBFT core (package bft): it runs a
// bft.Replica or a bft.Client on real connections, over TCP or RDMA
// (package rubin), with authenticated links (package bft/link) and the
// cluster's keys (package bft/auth).
//
// A Replica and a Client serve their links on the channels of rubin's
// transports with a selector, which needs Linux.
// "rdma" needs Linux, cgo and rdma-core, and a program that imports
// transport/rdma for its side effect.
//
// # Goroutines
//
// A running Replica is one event loop on one goroutine: a selector
// (package selector) serves its listener and every link, TCP and RDMA
// alike, with the selector's adaptive spin, and the same goroutine owns
// the core. Each pass of the loop accepts connections and advances their
// handshakes (link.Chan, non-blocking), receives, verifies, decodes and
// steps what the links have (up to MaxDrain messages and
// InboundQueueBytes bytes; a link gives up its turn after a burst of 64
// frames or 1 MiB), ticks the core when a Tick has passed, takes the
// core's Ready once, and routes its envelopes onto the links, each link
// flushed once at the end of the pass. There are no goroutines per link,
// no hand-offs between goroutines and no timers besides the tick.
//
// A running Client is an event loop of the same kind on one goroutine,
// which dials every replica and owns one bft.Client per client identity it
// multiplexes (ClientConfig.IDs), each with up to ClientConfig.Window
// requests outstanding. Invoke hands its call to the loop under a mutex
// and wakes the selector; each pass reads the replies the links have,
// takes every call waiting, and encodes the cores' requests into the
// links' pool buffers, so the requests of many identities to a replica
// share one flush. Concurrent Invokes start in the order they reach the
// loop, and the requests of one identity execute in the order they
// started.
//
// # Connections
//
// Exactly one link per pair of replicas: the lower ID dials the higher.
// The dialer redials with capped exponential backoff (RedialMin doubling
// up to RedialMax, with jitter) whenever the link breaks or the peer is
// unreachable, so a replica that is killed and restarted is reconnected
// without help. The acceptor's handshake lookup refuses a replica with a
// higher ID (it should have accepted), and an authenticated link that
// arrives for a peer that already has one replaces the old link (the peer
// restarted, or the old connection is half dead). Clients dial every
// replica, one link each, authenticated as the Client's first identity;
// the link may carry the requests of all its identities (each request's
// authenticator proves its client). A replica sends a client's replies on
// the link that last delivered a request of that client which the core
// took (or already held), else on the link of that client's own identity,
// and drops them if there is none (the client retransmits). It keeps one
// such route per client that sent through a link still up, like the reply
// cache keeps one reply per client; the routes of a link that closes are
// forgotten.
//
// The sender passed to bft.Replica.Step is the link's authenticated peer,
// never a field of the message. A frame that does not decode closes its
// link (a correct peer never sends one; the link layer already closes on
// MAC failure); messages the core rejects are counted and logged at debug
// level, and their link stays up.
//
// # Buffers, queueing and back-pressure
//
//   - Outbound: a message to one link is encoded straight into that
//     link's pool buffer and tagged beside it; a broadcast is encoded once
//     into a pool buffer, which its destinations share (each link retains
//     it and sends its own tag after it) when it is 1 KiB or more, and
//     which each copies when it is smaller (a copy costs less than a
//     message for the tag). A link's frames of one pass leave in as few
//     messages as its buffers allow. What the channel cannot take at once
//     waits, bounded by OutboundQueue frames, OutboundQueueBytes bytes and
//     64 pool buffers per link: a frame beyond a bound is dropped, as is
//     a frame to a destination without a link, so a slow or Byzantine
//     peer cannot stall the core and through it the others; PBFT's
//     retransmission, view synchronization and state transfer recover
//     what was dropped. A link whose output has waited longer than the
//     link's WriteTimeout is closed.
//   - Inbound: frames are verified in the pool buffer they arrived in, and
//     each is copied into memory of its own before it is decoded: the
//     core keeps what it decodes (requests in its log, signatures in its
//     certificates), and a kept message must pin neither a receive buffer
//     nor more memory than its own frame. The receive buffers go back to
//     the pool at once. What a pass does not read waits in the transport,
//     whose flow control pushes back on the senders; when the core stalls,
//     so does the loop.
//   - A Client queues per link (OutboundQueue frames, the same byte
//     bound) for its writer goroutines, and bounds the replies waiting for
//     its core to 64 MiB; a full inbound queue blocks its link readers.
//
// # Metrics
//
// With a Registerer, a Replica exports (namespace rubin_bft, constant
// label replica):
//
//	rubin_bft_committed_requests_total       counter
//	rubin_bft_committed_batches_total        counter
//	rubin_bft_batch_size                     histogram (requests per batch)
//	rubin_bft_view_changes_total             counter (new views entered)
//	rubin_bft_view                           gauge
//	rubin_bft_checkpoint_lag                 gauge (last executed - last stable)
//	rubin_bft_stable_checkpoint_seq          gauge
//	rubin_bft_last_executed_seq              gauge
//	rubin_bft_state_transfers_total          counter
//	rubin_bft_messages_sent_total{type}      counter (per destination)
//	rubin_bft_messages_received_total{type}  counter
//	rubin_bft_messages_dropped_total{reason} counter
//	rubin_bft_links                          gauge
//
// and a Client (constant label client):
//
//	rubin_bft_client_completed_requests_total       counter
//	rubin_bft_client_latency_seconds                histogram
//	rubin_bft_client_retransmissions_total          counter
//	rubin_bft_client_messages_dropped_total{reason} counter
//	rubin_bft_client_mismatched_replies_total{replica} counter (see Client.Mismatches)
//
// A Replica's event loop (its selector, transport and buffer pool) has
// counters of its own, read by LoopStats; cmd/bft exports them with
// package metrics under stack="replica-ID", for instance
//
//	rubin_selector_spins_total{poller="0",stack="replica-0"}
//	rubin_transport_messages_received_total{stack="replica-0"}
//	rubin_pool_buffers_in_use{stack="replica-0"}
//
// Drop reasons: decode, handshake, queue_full, no_link, frame_too_big,
// unexpected, and the core's Step errors: invalid, forged, stale,
// watermark, duplicate, equivocation, core_full, other.
//
// # Logging
//
// log/slog: listening, link up and down, view changes and state transfers
// at info; dropped messages, failed dials and handshakes at debug.
package node
