package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/internal/leakcheck"
	"github.com/rubin-go/rubin/internal/rdmatest"
	_ "github.com/rubin-go/rubin/transport/rdma" // the "rdma" network
)

// TestClusterRDMA runs four replicas in this process over RDMA, each on
// its own selector, with a client on package rubin's face: small requests
// (broadcasts copied into each link's buffer), large ones (pre-prepares
// sent as one shared buffer), then a restart of a backup, which must be
// reconnected and catch up. It needs an RDMA device: scripts/rdma-test.sh
// runs it in a Soft-RoCE virtual machine.
func TestClusterRDMA(t *testing.T) {
	host := rdmatest.Addr(t)
	const n = 4
	cl, err := auth.Generate(n, 1, host, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ln, err := rubin.Listen("rdma", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		cl.Replicas[i].Addr = ln.Addr().String()
		ln.Close()
	}
	// After rubin's default RDMA stack is up: it lives as long as the
	// process. The replicas and the client have transports of their own.
	leakcheck.Check(t)
	reps := make([]*Replica, n)
	stops := make([]func(), n)
	start := func(i int) {
		r, err := NewReplica(ReplicaConfig{Cluster: cl, ID: bft.ReplicaID(i), Network: "rdma", App: kv.New(kv.Config{}),
			Tick: testTick, Core: testCore(), Logger: testLogger(t), RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- r.Run(ctx) }()
		select {
		case <-r.Ready():
		case err := <-errc:
			cancel()
			t.Fatalf("replica %d: %v", i, err)
		}
		reps[i] = r
		stops[i] = func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
		}
	}
	for i := range n {
		start(i)
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	c, err := NewClient(context.Background(), ClientConfig{Cluster: cl, ID: 0, Transport: &rubin.Config{Transport: "rdma"}, Tick: testTick,
		Logger: testLogger(t), RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	put := func(k string, v []byte) {
		t.Helper()
		invoke(t, c, kv.EncodePut([]byte(k), v))
		res := invoke(t, c, kv.EncodeGet([]byte(k)))
		got, found, err := kv.DecodeResult(res)
		if err != nil || !found || !bytes.Equal(got, v) {
			t.Fatalf("get %s: %d bytes, found %v, err %v; want %d bytes", k, len(got), found, err, len(v))
		}
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<10) // 16 KiB
	for i := range 40 {
		put(fmt.Sprint("small", i), fmt.Appendf(nil, "v%d", i))
		put(fmt.Sprint("big", i), append(big[:len(big):len(big)], byte(i)))
	}
	stops[2]()
	for i := range 40 {
		put(fmt.Sprint("without2-", i), append(big[:len(big):len(big)], byte(i)))
	}
	start(2)
	for i := range 80 {
		put(fmt.Sprint("after", i), fmt.Appendf(nil, "v%d", i))
	}
	// Replica 2 came back empty: it catches up by state transfer.
	deadline := time.Now().Add(60 * time.Second)
	for {
		seq := reps[0].Status().LastExecuted
		same := true
		for _, r := range reps[1:] {
			same = same && r.Status().LastExecuted == seq
		}
		if same {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas did not converge: %d %d %d %d", reps[0].Status().LastExecuted,
				reps[1].Status().LastExecuted, reps[2].Status().LastExecuted, reps[3].Status().LastExecuted)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
