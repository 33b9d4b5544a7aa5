package node

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/internal/leakcheck"
)

// notifyingStore is a kv store that notifies the client of every op it
// executes with the op itself.
type notifyingStore struct{ *kv.Store }

func (s notifyingStore) Execute(ctx bft.ExecContext, op []byte) []byte {
	ctx.Notify(ctx.Client, op)
	return s.Store.Execute(ctx, op)
}

// A Client delivers the notifications the replicas' application emits
// for its identities, in order, each once, through OnNote.
func TestClientNotifications(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	tc := newTestClusterTuned(t, 4, 1, testCore(), testTick, nil, func(c *ReplicaConfig) {
		c.App = notifyingStore{c.App.(*kv.Store)}
	})
	var (
		mu    sync.Mutex
		notes []bft.Note
	)
	c, err := NewClient(context.Background(), ClientConfig{Cluster: tc.cl, ID: 0, Network: "tcp", Tick: tc.tick,
		Logger: testLogger(t), RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond,
		OnNote: func(id bft.ClientID, n bft.Note) {
			mu.Lock()
			notes = append(notes, n)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ops = 20
	for i := range ops {
		invoke(t, c, kv.EncodePut(fmt.Appendf(nil, "k%d", i), nil))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := len(notes)
		mu.Unlock()
		if got >= ops {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d notifications of %d", got, ops)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, n := range notes {
		if n.Number != uint64(i+1) || n.Lost != 0 || string(n.Payload) != string(kv.EncodePut(fmt.Appendf(nil, "k%d", i), nil)) {
			t.Fatalf("notification %d: %+v", i, n)
		}
	}
}
