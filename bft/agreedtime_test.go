package bft_test

import (
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

// ctxKey names one executed request.
type ctxKey struct {
	seq   uint64
	index int
}

// contexts indexes what app executed by (seq, index).
func contexts(t *testing.T, app *simnet.App) map[ctxKey]bft.ExecContext {
	t.Helper()
	m := make(map[ctxKey]bft.ExecContext, len(app.Contexts))
	for _, c := range app.Contexts {
		k := ctxKey{c.Seq, c.Index}
		if _, dup := m[k]; dup {
			t.Fatalf("seq %d index %d executed twice", c.Seq, c.Index)
		}
		m[k] = c
	}
	return m
}

// checkContexts fails unless every replica in ids executed every request
// with the same context as the others did, with the agreed time never
// decreasing, and each time within the bound of the simulated clock of a
// correct replica at some point of the run.
func checkContexts(t *testing.T, n *simnet.Net, ids ...int) {
	t.Helper()
	ref := contexts(t, n.Apps[ids[0]])
	if len(ref) == 0 {
		t.Fatal("nothing executed")
	}
	for _, i := range ids[1:] {
		for k, c := range contexts(t, n.Apps[i]) {
			if r, ok := ref[k]; ok && (r.Client != c.Client || !r.Time.Equal(c.Time)) {
				t.Fatalf("seq %d index %d: replica %d executed %+v, replica %d %+v", k.seq, k.index, ids[0], r, i, c)
			}
		}
	}
	var last time.Time
	end := simnet.Epoch.Add(time.Duration(n.Now) * simnet.TickDuration)
	for _, c := range n.Apps[ids[0]].Contexts {
		if c.Time.Before(last) {
			t.Fatalf("seq %d: agreed time %v after %v", c.Seq, c.Time, last)
		}
		last = c.Time
		if c.Time.Before(simnet.Epoch) || c.Time.After(end.Add(2*time.Second)) || c.Time.Location() != time.UTC {
			t.Fatalf("seq %d: agreed time %v outside the run [%v, %v]", c.Seq, c.Time, simnet.Epoch, end)
		}
	}
}

// replacedForTime runs 20 requests of each client and fails unless
// replica 0, the primary, was replaced for the times it proposed, and
// the other replicas agree on the contexts.
func replacedForTime(t *testing.T, n *simnet.Net) {
	t.Helper()
	if !n.Load(20, 20000, op) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	if v := n.Replicas[1].Status().View; v == 0 {
		t.Fatal("the primary was not replaced")
	}
	if n.Errors[bft.ErrTime] == 0 {
		t.Fatalf("no pre-prepare time refused: %v", n.Errors)
	}
	checkSameOrder(t, n)
	checkContexts(t, n, 1, 2, 3)
}

// Every correct replica executes every request with the same context,
// with the client that signed it and an agreed time that follows the
// clocks.
func TestExecContextAgreed(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 40, Codec: true, Config: smallCfg})
	n.DropRate, n.Reorder, n.MaxDelay = 0.05, true, 3
	if !n.Load(30, 20000, op) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	checkSameOrder(t, n)
	checkContexts(t, n, 0, 1, 2, 3)
	for _, c := range n.Apps[1].Contexts {
		if c.Client < 1 || c.Client > 3 {
			t.Fatalf("context names client %d", c.Client)
		}
	}
	if s := n.Replicas[1].Status(); s.Time.IsZero() || s.Time.Before(simnet.Epoch) {
		t.Fatalf("status time %v", s.Time)
	}
}

// A primary whose clock runs far ahead proposes times no backup accepts:
// it is replaced, the cluster goes on with agreed times that follow the
// correct replicas' clocks, and the skewed replica still follows the
// others' batches.
func TestClockAheadPrimaryReplaced(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 41, Config: smallCfg})
	n.ClockSkew[0] = time.Hour
	replacedForTime(t, n)
	n.Run(100, func() bool { return false })
	if got, want := n.Replicas[0].Status().LastExecuted, n.Replicas[1].Status().LastExecuted; got != want {
		t.Fatalf("skewed replica executed up to %d, the others %d", got, want)
	}
	checkContexts(t, n, 1, 0)
}

// A primary whose clock jumps back proposes the previous time, so
// agreed time never decreases, until the time it proposes falls behind
// the backups' clocks by more than the bound: then it is replaced.
func TestClockBackwardsPrimaryReplaced(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 42, Config: func(c *bft.Config) {
		smallCfg(c)
		c.MaxClockSkew = 20 * simnet.TickDuration
	}})
	if !n.Load(5, 2000, op) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	n.ClockSkew[0] = -time.Hour
	frozen := n.Replicas[1].Status().Time
	if !n.Load(200, 20000, op) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	if v := n.Replicas[1].Status().View; v == 0 {
		t.Fatal("the primary whose clock went back was not replaced")
	}
	if s := n.Replicas[1].Status(); !s.Time.After(frozen) {
		t.Fatalf("agreed time %v, not after %v", s.Time, frozen)
	}
	checkSameOrder(t, n)
	checkContexts(t, n, 1, 2, 3)
}

// A Byzantine primary that proposes a time before the previous batch's
// (within the clock bound) is not prepared and is replaced.
func TestTimeGoingBackRefused(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 43, Config: smallCfg})
	if !n.Load(5, 2000, op) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	n.Faulty[0] = true
	n.Byzantine = func(from bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		pp, ok := e.Msg.(*bft.PrePrepare)
		if from != 0 || !ok || pp.View != 0 {
			return []bft.Envelope{e}
		}
		back := *pp
		back.Time = uint64(n.Replicas[1].Status().Time.UnixNano()) - uint64(time.Millisecond)
		back.Digest = bft.BatchDigest(back.Time, back.Batch)
		return []bft.Envelope{{To: e.To, Msg: &back}}
	}
	replacedForTime(t, n)
}

// A replica that restarts from its disk replays its committed log with
// the same contexts, times included, as it executed them the first time.
func TestRecoverReplaysAgreedTime(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 44, Codec: true, Config: func(c *bft.Config) {
		c.CheckpointInterval, c.WatermarkWindow = 64, 128
		c.Persist = true
	}})
	if !n.Load(20, 5000, op) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	before := contexts(t, n.Apps[2])
	if err := n.Recover(2); err != nil {
		t.Fatal(err)
	}
	after := contexts(t, n.Apps[2])
	if len(after) == 0 || len(after) != len(before) {
		t.Fatalf("replayed %d requests of %d", len(after), len(before))
	}
	for k, c := range after {
		if b := before[k]; b.Client != c.Client || b.Seq != c.Seq || b.Index != c.Index || !b.Time.Equal(c.Time) {
			t.Fatalf("seq %d index %d: executed with %+v, replayed with %+v", k.seq, k.index, b, c)
		}
	}
	if !n.Load(30, 5000, op) {
		t.Fatalf("clients did not finish after the restart: %v", n.LastErrors)
	}
	checkContexts(t, n, 2, 0, 1, 3)
}
