package bft_test

import (
	"slices"
	"testing"

	"github.com/rubin-go/rubin/bft"
)

// TestClientDissent: a client counts, per replica, the replies to ordered
// requests that differ from the result f+1 replicas agreed on, whether
// they came before the result or after it while the client holds it; it
// counts nothing for read-only replies or requests it never sent, and
// keeps only its last few results for the comparison.
func TestClientDissent(t *testing.T) {
	c, err := bft.NewClient(bft.ClientConfig{ID: 1, N: 4, Window: 4, Sign: func(*bft.Request) {}})
	if err != nil {
		t.Fatal(err)
	}
	propose := func() uint64 {
		t.Helper()
		ts, err := c.Propose([]byte("op"))
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	step := func(r bft.ReplicaID, ts uint64, res string) {
		t.Helper()
		_ = c.Step(r, &bft.Reply{Replica: r, Client: 1, Timestamp: ts, Result: []byte(res)})
	}
	dissent := func() []uint64 {
		t.Helper()
		return c.Ready().Dissent
	}
	// Request 1: replica 3 lies before the result, twice (counted once:
	// its second reply replaces its first).
	ts := propose()
	step(3, ts, "lie")
	step(3, ts, "lie")
	step(0, ts, "ok")
	step(1, ts, "ok")
	if got := dissent(); !slices.Equal(got, []uint64{0, 0, 0, 1}) {
		t.Fatalf("request 1, before its result: %v", got)
	}
	// Replica 2's matching reply and replica 3's lie come late.
	step(2, ts, "ok")
	if c.Dissented() {
		t.Fatal("a late matching reply counted")
	}
	step(3, ts, "lie again")
	if !c.Dissented() {
		t.Fatal("a late lie not counted")
	}
	if got := dissent(); !slices.Equal(got, []uint64{0, 0, 0, 1}) {
		t.Fatalf("request 1, after its result: %v", got)
	}
	// Requests 2 and 3: the client has 3's result, held until 2 has its
	// own, when replica 3's lie about 3 comes.
	ts2, ts3 := propose(), propose()
	step(0, ts3, "ok3")
	step(1, ts3, "ok3")
	step(3, ts3, "lie")
	step(0, ts2, "ok2")
	step(1, ts2, "ok2")
	rd := c.Ready()
	if len(rd.Done) != 2 || !slices.Equal(rd.Dissent, []uint64{0, 0, 0, 1}) {
		t.Fatalf("requests 2 and 3: %d done, dissent %v", len(rd.Done), rd.Dissent)
	}
	// Read-only replies, and replies to requests never sent, count
	// nothing.
	_ = c.Step(3, &bft.Reply{Replica: 3, Client: 1, Timestamp: ts3 + 1, ReadOnly: true, Result: []byte("x")})
	for f := ts3 + 1; f < ts3+1000; f++ {
		step(3, f, "future")
	}
	if c.Dissented() {
		t.Fatalf("read-only or unsent replies counted: %v", dissent())
	}
	// Only the last results are kept to compare late replies with: a lie
	// about the request 8 results back counts, about the one before not.
	var done []uint64
	for range 16 {
		ts := propose()
		step(0, ts, "r")
		step(1, ts, "r")
		done = append(done, ts)
	}
	c.Ready()
	step(3, done[len(done)-8], "lie")
	step(3, done[len(done)-9], "lie")
	if got := dissent(); !slices.Equal(got, []uint64{0, 0, 0, 1}) {
		t.Fatalf("lies about old results: %v", got)
	}
}
