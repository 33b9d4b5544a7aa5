package node

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rubin-go/rubin/bft"
)

// TestDissent: replies that differ from the result are found whether they
// come before it, after it, or after it left the core but before it came
// out; read-only replies, replies to no request and repeats are not
// counted or kept.
func TestDissent(t *testing.T) {
	var d dissent
	reply := func(r bft.ReplicaID, ts uint64, res string) *bft.Reply {
		return &bft.Reply{Replica: r, Timestamp: ts, Result: []byte(res)}
	}
	late := fmt.Errorf("%w: late", bft.ErrStale)
	var got []bft.ReplicaID
	step := func(r *bft.Reply, err error, last uint64) {
		if liar, ok := d.reply(r.Replica, r, err, last); ok {
			got = append(got, liar)
		}
	}
	// Request 1: replica 3 lies before the result, twice (counted once).
	step(reply(3, 1, "lie"), nil, 1)
	step(reply(3, 1, "lie"), nil, 1)
	step(reply(0, 1, "ok"), nil, 1)
	step(reply(1, 1, "ok"), nil, 1)
	got = append(got, d.result(bft.Result{Timestamp: 1, Result: []byte("ok")})...)
	// Replica 2's matching reply and replica 3's lie come late.
	step(reply(2, 1, "ok"), late, 1)
	step(reply(3, 1, "lie again"), late, 1)
	if want := []bft.ReplicaID{3, 3}; !slices.Equal(got, want) {
		t.Fatalf("request 1: %v, want %v", got, want)
	}
	// Request 2: the core has the result when replica 3's lie comes, but
	// has not given it out.
	got = nil
	step(reply(0, 2, "ok2"), nil, 2)
	step(reply(1, 2, "ok2"), nil, 2)
	step(reply(3, 2, "lie"), late, 2)
	got = append(got, d.result(bft.Result{Timestamp: 2, Result: []byte("ok2")})...)
	if want := []bft.ReplicaID{3}; !slices.Equal(got, want) {
		t.Fatalf("request 2: %v, want %v", got, want)
	}
	// Read-only replies, and replies to requests never sent, are neither
	// counted nor kept.
	step(&bft.Reply{Replica: 3, Timestamp: 3, ReadOnly: true, Result: []byte("x")}, nil, 3)
	for ts := uint64(3); ts < 1000; ts++ {
		step(reply(3, ts, "future"), late, 2)
	}
	if len(got) != 1 || len(d.heard) != 0 {
		t.Fatalf("after read-only and unsent replies: %v counted, %d requests' replies kept", got, len(d.heard))
	}
	// Only the last dissentResults results are kept.
	for ts := uint64(3); ts < 3+2*dissentResults; ts++ {
		step(reply(0, ts, "r"), nil, ts)
		d.result(bft.Result{Timestamp: ts, Result: []byte("r")})
	}
	if len(d.done) != dissentResults || len(d.heard) != 0 {
		t.Fatalf("%d results and %d requests' replies kept", len(d.done), len(d.heard))
	}
}
