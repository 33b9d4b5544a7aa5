package bft_test

import (
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/wire"
	"github.com/rubin-go/rubin/internal/simnet"
)

// bigState is the application state of the large-state tests: four times
// the 16 MiB frame limit, so no single message can carry it.
const bigState = 64 << 20

// bigCfg checkpoints less often than smallCfg: every checkpoint of a
// large state copies and hashes all of it.
func bigCfg(c *bft.Config) {
	c.CheckpointInterval = 32
	c.WatermarkWindow = 64
}

// lagBehind runs load with replica victim cut off until the others hold a
// stable checkpoint beyond its window, so it can catch up only by state
// transfer; it returns the sequence number the victim had executed. The
// application state grows to pad bytes more once the victim is cut off,
// so only the checkpoints that matter copy and hash a large state.
func lagBehind(t *testing.T, n *simnet.Net, victim, pad int) uint64 {
	t.Helper()
	if !n.Load(2, 2000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	cut := bft.ToReplica(bft.ReplicaID(victim))
	n.Block = func(from, to bft.Target) bool { return from == cut || to == cut }
	behind := n.Replicas[victim].Status().LastExecuted
	for _, a := range n.Apps {
		a.Pad = pad
	}
	other := n.Replicas[(victim+1)%n.N]
	total := 2
	for other.Status().Stable <= behind {
		total += 4
		if !n.Load(total, 5000, op) {
			t.Fatalf("not finished with replica %d cut off: %v", victim, n.LastErrors)
		}
	}
	n.Block = nil
	// More load after healing, until a checkpoint it brings tells the
	// victim it lags.
	for n.Replicas[victim].Status().KnownStable <= behind {
		total += 2
		if !n.Load(total, 5000, op) {
			t.Fatalf("not finished after healing: %v", n.LastErrors)
		}
	}
	return behind
}

// A replica that lags behind a state larger than a frame catches up.
func TestStateTransferLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB state")
	}
	n := newNet(t, simnet.Options{Clients: 2, Seed: 30, Config: bigCfg, Codec: true})
	behind := lagBehind(t, n, 3, bigState)
	ok := n.Run(2000, func() bool {
		return n.Replicas[3].Status().LastExecuted >= n.Replicas[1].Status().Stable
	})
	s := n.Replicas[3].Status()
	if !ok || s.StateTransfers == 0 {
		t.Fatalf("replica 3 did not catch up from %d: %+v (others %+v); codec errors %d, checker: %v", behind, s, n.Replicas[1].Status(), n.CodecErrors, n.Check.Err())
	}
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
	// It takes part again: with another replica down, the cluster needs it.
	n.Crashed[2] = true
	if !n.Load(len(n.Results[0])+3, 10000, op) {
		t.Fatalf("not finished with the caught-up replica needed: %v %+v", n.LastErrors, n.Replicas[3].Status())
	}
	checkSameOrder(t, n)
}

// The replica serving a state transfer goes silent midway: the fetch
// resumes from another signer where it stopped, and the state installed
// is the certified one.
func TestStateTransferResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB state")
	}
	n := newNet(t, simnet.Options{Clients: 2, Seed: 33, Config: bigCfg, Codec: true})
	from := map[bft.ReplicaID]int{}
	n.Byzantine = func(src bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		if _, ok := e.Msg.(*bft.Chunk); ok && e.To == bft.ToReplica(3) {
			from[src]++
		}
		return []bft.Envelope{e}
	}
	lagBehind(t, n, 3, bigState)
	silenced := -1
	ok := n.Run(3000, func() bool {
		for src, k := range from {
			if silenced < 0 && k >= 20 {
				silenced = int(src)
				n.Crashed[silenced] = true
			}
		}
		return n.Replicas[3].Status().StateTransfers > 0
	})
	s := n.Replicas[3].Status()
	if !ok || silenced < 0 || len(from) < 2 {
		t.Fatalf("no resumed transfer: %+v; chunks sent by %v, silenced %d", s, from, silenced)
	}
	total := 0
	for _, k := range from {
		total += k
	}
	chunks := (bigState + (1 << 20)) / (1 << 20) // the snapshot and a small reply cache
	t.Logf("replica %d went silent; chunks sent by replica: %v; replica 3 verified %d", silenced, from, s.Chunks)
	if s.Chunks != uint64(chunks) || s.StateTransfers != 1 {
		t.Fatalf("replica 3 verified %d chunks in %d transfers, want %d in one: the fetch restarted", s.Chunks, s.StateTransfers, chunks)
	}
	// With the silent replica down, the cluster needs replica 3.
	if !n.Load(len(n.Results[0])+3, 10000, op) {
		t.Fatalf("not finished with the caught-up replica needed: %v %+v", n.LastErrors, n.Replicas[3].Status())
	}
	checkSameOrder(t, n)
}

// A peer that asks for the state every tick gets a bounded number of bytes
// per tick (4 MiB of chunks, a manifest and a resend), whatever the size of the
// state, and correct clients keep completing meanwhile.
func TestFetchStateFloodBounded(t *testing.T) {
	const (
		state = 8 << 20
		ticks = 60
	)
	const chunk = 256 << 10
	n := newNet(t, simnet.Options{Clients: 2, Seed: 31, AppPad: state, Config: func(c *bft.Config) {
		bigCfg(c)
		c.StateChunkBytes = chunk
	}})
	if !n.Load(20, 3000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	const liar = bft.ReplicaID(3)
	n.Crashed[liar], n.Faulty[liar] = true, true
	var answered int
	n.Byzantine = func(from bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		if from == 0 && e.To == bft.ToReplica(liar) {
			answered += len(wire.Append(nil, e.Msg))
		}
		return []bft.Envelope{e}
	}
	n.OnTick = append(n.OnTick, func() {
		to := bft.Envelope{To: bft.ToReplica(0), Msg: &bft.FetchState{Seq: 0, Replica: liar}}
		n.Send(bft.ToReplica(liar), to)
		// And every chunk of the state it holds, several times over.
		seq := n.Replicas[0].Status().Stable
		for i := range 3 * state / chunk {
			to.Msg = &bft.FetchChunk{Seq: seq, Index: uint64(i % (state / chunk)), Replica: liar}
			n.Send(bft.ToReplica(liar), to)
		}
	})
	start := n.Now
	if !n.Load(40, 3000, op) {
		t.Fatalf("clients starved by the flood: %v", n.LastErrors)
	}
	n.Run(ticks-int(n.Now-start), func() bool { return false })
	elapsed := int(n.Now - start)
	perTick := answered / elapsed
	t.Logf("replica 0 produced %d bytes in %d ticks for the flooding peer (%d per tick), state %d bytes", answered, elapsed, perTick, state)
	// 4 MiB of chunks (64 messages), the manifest, and the log's messages
	// resent once a tick.
	if limit := 4<<20 + 96<<10; perTick > limit {
		t.Fatalf("%d bytes per tick for one peer, limit %d", perTick, limit)
	}
}

// A replica whose state diverged from the certified one (a corrupted
// disk, a bug) discards it, fetches the certified state and keeps
// serving.
func TestDivergedReplicaRecovers(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 32, Config: smallCfg, Codec: true})
	if !n.Load(10, 3000, op) {
		t.Fatalf("not finished: %v", n.LastErrors)
	}
	n.Apps[3].Hash[0] ^= 1 // replica 3's application state is now wrong
	// Load until the next checkpoint is stable, not beyond: replica 3
	// stays inside its window, so nothing but the divergence can make it
	// fetch the state.
	stable := n.Replicas[1].Status().Stable
	for k := 11; n.Replicas[1].Status().Stable == stable; k++ {
		if !n.Load(k, 3000, op) {
			t.Fatalf("not finished after the corruption: %v", n.LastErrors)
		}
	}
	n.Run(200, func() bool { return false })
	s, ref := n.Replicas[3].Status(), n.Replicas[1].Status()
	if s.LastExecuted != ref.LastExecuted || n.Apps[3].Hash != n.Apps[1].Hash {
		t.Fatalf("replica 3 did not recover the certified state: %+v, others %+v", s, ref)
	}
	// It serves: with another replica down, the cluster needs it.
	n.Crashed[2] = true
	if !n.Load(45, 10000, op) {
		t.Fatalf("not finished with the recovered replica needed: %v %+v", n.LastErrors, n.Replicas[3].Status())
	}
	checkSameOrder(t, n)
	if s := n.Replicas[3].Status(); s.Divergences == 0 || s.StateTransfers == 0 {
		t.Fatalf("replica 3 recovered without noticing: %+v", s)
	}
}

// A replica behind a certified state above its MaxStateBytes refuses it
// with ErrTooLarge before allocating, and the others carry on.
func TestStateAboveMaxStateBytes(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 34, Codec: true, AppPad: 8 << 10, Config: func(c *bft.Config) {
		smallCfg(c)
		c.StateChunkBytes = 1 << 10
		c.MaxStateBytes = 1 << 20
	}})
	n.Configs[3].MaxStateBytes = 4 << 10
	if err := n.Restart(3); err != nil {
		t.Fatal(err)
	}
	lagBehind(t, n, 3, 8<<10)
	n.Run(100, func() bool { return false })
	if s := n.Replicas[3].Status(); s.StateTransfers != 0 || s.Chunks != 0 || n.Errors[bft.ErrTooLarge] == 0 {
		t.Fatalf("replica 3 took a state above its MaxStateBytes: %+v, errors %v", s, n.Errors)
	}
	checkSameOrder(t, n)
}

func TestStateConfigBounds(t *testing.T) {
	for _, c := range []struct{ chunk, max int }{{16 << 20, 0}, {16, 16 << 20}} {
		cfg := bft.Config{N: 4, App: &simnet.App{}, Auth: simnet.NewKeys(4, 1).Auth(0), StateChunkBytes: c.chunk, MaxStateBytes: c.max}
		if _, err := bft.NewReplica(cfg); err == nil {
			t.Errorf("chunks of %d bytes, MaxStateBytes %d: accepted", c.chunk, c.max)
		}
	}
}

// laggingBy128Chunks returns a cluster whose replica 3 lags behind a state
// of 128 chunks of 64 KiB, which it can reach only by state transfer.
func laggingBy128Chunks(t *testing.T, seed uint64) *simnet.Net {
	t.Helper()
	n := newNet(t, simnet.Options{Clients: 2, Seed: seed, Codec: true, Config: func(c *bft.Config) {
		bigCfg(c)
		c.StateChunkBytes = 64 << 10
	}})
	lagBehind(t, n, 3, 8<<20)
	return n
}

// A replica fetching a state that takes longer than RequestTicks to
// arrive (over a network that loses most chunks) waits for the state: the
// slots in its log stall for its own lag, not the primary's, so it starts
// no view change of its own, which would leave it out of the view the
// others are in until it timed out of that one too.
func TestNoViewChangeWhileFetchingState(t *testing.T) {
	n := laggingBy128Chunks(t, 34)
	sent := 0
	n.Byzantine = func(_ bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		if _, ok := e.Msg.(*bft.Chunk); ok && e.To == bft.ToReplica(3) {
			if sent++; sent%8 != 0 {
				return nil
			}
		}
		return []bft.Envelope{e}
	}
	ticks := 0
	ok := n.Run(5000, func() bool {
		ticks++
		return n.Replicas[3].Status().StateTransfers > 0
	})
	s := n.Replicas[3].Status()
	if !ok {
		t.Fatalf("replica 3 installed no state: %+v", s)
	}
	const requestTicks = 50 // the default
	if ticks <= requestTicks {
		t.Fatalf("the state arrived in %d ticks, within RequestTicks (%d): the test shows nothing", ticks, requestTicks)
	}
	if s.ViewChanges != 0 || s.View != n.Replicas[1].Status().View {
		t.Fatalf("replica 3 started %d view changes while it fetched the state for %d ticks; in view %d, the others in %d", s.ViewChanges, ticks, s.View, n.Replicas[1].Status().View)
	}
	n.Byzantine = nil
	if !n.Load(len(n.Results[0])+4, 5000, op) {
		t.Fatalf("not finished after the transfer: %v", n.LastErrors)
	}
	checkSameOrder(t, n)
}

// A replica that lags behind a large state catches up while the others
// keep ordering at full speed: the transfer must outrun the stable
// checkpoint, which moves on (and the old state with it) every
// CheckpointInterval sequence numbers.
func TestStateTransferUnderLoad(t *testing.T) {
	n := laggingBy128Chunks(t, 35)
	total := len(n.Results[0])
	for n.Replicas[3].Status().LastExecuted < n.Replicas[1].Status().Stable {
		total += 2
		if !n.Load(total, 5000, op) {
			t.Fatalf("not finished while replica 3 fetches: %v %+v", n.LastErrors, n.Replicas[3].Status())
		}
		if total > 1000 {
			t.Fatalf("replica 3 never caught up under load: %+v, others %+v", n.Replicas[3].Status(), n.Replicas[1].Status())
		}
	}
	s := n.Replicas[3].Status()
	t.Logf("replica 3 caught up by request %d: %+v", total, s)
	// It takes part again: with another replica down, the cluster needs it.
	n.Crashed[2] = true
	if !n.Load(total+3, 10000, op) {
		t.Fatalf("not finished with the caught-up replica needed: %v %+v", n.LastErrors, n.Replicas[3].Status())
	}
	checkSameOrder(t, n)
}

// A source that sends chunks that do not match the manifest is asked no
// more after its first one arrives; the others bring the state.
func TestStateTransferForgedChunks(t *testing.T) {
	n := laggingBy128Chunks(t, 36)
	const liar = 1
	forged := 0
	n.Byzantine = func(src bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		if c, ok := e.Msg.(*bft.Chunk); ok && src == liar && e.To == bft.ToReplica(3) {
			forged++
			bad := *c
			bad.Data = append([]byte(nil), c.Data...)
			bad.Data[len(bad.Data)/2] ^= 1
			e.Msg = &bad
		}
		return []bft.Envelope{e}
	}
	ok := n.Run(2000, func() bool { return n.Replicas[3].Status().StateTransfers > 0 })
	s := n.Replicas[3].Status()
	if !ok || n.Errors[bft.ErrForged] == 0 {
		t.Fatalf("replica 3 did not install the state past the forged chunks: %+v, errors %v", s, n.Errors)
	}
	// It was asked for a tick's worth at most before its first answer.
	if perTick := 4 << 20 / (64 << 10); forged > perTick {
		t.Fatalf("the liar sent %d forged chunks, more than the %d asked before the first came back", forged, perTick)
	}
	t.Logf("%d forged chunks; replica 3 verified %d", forged, s.Chunks)
	n.Byzantine = nil
	n.Crashed[2] = true // the cluster needs replica 3 now
	if !n.Load(len(n.Results[0])+3, 10000, op) {
		t.Fatalf("not finished with the caught-up replica needed: %v %+v", n.LastErrors, n.Replicas[3].Status())
	}
	checkSameOrder(t, n)
}
