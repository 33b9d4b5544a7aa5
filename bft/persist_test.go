package bft_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

// solo is one replica driven by hand, persisting what its Readies ask.
type solo struct {
	t    *testing.T
	keys *simnet.Keys
	id   bft.ReplicaID
	r    *bft.Replica
	disk simnet.Disk
	out  []bft.Envelope
}

func newSolo(t *testing.T, keys *simnet.Keys, id bft.ReplicaID, persist bool) *solo {
	t.Helper()
	r, err := bft.NewReplica(bft.Config{ID: id, N: 4, App: &simnet.App{}, Auth: keys.Auth(id), Persist: persist, CheckpointInterval: 8, WatermarkWindow: 16})
	if err != nil {
		t.Fatal(err)
	}
	return &solo{t: t, keys: keys, id: id, r: r}
}

// step feeds m from replica from and takes the Ready: records to disk,
// messages to out.
func (s *solo) step(from bft.ReplicaID, m bft.Message) error {
	err := s.r.Step(bft.ToReplica(from), m)
	s.ready()
	return err
}

func (s *solo) ready() {
	rd := s.r.Ready()
	if rd.Snapshot != nil {
		s.disk = simnet.Disk{Snapshot: rd.Snapshot}
	}
	s.disk.Records = append(s.disk.Records, rd.Persist...)
	if len(rd.Persist) > 0 {
		s.disk.Synced = len(s.disk.Records)
	}
	s.disk.Records = append(s.disk.Records, rd.Deferred...)
	s.out = append(s.out, rd.Messages...)
}

// recovered returns a replica like s's that recovered from s's disk, as
// after a crash that lost every record no sync covered if lose is set.
func (s *solo) recovered(lose bool) *solo {
	s.t.Helper()
	recs := s.disk.Records
	if lose {
		recs = recs[:s.disk.Synced]
	}
	rec := newSolo(s.t, s.keys, s.id, true)
	if err := rec.r.Recover(s.disk.Snapshot, recs); err != nil {
		s.t.Fatal(err)
	}
	rec.ready()
	rec.out = nil
	return rec
}

// prePrepare is primary 0's signed pre-prepare for seq in view 0 of one
// request of client 1 with op.
func (s *solo) prePrepare(seq uint64, op string) *bft.PrePrepare {
	req := bft.Request{Client: 1, Timestamp: seq, Op: []byte(op)}
	s.keys.SignRequest(&req)
	pp := &bft.PrePrepare{View: 0, Seq: seq, Time: uint64(time.Now().UnixNano()), Batch: []bft.Request{req}}
	pp.Digest = bft.BatchDigest(pp.Time, pp.Batch)
	return pp
}

func (s *solo) prepared(seq uint64) (d bft.Digest, ok bool) {
	for _, e := range s.out {
		if p, isP := e.Msg.(*bft.Prepare); isP && p.Seq == seq {
			return p.Digest, true
		}
	}
	return d, false
}

// TestRecoverRefusesSecondVote: a backup prepared batch A at seq 1 of
// view 0, crashed and recovered from its records; a pre-prepare of batch
// B for the same slot and view (an equivocating primary) is refused. A
// replica restarted without its records takes B and prepares it: it votes
// twice differently in one view, which PBFT's safety argument forbids.
func TestRecoverRefusesSecondVote(t *testing.T) {
	keys := simnet.NewKeys(4, 1)
	a := newSolo(t, keys, 1, true)
	ppA := a.prePrepare(1, "A")
	if err := a.step(0, ppA); err != nil {
		t.Fatal(err)
	}
	if d, ok := a.prepared(1); !ok || d != ppA.Digest {
		t.Fatal("the backup did not prepare A")
	}
	ppB := a.prePrepare(1, "B")

	rec := newSolo(t, keys, 1, true)
	if err := rec.r.Recover(a.disk.Snapshot, a.disk.Records); err != nil {
		t.Fatal(err)
	}
	rec.ready()
	rec.out = nil
	if err := rec.step(0, ppB); !errors.Is(err, bft.ErrEquivocation) {
		t.Fatalf("recovered replica took a conflicting pre-prepare: err = %v, want ErrEquivocation", err)
	}
	if _, ok := rec.prepared(1); ok {
		t.Fatal("recovered replica prepared a second batch at seq 1 of view 0")
	}
	// Its retransmission after a stall is its first vote, A.
	for i := 0; i < 40; i++ {
		rec.r.Tick()
		rec.ready()
	}
	if d, ok := rec.prepared(1); !ok || d != ppA.Digest {
		t.Fatal("recovered replica does not resend its prepare of A")
	}

	empty := newSolo(t, keys, 1, false)
	if err := empty.step(0, ppB); err != nil {
		t.Fatalf("a replica without its records: %v", err)
	}
	if d, ok := empty.prepared(1); !ok || d != ppB.Digest {
		t.Fatal("expected a replica without its records to prepare B (the hole recovery closes)")
	}
}

// TestLostVoteMutesView: once a backup has records on its disk, its
// pre-prepares and prepares go out before they are synced, and a crash
// may lose them. Recovered, it must not prepare in that view again: a
// pre-prepare of batch B for the slot where it prepared A before the
// crash (an equivocating primary) is not prepared, though the lost vote
// left nothing to refuse it with. It still becomes prepared on others'
// prepares, and commits, synced first.
func TestLostVoteMutesView(t *testing.T) {
	keys := simnet.NewKeys(4, 1)
	a := newSolo(t, keys, 1, true)
	if err := a.step(0, a.prePrepare(1, "first")); err != nil {
		t.Fatal(err)
	}
	synced := a.disk.Synced
	ppA := a.prePrepare(2, "A")
	if err := a.step(0, ppA); err != nil {
		t.Fatal(err)
	}
	if d, ok := a.prepared(2); !ok || d != ppA.Digest {
		t.Fatal("the backup did not prepare A")
	}
	if synced == 0 || a.disk.Synced != synced {
		t.Fatalf("the prepare of A waited for a sync (synced records %d, then %d)", synced, a.disk.Synced)
	}

	rec := a.recovered(true)
	ppB := rec.prePrepare(2, "B")
	if err := rec.step(0, ppB); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.prepared(2); ok {
		t.Fatal("recovered replica prepared B at seq 2 of view 0, where its lost vote was A")
	}
	for _, from := range []bft.ReplicaID{2, 3} {
		p := &bft.Prepare{View: 0, Seq: 2, Digest: ppB.Digest, Replica: from}
		if err := rec.step(from, p); err != nil {
			t.Fatal(err)
		}
	}
	committed := false
	for _, e := range rec.out {
		if c, ok := e.Msg.(*bft.Commit); ok && c.Seq == 2 && c.Digest == ppB.Digest {
			committed = true
		}
	}
	if !committed || rec.disk.Synced != len(rec.disk.Records) {
		t.Fatalf("recovered replica did not commit B on others' prepares, synced first (commit sent %v, synced %d of %d records)",
			committed, rec.disk.Synced, len(rec.disk.Records))
	}
}

// TestRecoverPrimaryKeepsItsSequence: a primary that proposed seq 1 and
// recovered proposes nothing in that view (see TestLostVoteMutesView),
// never a new batch at seq 1.
func TestRecoverPrimaryKeepsItsSequence(t *testing.T) {
	keys := simnet.NewKeys(4, 1)
	p := newSolo(t, keys, 0, true)
	req := bft.Request{Client: 1, Timestamp: 1, Op: []byte("A")}
	keys.SignRequest(&req)
	if err := p.r.Step(bft.ToClient(1), &req); err != nil {
		t.Fatal(err)
	}
	p.ready()
	rec := newSolo(t, keys, 0, true)
	if err := rec.r.Recover(p.disk.Snapshot, p.disk.Records); err != nil {
		t.Fatal(err)
	}
	req2 := bft.Request{Client: 2, Timestamp: 1, Op: []byte("B")}
	keys.SignRequest(&req2)
	if err := rec.r.Step(bft.ToClient(2), &req2); err != nil {
		t.Fatal(err)
	}
	rec.ready()
	for _, e := range rec.out {
		if pp, ok := e.Msg.(*bft.PrePrepare); ok && pp.Batch[0].Client == 2 {
			t.Fatalf("recovered primary proposed B at seq %d of the view it recovered in", pp.Seq)
		}
	}
}

// TestRecoverAllReplicas crashes every replica at once, repeatedly, in a
// lossy, reordering network under load, and recovers each from its
// disk: no result a client accepted is lost (the counter every operation
// increments keeps rising for each client, and ends at the number of
// operations executed), and the replicas agree. Restarting them empty
// instead (no Persist) loses the counter: the same check fails.
func TestRecoverAllReplicas(t *testing.T) { recoverAll(t, false) }

// TestRecoverAllReplicasLosingCommitted is TestRecoverAllReplicas with
// every crash coming in the tick a client got a reply and losing every
// record not synced (Ready.Deferred since the last Persist: the
// committed slots, which the driver does not sync before the replies,
// and votes sent before their sync), so every slot committed and replied
// since then must commit again from the pre-prepares and votes on the
// disks (the P claims of view changes): the same checks hold, and the
// replicas execute those slots again to the same results.
func TestRecoverAllReplicasLosingCommitted(t *testing.T) { recoverAll(t, true) }

func recoverAll(t *testing.T, loseCommitted bool) {
	lost := 0
	for _, seed := range []uint64{1, 2, 3, 4} {
		n := newNet(t, simnet.Options{Clients: 3, Seed: seed, Codec: true, Config: func(c *bft.Config) {
			smallCfg(c)
			c.Persist = true
		}})
		n.LoseCommitted = loseCommitted
		n.DropRate, n.Reorder, n.MaxDelay = 0.02, true, 2
		for round := 0; round < 6; round++ {
			// Busy clients throughout: the crash comes mid-flight.
			n.Load(1000, 5+n.Rand.IntN(150), op)
			if loseCommitted {
				// On to the next reply: some slot committed and was
				// replied just now.
				replies := func() (k int) {
					for _, res := range n.Results {
						k += len(res)
					}
					return k
				}
				for k, tick := replies(), 0; replies() == k; tick++ {
					if tick == 5000 {
						t.Fatalf("seed %d: no reply in 5000 ticks", seed)
					}
					n.Load(1000, 1, op)
				}
			}
			for i := 0; i < n.N; i++ {
				before := n.Replicas[i].Status().LastExecuted
				if err := n.Recover(i); err != nil {
					t.Fatalf("seed %d: recover replica %d: %v", seed, i, err)
				}
				if n.Replicas[i].Status().LastExecuted < before {
					lost++
				}
			}
		}
		n.Heal()
		if !n.Load(len(n.Results[0])+20, 20000, op) {
			t.Fatalf("seed %d: clients did not finish after recovery: %v", seed, n.LastErrors)
		}
		if err := n.Check.Err(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		checkSameOrder(t, n)
		var max uint64
		for c, res := range n.Results {
			var last uint64
			for _, r := range res {
				v := binary.BigEndian.Uint64(r.Result)
				if v <= last {
					t.Fatalf("seed %d: client %d saw the counter at %d after %d: an acknowledged operation was lost", seed, c, v, last)
				}
				last = v
				max = maxU(max, v)
			}
		}
		n.Run(200, func() bool { return false })
		for i, a := range n.Apps {
			if a.Count < max {
				t.Fatalf("seed %d: replica %d's counter is %d, a client saw %d", seed, i, a.Count, max)
			}
		}
	}
	t.Logf("%d recoveries came back below what the replica had executed", lost)
	if loseCommitted && lost == 0 {
		t.Fatal("no recovery lost an executed slot: the committed records lost nothing")
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
