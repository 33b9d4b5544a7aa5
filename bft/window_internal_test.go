package bft

import "testing"

// TestReplyCacheKeepsTheWindow: the cache holds a client's last
// ClientWindow replies, oldest dropped first, however many came, and
// never more than the window in its slice.
func TestReplyCacheKeepsTheWindow(t *testing.T) {
	const window = 16
	r := &Replica{cfg: Config{ClientWindow: window}, replies: make(map[ClientID][]*Reply)}
	for ts := uint64(1); ts <= 40; ts++ {
		r.cacheReply(&Reply{Client: 7, Timestamp: ts})
		r.cacheReply(&Reply{Client: 8, Timestamp: 100 + ts})
		rs := r.replies[7]
		if want := min(ts, window); uint64(len(rs)) != want || rs[0].Timestamp != ts+1-want {
			t.Fatalf("after reply %d the cache holds %d replies from %d, want %d from %d", ts, len(rs), rs[0].Timestamp, want, ts+1-want)
		}
	}
	for ts := uint64(1); ts <= 40; ts++ {
		got := r.cachedReply(7, ts)
		switch {
		case ts <= 40-window && got != nil:
			t.Errorf("reply %d is cached beyond the window of %d", ts, window)
		case ts > 40-window && (got == nil || got.Timestamp != ts):
			t.Errorf("reply %d of the window is not cached (got %v)", ts, got)
		}
	}
	if got := r.lastTS(7); got != 40 {
		t.Errorf("last timestamp %d, want 40", got)
	}
	if got := r.lastTS(8); got != 140 {
		t.Errorf("other client's last timestamp %d, want 140", got)
	}
	if rs := r.replies[7]; len(rs) != window || cap(rs) > 2*window {
		t.Errorf("cache slice of length %d and capacity %d for a window of %d", len(rs), cap(rs), window)
	}
}
