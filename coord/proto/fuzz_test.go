package proto

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// reencode checks what every accepted input must satisfy: the record it
// decoded to encodes to bytes that decode, by the same decode, to an equal
// record, and encode again to the same bytes. (The input itself need not
// come back: null strings and vectors, and booleans other than 0 and 1,
// are written back in their canonical form.)
func reencode(t *testing.T, what string, r Record, decode func([]byte) (Record, error)) {
	t.Helper()
	out := Marshal(nil, r)
	r2, err := decode(out)
	if err != nil {
		t.Fatalf("%s: re-encoded %T does not decode: %v\n%x", what, r, err, out)
	}
	if diff := cmp.Diff(r, r2); diff != "" {
		t.Fatalf("%s: %T differs after a round trip (-first +second):\n%s", what, r, diff)
	}
	if again := Marshal(nil, r2); !bytes.Equal(again, out) {
		t.Fatalf("%s: %T encodes to\n%x\nthen to\n%x", what, r, out, again)
	}
}

// checkErr fails unless err is one that decoding bytes may return.
func checkErr(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownOp) {
		t.Fatalf("%s: error %v wraps neither ErrMalformed nor ErrUnknownOp", what, err)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range requestSamples() {
		f.Add(int32(s.op), Marshal(nil, s.rec))
	}
	f.Add(int32(OpMulti), []byte{0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff})
	f.Add(int32(OpSetWatches), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add(int32(OpReconfig), []byte{})
	f.Fuzz(func(t *testing.T, op int32, body []byte) {
		r, err := DecodeRequest(OpCode(op), body)
		if err != nil {
			checkErr(t, OpCode(op).String(), err)
			return
		}
		reencode(t, OpCode(op).String(), r, func(b []byte) (Record, error) { return DecodeRequest(OpCode(op), b) })
	})
}

func FuzzDecodeResponse(f *testing.F) {
	for _, s := range responseSamples() {
		f.Add(int32(s.op), Marshal(nil, s.rec))
	}
	f.Add(int32(OpMulti), []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0})
	f.Add(int32(OpWhoAmI), []byte{0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, op int32, body []byte) {
		r, err := DecodeResponse(OpCode(op), body)
		if err != nil {
			checkErr(t, OpCode(op).String(), err)
			return
		}
		reencode(t, OpCode(op).String(), r, func(b []byte) (Record, error) { return DecodeResponse(OpCode(op), b) })
		// What decodes encodes into a reply frame, unless it is too long.
		if _, err := AppendReply(nil, ReplyHeader{Xid: 1}, OpCode(op), r); err != nil && !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("%v: a decoded %T is no reply: %v", OpCode(op), r, err)
		}
	})
}

// FuzzRecords decodes the records that are no op's body (the handshake,
// the headers, watch events) with Unmarshal.
func FuzzRecords(f *testing.F) {
	for i, r := range otherSamples() {
		f.Add(uint8(i), Marshal(nil, r))
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		records := otherSamples()
		r := newLike(records[int(which)%len(records)])
		decode := func(b []byte) (Record, error) {
			r := newLike(r)
			return r, Unmarshal(b, r)
		}
		if err := Unmarshal(body, r); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("%T: error %v does not wrap ErrMalformed", r, err)
			}
			return
		}
		reencode(t, "Unmarshal", r, decode)
	})
}

// FuzzFrames reads a stream of frames as a server reads a connection's:
// a ConnectRequest, then requests; and as a client reads it: a
// ConnectResponse, then replies and events.
func FuzzFrames(f *testing.F) {
	var server, client []byte
	server, _ = AppendFrame(server, &ConnectRequest{TimeOut: 30000, Passwd: make([]byte, 16)})
	client, _ = AppendFrame(client, &ConnectResponse{TimeOut: 30000, SessionID: 1, Passwd: make([]byte, 16)})
	for i, s := range requestSamples() {
		server, _ = AppendFrame(server, &RequestHeader{Xid: int32(i), Type: s.op}, s.rec)
	}
	for i, s := range responseSamples() {
		client, _ = AppendReply(client, ReplyHeader{Xid: int32(i), Zxid: int64(i)}, s.op, s.rec)
	}
	client, _ = AppendEvent(client, &WatcherEvent{Type: EventNodeDeleted, State: StateSyncConnected, Path: "/a"})
	f.Add(server)
	f.Add(client)
	f.Add([]byte("ruok"))
	f.Add([]byte{0, 0, 0, 8, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, stream []byte) {
		readStream(t, stream, true)
		readStream(t, stream, false)
	})
}

// readStream reads frames from stream until it ends, as a server if
// server is set and as a client otherwise; a client takes each reply to
// answer the op its xid names, modulo the number of ops.
func readStream(t *testing.T, stream []byte, server bool) {
	r := bytes.NewReader(stream)
	buf := make([]byte, 0, 256)
	for n := 0; ; n++ {
		frame, err := ReadFrame(r, buf)
		if err != nil {
			if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("frame %d: ReadFrame: %v", n, err)
			}
			return
		}
		switch {
		case n == 0 && server:
			if err := Unmarshal(frame, new(ConnectRequest)); err != nil {
				checkErr(t, "connect request", err)
			}
		case n == 0:
			if err := Unmarshal(frame, new(ConnectResponse)); err != nil {
				checkErr(t, "connect response", err)
			}
		case server:
			hdr, body, err := SplitRequest(frame)
			if err != nil {
				checkErr(t, "request header", err)
				continue
			}
			if _, err := DecodeRequest(hdr.Type, body); err != nil {
				checkErr(t, hdr.Type.String(), err)
			}
		default:
			hdr, body, err := SplitReply(frame)
			if err != nil {
				checkErr(t, "reply header", err)
				continue
			}
			if hdr.Xid == XidWatchEvent {
				if err := Unmarshal(body, new(WatcherEvent)); err != nil {
					checkErr(t, "watch event", err)
				}
				continue
			}
			samples := responseSamples()
			op := samples[int(uint32(hdr.Xid))%len(samples)].op
			if _, err := DecodeResponse(op, body); err != nil {
				checkErr(t, op.String(), err)
			}
		}
	}
}
