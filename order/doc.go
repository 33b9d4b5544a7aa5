// Package order is Hyperledger Fabric's ordering service as a replicated
// application of the PBFT core (package bft): envelopes are ordered by
// the core, cut into Fabric blocks on every replica alike (package
// order/block), and a block becomes final, and deliverable, once 2f+1
// orderers' signatures over its header have been ordered too.
//
// # Operations
//
// The App executes three kinds of operation, built by EnvelopeOp, CutOp
// and SignOp, from any client of the cluster:
//
//   - an envelope, which the App authorizes again (package
//     order/envelope, at the batch's agreed time) so that no orderer can
//     slip a forged one into a block, and hands to the block cutter;
//   - a timeout cut for block N, which cuts the pending envelopes if
//     block N is the next to cut and BatchTimeout has passed in agreed
//     time since the first of them was ordered: the timeout is an agreed
//     event, not a replica's timer;
//   - an orderer's signature over block N's header, which counts if it
//     verifies by that orderer's key and N is cut and not yet final.
//
// Block N is final once it holds 2f+1 signatures and block N-1 is final;
// its SIGNATURES metadata then holds exactly the first 2f+1 valid ones in
// the order they were ordered, so every correct replica produces the
// same bytes (docs/order.md gives the format). Final blocks go to the
// Chain, whose store is synced before every snapshot.
//
// Each replica's Duties sign the blocks its App cuts and ask for timeout
// cuts when its own clock says one is due, both as ordered operations.
package order
