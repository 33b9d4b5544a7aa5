package coord_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/proto"
)

// FuzzExecute feeds ops of any bytes, after a session is open, to two
// Apps: neither may panic, both must answer alike and end in the same
// state, and a snapshot must restore.
func FuzzExecute(f *testing.F) {
	req := func(op proto.OpCode, r proto.Record) []byte {
		frame := proto.Marshal(nil, &proto.RequestHeader{Xid: 1, Type: op})
		return coord.RequestOp(1, 1, 1, proto.Marshal(frame, r))
	}
	f.Add(req(proto.OpCreate, &proto.CreateRequest{Path: "/a", Data: []byte("x"), ACL: proto.OpenACL, Flags: proto.ModeEphemeralSequential}))
	f.Add(req(proto.OpMulti, &proto.MultiRequest{Ops: []proto.MultiOp{{Type: proto.OpCheck, Request: &proto.CheckVersionRequest{Path: "/", Version: 1}}}}))
	f.Add(req(proto.OpSetWatches, &proto.SetWatches{DataWatches: []string{"/a"}}))
	f.Add(req(proto.OpCloseSession, &proto.Empty{}))
	f.Add(coord.PollOp(1, []int64{1, 2}))
	f.Add(coord.ConnectOp(2, 1, []byte("pw"), 5000))
	f.Add(coord.ClaimOp(1, 7, []bft.ClientID{0, 1, 2, 5}))
	f.Add(coord.StatsOp(1))
	f.Fuzz(func(t *testing.T, op []byte) {
		var apps [2]*coord.App
		var res [2][]byte
		for i := range apps {
			apps[i] = coord.New(coord.Config{})
			ctx := bft.ExecContext{Seq: 1, Time: time.UnixMilli(1_700_000_000_000)}
			// The first session gets id 1: the first zxid.
			apps[i].Execute(ctx, coord.ConnectOp(1, 0, []byte("pw"), 5000))
			ctx.Seq++
			res[i] = apps[i].Execute(ctx, op)
		}
		if !bytes.Equal(res[0], res[1]) {
			t.Fatalf("two Apps answered %x and %x", res[0], res[1])
		}
		snap := apps[0].Snapshot()
		if !bytes.Equal(snap, apps[1].Snapshot()) {
			t.Fatal("two Apps in different states")
		}
		if err := coord.New(coord.Config{}).Restore(snap); err != nil {
			t.Fatalf("restore: %v", err)
		}
	})
}
