package coord

import (
	"errors"

	"github.com/rubin-go/rubin/coord/proto"
	"github.com/rubin-go/rubin/coord/tree"
)

// outcome is what running one request gives.
type outcome struct {
	code      proto.Code
	resp      proto.Record // nil for *proto.Empty
	close     bool         // close the connection after the reply
	malformed bool         // the body did not decode: no reply, close
}

// run runs one request of session at agreed time now on the tree and
// queues the watch events it fires.
func (a *App) run(sid int64, now int64, hdr proto.RequestHeader, body []byte) outcome {
	req, err := proto.DecodeRequest(hdr.Type, body)
	switch {
	case errors.Is(err, proto.ErrUnknownOp):
		return outcome{code: proto.CodeUnimplemented}
	case err != nil:
		return outcome{malformed: true}
	}
	t := a.tree
	w := func() tree.Write { return tree.Write{Session: sid, Zxid: a.nextZxid(), Time: now} }
	var evs []tree.Event
	var resp proto.Record
	switch r := req.(type) {
	case *proto.CreateRequest:
		if hdr.Type == proto.OpCreateContainer && r.Flags != proto.ModeContainer {
			// As in a multi: a createContainer must ask for a container.
			return outcome{code: proto.CodeBadArguments}
		}
		var path string
		var st proto.Stat
		path, st, evs, err = t.Create(w(), r.Path, r.Data, r.ACL, r.Flags)
		if hdr.Type == proto.OpCreate {
			resp = &proto.CreateResponse{Path: path}
		} else {
			resp = &proto.Create2Response{Path: path, Stat: st}
		}
	case *proto.CreateTTLRequest:
		var path string
		var st proto.Stat
		path, st, evs, err = t.CreateTTL(w(), r.Path, r.Data, r.ACL, r.Flags, r.TTL)
		resp = &proto.Create2Response{Path: path, Stat: st}
	case *proto.DeleteRequest:
		evs, err = t.Delete(w(), r.Path, r.Version)
	case *proto.ExistsRequest:
		var st proto.Stat
		st, err = t.Exists(sid, r.Path, r.Watch)
		resp = &proto.ExistsResponse{Stat: st}
	case *proto.GetDataRequest:
		var data []byte
		var st proto.Stat
		data, st, err = t.GetData(sid, r.Path, r.Watch)
		resp = &proto.GetDataResponse{Data: data, Stat: st}
	case *proto.SetDataRequest:
		var st proto.Stat
		st, evs, err = t.SetData(w(), r.Path, r.Data, r.Version)
		resp = &proto.SetDataResponse{Stat: st}
	case *proto.GetACLRequest:
		var acl []proto.ACL
		var st proto.Stat
		acl, st, err = t.GetACL(sid, r.Path)
		resp = &proto.GetACLResponse{ACL: acl, Stat: st}
	case *proto.SetACLRequest:
		var st proto.Stat
		st, err = t.SetACL(w(), r.Path, r.ACL, r.Version)
		resp = &proto.SetACLResponse{Stat: st}
	case *proto.GetChildrenRequest:
		var kids []string
		kids, _, err = t.GetChildren(sid, r.Path, r.Watch)
		resp = &proto.GetChildrenResponse{Children: kids}
	case *proto.GetChildren2Request:
		var kids []string
		var st proto.Stat
		kids, st, err = t.GetChildren(sid, r.Path, r.Watch)
		resp = &proto.GetChildren2Response{Children: kids, Stat: st}
	case *proto.SyncRequest:
		// Every request is ordered: a sync has nothing to wait for.
		resp = &proto.SyncResponse{Path: r.Path}
	case *proto.CheckVersionRequest:
		if err = t.Check(w(), r.Path, r.Version); err == nil {
			var st proto.Stat
			st, err = t.Exists(sid, r.Path, false)
			resp = &proto.SetDataResponse{Stat: st}
		}
	case *proto.MultiRequest:
		return a.multi(sid, now, hdr.Type, r)
	case *proto.AuthPacket:
		err = t.AddAuth(sid, r.Scheme, r.Auth)
		// ZooKeeper closes the connection of a client whose auth failed.
		return outcome{code: codeOf(err), close: err != nil}
	case *proto.SetWatches:
		evs, err = t.SetWatches(sid, r.RelativeZxid, r.DataWatches, r.ExistWatches, r.ChildWatches, nil, nil)
	case *proto.SetWatches2:
		evs, err = t.SetWatches(sid, r.RelativeZxid, r.DataWatches, r.ExistWatches, r.ChildWatches,
			r.PersistentWatches, r.PersistentRecursiveWatches)
	case *proto.AddWatchRequest:
		err = t.AddWatch(sid, r.Path, r.Mode)
		resp = &proto.ErrorResponse{Err: proto.CodeOK}
	case *proto.CheckWatchesRequest:
		err = t.CheckWatches(sid, r.Path, r.Type)
	case *proto.RemoveWatchesRequest:
		err = t.RemoveWatches(sid, r.Path, r.Type)
	case *proto.GetEphemeralsRequest:
		var paths []string
		paths, err = t.GetEphemerals(sid, r.PrefixPath)
		resp = &proto.GetEphemeralsResponse{Ephemerals: paths}
	case *proto.GetAllChildrenNumberRequest:
		var n int32
		n, err = t.GetAllChildrenNumber(sid, r.Path)
		resp = &proto.GetAllChildrenNumberResponse{TotalNumber: n}
	case *proto.Empty:
		switch hdr.Type {
		case proto.OpCloseSession:
			evs, err = t.CloseSession(w())
			a.queue(evs)
			return outcome{code: codeOf(err), close: true}
		case proto.OpWhoAmI:
			info, _ := t.Session(sid)
			who := &proto.WhoAmIResponse{}
			for _, id := range info.Auth {
				who.ClientInfo = append(who.ClientInfo, proto.ClientInfo{AuthScheme: id.Scheme, User: id.ID})
			}
			resp = who
		}
		// OpPing: the session was touched; the answer is empty.
	default:
		return outcome{code: proto.CodeUnimplemented}
	}
	a.queue(evs)
	return outcome{code: codeOf(err), resp: resp}
}

func (a *App) multi(sid int64, now int64, typ proto.OpCode, r *proto.MultiRequest) outcome {
	ops := make([]tree.Op, len(r.Ops))
	for i, m := range r.Ops {
		op := tree.Op{Type: m.Type}
		switch q := m.Request.(type) {
		case *proto.CreateRequest:
			op.Path, op.Data, op.ACL, op.Mode = q.Path, q.Data, q.ACL, q.Flags
		case *proto.CreateTTLRequest:
			op.Path, op.Data, op.ACL, op.Mode, op.TTL = q.Path, q.Data, q.ACL, q.Flags, q.TTL
		case *proto.DeleteRequest:
			op.Path, op.Version = q.Path, q.Version
		case *proto.SetDataRequest:
			op.Path, op.Data, op.Version = q.Path, q.Data, q.Version
		case *proto.CheckVersionRequest:
			op.Path, op.Version = q.Path, q.Version
		case *proto.GetDataRequest:
			op.Path = q.Path
		case *proto.GetChildrenRequest:
			op.Path = q.Path
		}
		ops[i] = op
	}
	var results []tree.OpResult
	var err error
	if typ == proto.OpMulti {
		var evs []tree.Event
		results, evs, err = a.tree.Multi(tree.Write{Session: sid, Zxid: a.nextZxid(), Time: now}, ops)
		a.queue(evs)
	} else {
		results, err = a.tree.MultiRead(sid, ops)
	}
	if results == nil {
		return outcome{code: codeOf(err)}
	}
	// A multi that failed answers with its results, each op's error in
	// its own, under a header without error, as ZooKeeper answers.
	resp := &proto.MultiResponse{Results: make([]proto.MultiResult, len(results))}
	for i, res := range results {
		resp.Results[i] = multiResult(res)
	}
	return outcome{code: proto.CodeOK, resp: resp}
}

func multiResult(r tree.OpResult) proto.MultiResult {
	switch r.Type {
	case proto.OpCreate:
		return proto.MultiResult{Type: proto.OpCreate, Response: &proto.CreateResponse{Path: r.Path}}
	case proto.OpCreate2, proto.OpCreateContainer, proto.OpCreateTTL:
		return proto.MultiResult{Type: proto.OpCreate2, Response: &proto.Create2Response{Path: r.Path, Stat: r.Stat}}
	case proto.OpSetData:
		return proto.MultiResult{Type: proto.OpSetData, Response: &proto.SetDataResponse{Stat: r.Stat}}
	case proto.OpGetData:
		return proto.MultiResult{Type: proto.OpGetData, Response: &proto.GetDataResponse{Data: r.Data, Stat: r.Stat}}
	case proto.OpGetChildren:
		return proto.MultiResult{Type: proto.OpGetChildren, Response: &proto.GetChildrenResponse{Children: r.Children}}
	case proto.OpError:
		return proto.MultiResult{Type: proto.OpError, Response: &proto.ErrorResponse{Err: r.Err}}
	}
	return proto.MultiResult{Type: r.Type} // OpDelete, OpCheck: no body
}
