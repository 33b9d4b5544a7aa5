package bft_test

import (
	"fmt"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

// noteOp has client c's k-th op emit a notification for client 1.
func noteOp(c, k int) []byte { return fmt.Appendf(nil, "note 1 c%d-%d", c, k) }

// checkNotes fails unless client 1 delivered notifications 1 to want in
// order, each once, apart from the ranges it was told were lost, which
// must add up to lost.
func checkNotes(t *testing.T, n *simnet.Net, want, lost uint64) {
	t.Helper()
	next, gone := uint64(1), uint64(0)
	for _, nt := range n.Notes[0] {
		if nt.Number != next {
			t.Fatalf("notification %d delivered after %d", nt.Number, next-1)
		}
		if nt.Lost != 0 {
			gone += nt.Lost
			next += nt.Lost
			continue
		}
		next++
	}
	if next-1 != want || gone != lost {
		t.Fatalf("delivered up to %d with %d lost, want %d with %d lost", next-1, gone, want, lost)
	}
	if err := n.CheckAgreement(); err != nil { // with the checker's: payloads as correct replicas sent them
		t.Fatal(err)
	}
}

// finish has client 1 run one request, whose reply tells it how many
// notifications it was sent, and waits until it delivered them all.
func finish(t *testing.T, n *simnet.Net, want uint64) {
	t.Helper()
	if _, err := n.Clients[0].Propose([]byte("sync")); err != nil {
		t.Fatal(err)
	}
	if !n.Run(2000, func() bool { return !n.Clients[0].Outstanding() && n.Clients[0].NextNote() > want }) {
		t.Fatalf("client 1 delivered up to %d of %d: %v", n.Clients[0].NextNote()-1, want, n.LastErrors)
	}
}

// emit has clients (indexes into n.Clients) run count requests each that
// emit a notification for client 1.
func emit(t *testing.T, n *simnet.Net, count int, clients ...int) {
	t.Helper()
	drive(t, n, count, noteOp, clients...)
}

// drive has clients run requests opf(c, k) until each has count results.
func drive(t *testing.T, n *simnet.Net, count int, opf func(c, k int) []byte, clients ...int) {
	t.Helper()
	ok := n.Run(20000, func() bool {
		done := true
		for _, i := range clients {
			if len(n.Results[i]) < count {
				done = false
				if !n.Clients[i].Outstanding() {
					if _, err := n.Clients[i].Propose(opf(i, len(n.Results[i]))); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		return done
	})
	if !ok {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
}

// Notifications the application emits for a client reach it in order,
// each once, over a lossy network; the ones it missed it fetches.
func TestNotifications(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 3, Seed: 60, Codec: true, Config: smallCfg})
	n.DropRate, n.Reorder, n.MaxDelay = 0.1, true, 2
	// Clients 2 and 3 emit notifications for client 1, which is idle.
	emit(t, n, 30, 1, 2)
	n.Heal()
	finish(t, n, 60)
	checkNotes(t, n, 60, 0)
	if n.Errors[bft.ErrDuplicate] == 0 {
		t.Log("no duplicate copy seen")
	}
}

// forger makes replica id rewrite the payload of every notification it
// sends and add notifications of its own, far ahead and claiming the
// others are gone.
func forger(n *simnet.Net, id bft.ReplicaID) {
	n.Faulty[id] = true
	n.Byzantine = func(from bft.ReplicaID, e bft.Envelope) []bft.Envelope {
		nt, ok := e.Msg.(*bft.Notify)
		if from != id || !ok {
			return []bft.Envelope{e}
		}
		lie := *nt
		lie.Payload = []byte("forged")
		ahead := lie
		ahead.Number, ahead.Oldest = nt.Number+10, nt.Number+10
		far := lie
		far.Number, far.Oldest = 1<<40, 1<<40
		return []bft.Envelope{{To: e.To, Msg: &lie}, {To: e.To, Msg: &ahead}, {To: e.To, Msg: &far}}
	}
}

// A Byzantine replica that forges notifications, numbers far ahead and
// claims of lost ones gets none of them delivered.
func TestNotificationsForged(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 61, Config: smallCfg})
	forger(n, 2)
	if !n.Load(25, 5000, func(c, k int) []byte {
		if c == 1 {
			return noteOp(c, k)
		}
		return op(c, k)
	}) {
		t.Fatalf("clients did not finish: %v", n.LastErrors)
	}
	finish(t, n, 25)
	checkNotes(t, n, 25, 0)
	for _, nt := range n.Notes[0] {
		if string(nt.Payload) == "forged" {
			t.Fatalf("forged notification %d delivered", nt.Number)
		}
	}
}

// A client that was away while more notifications were emitted than the
// replicas keep learns which ones are lost and gets the rest, also from
// a replica that restarted empty and caught up by state transfer.
func TestNotificationsLost(t *testing.T) {
	n := newNet(t, simnet.Options{Clients: 2, Seed: 62, Config: func(c *bft.Config) {
		smallCfg(c)
		c.NoteRetain = 4
	}})
	away := true
	n.Block = func(from, to bft.Target) bool { return away && to == bft.ToClient(1) }
	emit(t, n, 30, 1)
	if err := n.Restart(3); err != nil {
		t.Fatal(err)
	}
	drive(t, n, 50, op, 1) // no notifications: new checkpoints to catch up to
	if !n.Run(2000, func() bool { return n.Replicas[3].Status().StateTransfers > 0 }) {
		t.Fatal("replica 3 did not catch up")
	}
	n.Crashed[0] = true // replies come from 1, 2 and 3, notifications from 2 and 3
	n.Drop = func(from, to bft.Target, m bft.Message) bool {
		_, note := m.(*bft.Notify)
		return note && from == bft.ToReplica(1)
	}
	away = false
	finish(t, n, 30)
	checkNotes(t, n, 30, 30-4)
}

// One replica's notifications cost a client at most its share: the
// numbers in the window, one copy each, and NoteBuffer bytes.
func TestNotificationBufferBounded(t *testing.T) {
	c, err := bft.NewClient(bft.ClientConfig{ID: 1, N: 4, Sign: func(*bft.Request) {}, NoteWindow: 8, NoteBuffer: 100})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 40)
	for num := uint64(1); num <= 3; num++ {
		err := c.StepNotify(3, &bft.Notify{Client: 1, Number: num, Oldest: 1, Replica: 3, Payload: big})
		if want := num == 3; want != (err != nil) {
			t.Fatalf("copy %d: %v", num, err)
		}
	}
	for _, m := range []*bft.Notify{
		{Client: 1, Number: 2, Oldest: 1, Replica: 3},             // a second copy
		{Client: 1, Number: 9, Oldest: 1, Replica: 3},             // beyond the window
		{Client: 1, Number: 1 << 40, Oldest: 1 << 40, Replica: 3}, // far ahead, "the rest is lost"
		{Client: 2, Number: 4, Oldest: 1, Replica: 3},             // another client's
		{Client: 1, Number: 4, Oldest: 1, Replica: 2},             // forged sender
		{Client: 1, Number: 5, Oldest: 6, Replica: 3},             // oldest above number
	} {
		if err := c.StepNotify(3, m); err == nil {
			t.Fatalf("%+v taken", m)
		}
	}
	if c.NextNote() != 1 || len(c.Ready().Notes) != 0 {
		t.Fatal("one replica made the client deliver or skip")
	}
	// A second replica that agrees delivers 1 and 2.
	for num := uint64(1); num <= 2; num++ {
		if err := c.StepNotify(0, &bft.Notify{Client: 1, Number: num, Oldest: 1, Replica: 0, Payload: big}); err != nil {
			t.Fatal(err)
		}
	}
	if notes := c.Ready().Notes; len(notes) != 2 || c.NextNote() != 3 {
		t.Fatalf("delivered %+v", notes)
	}
	// Delivered copies free their bytes: replica 3 may send 3 now.
	if err := c.StepNotify(3, &bft.Notify{Client: 1, Number: 3, Oldest: 1, Replica: 3, Payload: big}); err != nil {
		t.Fatal(err)
	}
}
