// Package node is the driver of the PBFT core (package bft): it runs a
// bft.Replica or a bft.Client on real connections, over TCP or RDMA
// (package rubin), with authenticated links (package bft/link) and the
// cluster's keys (package bft/auth).
//
// Over "tcp" a node runs wherever package rubin does: on Linux over
// rubin's TCP transport, elsewhere over package net. "rdma" needs Linux,
// cgo and rdma-core, and a program that imports transport/rdma for its
// side effect.
//
// # Goroutines
//
// A running Replica has one goroutine that owns the core: it selects over a
// bounded channel of decoded inbound messages, a ticker (Tick, the core's
// tick) and ctx; after each input it drains the inbound channel without
// blocking (up to MaxDrain messages), then takes the core's Ready once and
// routes its envelopes. Every link has a reader goroutine (receive,
// decode, hand over to the core; frames that arrived together, up to 64,
// are handed over together) and a writer goroutine (drain the link's
// queue with link.Queue and one Flush per burst). One goroutine accepts
// connections, one per handshake in progress, and one per higher-ID peer
// dials and redials. A Client is built the same way around one bft.Client
// per client identity it multiplexes (ClientConfig.IDs): one goroutine
// runs all the cores, taking every waiting reply and call before it sends,
// so the requests of many identities to a replica share one flush.
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
// # Queueing and back-pressure
//
//   - Inbound: one channel per replica, bounded by InboundQueue deliveries
//     and InboundQueueBytes frame bytes over all links (a client: 64 MiB).
//     When either is full, the link readers block, which pushes back on
//     the senders through the transport's flow control.
//   - Outbound: each message is encoded once per Ready (a broadcast's
//     envelopes share its bytes) and queued per link, bounded by
//     OutboundQueue frames and OutboundQueueBytes bytes (counting what the
//     writer is still writing). A full queue drops the new frame, and a destination
//     without a link drops it too: a slow or Byzantine peer cannot stall
//     the core and through it the others. PBFT's retransmission, view
//     synchronization and state transfer recover what was dropped.
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
