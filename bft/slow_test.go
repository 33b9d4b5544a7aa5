package bft_test

import (
	"fmt"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

// On a network that is now and then slower than the request timeout (as
// an emulated CPU is than the defaults), the timeouts a view change
// doubled stay doubled for a while after requests execute again, so the
// cluster settles on a view instead of changing views at every slow
// request. With the timeouts back to their base at the first execution,
// this run changed views 214 times, and took 60% longer.
func TestSlowNetworkSettles(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 1, Seed: 37, Codec: true, Config: func(c *bft.Config) {
		c.RequestTicks = 6
		c.ViewChangeTicks = 6
	}})
	n.MaxDelay = 4 // a request takes about 10 ticks, often more than 6
	if !n.Load(400, 100000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	view := n.Replicas[0].Status().View
	t.Logf("400 requests in %d ticks, in view %d", n.Now, view)
	if view > 20 {
		t.Fatalf("the cluster changed views %d times in 400 requests", view)
	}
	checkSameOrder(t, n)
}

// A network slower than FetchTicks, as an emulated machine's is, loses
// nothing, yet replicas retransmit what has not committed by then, and a
// replica ahead answers each such retransmission with its own messages
// for the slots since. Answered with the whole log instead, a run of 200
// requests with packets taking up to 15 ticks delivered 4141 messages
// per request, 143 times as many as with packets taking at most 1 tick.
func TestSlowNetworkTraffic(t *testing.T) {
	const reqs = 200
	perRequest := func(delay int) float64 {
		n := newNet(t, simnet.Options{Clients: 1, Seed: 5})
		n.MaxDelay = delay
		if !n.Load(reqs, 200000, op) {
			t.Fatalf("packets taking up to %d ticks: not finished: %v", delay, n.LastErrors)
		}
		checkSameOrder(t, n)
		per := float64(n.Delivered) / reqs
		t.Logf("packets taking up to %d ticks: %d requests in %d ticks, %.0f messages delivered per request", delay, reqs, n.Now, per)
		return per
	}
	fast, slow := perRequest(1), perRequest(15)
	if slow > 10*fast {
		t.Errorf("a slow network delivered %.0f messages per request, %.0f times a fast one's %.0f", slow, slow/fast, fast)
	}
}

// A replica that missed the first slot's pre-prepare, and only that, holds
// every later slot and resends its votes for them, but has none to resend
// for the first. The others' answers must reach back to it (from the first
// slot they have no commit of the laggard's for), or it waits for the
// next stable checkpoint (none here, in 1024 slots).
func TestLaggardMissingTheFrontSlot(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 1, Seed: 3, Config: func(c *bft.Config) {
		c.CheckpointInterval, c.WatermarkWindow = 1024, 2048
	}})
	dropped := false
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		if pp, ok := m.(*bft.PrePrepare); ok && !dropped && pp.Seq == 1 && to == bft.ToReplica(3) {
			dropped = true
			return true
		}
		return false
	}
	if !n.Load(20, 100000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	want := n.Replicas[0].Status().LastExecuted
	if !n.Run(2000, func() bool { return n.Replicas[3].Status().LastExecuted == want }) {
		t.Fatalf("replica 3 executed %d of %d slots; dropped the first pre-prepare: %v", n.Replicas[3].Status().LastExecuted, want, dropped)
	}
	checkSameOrder(t, n)
}

// A cluster that takes in only so many bytes per tick, loaded by 64
// clients with 1 KiB requests, loses its primary; requests now wait
// longer than FetchTicks for their slots. Two kinds of retransmission
// then filled the links with copies of what was only queued, so the
// delay grew with the copies and the copies with the delay: every
// replica resent every uncommitted slot each FetchTicks while slots
// still executed (tickResend), and the replicas ahead answered one that
// was merely slow with everything it was behind by, the primary its
// pre-prepares with their batches (answerLaggard). With both, the three
// replicas left executed 278, 819 and 319 requests in the last 1000 of
// 2000 ticks (seeds 1-3; 162, 63 and 135 messages delivered per
// request), in views 2 to 4; with the first fixed only, seed 2 still
// executed 408. Now about 4800 each, 7 messages per request, in view 1.
func TestSlowNetworkLoadedViewChange(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { slowLoad(t, seed, 15000, true, 3000) })
	}
}

// The same load on links that take in less than half as much: 6000
// B/tick, and 7000 B/tick with the primary crashed at tick 300. A
// client without a result after RetransmitTicks sent its request to
// every replica, four times its size, and again every RetransmitTicks,
// while the result was only queued behind the load, which the copies
// lengthened: all six runs (seeds 1-3) executed nothing in the last 1000
// ticks, the clients sending 12800 copies, and changed views 3 or 4
// times. With the wait doubled at each retransmission but back to
// RetransmitTicks at every result, the runs at 6000 B/tick executed
// 2434, 2439 and 4385 requests, the first two sending each request 5
// times (once, then to all 4 again), and those at 7000 B/tick 276, 3681
// and 741. With the wait lowered only as results come faster than it,
// about 4370 each, every request sent once.
func TestSlowNetworkClientRetransmissions(t *testing.T) {
	for _, bandwidth := range []int{6000, 7000} {
		crash := bandwidth == 7000
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%d/%d", bandwidth, seed), func(t *testing.T) { slowLoad(t, seed, bandwidth, crash, 3000) })
		}
	}
}

// The same load, no replica crashed, on links near what they carry: at
// 5000 B/tick the replicas take in about 4 requests per tick, and a
// request queues behind the others for longer than FetchTicks. An
// execution set tickResend's wait back to FetchTicks, so every gap of
// that long between two executions resent every uncommitted slot (the
// primary's pre-prepares with their batches), and the replicas ahead
// answered every FetchTicks a peer that did not move for that long; at
// 4000 and 5000 B/tick (seeds 1-3) the runs executed 161, 64, 207 and
// 36, 2202, 3997 requests in the last 1000 ticks, all but the last in
// views 2 to 5. With the wait lowered only as slots commit within it,
// the 5000 B/tick run of seed 2 still collapsed (0 requests), on the
// answers; with the answers paced by the same wait, every run executes
// about 3140 and 4000 requests, in view 0.
func TestSlowNetworkHeavyLoad(t *testing.T) {
	for _, c := range []struct {
		bandwidth, want int
	}{{4000, 3000}, {5000, 3800}} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%d/%d", c.bandwidth, seed), func(t *testing.T) {
				if view := slowLoad(t, seed, c.bandwidth, false, c.want); view != 0 {
					t.Errorf("the cluster, no replica crashed, changed views %d times", view)
				}
			})
		}
	}
}

// The same load at 4000 B/tick, the primary crashed at tick 300. The
// three replicas left hold certificates for about 120 prepared slots
// above the stable checkpoint, so a view change is 26 KB and the new
// view 87 KB. Each replica repeated its view change every FetchTicks,
// and each copy that reached a replica already in the new view drew the
// new view in answer: more than the links take in, so none of the
// replicas' view changes completed, and the runs (seeds 1-3) executed
// nothing in the last 1000 ticks, in view 4. With the repeat's wait
// doubling, they execute about 3240 requests each, in view 2.
func TestSlowNetworkHeavyLoadViewChange(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { slowLoad(t, seed, 4000, true, 3000) })
	}
}

// slowLoad runs 64 clients with 1 KiB requests for 2000 ticks on links
// that take in bandwidth bytes per tick, crashing the primary at tick
// 300 if crash, checks the cluster executed at least want requests in
// the last 1000 ticks, and returns the view it ended in.
func slowLoad(t *testing.T, seed uint64, bandwidth int, crash bool, want int) uint64 {
	const clients, size, crashAt, ticks, window = 64, 1024, 300, 2000, 1000
	n := newNet(t, simnet.Options{Clients: clients, Seed: seed})
	n.MaxDelay = 3
	n.Bandwidth = bandwidth
	pad := make([]byte, size)
	opN := func(c, k int) []byte { return append(op(c, k), pad...) }
	done := func() int {
		s := 0
		for _, r := range n.Results {
			s += len(r)
		}
		return s
	}
	copies := 0 // of requests, sent by clients
	n.Drop = func(from, _ bft.Target, m bft.Message) bool {
		if _, ok := m.(*bft.Request); ok && from.Client {
			copies++
		}
		return false
	}
	var before, copiesBefore int
	var sent uint64
	for k := range ticks {
		switch k {
		case crashAt:
			if crash {
				n.Crashed[n.Replicas[0].Status().Primary] = true
			}
		case ticks - window:
			before, sent, copiesBefore = done(), n.Delivered, copies
		}
		n.Load(1<<30, 1, opN)
	}
	checkSameOrder(t, n)
	got := done() - before
	per := float64(n.Delivered-sent) / float64(max(got, 1))
	sends := float64(copies-copiesBefore) / float64(max(got, 1))
	view := n.Replicas[1].Status().View
	t.Logf("%d requests in the last %d ticks, %.0f messages delivered and %.1f sent by the client per request, view %d", got, window, per, sends, view)
	if got < want {
		t.Fatalf("the cluster executed %d requests in the last %d ticks (%.0f messages delivered, %.1f sent by the client, per request): fewer than %d", got, window, per, sends, want)
	}
	return view
}

// Replica 3 misses the commits of a slot in view 0, where the other
// three execute it, and then, after a view change that proposes the slot
// again in view 1, the first copy of the view-1 commits from replicas 1
// and 2 (replica 0, the old primary, is cut off meanwhile). It resends
// its votes, but the others answered only for slots committed in the
// view they are in, and this one committed in view 0: once the clients
// stopped, replica 3 never executed it nor the next, its request timer
// fired and it sat alone in a view change to view 2. Now the others'
// answers to its resent votes carry their view-1 commits, and it
// executes the slot 21 ticks after it lost them.
func TestLaggardMissingCommitsAcrossViewChange(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 1, Seed: 3, Config: func(c *bft.Config) {
		c.CheckpointInterval, c.WatermarkWindow = 1024, 2048
	}})
	if !n.Load(5, 1000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	laggard := bft.ToReplica(3)
	var slot uint64                  // the slot whose commits the laggard misses
	dropped := map[bft.Target]bool{} // senders of the first view-1 commit dropped
	var droppedAt uint64
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		c, ok := m.(*bft.Commit)
		if !ok || to != laggard {
			return false
		}
		if slot == 0 && c.View == 0 {
			slot = c.Seq
		}
		if c.Seq != slot {
			return false
		}
		if c.View == 0 {
			return true
		}
		if c.View == 1 && !dropped[from] {
			dropped[from], droppedAt = true, n.Now
			return true
		}
		return false
	}
	if !n.Load(6, 1000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	if got := n.Replicas[3].Status().LastExecuted; got != slot-1 {
		t.Fatalf("replica 3 executed up to %d, want %d: the view-0 commits of slot %d were not lost", got, slot-1, slot)
	}
	var executedAt uint64 // when replica 3 executed slot
	n.OnTick = append(n.OnTick, func() {
		if executedAt == 0 && n.Replicas[3].Status().LastExecuted >= slot {
			executedAt = n.Now
		}
	})
	old := bft.ToReplica(0)
	n.Block = func(from, to bft.Target) bool { return from == old || to == old }
	if !n.Load(7, 3000, op) {
		t.Fatalf("no result with the primary cut off: %v", n.LastErrors)
	}
	n.Block = nil
	if !dropped[bft.ToReplica(1)] || !dropped[bft.ToReplica(2)] {
		t.Fatalf("view-1 commits of slot %d dropped from %v, want replicas 1 and 2", slot, dropped)
	}
	want := n.Replicas[1].Status().LastExecuted
	caughtUp := func() bool { return n.Replicas[3].Status().LastExecuted == want }
	if !n.Run(500, caughtUp) {
		s := n.Replicas[3].Status()
		t.Fatalf("replica 3 executed %d of %d slots 500 ticks after the others, in view %d (changing %v)", s.LastExecuted, want, s.View, s.ViewChanging)
	}
	n.Run(500, func() bool { return false })
	t.Logf("replica 3 executed slot %d %d ticks after its view-1 commits were lost", slot, executedAt-droppedAt)
	if s := n.Replicas[3].Status(); s.ViewChanging || s.View != n.Replicas[1].Status().View {
		t.Fatalf("replica 3 in view %d (changing %v), the others in view %d", s.View, s.ViewChanging, n.Replicas[1].Status().View)
	}
	checkSameOrder(t, n)
}
