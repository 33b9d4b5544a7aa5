package bft_test

import (
	"encoding/binary"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/internal/simnet"
)

// readLoad keeps clients 2.. writing (each write's result is the
// application's count after it) while client 1 reads the count with
// ProposeRead, until it has reads results. Every result client 1 accepts
// must be linearizable: at least the highest count any client had
// accepted when the read was issued, and at most the highest count a
// correct replica has reached when the read is accepted. It returns how
// many reads were answered read-only and how many were ordered.
func readLoad(t *testing.T, n *simnet.Net, reads, maxTicks int) (readOnly, ordered int) {
	t.Helper()
	accepted := func() uint64 {
		var m uint64
		for _, res := range n.Results {
			for _, r := range res {
				if !r.ReadOnly {
					m = max(m, binary.BigEndian.Uint64(r.Result))
				}
			}
		}
		return m
	}
	var floor uint64 // for a read issued in an earlier call: 0
	seen := len(n.Results[0])
	reads += seen
	for tick := 0; tick < maxTicks && seen < reads; tick++ {
		for i := 1; i < len(n.Clients); i++ {
			if c := n.Clients[i]; !c.Outstanding() {
				if _, err := c.Propose(op(i, len(n.Results[i]))); err != nil {
					t.Fatal(err)
				}
			}
		}
		if c := n.Clients[0]; !c.Outstanding() {
			floor = accepted()
			if _, err := c.ProposeRead([]byte("count")); err != nil {
				t.Fatal(err)
			}
		}
		n.Tick()
		for ; seen < len(n.Results[0]); seen++ {
			r := n.Results[0][seen]
			v := binary.BigEndian.Uint64(r.Result)
			var top uint64
			for i, a := range n.Apps {
				if !n.Faulty[i] {
					top = max(top, a.Count)
				}
			}
			if v < floor || v > top {
				t.Fatalf("read %d (read-only %v) returned %d: not within [%d, %d]", seen, r.ReadOnly, v, floor, top)
			}
			if r.ReadOnly {
				readOnly++
			} else {
				ordered++
			}
		}
	}
	if seen < reads {
		t.Fatalf("%d reads of %d in %d ticks: %v", seen, reads, maxTicks, n.LastErrors)
	}
	if err := n.CheckAgreement(); err != nil {
		t.Fatal(err)
	}
	return readOnly, ordered
}

// Reads are answered from the replicas' state, without being ordered,
// and see every write that completed before them.
func TestReadOnly(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 50, Codec: true, Config: smallCfg})
	ro, ord := readLoad(t, n, 100, 5000)
	if ro < 50 {
		t.Fatalf("%d reads answered read-only, %d ordered", ro, ord)
	}
	for i, a := range n.Apps {
		if a.Queries == 0 {
			t.Fatalf("replica %d answered no query", i)
		}
	}
	// Quiet: a read sees the last write, and changes nothing.
	n.Run(50, func() bool { return false })
	count := n.Apps[1].Count
	if _, err := n.Clients[0].ProposeRead(nil); err != nil {
		t.Fatal(err)
	}
	if !n.Run(50, func() bool { return !n.Clients[0].Outstanding() }) {
		t.Fatal("read not answered")
	}
	last := n.Results[0][len(n.Results[0])-1]
	if !last.ReadOnly || binary.BigEndian.Uint64(last.Result) != count || n.Apps[1].Count != count {
		t.Fatalf("read %+v with the count at %d, now %d", last, count, n.Apps[1].Count)
	}
}

// liar makes replica id answer every read-only request with a count of
// its own, and marks it faulty.
func liar(n *simnet.Net, id bft.ReplicaID) {
	n.Faulty[id] = true
	n.Byzantine = func(from bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		rep, ok := e.Msg.(*bft.Reply)
		if from != id || !ok || !rep.ReadOnly {
			return []bft.Envelope{e}
		}
		lie := *rep
		lie.Result = binary.BigEndian.AppendUint64(nil, 1<<40)
		return []bft.Envelope{{To: e.To, Msg: &lie}}
	}
}

// A Byzantine replica that answers reads with a value of its own is
// outvoted: the reads stay linearizable, over a lossy network.
func TestReadOnlyByzantine(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 51, Config: smallCfg})
	liar(n, 3)
	n.DropRate, n.Reorder, n.MaxDelay = 0.02, true, 2
	ro, ord := readLoad(t, n, 100, 20000)
	t.Logf("%d reads answered read-only, %d ordered", ro, ord)
	if ro == 0 {
		t.Fatal("no read answered read-only")
	}
}

// A replica that lags answers reads from an old state: with a correct
// quorum up to date the reads are answered read-only all the same; with
// a liar besides, no 2f+1 answers agree and the reads are ordered. All
// stay linearizable.
func TestReadOnlyLagging(t *testing.T) {
	for _, withLiar := range []bool{false, true} {
		n := newNet(t, simnet.Options{Clients: 3, Seed: 52, Config: smallCfg})
		n.Drop = func(from, to bft.Target, m bft.Message) bool {
			switch m.(type) {
			case *bft.PrePrepare, *bft.Prepare, *bft.Commit, *bft.Checkpoint:
				return to == bft.ToReplica(2)
			}
			return false
		}
		if withLiar {
			liar(n, 3)
		}
		ro, ord := readLoad(t, n, 60, 20000)
		t.Logf("liar %v: %d reads answered read-only, %d ordered; replica 2 executed %d, replica 1 %d",
			withLiar, ro, ord, n.Replicas[2].Status().LastExecuted, n.Replicas[1].Status().LastExecuted)
		if s := n.Replicas[2].Status(); s.LastExecuted >= n.Replicas[1].Status().LastExecuted {
			t.Fatalf("replica 2 does not lag: %+v", s)
		}
		switch {
		case !withLiar && ro < 30:
			t.Fatalf("without a liar %d reads answered read-only, %d ordered", ro, ord)
		case withLiar && ord < 30:
			t.Fatalf("with a liar %d reads ordered, %d read-only", ord, ro)
		}
	}
}

// A replica answers a read only once it executed what it prepared: a
// backup that prepared a batch but misses its commits holds the read.
func TestReadWaitsForPrepared(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 53, Config: smallCfg})
	if !n.Load(3, 1000, op) {
		t.Fatal("clients did not finish")
	}
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		_, commit := m.(*bft.Commit)
		return commit && to == bft.ToReplica(1)
	}
	if _, err := n.Clients[1].Propose([]byte("w")); err != nil {
		t.Fatal(err)
	}
	if !n.Run(100, func() bool { return !n.Clients[1].Outstanding() }) {
		t.Fatal("write not answered")
	}
	if s := n.Replicas[1].Status(); s.LastExecuted == n.Replicas[0].Status().LastExecuted {
		t.Fatalf("replica 1 executed the write without commits: %+v", s)
	}
	read := &bft.Request{Client: 1, Timestamp: 99, ReadOnly: true}
	n.SignRequest(read)
	if err := n.Replicas[1].Step(bft.ToClient(1), read); err != nil {
		t.Fatal(err)
	}
	if s := n.Replicas[1].Status(); s.Reads != 1 || n.Apps[1].Queries != 0 {
		t.Fatalf("read answered before the prepared write executed: %+v", s)
	}
	n.Drop = nil
	if !n.Run(200, func() bool { return n.Replicas[1].Status().Reads == 0 }) {
		t.Fatal("read never answered")
	}
	if n.Apps[1].Queries != 1 || n.Apps[1].Count != n.Apps[0].Count {
		t.Fatalf("replica 1 answered %d queries at count %d, replica 0 at %d", n.Apps[1].Queries, n.Apps[1].Count, n.Apps[0].Count)
	}
}

// Reads stay linearizable through view changes (the primary crashes, its
// successor later) and a replica that restarts empty and catches up by
// state transfer, over a lossy network.
func TestReadOnlyThroughFaults(t *testing.T) {
	for _, seed := range []uint64{54, 55, 56} {
		n := newNet(t, simnet.Options{Clients: 3, Seed: seed, Config: smallCfg})
		n.DropRate, n.Reorder, n.MaxDelay = 0.05, true, 2
		readLoad(t, n, 30, 20000)
		n.Crashed[0] = true
		readLoad(t, n, 60, 20000)
		if err := n.Restart(0); err != nil {
			t.Fatal(err)
		}
		n.Crashed[1] = true
		ro, ord := readLoad(t, n, 120, 40000)
		if v := n.Replicas[2].Status().View; v < 2 {
			t.Fatalf("seed %d: view %d, want two view changes", seed, v)
		}
		t.Logf("seed %d: %d reads answered read-only, %d ordered; replica 0 state transfers %d", seed, ro, ord, n.Replicas[0].Status().StateTransfers)
	}
}
