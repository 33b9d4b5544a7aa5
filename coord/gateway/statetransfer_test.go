package gateway_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestLargeTreeStateTransfer checks that a tree many state chunks large
// reaches a replica that missed it by state transfer: fetched chunk by
// chunk, each checked, and restored into an App that then serves the
// same data. The replica comes back either once the log that built the
// tree is gone (behind), or at once, fetching while the others go on
// ordering (during).
func TestLargeTreeStateTransfer(t *testing.T) {
	for _, tt := range []struct {
		name string
		// the small write before which the replica restarts, and the
		// fewest chunks it must fetch
		restart   int
		minChunks uint64
	}{
		{"behind", 40, 12},
		{"during", 0, 2},
	} {
		t.Run(tt.name, func(t *testing.T) { largeTreeStateTransfer(t, tt.restart, tt.minChunks) })
	}
}

func largeTreeStateTransfer(t *testing.T, restart int, minChunks uint64) {
	tc := newTestCluster(t)
	c := tc.connect(10 * time.Second)
	tc.crash(3) // a backup: the cluster goes on without it

	// 24 znodes of 512 KiB: 12 MiB, twelve or more chunks of the
	// default 1 MiB.
	const nodes, size = 24, 512 << 10
	data := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, size) }
	for i := range nodes {
		must(c.Create(fmt.Sprintf("/big-%d", i), data(i), 0, open))
	}
	// Small writes move the stable checkpoint past every big znode, so
	// the log that created them is gone; those after replica 3 is back
	// show it that it is behind.
	for i := range 80 {
		if i == restart {
			tc.restart(3)
		}
		must(c.Create(fmt.Sprintf("/after-%d", i), nil, 0, open))
	}
	waitFor(t, time.Minute, "replica 3 to catch up", func() bool {
		return tc.reps[3].Status().LastExecuted >= tc.reps[1].Status().LastExecuted
	})
	st := tc.reps[3].Status()
	t.Logf("replica 3: %d state transfers, %d chunks, %d view changes", st.StateTransfers, st.Chunks, st.ViewChanges)
	if st.StateTransfers == 0 || st.Chunks < minChunks {
		t.Fatalf("replica 3 caught up with %d state transfers of %d chunks in all, want one or more of at least %d", st.StateTransfers, st.Chunks, minChunks)
	}

	// What it restored is served: with replica 0 down, every quorum
	// needs replica 3.
	tc.crash(0)
	for i := range nodes {
		got, _ := must2(c.Get(fmt.Sprintf("/big-%d", i)))
		if !bytes.Equal(got, data(i)) {
			t.Fatalf("/big-%d: read %d bytes, not the %d written", i, len(got), size)
		}
	}
	must(c.Create("/after-crash", nil, 0, open))
	waitFor(t, 10*time.Second, "replicas 1 to 3 to execute alike", func() bool {
		last := tc.reps[1].Status().LastExecuted
		return tc.reps[2].Status().LastExecuted == last && tc.reps[3].Status().LastExecuted == last
	})
	tc.stop()
	tc.checkSameState()
}
