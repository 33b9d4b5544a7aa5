package gateway_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/proto"
)

// liar is a Byzantine replica's App: it keeps the true state, so it stays
// in the protocol, but every answer to a request it sends carries an
// invented watch event and has "truth" replaced by "lies!".
type liar struct{ *coord.App }

func (l liar) Execute(ctx bft.ExecContext, op []byte) []byte {
	res := l.App.Execute(ctx, op)
	if len(op) < 4 || binary.BigEndian.Uint32(op) != 2 { // not a RequestOp
		return res
	}
	r, err := coord.ParseRequestResult(res)
	if err != nil {
		return res
	}
	frames, _ := proto.AppendEvent(nil, &proto.WatcherEvent{Type: proto.EventNodeDeleted, State: proto.StateSyncConnected, Path: "/truth"})
	frames = append(frames, bytes.ReplaceAll(r.Frames, []byte("truth"), []byte("lies!"))...)
	e := proto.NewEncoder(nil)
	e.Int32(int32(r.Status))
	e.Buffer(frames)
	return e.Bytes()
}

// TestByzantineReplicaOutvoted runs a client against four replicas of
// which one lies in every answer: the gateway passes on only what f+1
// replicas said, so the client sees neither the lies nor the invented
// events.
func TestByzantineReplicaOutvoted(t *testing.T) {
	tc := newClusterWith(t, func(i int, app *coord.App) bft.App {
		if i == 2 {
			return liar{app}
		}
		return app
	}, nil)
	c := tc.connect(10 * time.Second)
	must(c.Create("/truth", []byte("truth"), 0, open))
	for range 20 {
		data, _, w := must3(c.GetW("/truth"))
		if string(data) != "truth" {
			t.Fatalf("the client read %q", data)
		}
		select {
		case ev := <-w:
			t.Fatalf("an event that did not happen: %+v", ev)
		default:
		}
		must(c.Set("/truth", []byte("truth"), -1))
		waitEvent(t, w, zk.EventNodeDataChanged, "/truth")
	}
}
