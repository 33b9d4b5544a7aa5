package gateway_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/coordtest"
)

// TestByzantineReplicaOutvoted runs a client against four replicas of
// which one lies in every answer (coordtest.Liar): the gateway passes on only what f+1
// replicas said, so the client sees neither the lies nor the invented
// events; its bft client counts the liar's replies as mismatches.
func TestByzantineReplicaOutvoted(t *testing.T) {
	tc := newClusterWith(t, func(i int, app *coord.App) bft.App {
		if i == 2 {
			return coordtest.Liar{App: app}
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
	// The gateway's bft client saw the liar's replies to the 41 ordered
	// requests differ from the results, and no other replica's.
	var m []uint64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m = tc.client.Mismatches(); m[2] >= 41 || time.Now().After(deadline) {
			break
		}
	}
	if m[0] != 0 || m[1] != 0 || m[3] != 0 || m[2] < 41 {
		t.Fatalf("mismatched replies by replica: %v, want 41 or more of replica 2's alone", m)
	}
}
