package bft_test

import (
	"fmt"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

const window = 8

func pipelined(c *bft.ClientConfig) { c.Window = window }

// pipeLoad keeps window requests of every client in flight until each
// has total results; it reports whether they all came within maxTicks.
func pipeLoad(t *testing.T, n *simnet.Net, total, maxTicks int) bool {
	t.Helper()
	return n.Run(maxTicks, func() bool {
		done := true
		for i, c := range n.Clients {
			for k := len(n.Results[i]) + c.InFlight(); k < total && c.InFlight() < window; k++ {
				if _, err := c.Propose(op(i, k)); err != nil {
					t.Fatal(err)
				}
			}
			done = done && len(n.Results[i]) >= total
		}
		return done
	})
}

// checkClientOrder fails unless every client got its results in
// timestamp order, one each, and every correct replica executed each
// client's operations in the order the client issued them, each once
// (after a state transfer, from where the transferred state left off).
func checkClientOrder(t *testing.T, n *simnet.Net) {
	t.Helper()
	for i, res := range n.Results {
		for k := 1; k < len(res); k++ {
			if res[k].Timestamp != res[k-1].Timestamp+1 {
				t.Fatalf("client %d: result for ts %d after ts %d", i+1, res[k].Timestamp, res[k-1].Timestamp)
			}
		}
	}
	checkExecOrder(t, n)
}

// checkExecOrder is checkClientOrder's check of the replicas.
func checkExecOrder(t *testing.T, n *simnet.Net) {
	t.Helper()
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
	for r, app := range n.Apps {
		if n.Faulty[r] {
			continue
		}
		next := map[int]int{}
		for _, o := range app.Ops {
			var c, k int
			if _, err := fmt.Sscanf(string(o), "c%d-op%d", &c, &k); err != nil {
				continue
			}
			if want, ok := next[c]; ok && k != want {
				t.Fatalf("replica %d executed client %d's op %d after op %d", r, c+1, k, want-1)
			}
			next[c] = k + 1
		}
	}
}

// Clients with several requests in flight get them executed in order,
// each once, over a network that loses, duplicates and reorders.
func TestPipelinedRequests(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 70, Codec: true, Config: smallCfg, ClientConfig: pipelined})
	n.DropRate, n.DupRate, n.Reorder, n.MaxDelay = 0.05, 0.05, true, 3
	if !pipeLoad(t, n, 200, 20000) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	checkClientOrder(t, n)
}

// Pipelined requests across view changes (the primary crashes, later
// another one) execute once, in order.
func TestPipelinedAcrossViewChange(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 71, Config: smallCfg, ClientConfig: pipelined})
	n.Reorder, n.MaxDelay = true, 2
	if !pipeLoad(t, n, 40, 5000) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	n.Crashed[0] = true
	if !pipeLoad(t, n, 120, 20000) {
		t.Fatalf("clients did not finish after the primary crashed: %v", n.LastErrors)
	}
	if v := n.Replicas[1].Status().View; v == 0 {
		t.Fatal("no view change")
	}
	n.Crashed[0] = false
	if err := n.Restart(0); err != nil {
		t.Fatal(err)
	}
	n.Crashed[1] = true
	if !pipeLoad(t, n, 200, 20000) {
		t.Fatalf("clients did not finish after the second crash: %v", n.LastErrors)
	}
	checkClientOrder(t, n)
}

// reorderer makes primary 0 propose every batch with its requests in
// reverse order, validly signed: a client's pipelined requests come out
// of order. The replicas must still execute them in order.
func reorderer(n *simnet.Net) {
	n.Faulty[0] = true
	n.Byzantine = func(from bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		pp, ok := e.Msg.(*bft.PrePrepare)
		if from != 0 || !ok || len(pp.Batch) < 2 {
			return []bft.Envelope{e}
		}
		rev := *pp
		rev.Batch = make([]bft.Request, len(pp.Batch))
		for i := range pp.Batch {
			rev.Batch[len(pp.Batch)-1-i] = pp.Batch[i]
		}
		rev.Digest = bft.BatchDigest(rev.Time, rev.Batch)
		return []bft.Envelope{{To: e.To, Msg: &rev}}
	}
}

// A Byzantine primary that reorders a client's pipelined requests gets
// none of them executed out of order; the requests it held back are
// proposed again and every client finishes.
func TestPipelinedReorderingPrimary(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 72, Config: smallCfg, ClientConfig: pipelined})
	reorderer(n)
	if !pipeLoad(t, n, 100, 30000) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	checkClientOrder(t, n)
}

// A client that starts afresh (a new Client, timestamps above its old
// ones) flags its first request Restart and goes on.
func TestClientRestart(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 1, Seed: 73, Config: smallCfg, ClientConfig: pipelined})
	if !pipeLoad(t, n, 20, 2000) {
		t.Fatal("client did not finish")
	}
	c, err := bft.NewClient(bft.ClientConfig{ID: 1, N: 4, Window: window, Sign: n.SignRequest, StartTimestamp: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n.Clients[0] = c
	if !pipeLoad(t, n, 40, 2000) {
		t.Fatalf("restarted client did not finish: %v", n.LastErrors)
	}
	if ts := n.Results[0][20].Timestamp; ts != 1001 {
		t.Fatalf("first result for ts %d", ts)
	}
	checkExecOrder(t, n)
}

// TestOutOfOrderRequestFetchesMissedSlots: a backup holds a request that
// follows one of its client's it never saw. It must not time it against
// the primary (a Byzantine client could skip a timestamp to frame every
// primary), but it may have missed slots the others executed, which no
// later slot would reveal to it: once per request timeout it asks its
// peers for them (see LaggardAndLiar's seeds 215944477212 and
// 396621278727, where it waited forever).
func TestOutOfOrderRequestFetchesMissedSlots(t *testing.T) {
	cfg := func(c *bft.Config) {
		smallCfg(c)
		c.RequestTicks = 20
	}
	n := newNet(t, simnet.Options{Clients: 1, Seed: 53, Config: cfg})
	if !n.Load(3, 200, op) {
		t.Fatal("requests did not complete")
	}
	r := n.Replicas[3]
	before := r.Status()
	gap := &bft.Request{Client: 1, Timestamp: 5, Op: []byte("after a timestamp no replica saw")}
	n.SignRequest(gap)
	if err := r.Step(bft.ToClient(1), gap); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 3*20+5; k++ {
		n.Tick()
	}
	s := r.Status()
	if s.Pending != 1 || s.View != before.View || s.ViewChanging {
		t.Fatalf("the held request should stay held without a view change: %+v", s)
	}
	if got := s.Fetches - before.Fetches; got != 3 {
		t.Fatalf("%d fetches in three request timeouts, want 3", got)
	}
}
