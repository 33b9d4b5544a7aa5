// Package proto is ZooKeeper's client protocol as the coordination
// service speaks it: the constants and records of Apache ZooKeeper's jute
// wire format and a codec for them, so that unmodified ZooKeeper clients
// talk to the service.
//
// The names follow ZooKeeper's own (ZooDefs.OpCode, KeeperException.Code,
// CreateMode, Watcher.Event, the records of zookeeper.jute), and every
// numeric value is the one those clients put on the wire.
//
// # Format
//
// A connection is a stream of frames: a 4-byte big-endian length, then
// that many bytes (ReadFrame, AppendFrame; at most MaxPacket). The
// client's first frame is a ConnectRequest and the server's a
// ConnectResponse. After that each client frame is a RequestHeader (xid,
// OpCode) and the body of that op, and each server frame a ReplyHeader
// (xid, zxid, error code) and, on success, the body of the answer; watch
// events, pings, auth and setWatches use the reserved xids (XidWatchEvent
// and the others).
//
// Records are jute's: their fields in order, with no tags or padding. An
// int is 4 bytes and a long 8, big-endian; a boolean is one byte; a
// buffer or ustring is a 4-byte length and its bytes; a vector is a
// 4-byte count and its elements. A length or count of -1 means null. Go
// has no null string, and the codec writes no null vector (clients
// mishandle them): a null string decodes as "", and a null or empty
// vector as nil; "" and nil are written with length 0, so a record whose
// empty vectors are nil round-trips unchanged. Buffers keep the
// distinction: a null buffer decodes as nil and an empty one as a
// non-nil empty slice, and nil is written as -1, as ZooKeeper writes a
// node with no data.
//
// # A server's loop
//
//	frame, err := proto.ReadFrame(conn, buf[:0])
//	hdr, body, err := proto.SplitRequest(frame)
//	req, err := proto.DecodeRequest(hdr.Type, body)
//	// act on req, according to hdr.Type ...
//	out, err = proto.AppendReply(out[:0], proto.ReplyHeader{Xid: hdr.Xid, Zxid: zxid, Err: code}, hdr.Type, resp)
//	_, err = conn.Write(out)
//
// DecodeRequest returns one Go type per record (*CreateRequest for
// OpCreate, *MultiRequest for OpMulti, ...) and AppendReply takes the
// record ResponseFor names. Their errors say what to do. ErrFrameTooLarge,
// and ErrMalformed from SplitRequest or the handshake, mean the peer does
// not speak the protocol: close the connection, as ZooKeeper does. A body
// that does not decode (ErrMalformed from DecodeRequest) ZooKeeper
// answers with CodeMarshallingError, and an op the codec does not serve
// (ErrUnknownOp) with CodeUnimplemented; the connection stays usable,
// since the frame was read whole.
//
// # Decoding untrusted input
//
// The decoders are written for bytes from any peer. They never panic,
// and they check every length and count against the bytes left in the
// frame before allocating, so a frame that claims a long buffer or a vast
// vector fails with an error and costs nothing. Decoding allocates at
// most 12 bytes per byte of the frame in the worst case (a multi's
// results of deletes, 9 bytes each on the wire), 8 for requests (a multi
// of minimal deletes), and little more than the frame itself for the
// records of real traffic, whose bulk is paths and data. Buffers and
// strings are copied: a decoded record never aliases the frame, so a
// server can read every frame into the same buffer.
//
// Every error of decoding wraps ErrMalformed and says where it stopped,
// for example "zookeeper protocol: malformed record: create request: at
// byte 12: buffer needs 200 bytes, 3 left". Decoding is strict about
// length: a body must hold exactly its record (only the trailing readOnly
// flag of the handshake is optional), and a multi must hold only the ops
// its kind allows.
//
// # Concurrency
//
// Records, Encoders and Decoders are plain values: safe for concurrent
// reads, not for concurrent use. The package-level functions may be
// called from any number of goroutines.
package proto
