package proto_test

import (
	"bytes"
	"fmt"

	"github.com/rubin-go/rubin/coord/proto"
)

// A server reads a client's request from its connection, decodes it by
// the op its header names, and answers under the same xid.
func Example() {
	// What a client sends: a header and a create request, in one frame.
	var conn bytes.Buffer
	proto.WriteFrame(&conn,
		&proto.RequestHeader{Xid: 1, Type: proto.OpCreate},
		&proto.CreateRequest{Path: "/lock-", Data: []byte("me"), ACL: proto.OpenACL, Flags: proto.ModeEphemeralSequential})

	// What the server does with it.
	buf := make([]byte, 0, proto.MaxPacket)
	frame, err := proto.ReadFrame(&conn, buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	hdr, body, err := proto.SplitRequest(frame)
	if err != nil {
		fmt.Println(err)
		return
	}
	req, err := proto.DecodeRequest(hdr.Type, body)
	if err != nil {
		fmt.Println(err)
		return
	}
	create := req.(*proto.CreateRequest)
	fmt.Printf("xid %d: %v %s, ephemeral %v, sequential %v\n",
		hdr.Xid, hdr.Type, create.Path, create.Flags.Ephemeral(), create.Flags.Sequential())

	reply, err := proto.AppendReply(nil, proto.ReplyHeader{Xid: hdr.Xid, Zxid: 7}, hdr.Type,
		&proto.CreateResponse{Path: create.Path + "0000000000"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("reply: % x\n", reply)
	// Output:
	// xid 1: create /lock-, ephemeral true, sequential true
	// reply: 00 00 00 24 00 00 00 01 00 00 00 00 00 00 00 07 00 00 00 00 00 00 00 10 2f 6c 6f 63 6b 2d 30 30 30 30 30 30 30 30 30 30
}
