package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/trace"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/internal/cost"
	"github.com/rubin-go/rubin/internal/stats"
)

// A recorder hands out the sequence numbers of a client's messages and
// keeps the round-trip times of the measured ones.
//
// Sequence numbers 0 to warmup-1 are warmup messages, whose times are
// dropped; the next n are measured. The measured phase runs from the moment
// the first measured sequence number is handed out to the moment the last
// measured message is recorded.
//
// With a meter, it also reads what the process spends as the measured
// phase begins and as it ends.
//
// Next and Record may be called from any number of goroutines at once. The
// times live in a slice allocated up front, one slot per measured message,
// each written by the one goroutine that recorded it; result reads them and
// must be called only after every Record call has returned.
type recorder struct {
	warmup uint64
	total  uint64 // warmup + n
	base   time.Time
	times  []time.Duration // indexed by seq - warmup
	meter  *cost.Meter     // nil: no costs
	// sent, if not nil, holds each measured message's send time, as time
	// since base, indexed like times (keepSent).
	sent []time.Duration
	// fastest is the shortest round trip recorded so far, while an
	// execution trace is being taken (traceSlow).
	fastest atomic.Int64

	// The meter's readings as the measured phase begins and as it ends,
	// each written by the one goroutine that begins or ends it; the last
	// Record comes after Next began the phase, so result reads both.
	costStart, costEnd cost.Reading

	next     atomic.Uint64 // the next sequence number to hand out
	recorded atomic.Uint64 // messages recorded, warmup included
	measured atomic.Uint64 // measured messages recorded
	start    atomic.Int64  // when the measured phase began, as time since base
	end      atomic.Int64  // when it ended, as time since base
}

// newRecorder returns a recorder for warmup unmeasured messages followed by
// n measured ones, which reads meter, if not nil, around the measured ones.
func newRecorder(n, warmup int, meter *cost.Meter) *recorder {
	return &recorder{
		warmup: uint64(warmup),
		total:  uint64(warmup) + uint64(n),
		base:   time.Now(),
		times:  make([]time.Duration, n),
		meter:  meter,
	}
}

// Next returns the sequence number of the next message to send. It reports
// false once all messages have been handed out.
func (r *recorder) Next() (seq uint64, ok bool) {
	seq = r.next.Add(1) - 1
	if seq >= r.total {
		return 0, false
	}
	if seq == r.warmup {
		if r.meter != nil {
			r.costStart = r.meter.Read()
		}
		r.start.Store(int64(time.Since(r.base)))
	}
	return seq, true
}

// Record stores the round-trip time of message seq, which Next handed out
// and which has been echoed correctly. Each message must be recorded once.
func (r *recorder) Record(seq uint64, rtt time.Duration) {
	if seq >= r.total {
		panic(fmt.Sprintf("echo: Record(%d) of a sequence number never handed out", seq))
	}
	if trace.IsEnabled() {
		r.traceSlow(seq, rtt)
	}
	if seq >= r.warmup {
		r.times[seq-r.warmup] = rtt
		if r.sent != nil {
			r.sent[seq-r.warmup] = time.Since(r.base) - rtt
		}
		if r.measured.Add(1) == uint64(len(r.times)) {
			r.end.Store(int64(time.Since(r.base)))
			if r.meter != nil {
				r.costEnd = r.meter.Read()
			}
		}
	}
	r.recorded.Add(1)
}

// keepSent has the recorder keep each measured message's send time, for
// writeTimes. It must be called before the first Record.
func (r *recorder) keepSent() {
	r.sent = make([]time.Duration, len(r.times))
}

// writeTimes writes one line per measured message, in the order they were
// handed out: its sequence number, when it was sent (microseconds since
// the recorder was made) and its round-trip time (microseconds). It needs
// keepSent, and must be called after every Record call has returned and
// before result, which sorts the times.
func (r *recorder) writeTimes(w io.Writer) error {
	if r.sent == nil {
		return errors.New("echo: writeTimes without keepSent")
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "seq sent_us rtt_us")
	for i, rtt := range r.times {
		fmt.Fprintf(bw, "%d %.1f %.1f\n", r.warmup+uint64(i), micros(r.sent[i]), micros(rtt))
	}
	return bw.Flush()
}

// slowFactor is how many times the fastest round trip so far a round trip
// must take to be logged in an execution trace.
const slowFactor = 4

// traceSlow logs message seq in the execution trace being taken if its
// round trip took at least slowFactor times the fastest one so far, so
// that a trace viewer finds the slow round trips: the log's time is the
// end of the round trip, and it says how long it took.
func (r *recorder) traceSlow(seq uint64, rtt time.Duration) {
	fastest := r.fastest.Load()
	for (fastest == 0 || int64(rtt) < fastest) && !r.fastest.CompareAndSwap(fastest, int64(rtt)) {
		fastest = r.fastest.Load()
	}
	if fastest > 0 && int64(rtt) >= slowFactor*fastest {
		trace.Log(context.Background(), "echo slow round trip",
			fmt.Sprintf("seq=%d rtt_us=%.1f fastest_us=%.1f", seq, micros(rtt), micros(time.Duration(fastest))))
	}
}

// A result summarizes the measured phase of a client run.
type result struct {
	msgs           int           // measured messages
	p50, p99, p999 time.Duration // round-trip time percentiles
	wall           time.Duration // duration of the measured phase
	metered        bool          // cost is known: the recorder had a meter
	cost           cost.Reading  // what the process spent in the measured phase
}

// msgsPerSecond returns the measured messages per second of wall time.
func (r result) msgsPerSecond() float64 {
	if r.wall <= 0 {
		return 0
	}
	return float64(r.msgs) / r.wall.Seconds()
}

// result sorts the recorded times and summarizes them. It fails if some
// measured message was not recorded.
func (r *recorder) result() (result, error) {
	if got := r.measured.Load(); got != uint64(len(r.times)) {
		return result{}, fmt.Errorf("client recorded %d of %d measured messages", got, len(r.times))
	}
	slices.Sort(r.times)
	return result{
		msgs:    len(r.times),
		p50:     stats.Percentile(r.times, 50),
		p99:     stats.Percentile(r.times, 99),
		p999:    stats.Percentile(r.times, 99.9),
		wall:    time.Duration(r.end.Load() - r.start.Load()),
		metered: r.meter != nil,
		cost:    r.costEnd.Sub(r.costStart),
	}, nil
}

// reportProgress writes a progress line to w every interval, from quiet
// onwards, until ctx is done: the messages recorded so far, warmup included,
// and the rate since the previous line.
func (r *recorder) reportProgress(ctx context.Context, w io.Writer, interval, quiet time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	began := time.Now()
	last, lastAt := uint64(0), began
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			done := r.recorded.Load()
			rate := float64(done-last) / now.Sub(lastAt).Seconds()
			last, lastAt = done, now
			if now.Sub(began) < quiet {
				continue
			}
			fmt.Fprintf(w, "progress: %d/%d msgs (%.0f%%), %.0f msgs/s\n",
				done, r.total, 100*float64(done)/float64(r.total), rate)
		}
	}
}

// awaitStall waits until no message has been recorded for timeout, and
// then reports true, or until ctx is done, and then reports false. It
// looks at the count a few times per timeout, so it notices a stall
// within a quarter of timeout after it begins, and costs the messages
// nothing.
func (r *recorder) awaitStall(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTicker(max(timeout/4, time.Millisecond))
	defer t.Stop()
	last, lastAt := r.recorded.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return false
		case now := <-t.C:
			if done := r.recorded.Load(); done != last {
				last, lastAt = done, now
			} else if now.Sub(lastAt) >= timeout {
				return true
			}
		}
	}
}
