package proto

import (
	"errors"
	"fmt"
	"reflect"
)

// ErrUnknownOp is wrapped by the error DecodeRequest and DecodeResponse
// return for an OpCode they do not know or that has no body of its own on
// a client connection (OpNotification, OpReconfig, OpSASL,
// OpDeleteContainer, OpCreateSession, OpError). A server answers such a
// request with CodeUnimplemented and goes on; the frame was well formed.
var ErrUnknownOp = errors.New("zookeeper protocol: unknown operation")

// An op is what the codec knows of one OpCode.
type op struct {
	name     string
	request  func() Record // a new empty request body; nil if clients do not send the op
	response func() Record // a new empty response body
	respType reflect.Type  // the type response returns
}

// ops maps each OpCode a client sends to its bodies.
var ops = map[OpCode]*op{}

func init() {
	add := func(code OpCode, name string, req, resp func() Record) {
		ops[code] = &op{name: name, request: req, response: resp, respType: reflect.TypeOf(resp())}
	}
	empty := func() Record { return new(Empty) }
	add(OpCreate, "create", func() Record { return new(CreateRequest) }, func() Record { return new(CreateResponse) })
	add(OpDelete, "delete", func() Record { return new(DeleteRequest) }, empty)
	add(OpExists, "exists", func() Record { return new(ExistsRequest) }, func() Record { return new(ExistsResponse) })
	add(OpGetData, "getData", func() Record { return new(GetDataRequest) }, func() Record { return new(GetDataResponse) })
	add(OpSetData, "setData", func() Record { return new(SetDataRequest) }, func() Record { return new(SetDataResponse) })
	add(OpGetACL, "getACL", func() Record { return new(GetACLRequest) }, func() Record { return new(GetACLResponse) })
	add(OpSetACL, "setACL", func() Record { return new(SetACLRequest) }, func() Record { return new(SetACLResponse) })
	add(OpGetChildren, "getChildren", func() Record { return new(GetChildrenRequest) }, func() Record { return new(GetChildrenResponse) })
	add(OpSync, "sync", func() Record { return new(SyncRequest) }, func() Record { return new(SyncResponse) })
	add(OpPing, "ping", empty, empty)
	add(OpGetChildren2, "getChildren2", func() Record { return new(GetChildren2Request) }, func() Record { return new(GetChildren2Response) })
	// A lone check is answered as a setData is, with the node's Stat.
	add(OpCheck, "check", func() Record { return new(CheckVersionRequest) }, func() Record { return new(SetDataResponse) })
	add(OpMulti, "multi", func() Record { return new(MultiRequest) }, func() Record { return new(MultiResponse) })
	add(OpCreate2, "create2", func() Record { return new(CreateRequest) }, func() Record { return new(Create2Response) })
	add(OpCheckWatches, "checkWatches", func() Record { return new(CheckWatchesRequest) }, empty)
	add(OpRemoveWatches, "removeWatches", func() Record { return new(RemoveWatchesRequest) }, empty)
	add(OpCreateContainer, "createContainer", func() Record { return new(CreateRequest) }, func() Record { return new(Create2Response) })
	add(OpCreateTTL, "createTTL", func() Record { return new(CreateTTLRequest) }, func() Record { return new(Create2Response) })
	add(OpMultiRead, "multiRead", func() Record { return new(MultiRequest) }, func() Record { return new(MultiResponse) })
	add(OpAuth, "auth", func() Record { return new(AuthPacket) }, empty)
	add(OpSetWatches, "setWatches", func() Record { return new(SetWatches) }, empty)
	add(OpGetEphemerals, "getEphemerals", func() Record { return new(GetEphemeralsRequest) }, func() Record { return new(GetEphemeralsResponse) })
	add(OpGetAllChildrenNum, "getAllChildrenNumber", func() Record { return new(GetAllChildrenNumberRequest) }, func() Record { return new(GetAllChildrenNumberResponse) })
	add(OpSetWatches2, "setWatches2", func() Record { return new(SetWatches2) }, empty)
	// addWatch is answered with an ErrorResponse holding CodeOK.
	add(OpAddWatch, "addWatch", func() Record { return new(AddWatchRequest) }, func() Record { return new(ErrorResponse) })
	add(OpWhoAmI, "whoAmI", empty, func() Record { return new(WhoAmIResponse) })
	add(OpCloseSession, "closeSession", empty, empty)
}

// otherOps names the OpCodes the codec has no bodies for.
var otherOps = map[OpCode]string{
	OpNotification:    "notification",
	OpReconfig:        "reconfig",
	OpDeleteContainer: "deleteContainer",
	OpSASL:            "sasl",
	OpCreateSession:   "createSession",
	OpError:           "error",
}

// String returns ZooKeeper's name for the op, such as "getChildren2".
func (c OpCode) String() string {
	if o, ok := ops[c]; ok {
		return o.name
	}
	if s, ok := otherOps[c]; ok {
		return s
	}
	return fmt.Sprintf("op(%d)", int32(c))
}

// SplitRequest decodes the RequestHeader at the start of frame (a frame's
// contents, without its length) and returns it with the body that
// follows, which aliases frame. The error wraps ErrMalformed.
func SplitRequest(frame []byte) (RequestHeader, []byte, error) {
	var h RequestHeader
	if len(frame) < requestHeaderSize {
		return h, nil, fmt.Errorf("%w: request header needs %d bytes, frame has %d", ErrMalformed, requestHeaderSize, len(frame))
	}
	d := NewDecoder(frame[:requestHeaderSize])
	h.Decode(d)
	return h, frame[requestHeaderSize:], nil
}

// SplitReply decodes the ReplyHeader at the start of frame and returns it
// with the body that follows, which aliases frame. The error wraps
// ErrMalformed.
func SplitReply(frame []byte) (ReplyHeader, []byte, error) {
	var h ReplyHeader
	if len(frame) < replyHeaderSize {
		return h, nil, fmt.Errorf("%w: reply header needs %d bytes, frame has %d", ErrMalformed, replyHeaderSize, len(frame))
	}
	d := NewDecoder(frame[:replyHeaderSize])
	h.Decode(d)
	return h, frame[replyHeaderSize:], nil
}

// DecodeRequest decodes the body of a request of type op into the record
// the table below names for op; the body must hold exactly that record. The result owns its memory and
// does not alias body.
//
//	OpCreate, OpCreate2, OpCreateContainer   *CreateRequest
//	OpCreateTTL                              *CreateTTLRequest
//	OpDelete                                 *DeleteRequest
//	OpExists                                 *ExistsRequest
//	OpGetData                                *GetDataRequest
//	OpSetData                                *SetDataRequest
//	OpGetACL                                 *GetACLRequest
//	OpSetACL                                 *SetACLRequest
//	OpGetChildren                            *GetChildrenRequest
//	OpGetChildren2                           *GetChildren2Request
//	OpSync                                   *SyncRequest
//	OpCheck                                  *CheckVersionRequest
//	OpMulti, OpMultiRead                     *MultiRequest
//	OpAuth                                   *AuthPacket
//	OpSetWatches                             *SetWatches
//	OpSetWatches2                            *SetWatches2
//	OpAddWatch                               *AddWatchRequest
//	OpCheckWatches                           *CheckWatchesRequest
//	OpRemoveWatches                          *RemoveWatchesRequest
//	OpGetEphemerals                          *GetEphemeralsRequest
//	OpGetAllChildrenNum                      *GetAllChildrenNumberRequest
//	OpPing, OpCloseSession, OpWhoAmI         *Empty
//
// An error wraps ErrUnknownOp for any other op and ErrMalformed for a
// body that does not decode, including a multi whose ops are not all
// writes (OpMulti) or all reads (OpMultiRead).
func DecodeRequest(op OpCode, body []byte) (Record, error) {
	o, ok := ops[op]
	if !ok || o.request == nil {
		return nil, fmt.Errorf("%w: %v", ErrUnknownOp, op)
	}
	r := o.request()
	d := NewDecoder(body)
	d.what = o.name + " request"
	r.Decode(d)
	if m, ok := r.(*MultiRequest); ok && d.err == nil {
		for i, mo := range m.Ops {
			if readOp(mo.Type) != (op == OpMultiRead) {
				d.failf("op %d: %v cannot be part of a %v", i, mo.Type, op)
				break
			}
		}
	}
	if err := d.finish(); err != nil {
		return nil, err
	}
	return r, nil
}

// DecodeResponse decodes the body of a successful reply to a request of
// type op: the record EncodeResponse takes for op. A reply whose header
// has an error has no body and nothing to decode. The result owns its
// memory and does not alias body. The error wraps ErrUnknownOp or
// ErrMalformed, as DecodeRequest's does.
func DecodeResponse(op OpCode, body []byte) (Record, error) {
	o, ok := ops[op]
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrUnknownOp, op)
	}
	r := o.response()
	d := NewDecoder(body)
	d.what = o.name + " response"
	r.Decode(d)
	if err := d.finish(); err != nil {
		return nil, err
	}
	return r, nil
}

// ResponseFor returns a new, empty record of the type that answers op
// successfully, or nil if op is unknown:
//
//	OpCreate                                        *CreateResponse
//	OpCreate2, OpCreateContainer, OpCreateTTL       *Create2Response
//	OpExists                                        *ExistsResponse
//	OpGetData                                       *GetDataResponse
//	OpSetData, OpCheck                              *SetDataResponse
//	OpGetACL                                        *GetACLResponse
//	OpSetACL                                        *SetACLResponse
//	OpGetChildren                                   *GetChildrenResponse
//	OpGetChildren2                                  *GetChildren2Response
//	OpSync                                          *SyncResponse
//	OpMulti, OpMultiRead                            *MultiResponse
//	OpAddWatch                                      *ErrorResponse
//	OpGetEphemerals                                 *GetEphemeralsResponse
//	OpGetAllChildrenNum                             *GetAllChildrenNumberResponse
//	OpWhoAmI                                        *WhoAmIResponse
//	OpDelete, OpSetWatches, OpSetWatches2,
//	OpCheckWatches, OpRemoveWatches, OpAuth,
//	OpCloseSession, OpPing                          *Empty
func ResponseFor(op OpCode) Record {
	o, ok := ops[op]
	if !ok {
		return nil
	}
	return o.response()
}

// AppendReply appends to b a whole frame answering a request of type op:
// the length, hdr, and, if hdr.Err is CodeOK, resp, which must be the
// record ResponseFor(op) returns (nil stands for *Empty). A reply with an
// error carries no body; resp is ignored. On an error (a resp of the
// wrong type, a frame beyond MaxPacket) it returns b unchanged.
func AppendReply(b []byte, hdr ReplyHeader, op OpCode, resp Record) ([]byte, error) {
	if hdr.Err != CodeOK {
		return AppendFrame(b, &hdr)
	}
	o, ok := ops[op]
	if !ok {
		return b, fmt.Errorf("%w: %v", ErrUnknownOp, op)
	}
	if resp == nil {
		resp = &Empty{}
	}
	if reflect.TypeOf(resp) != o.respType {
		return b, fmt.Errorf("proto: %v answered with %T, want %v", op, resp, o.respType)
	}
	if m, ok := resp.(*MultiResponse); ok {
		if err := m.check(); err != nil {
			return b, err
		}
	}
	return AppendFrame(b, &hdr, resp)
}

// AppendEvent appends to b a whole frame carrying a watch event, under
// the reply header ZooKeeper's servers send with one (xid XidWatchEvent,
// zxid -1). It fails, returning b unchanged, only if the path makes the
// frame longer than MaxPacket.
func AppendEvent(b []byte, ev *WatcherEvent) ([]byte, error) {
	return AppendFrame(b, &ReplyHeader{Xid: XidWatchEvent, Zxid: -1}, ev)
}

// sameType reports whether a and b are records of the same type; two nil
// records are.
func sameType(a, b Record) bool { return reflect.TypeOf(a) == reflect.TypeOf(b) }
