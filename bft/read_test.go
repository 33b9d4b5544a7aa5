package bft_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
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

// An answer counts only for the read it was computed for. Client 1's
// reads R1 and R2 share a timestamp (a read answered read-only leaves it
// unused) and an op. With n = 4, replica 0 a Byzantine primary that
// completes write W1 without replica 3 and then lies, a late answer of
// correct replica 1 to R1 makes the third stale answer R2 needs:
//
//   - held: W0 commits at slot s0 on replicas 0, 2 and 3; replica 1
//     prepared it but its commits are late, so it holds R1 until it
//     executes s0, while 0, 2 and 3 answer R1. W1 commits at s1 on 0, 1
//     and 2 and completes; replica 3 never hears of it. R2 reaches every
//     replica: 2 answers the count after W1, 3 and 0 the count before.
//     Then s0's commits reach replica 1, which executes s0 (not s1) and
//     answers the read it holds.
//   - late: replica 1 answers R1 at once but its answer is late; W1
//     completes without replica 3 as above; R2 is late to replica 1, and
//     R1's answer reaches the client while R2 is outstanding.
//
// Either answer of replica 1, counted for R2, makes 2f+1 for a count
// from before W1, which completed before R2 was issued.
func TestReadAnswerNamesItsRead(t *testing.T) {
	for _, held := range []bool{true, false} {
		name := map[bool]string{true: "held", false: "late"}[held]
		t.Run(name, func(t *testing.T) {
			n := newNet(t, simnet.Options{Clients: 2, Seed: 57, Config: smallCfg})
			if !n.Load(3, 1000, op) {
				t.Fatal("clients did not finish")
			}
			reader, writer := n.Clients[0], n.Clients[1]
			count := func(r bft.Result) uint64 { return binary.BigEndian.Uint64(r.Result) }
			last := func(i int) bft.Result { return n.Results[i][len(n.Results[i])-1] }
			done := func(c *bft.Client) bool {
				return n.Run(20, func() bool { return !c.Outstanding() })
			}

			// The network holds back what late matches, until released.
			var late func(to bft.Target, m bft.Message) bool
			var kept []simnet.Packet
			releasing := false
			n.Drop = func(from, to bft.Target, m bft.Message) bool {
				if !releasing && late != nil && late(to, m) {
					kept = append(kept, simnet.Packet{From: from, To: to, Msg: m})
					return true
				}
				return false
			}
			release := func(match func(m bft.Message) bool) {
				releasing = true
				defer func() { releasing = false }()
				k := 0
				for _, p := range kept {
					if match(p.Msg) {
						n.Send(p.From, bft.Envelope{To: p.To, Msg: p.Msg})
						continue
					}
					kept[k] = p
					k++
				}
				kept = kept[:k]
			}
			normal := func(m bft.Message) bool {
				switch m.(type) {
				case *bft.PrePrepare, *bft.Prepare, *bft.Commit:
					return true
				}
				return false
			}
			commitTo1 := func(to bft.Target, m bft.Message) bool {
				_, ok := m.(*bft.Commit)
				return ok && to == bft.ToReplica(1)
			}
			readReplyFrom1 := func(to bft.Target, m bft.Message) bool {
				rep, ok := m.(*bft.Reply)
				return ok && rep.ReadOnly && rep.Replica == 1
			}

			// Replica 0 is the primary and Byzantine: it leaves replica 3
			// out of W1, and once W1 completed it answers reads with the
			// count from before it.
			n.Faulty[0] = true
			var stale []byte
			n.Byzantine = func(from bft.ReplicaID, e bft.Envelope) []bft.Envelope {
				if from != 0 {
					return []bft.Envelope{e}
				}
				switch m := e.Msg.(type) {
				case *bft.PrePrepare:
					if stale != nil && e.To == bft.ToReplica(3) {
						return nil
					}
				case *bft.Reply:
					if m.ReadOnly && stale != nil {
						lie := *m
						lie.Result = stale
						return []bft.Envelope{{To: e.To, Msg: &lie}}
					}
				}
				return []bft.Envelope{e}
			}

			var s0 uint64
			if held {
				late = commitTo1
				if _, err := writer.Propose([]byte("w0")); err != nil {
					t.Fatal(err)
				}
				if !done(writer) {
					t.Fatal("W0 not answered")
				}
				s0 = n.Replicas[0].Status().LastExecuted
				if s := n.Replicas[1].Status(); s.LastExecuted >= s0 {
					t.Fatalf("replica 1 executed s0 = %d without commits: %+v", s0, s)
				}
			} else {
				late = readReplyFrom1
			}
			before := count(last(1))

			ts1, err := reader.ProposeRead([]byte("count"))
			if err != nil {
				t.Fatal(err)
			}
			if !done(reader) {
				t.Fatal("R1 not answered")
			}
			if r := last(0); !r.ReadOnly || count(r) != before {
				t.Fatalf("R1: %+v, want count %d read-only", r, before)
			}
			if held {
				if s := n.Replicas[1].Status(); s.Reads != 1 {
					t.Fatalf("replica 1 does not hold R1: %+v", s)
				}
			} else if len(kept) != 1 {
				t.Fatalf("%d messages held, want replica 1's answer to R1", len(kept))
			}

			// W1 leaves replica 3 out: the primary sends it no
			// pre-prepare, the others' prepares and commits to it are
			// late.
			stale = binary.BigEndian.AppendUint64(nil, before)
			prev := late
			late = func(to bft.Target, m bft.Message) bool {
				return prev(to, m) || to == bft.ToReplica(3) && normal(m)
			}
			if _, err := writer.Propose([]byte("w1")); err != nil {
				t.Fatal(err)
			}
			if !done(writer) {
				t.Fatal("W1 not answered")
			}
			floor := count(last(1))
			if floor != before+1 || n.Apps[3].Count != before {
				t.Fatalf("W1 returned %d, replica 3 at count %d; want %d and %d", floor, n.Apps[3].Count, before+1, before)
			}

			ts2, err := reader.ProposeRead([]byte("count"))
			if err != nil {
				t.Fatal(err)
			}
			if ts2 != ts1 {
				t.Fatalf("R1 at timestamp %d, R2 at %d: the schedule needs them equal", ts1, ts2)
			}
			if held {
				n.Tick() // R2 reaches every replica
				release(func(m bft.Message) bool {
					c, ok := m.(*bft.Commit)
					return ok && c.Seq == s0
				})
			} else {
				prev := late
				late = func(to bft.Target, m bft.Message) bool {
					r, ok := m.(*bft.Request)
					return prev(to, m) || ok && r.ReadOnly && to == bft.ToReplica(1)
				}
				release(func(m bft.Message) bool { _, ok := m.(*bft.Reply); return ok })
			}
			for range 3 {
				n.Tick()
			}
			if !reader.Outstanding() {
				if r := last(0); count(r) < floor {
					t.Fatalf("R2 accepted count %d (read-only %v), but W1 made it %d before R2 was issued", count(r), r.ReadOnly, floor)
				}
			}

			// Heal: R2 completes, and sees W1.
			late, stale = nil, nil
			release(func(bft.Message) bool { return true })
			if !n.Run(200, func() bool { return !reader.Outstanding() }) {
				t.Fatalf("R2 not answered: %v", n.LastErrors)
			}
			if r := last(0); count(r) < floor {
				t.Fatalf("R2 returned count %d (read-only %v), W1 made it %d before R2 was issued", count(r), r.ReadOnly, floor)
			}
			if err := n.CheckAgreement(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Consecutive reads share a timestamp but not a nonce, and the client
// counts an answer only for the read whose nonce it carries.
func TestClientReadNonce(t *testing.T) {
	c, err := bft.NewClient(bft.ClientConfig{ID: 1, N: 4, Sign: func(*bft.Request) {}})
	if err != nil {
		t.Fatal(err)
	}
	read := func() *bft.Request {
		t.Helper()
		if _, err := c.ProposeRead([]byte("get")); err != nil {
			t.Fatal(err)
		}
		msgs := c.Ready().Messages
		if len(msgs) != 4 {
			t.Fatalf("read sent %d times, want 4", len(msgs))
		}
		return msgs[0].Msg.(*bft.Request)
	}
	answer := func(r *bft.Request, from bft.ReplicaID, v string) error {
		return c.Step(from, &bft.Reply{Timestamp: r.Timestamp, Client: 1, Replica: from, ReadOnly: true, Nonce: r.Nonce, Result: []byte(v)})
	}
	r1 := read()
	for i := range 3 {
		if err := answer(r1, bft.ReplicaID(i), "old"); err != nil {
			t.Fatal(err)
		}
	}
	if d := c.Ready().Done; len(d) != 1 || string(d[0].Result) != "old" {
		t.Fatalf("R1 done %+v", d)
	}
	r2 := read()
	if r2.Timestamp != r1.Timestamp || r2.Nonce <= r1.Nonce {
		t.Fatalf("R1 %d/%d, R2 %d/%d: want one timestamp, a higher nonce", r1.Timestamp, r1.Nonce, r2.Timestamp, r2.Nonce)
	}
	if err := answer(r1, 3, "old"); !errors.Is(err, bft.ErrStale) {
		t.Fatalf("R1's answer stepped for R2: %v", err)
	}
	for i := range 2 {
		if err := answer(r2, bft.ReplicaID(i), "old"); err != nil {
			t.Fatal(err)
		}
	}
	if c.Ready().Done != nil {
		t.Fatal("R2 done with two answers of its own")
	}
	if err := answer(r2, 3, "old"); err != nil {
		t.Fatal(err)
	}
	if d := c.Ready().Done; len(d) != 1 || !d[0].ReadOnly {
		t.Fatalf("R2 done %+v", d)
	}
}

// A replica holds one read per client, the latest by timestamp then
// nonce, and answers it under its nonce: an earlier read that arrives
// late is dropped, a later one replaces the held one.
func TestReplicaHoldsLatestRead(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 58, Config: smallCfg})
	if !n.Load(3, 1000, op) {
		t.Fatal("clients did not finish")
	}
	var answered []uint64
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		if rep, ok := m.(*bft.Reply); ok && rep.ReadOnly && from == bft.ToReplica(1) {
			answered = append(answered, rep.Nonce)
		}
		_, commit := m.(*bft.Commit)
		return commit && to == bft.ToReplica(1)
	}
	if _, err := n.Clients[1].Propose([]byte("w")); err != nil {
		t.Fatal(err)
	}
	if !n.Run(100, func() bool { return !n.Clients[1].Outstanding() }) {
		t.Fatal("write not answered")
	}
	step := func(ts, nonce uint64) error {
		read := &bft.Request{Client: 1, Timestamp: ts, ReadOnly: true, Nonce: nonce, Op: []byte("count")}
		n.SignRequest(read)
		return n.Replicas[1].Step(bft.ToClient(1), read)
	}
	for _, s := range []struct {
		ts, nonce uint64
		want      error
	}{
		{99, 5, nil},
		{99, 5, bft.ErrDuplicate},
		{99, 4, bft.ErrStale},
		{98, 9, bft.ErrStale},
		{99, 6, nil},
		{100, 1, nil},
		{99, 7, bft.ErrStale},
	} {
		if err := step(s.ts, s.nonce); !errors.Is(err, s.want) || (s.want == nil) != (err == nil) {
			t.Fatalf("read %d/%d: %v, want %v", s.ts, s.nonce, err, s.want)
		}
	}
	if s := n.Replicas[1].Status(); s.Reads != 1 {
		t.Fatalf("replica 1 holds %d reads, want 1", s.Reads)
	}
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		if rep, ok := m.(*bft.Reply); ok && rep.ReadOnly && from == bft.ToReplica(1) {
			answered = append(answered, rep.Nonce)
		}
		return false
	}
	if !n.Run(200, func() bool { return n.Replicas[1].Status().Reads == 0 }) {
		t.Fatal("read never answered")
	}
	n.Tick()
	if len(answered) != 1 || answered[0] != 1 {
		t.Fatalf("replica 1 answered nonces %v, want [1] (the read of timestamp 100)", answered)
	}
}
