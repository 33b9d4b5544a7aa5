// Package ledger is the orderer's block store: an append-only ledger of
// blocks numbered from 0, each kept as the exact bytes appended.
//
// # Layout
//
// A directory holds a key file, named key, and segment files named
// blocks-N, N the number of the segment's first block in 20 decimal
// digits (so names sort like numbers). Blocks are appended to the last
// segment; a new one is started when the next record would carry the last
// past Options.SegmentSize (default 64 MiB; a segment holds at least one
// block, so a large block makes a segment larger). A record is a 36-byte
// header (a magic, the block's size, its number, the ledger's durable
// height when it was written, a CRC-32C of the block, and a tag keyed by
// the ledger's key that depends on the record's file offset) followed by
// the block. Nothing else is stored: there is no index file.
//
// # Key
//
// Blocks hold bytes chosen by clients, who may be Byzantine, and a
// client that can predict where its block will land in a segment can put
// in it bytes laid out like a record header. Recovery (below) searches
// the bytes after a damaged record for intact records, and one that says
// the damaged block was synced makes Open fail: with headers anyone could
// compute, a client could thus make an orderer whose last record before
// that block was torn by a crash refuse to restart. So a header's tag is
// keyed: the first 8 bytes of HMAC-SHA256, under a 32-byte random key,
// of the record's offset and the header's other fields.
//
// The key is made when the ledger is created (crypto/rand) and kept in
// the key file (mode 0600, checksummed, written and synced before the
// first segment), and never leaves the machine: clients see blocks, never
// headers or the key. A forger can only guess tags, and its guesses are
// tested only by a crash tearing a record just before them: a segment
// holds at most one guess per 4 bytes (a magic cannot overlap itself),
// so with the defaults (segments below 256 MiB) fewer than 2^26 guesses
// a crash, each right with chance 2^-64: one crash in 2^38 or more (a
// 32-bit tag would fall to one crash in 64). A missing or damaged key
// file, while segments exist, fails Open with ErrCorrupt naming it, and
// Open cuts nothing. The key file belongs with the segments: a copy of
// the ledger must take it (under another key every header is damage, and
// the last segment would be cut as a torn tail).
//
// # Index
//
// The index, the offset of every block, is rebuilt at Open from the
// record headers and kept in memory, 8 bytes a block (8 MB for a million
// blocks). An index file would be a second copy of the same facts, which
// a crash can leave out of step with the blocks and which needs a
// recovery of its own. One 36-byte read a block at Open is the simpler
// price (BenchmarkOpen), and an index derived from the segments cannot
// disagree with them.
// With the index, Block(n) is one read of the record, checked against
// its tag and its block's checksum before it is returned. Every segment
// stays open: one file descriptor per 64 MiB of blocks with the default
// SegmentSize.
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
// Open reads the key file (in a directory without segments it may create
// it), then the header of every record and, in the last segment, every
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
