package server_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/internal/rdmatest"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/ordertest"
	"github.com/rubin-go/rubin/order/server"
	_ "github.com/rubin-go/rubin/transport/rdma" // the "rdma" network
)

// overRDMA links the orderers' replicas to each other, and each orderer's
// ordering client to them, over RDMA on the device at host; Fabric's
// clients still reach the orderers over gRPC on TCP, as in a deployment.
// The replicas listen through a stack of the test's own, made before the
// cluster so that its goroutines are not counted as the cluster's leaks,
// and closed after it.
func overRDMA(t *testing.T, host string) clusterOption {
	s, err := rubin.NewStack(rubin.Config{Transport: "rdma"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return func(t *testing.T, cfg *server.OrdererConfig) {
		t.Helper()
		ln, err := s.Listen(context.Background(), net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ReplicaListener.Close()
		cfg.ReplicaListener = ln
		cfg.Cluster.Replicas[cfg.ID].Addr = ln.Addr().String()
		cfg.Transport = &rubin.Config{Transport: "rdma"}
	}
}

// TestBroadcastDeliverRDMA: four orderers whose PBFT links run over RDMA
// (Soft-RoCE in scripts/rdma-test.sh's virtual machine) order envelopes
// broadcast through two of them, and two others deliver the same chain,
// every accepted envelope once, checked by Fabric's hash rules and 2f+1
// signatures.
func TestBroadcastDeliverRDMA(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 10, BatchTimeout: 200 * time.Millisecond}, overRDMA(t, rdmatest.Addr(t)))
	var good []*cb.Envelope
	for i := range 40 {
		good = append(good, mustEnvelope(t, c.writer, cb.HeaderType_ENDORSER_TRANSACTION, channel, fmt.Sprintf("tx %d", i)))
	}
	forged := []*cb.Envelope{mustEnvelope(t, c.forger, cb.HeaderType_ENDORSER_TRANSACTION, channel, "forged")}
	for k, part := range [][]*cb.Envelope{good[:20], append(good[20:], forged...)} {
		for j, r := range broadcast(t, c.dial(t, 2*k), part) {
			want := cb.Status_SUCCESS
			if k == 1 && j == len(part)-1 {
				want = cb.Status_FORBIDDEN
			}
			if r.Status != want {
				t.Errorf("envelope %d through orderer %d: %v, want %v", j, 2*k, r, want)
			}
		}
	}
	if t.Failed() {
		return
	}
	a, b := c.deliverUntil(t, 1, len(good)), c.deliverUntil(t, 3, len(good))
	if err := ordertest.CheckDelivered([][]*cb.Block{a, b}, good, forged); err != nil {
		t.Fatal(err)
	}
}
