package order_test

import (
	"bytes"
	"testing"

	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
)

// FuzzRestore feeds arbitrary snapshots to Restore, which a replica runs
// on state it receives from others: it must never panic nor allocate by
// a count the bytes cannot back, a failed Restore must leave the state as
// it was, and a state it accepts must snapshot again to bytes it accepts.
func FuzzRestore(f *testing.F) {
	h := newHarness(f, block.Config{MaxMessageCount: 2})
	for range 3 {
		h.exec(f, order.EnvelopeOp(h.envelope(f, h.writer, "x")))
	}
	h.signAll(f, 0, 0, 1)
	f.Add(h.apps[0].Snapshot())
	fresh, _ := order.New(h.cfg)
	f.Add(fresh.Snapshot())
	f.Fuzz(func(t *testing.T, snap []byte) {
		a, err := order.New(h.cfg)
		if err != nil {
			t.Fatal(err)
		}
		before := a.Snapshot()
		if err := a.Restore(snap); err != nil {
			if !bytes.Equal(a.Snapshot(), before) {
				t.Fatal("a failed Restore changed the state")
			}
			return
		}
		again, _ := order.New(h.cfg)
		if err := again.Restore(a.Snapshot()); err != nil {
			t.Fatalf("the snapshot of an accepted state is refused: %v", err)
		}
	})
}
