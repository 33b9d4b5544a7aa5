package tree

import "github.com/rubin-go/rubin/coord/proto"

// An Op is one operation of a multi or a multiRead. Type says which and
// which fields it reads: OpCreate, OpCreate2, OpCreateContainer and
// OpCreateTTL (Path, Data, ACL, Mode, TTL; container mode for
// OpCreateContainer, TTL for OpCreateTTL only), OpDelete and OpCheck
// (Path, Version), OpSetData (Path, Data, Version) in Multi; OpGetData
// and OpGetChildren (Path) in MultiRead.
type Op struct {
	Type    proto.OpCode
	Path    string
	Data    []byte
	ACL     []proto.ACL
	Mode    proto.CreateMode
	TTL     int64
	Version int32
}

// An OpResult is one operation's result. Type is the operation's type, or
// OpError with the code in Err. Path is a create's path; Stat a create's,
// setData's or getData's Stat; Data getData's data (the tree's own, not
// to be modified); Children getChildren's names in byte order.
type OpResult struct {
	Type     proto.OpCode
	Err      proto.Code
	Path     string
	Stat     proto.Stat
	Data     []byte
	Children []string
}

// Multi runs ops as one write, all or nothing, with one zxid. If an op
// fails, nothing of the multi stays and no watch fires; the results say,
// as ZooKeeper's do, CodeOK for the ops before it, its own code for the
// failing op, and CodeRuntimeInconsistency for the ops after it, each
// with Type OpError; the error returned is then the failing op's code.
// An op type a multi cannot hold fails the whole request with
// CodeMarshallingError and no results, as ZooKeeper fails to decode it.
func (t *Tree) Multi(w Write, ops []Op) ([]OpResult, []Event, error) {
	for _, op := range ops {
		switch op.Type {
		case proto.OpCreate, proto.OpCreate2, proto.OpCreateContainer, proto.OpCreateTTL,
			proto.OpDelete, proto.OpSetData, proto.OpCheck:
		default:
			return nil, nil, proto.CodeMarshallingError
		}
	}
	s, err := t.begin(w)
	if err != nil {
		return nil, nil, err
	}
	t.inMulti = true
	defer func() { t.inMulti, t.undo = false, t.undo[:0] }()
	results := make([]OpResult, len(ops))
	failed := -1
	var code proto.Code
	for i, op := range ops {
		r := OpResult{Type: op.Type}
		var err error
		switch op.Type {
		case proto.OpCreate, proto.OpCreate2, proto.OpCreateContainer, proto.OpCreateTTL:
			mode, ttl := op.Mode, int64(-1)
			switch op.Type {
			case proto.OpCreateTTL:
				ttl = op.TTL
			case proto.OpCreateContainer:
				if mode != proto.ModeContainer {
					err = proto.CodeBadArguments
				}
			}
			if err == nil {
				r.Path, r.Stat, err = t.create(s, w, op.Path, op.Data, op.ACL, mode, ttl)
			}
		case proto.OpDelete:
			err = t.delete(s, w, op.Path, op.Version)
		case proto.OpSetData:
			r.Stat, err = t.setData(s, w, op.Path, op.Data, op.Version)
		case proto.OpCheck:
			err = t.check(s, op.Path, op.Version)
		}
		if err != nil {
			failed, code = i, codeOf(err)
			break
		}
		results[i] = r
	}
	if failed < 0 {
		return results, t.fire(), nil
	}
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	t.triggers = t.triggers[:0]
	for i := range results {
		results[i] = OpResult{Type: proto.OpError}
		switch {
		case i == failed:
			results[i].Err = code
		case i > failed:
			results[i].Err = proto.CodeRuntimeInconsistency
		}
	}
	return results, nil, code
}

// codeOf returns err's ZooKeeper code; the tree's ops return only codes.
func codeOf(err error) proto.Code {
	if c, ok := err.(proto.Code); ok {
		return c
	}
	return proto.CodeSystemError
}

// MultiRead runs read ops (OpGetData, OpGetChildren, without watches)
// one by one; each succeeds or fails on its own, as in ZooKeeper. Other
// op types fail the request with CodeMarshallingError.
func (t *Tree) MultiRead(session int64, ops []Op) ([]OpResult, error) {
	for _, op := range ops {
		if op.Type != proto.OpGetData && op.Type != proto.OpGetChildren {
			return nil, proto.CodeMarshallingError
		}
	}
	if _, err := t.reader(session); err != nil {
		return nil, err
	}
	results := make([]OpResult, len(ops))
	for i, op := range ops {
		r := OpResult{Type: op.Type}
		var err error
		if op.Type == proto.OpGetData {
			r.Data, r.Stat, err = t.GetData(session, op.Path, false)
		} else {
			r.Children, _, err = t.GetChildren(session, op.Path, false)
		}
		if err != nil {
			r = OpResult{Type: proto.OpError, Err: codeOf(err)}
		}
		results[i] = r
	}
	return results, nil
}
