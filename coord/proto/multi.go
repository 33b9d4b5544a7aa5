package proto

import "fmt"

// MultiHeader precedes each op of a MultiRequest and each result of a
// MultiResponse, and a last one with Done set ends the list.
type MultiHeader struct {
	Type OpCode // the op's code; OpError for a failed op's result; -1 at the end
	Done bool   // this header ends the list
	Err  Code   // a failed op's error in a result; -1 in requests and at the end
}

// Encode implements Record.
func (r *MultiHeader) Encode(e *Encoder) {
	e.Int32(int32(r.Type))
	e.Bool(r.Done)
	e.Int32(int32(r.Err))
}

// Decode implements Record.
func (r *MultiHeader) Decode(d *Decoder) {
	r.Type = OpCode(d.Int32())
	r.Done = d.Bool()
	r.Err = Code(d.Int32())
}

// multiEnd is the header that ends a multi's list, in both directions.
var multiEnd = MultiHeader{Type: -1, Done: true, Err: -1}

// A MultiOp is one operation of a multi or multiRead.
type MultiOp struct {
	// Type is the op's code: for OpMulti one of OpCreate, OpCreate2,
	// OpCreateContainer, OpCreateTTL, OpDelete, OpSetData and OpCheck;
	// for OpMultiRead OpGetChildren or OpGetData.
	Type OpCode
	// Request is the op's body: *CreateRequest (*CreateTTLRequest for
	// OpCreateTTL), *DeleteRequest, *SetDataRequest,
	// *CheckVersionRequest, *GetChildrenRequest or *GetDataRequest.
	Request Record
}

// newMultiOp returns an empty body for an op of type t, or nil if a multi
// cannot hold t.
func newMultiOp(t OpCode) Record {
	switch t {
	case OpCreate, OpCreate2, OpCreateContainer:
		return new(CreateRequest)
	case OpCreateTTL:
		return new(CreateTTLRequest)
	case OpDelete:
		return new(DeleteRequest)
	case OpSetData:
		return new(SetDataRequest)
	case OpCheck:
		return new(CheckVersionRequest)
	case OpGetChildren:
		return new(GetChildrenRequest)
	case OpGetData:
		return new(GetDataRequest)
	}
	return nil
}

// readOp reports whether a multi op of type t reads (belongs in a
// multiRead) rather than writes (belongs in a multi).
func readOp(t OpCode) bool { return t == OpGetChildren || t == OpGetData }

// MultiRequest is the body of OpMulti, whose write ops succeed or fail
// together, and of OpMultiRead, whose read ops are answered one by one.
// Decoding checks that each op's Request is the record its Type names;
// DecodeRequest also checks that the ops are all writes for OpMulti and
// all reads for OpMultiRead.
type MultiRequest struct {
	Ops []MultiOp
}

// Encode implements Record. It writes each op's header with Err -1, as
// clients do.
func (r *MultiRequest) Encode(e *Encoder) {
	for _, op := range r.Ops {
		h := MultiHeader{Type: op.Type, Err: -1}
		h.Encode(e)
		op.Request.Encode(e)
	}
	end := multiEnd
	end.Encode(e)
}

// Decode implements Record. It ignores the Err of each op's header.
func (r *MultiRequest) Decode(d *Decoder) {
	r.Ops = nil
	for d.Err() == nil {
		var h MultiHeader
		h.Decode(d)
		if h.Done || d.Err() != nil {
			break
		}
		req := newMultiOp(h.Type)
		if req == nil {
			d.Fail(fmt.Errorf("op %d: %v cannot be part of a multi", len(r.Ops), h.Type))
			break
		}
		req.Decode(d)
		r.Ops = append(grow(r.Ops), MultiOp{Type: h.Type, Request: req})
	}
	if d.Err() != nil {
		r.Ops = nil
	}
}

// A MultiResult is the outcome of one op of a multi or multiRead.
type MultiResult struct {
	// Type is the op's code, or OpError if it failed. A create's result
	// has type OpCreate; the other creates' have OpCreate2.
	Type OpCode
	// Response is the result's body: *CreateResponse for OpCreate,
	// *Create2Response for OpCreate2, nil for OpDelete and OpCheck,
	// *SetDataResponse for OpSetData, *GetChildrenResponse for
	// OpGetChildren, *GetDataResponse for OpGetData and *ErrorResponse
	// for OpError.
	Response Record
}

// newMultiResult returns an empty body for a result of type t, nil for
// the types without one, and ok false for a type no result has.
func newMultiResult(t OpCode) (r Record, ok bool) {
	switch t {
	case OpCreate:
		return new(CreateResponse), true
	case OpCreate2:
		return new(Create2Response), true
	case OpDelete, OpCheck:
		return nil, true
	case OpSetData:
		return new(SetDataResponse), true
	case OpGetChildren:
		return new(GetChildrenResponse), true
	case OpGetData:
		return new(GetDataResponse), true
	case OpError:
		return new(ErrorResponse), true
	}
	return nil, false
}

// MultiResponse answers OpMulti and OpMultiRead with one result per op,
// in order. A multi that failed answers CodeOK in its reply header and
// ErrorResponse results: the failed op's error, and CodeOK for ops that
// were rolled back or CodeRuntimeInconsistency for ops after the failure,
// as ZooKeeper does. A multiRead reports each failed read by itself.
type MultiResponse struct {
	Results []MultiResult
}

// check returns an error if a result's Response is not the record its
// Type calls for.
func (r *MultiResponse) check() error {
	for i, res := range r.Results {
		want, ok := newMultiResult(res.Type)
		if !ok || !sameType(want, res.Response) {
			return fmt.Errorf("proto: multi result %d of type %v has body %T", i, res.Type, res.Response)
		}
	}
	return nil
}

// Encode implements Record. A failed op's header carries its error too.
// It panics if a result's Response is not the record its Type calls for,
// a server's bug, which AppendReply reports as an error instead.
func (r *MultiResponse) Encode(e *Encoder) {
	if err := r.check(); err != nil {
		panic(err)
	}
	for _, res := range r.Results {
		h := MultiHeader{Type: res.Type}
		if er, ok := res.Response.(*ErrorResponse); ok {
			h.Err = er.Err
		}
		h.Encode(e)
		if res.Response != nil {
			res.Response.Encode(e)
		}
	}
	end := multiEnd
	end.Encode(e)
}

// Decode implements Record. A failed op's error is taken from its
// ErrorResponse, as ZooKeeper's clients take it.
func (r *MultiResponse) Decode(d *Decoder) {
	r.Results = nil
	for d.Err() == nil {
		var h MultiHeader
		h.Decode(d)
		if h.Done || d.Err() != nil {
			break
		}
		body, ok := newMultiResult(h.Type)
		if !ok {
			d.Fail(fmt.Errorf("result %d: no multi result has type %v", len(r.Results), h.Type))
			break
		}
		if body != nil {
			body.Decode(d)
		}
		r.Results = append(grow(r.Results), MultiResult{Type: h.Type, Response: body})
	}
	if d.Err() != nil {
		r.Results = nil
	}
}

// grow returns s with room for one more element, doubling its capacity
// when full rather than growing by append's smaller steps, so that a
// multi of many small ops allocates at most twice its final slice.
func grow[T any](s []T) []T {
	if len(s) < cap(s) {
		return s
	}
	n := make([]T, len(s), max(4, 2*cap(s)))
	copy(n, s)
	return n
}
