// Package coordtest holds test support for the coordination service: a
// Byzantine replica's application.
package coordtest

import (
	"bytes"
	"encoding/binary"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/proto"
)

// Liar is a Byzantine replica's App: it keeps the true state, so it stays
// in the protocol, but every answer to a client's request that it sends,
// ordered or read-only, carries an invented watch event (NodeDeleted of
// /truth) and has "truth" replaced by "lies!". A gateway must pass on
// none of it.
type Liar struct {
	*coord.App
	// OnLie, if set, is called for every answer it falsified.
	OnLie func()
}

// Execute runs op and falsifies the answer to a client's request.
func (l Liar) Execute(ctx bft.ExecContext, op []byte) []byte {
	res := l.App.Execute(ctx, op)
	if len(op) < 4 || binary.BigEndian.Uint32(op) != 2 { // not a RequestOp
		return res
	}
	return l.lie(res)
}

// Query answers op and falsifies the answer.
func (l Liar) Query(ctx bft.QueryContext, op []byte) []byte {
	return l.lie(l.App.Query(ctx, op))
}

func (l Liar) lie(res []byte) []byte {
	r, err := coord.ParseRequestResult(res)
	if err != nil {
		return res
	}
	frames, _ := proto.AppendEvent(nil, &proto.WatcherEvent{Type: proto.EventNodeDeleted, State: proto.StateSyncConnected, Path: "/truth"})
	frames = append(frames, bytes.ReplaceAll(r.Frames, []byte("truth"), []byte("lies!"))...)
	e := proto.NewEncoder(nil)
	e.Int32(int32(r.Status))
	e.Buffer(frames)
	if l.OnLie != nil {
		l.OnLie()
	}
	return e.Bytes()
}
