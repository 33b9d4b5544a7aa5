package client_test

import (
	"context"
	"crypto/ed25519"
	"testing"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"

	"github.com/rubin-go/rubin/order/client"
)

// The clients' behavior against orderers, correct and Byzantine, is
// tested with real ones in package order/server (TestDeliverClientSwitches,
// TestMiscuttingOrderer, TestRestartCatchesUp,
// TestBroadcastClientPassesSilentOrderer), and the Deliverer's following
// of headers with fake ones in deliver_test.go.

func TestNewDeliverer(t *testing.T) {
	seek := func(uint64, uint64) (*cb.Envelope, error) { return &cb.Envelope{}, nil }
	keys := make([]ed25519.PublicKey, 4)
	for name, cfg := range map[string]client.DeliverConfig{
		"no orderers": {Keys: keys, Quorum: 3, Seek: seek},
		"no keys":     {Orderers: []string{"a", "b", "c", "d"}, Quorum: 3, Seek: seek},
		"no quorum":   {Orderers: []string{"a", "b", "c", "d"}, Keys: keys, Seek: seek},
		"no seek":     {Orderers: []string{"a", "b", "c", "d"}, Keys: keys, Quorum: 3},
	} {
		if _, err := client.NewDeliverer(cfg); err == nil {
			t.Errorf("%s: New took it", name)
		}
	}
	c, err := client.NewDeliverer(client.DeliverConfig{Orderers: []string{"127.0.0.1:1"}, Keys: keys, Quorum: 3, Seek: seek})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Blocks(context.Background(), 2, 1, nil, nil); err == nil {
		t.Fatal("Blocks took a stop before the start")
	}
	// With no orderer answering, Blocks waits until its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Blocks(ctx, 0, 1, nil, func(*cb.Block) error { return nil }); err != context.Canceled {
		t.Fatalf("Blocks = %v, want context.Canceled", err)
	}
}

func TestNewBroadcaster(t *testing.T) {
	if _, err := client.NewBroadcaster(client.BroadcastConfig{}); err == nil {
		t.Fatal("NewBroadcaster took no orderers")
	}
	b, err := client.NewBroadcaster(client.BroadcastConfig{Orderers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Submit(ctx, &cb.Envelope{}); err != context.Canceled {
		t.Fatalf("Submit = %v, want context.Canceled", err)
	}
}
