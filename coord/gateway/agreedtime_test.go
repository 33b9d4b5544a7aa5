package gateway_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// swingingClock is a lying primary's clock: every period it runs from
// swing behind the real time to swing ahead of it within ramp, then
// falls back to swing behind. Backups accept every time it proposes
// (bft.Config.MaxClockSkew is 2s); the agreed time, which never goes
// back, stands still after each fall until the clock catches up with
// it.
func swingingClock(start time.Time, swing, ramp, period time.Duration) func() time.Time {
	return func() time.Time {
		now := time.Now()
		off := -swing
		if phase := now.Sub(start) % period; phase < ramp {
			off += time.Duration(int64(2*swing) * int64(phase) / int64(ramp))
		}
		return now.Add(off)
	}
}

// TestLyingPrimaryCannotExpireAnIdleSession runs the primary, replica 0,
// with a clock that swings 1.9s either side of the real time: it holds
// the agreed time back while a session renews, then pushes it ahead, in
// steps of under a second while another client keeps the service busy,
// so that no gap between two ops looks like an outage. A 4s session
// that only its gateway's renewals keep alive stays open for 30s, and
// its ephemeral node with it.
func TestLyingPrimaryCannotExpireAnIdleSession(t *testing.T) {
	const swing = 1900 * time.Millisecond
	tc := newClusterOver(t, "tcp", "127.0.0.1", nil, nil, func(tc *testCluster) {
		tc.clocks = []func() time.Time{swingingClock(time.Now(), swing, 500*time.Millisecond, 6500*time.Millisecond)}
	})
	busy := tc.connect(30 * time.Second)
	must(busy.Create("/busy", nil, 0, open))

	victim := tc.trackSession([]string{tc.addr}, 4*time.Second)
	id := victim.id
	must(victim.Create("/victim", nil, zk.FlagEphemeral, open))

	// The other client writes every 50ms and watches the agreed time
	// at a correct replica run ahead of and behind the real time.
	var ahead, behind time.Duration
	stop := time.After(30 * time.Second)
	for loop := true; loop; {
		select {
		case <-stop:
			loop = false
		case <-time.After(50 * time.Millisecond):
			must(busy.Set("/busy", []byte("x"), -1))
			if at := tc.reps[1].Status().Time; !at.IsZero() {
				d := time.Until(at)
				ahead, behind = max(ahead, d), min(behind, d)
			}
		}
		if victim.expired.Load() {
			break
		}
	}
	if victim.expired.Load() {
		t.Fatalf("session %#x expired with the primary's clock swinging %v either side (agreed time seen %v ahead, %v behind)", id, swing, ahead, -behind)
	}
	if victim.SessionID() != id {
		t.Fatalf("session %#x, was %#x", victim.SessionID(), id)
	}
	if ok, st := must2(busy.Exists("/victim")); !ok || st.EphemeralOwner != id {
		t.Fatalf("the idle session's ephemeral node: %v %+v", ok, st)
	}
	if s := tc.reps[1].Status(); s.View != 0 {
		t.Fatalf("view %d: the lying primary was replaced, so it did not lie for 30s", s.View)
	}
	if ahead < swing*3/4 || -behind < swing*3/4 {
		t.Fatalf("agreed time seen at most %v ahead and %v behind: the primary's clock did not swing it", ahead, -behind)
	}
}
