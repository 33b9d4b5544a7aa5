// Package ledger is the orderer's block store: an append-only ledger of
// blocks numbered from 0, each kept as the exact bytes appended.
//
// # Layout
//
// A directory holds segment files named blocks-N, N the number of the
// segment's first block in 20 decimal digits (so names sort like
// numbers). Blocks are appended to the last segment; a new one is started
// when the next record would carry the last past Options.SegmentSize
// (default 64 MiB; a segment holds at least one block, so a large block
// makes a segment larger). A record is a 32-byte header (a magic, the
// block's size, its number, the ledger's durable height when it was
// written, a CRC-32C of the block, and a CRC-32C of the header that
// depends on the record's file offset) followed by the block. Nothing
// else is stored: there is no index file.
//
// # Index
//
// The index, the offset of every block, is rebuilt at Open from the
// record headers and kept in memory, 8 bytes a block (8 MB for a million
// blocks). An index file would be a second copy of the same facts, which
// a crash can leave out of step with the blocks and which needs a
// recovery of its own. One 32-byte read a block at Open is the simpler
// price (BenchmarkOpen), and an index derived from the segments cannot
// disagree with them.
// With the index, Block(n) is one read of the record, checked against
// both its checksums before it is returned. Every segment stays open:
// one file descriptor per 64 MiB of blocks with the default SegmentSize.
//
// # Durability
//
// Append writes the record (to the page cache); Sync makes every block
// appended before it durable (fdatasync of the last segment). Sync, then
// acknowledge: a block is promised to survive a crash only once a Sync
// that began after its Append has returned. Starting a new segment syncs
// the old one, then creates the new one and syncs the directory, so
// every segment but the last is durable entire.
//
// # Recovery
//
// Open reads the header of every record and, in the last segment, every
// block too (checking its checksum as it streams through a buffer of a
// fixed size: no whole file is read into memory).
//
//   - The last segment may end in a torn tail: the records of blocks no
//     Sync covered, written in part or not at all (a crash may keep some
//     of their pages and not others, in any order, and zeros where the
//     file grew). Open cuts the last segment at its first damaged record
//     (truncates the file there and syncs it) and keeps the blocks before
//     it: exactly a prefix of the appended blocks, and every block a Sync
//     covered.
//   - A damaged record is not a torn tail if an intact record after it
//     was written once a Sync had covered it (its header's durable height
//     is above the damaged block's number); nor is any damage in a
//     segment before the last. Then Open fails with ErrCorrupt, naming
//     the file and offset, and cuts nothing. Damage to a block that no
//     later record vouches for (one of the last Sync before a crash,
//     say) cannot be told from a torn write and is cut.
//   - A segment before the last has only its headers read at Open; a
//     damaged block in it is found by Block, which returns ErrCorrupt
//     naming the file and offset, never the damaged bytes.
//
// After a failed write or fdatasync every later Append, Sync and Close
// fails (ErrBroken): a failed fdatasync may have dropped the dirty pages,
// so nothing is retried. Reopen to continue from what is on disk.
//
// # Concurrency
//
// A Ledger is safe for concurrent use: one writer (Append, Sync) and any
// number of readers (Block, Height, Wait), e.g. Deliver streams reading
// old blocks and waiting for new ones while they are appended. Appends
// and Syncs are serialized (an Append waits for a Sync in progress);
// readers never wait for a Sync's disk flush.
package ledger
