package gateway_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/proto"
	"github.com/rubin-go/rubin/coord/tree"
)

// recorder is a replica's App that keeps every op it is given, ordered
// or read-only: what a Byzantine replica sees of the clients' requests.
type recorder struct {
	*coord.App
	mu  *sync.Mutex
	ops *[][]byte
}

func (r recorder) Execute(ctx bft.ExecContext, op []byte) []byte {
	r.keep(op)
	return r.App.Execute(ctx, op)
}

func (r recorder) Query(ctx bft.QueryContext, op []byte) []byte {
	r.keep(op)
	return r.App.Query(ctx, op)
}

func (r recorder) keep(op []byte) {
	r.mu.Lock()
	*r.ops = append(*r.ops, bytes.Clone(op))
	r.mu.Unlock()
}

// rawConnect opens (session 0) or resumes a session with a handshake of
// its own, which shows the password the gateway gives.
func rawConnect(t *testing.T, addr string, session int64, passwd []byte) (net.Conn, proto.ConnectResponse) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	resp, err := handshake(nc, session, passwd)
	if err != nil || resp.SessionID == 0 {
		t.Fatalf("handshake: %+v %v", resp, err)
	}
	return nc, resp
}

// handshake sends a connect request for session (0: a new one) with a
// 10s timeout on nc and reads the answer.
func handshake(nc net.Conn, session int64, passwd []byte) (proto.ConnectResponse, error) {
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if passwd == nil {
		passwd = make([]byte, 16)
	}
	var resp proto.ConnectResponse
	if err := proto.WriteFrame(nc, &proto.ConnectRequest{TimeOut: 10000, SessionID: session, Passwd: passwd}); err != nil {
		return resp, err
	}
	frame, err := proto.ReadFrame(nc, nil)
	if err != nil {
		return resp, err
	}
	return resp, proto.Unmarshal(frame, &resp)
}

// TestReplicasSeeNoSecrets has a client open a session, resume it with
// its password and authenticate with addauth digest, super included, and
// with a scheme the replicas refuse,
// while a replica keeps every op it is given: neither the ops nor any
// replica's state hold the session's password or the plaintext
// credentials, so a Byzantine replica could not resume the session
// through a gateway, nor authenticate as the client. The digest
// identity still grants what its ACL says.
func TestReplicasSeeNoSecrets(t *testing.T) {
	const user, secret = "alice", "s3cret-alice-pw"
	const superSecret, otherSecret = "s3cret-super-pw", "s3cret-other-scheme"
	var mu sync.Mutex
	var ops [][]byte
	tc := newClusterOver(t, "tcp", "127.0.0.1", func(i int, app *coord.App) bft.App {
		if i == 2 {
			return recorder{App: app, mu: &mu, ops: &ops}
		}
		return app
	}, nil, func(tc *testCluster) {
		tc.appConfig.Tree.SuperDigest = tree.Digest("super:" + superSecret)
	})

	nc, resp := rawConnect(t, tc.addr, 0, nil)
	passwd := resp.Passwd
	nc.Close()
	nc, _ = rawConnect(t, tc.addr, resp.SessionID, passwd)
	for i, auth := range []string{user + ":" + secret, "super:" + superSecret} {
		if err := proto.WriteFrame(nc, &proto.RequestHeader{Xid: proto.XidAuth, Type: proto.OpAuth},
			&proto.AuthPacket{Scheme: "digest", Auth: []byte(auth)}); err != nil {
			t.Fatal(err)
		}
		frame, err := proto.ReadFrame(nc, nil)
		if err != nil {
			t.Fatalf("auth %d: %v", i, err)
		}
		if hdr, _, err := proto.SplitReply(frame); err != nil || hdr.Err != proto.CodeOK {
			t.Fatalf("auth %d: %+v %v", i, hdr, err)
		}
	}
	// A scheme the replicas refuse: the connection closes, and the
	// replicas got its name alone.
	if err := proto.WriteFrame(nc, &proto.RequestHeader{Xid: proto.XidAuth, Type: proto.OpAuth},
		&proto.AuthPacket{Scheme: "sasl", Auth: []byte(otherSecret)}); err != nil {
		t.Fatal(err)
	}
	if frame, err := proto.ReadFrame(nc, nil); err != nil {
		t.Fatal(err)
	} else if hdr, _, err := proto.SplitReply(frame); err != nil || hdr.Err != proto.CodeAuthFailed {
		t.Fatalf("auth of an unknown scheme: %+v %v", hdr, err)
	}
	nc.Close()

	// The digest identity works: a session that added it reads a node
	// only it may, through the zk client.
	c := tc.connect(10 * time.Second)
	if err := c.AddAuth("digest", []byte(user+":"+secret)); err != nil {
		t.Fatal(err)
	}
	must(c.Create("/private", []byte("x"), 0, zk.DigestACL(zk.PermAll, user, secret)))
	if data, _ := must2(c.Get("/private")); string(data) != "x" {
		t.Fatalf("read %q", data)
	}

	for i := range tc.apps {
		tc.crash(i) // so that their states can be read
	}
	secrets := map[string][]byte{"the session's password": passwd, "alice's password": []byte(secret), "super's password": []byte(superSecret), "another scheme's credentials": []byte(otherSecret)}
	mu.Lock()
	defer mu.Unlock()
	if len(ops) == 0 {
		t.Fatal("the replica was given no op")
	}
	for name, s := range secrets {
		for _, op := range ops {
			if bytes.Contains(op, s) {
				t.Errorf("an op given to the replicas holds %s: %q", name, op)
				break
			}
		}
		for i, app := range tc.apps {
			if bytes.Contains(app.Snapshot(), s) {
				t.Errorf("replica %d's state holds %s", i, name)
			}
		}
	}
}
