package coord_test

import (
	"bytes"
	"fmt"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/proto"
)

// Example runs what a gateway sends for a new client, a session and a
// create, on an App directly, as a replica executes them, and reads the
// ZooKeeper reply the client would get.
func Example() {
	app := coord.New(coord.Config{})
	ctx := bft.ExecContext{Client: 0, Seq: 1, Time: time.UnixMilli(1_700_000_000_000)}
	const gateway = 1

	c, _ := coord.ParseConnectResult(app.Execute(ctx, coord.ConnectOp(gateway, 0, []byte("0123456789abcdef"), 30000)))
	fmt.Println("session:", c.Status, c.Session != 0, c.Timeout)

	frame := proto.Marshal(nil, &proto.RequestHeader{Xid: 1, Type: proto.OpCreate})
	frame = proto.Marshal(frame, &proto.CreateRequest{Path: "/service/lock-", ACL: proto.OpenACL, Flags: proto.ModeEphemeralSequential})
	ctx.Seq++
	res, _ := coord.ParseRequestResult(app.Execute(ctx, coord.RequestOp(gateway, c.Session, c.Conn, frame)))

	reply, _ := proto.ReadFrame(bytes.NewReader(res.Frames), nil)
	hdr, _, _ := proto.SplitReply(reply)
	fmt.Println("create /service/lock-:", hdr.Err)

	frame = proto.Marshal(nil, &proto.RequestHeader{Xid: 2, Type: proto.OpCreate})
	frame = proto.Marshal(frame, &proto.CreateRequest{Path: "/service", ACL: proto.OpenACL})
	ctx.Seq++
	res, _ = coord.ParseRequestResult(app.Execute(ctx, coord.RequestOp(gateway, c.Session, c.Conn, frame)))
	reply, _ = proto.ReadFrame(bytes.NewReader(res.Frames), nil)
	hdr, body, _ := proto.SplitReply(reply)
	created, _ := proto.DecodeResponse(proto.OpCreate, body)
	fmt.Println("create /service:", hdr.Xid, hdr.Zxid, created.(*proto.CreateResponse).Path)
	// Output:
	// session: ok true 30000
	// create /service/lock-: zookeeper: no node
	// create /service: 2 3 /service
}
