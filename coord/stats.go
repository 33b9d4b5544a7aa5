package coord

import (
	"github.com/rubin-go/rubin/coord/proto"
	"github.com/rubin-go/rubin/coord/tree"
)

// StatsOp is the op that asks for the tree's counts (tree.Stats) and its
// last zxid, which a gateway reports in ZooKeeper's four-letter words. It
// changes nothing: a gateway sends it read-only, and the replicas answer
// it alike ordered or not, so that the answer is what 2f+1 (or, ordered,
// f+1) replicas agree on, never one replica's word.
func StatsOp(gateway int64) []byte {
	e := proto.NewEncoder(make([]byte, 0, 12))
	e.Int32(kindStats)
	e.Int64(gateway)
	return e.Bytes()
}

// StatsResult is the answer to a StatsOp.
type StatsResult struct {
	Zxid int64 // the tree's last zxid
	tree.Stats
}

// ParseStatsResult decodes the result of a StatsOp.
func ParseStatsResult(b []byte) (StatsResult, error) {
	d := proto.NewDecoder(b)
	r := StatsResult{Zxid: d.Int64()}
	for _, p := range r.fields() {
		*p = d.Int64()
	}
	return r, finish(d, "stats")
}

func (r *StatsResult) fields() []*int64 {
	s := &r.Stats
	return []*int64{&s.Nodes, &s.Sessions, &s.Watches, &s.WatchedPaths, &s.WatchingSessions, &s.Ephemerals, &s.DataSize}
}

func (a *App) stats() []byte {
	r := StatsResult{Zxid: a.tree.LastZxid(), Stats: a.tree.Stats()}
	e := proto.NewEncoder(make([]byte, 0, 64))
	e.Int64(r.Zxid)
	for _, p := range r.fields() {
		e.Int64(*p)
	}
	return e.Bytes()
}
