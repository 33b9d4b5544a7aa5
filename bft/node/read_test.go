package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/internal/leakcheck"
)

// InvokeRead reads what Invoke wrote, from the replicas' state, over the
// real stack, without ordering the reads.
func TestInvokeRead(t *testing.T) {
	warm(t)
	leakcheck.Check(t)
	tc := newTestCluster(t, 4, 1, testCore(), testTick)
	c := tc.client(context.Background(), 0)
	const keys = 10
	for i := range keys {
		invoke(t, c, kv.EncodePut(fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)))
	}
	seq := tc.waitConverged(all(4), 1, 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range keys {
		res, err := c.InvokeRead(ctx, kv.EncodeGet(fmt.Appendf(nil, "k%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if v, found, err := kv.DecodeResult(res); err != nil || !found || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("read k%d: %q %v %v", i, v, found, err)
		}
	}
	for i, r := range tc.reps {
		if got := r.Status().LastExecuted; got != seq {
			t.Fatalf("reads were ordered: replica %d executed up to %d, %d before", i, got, seq)
		}
	}
	c.Close()
}
