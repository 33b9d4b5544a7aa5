package block

import (
	"bytes"
	"testing"
	"time"
)

func env(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sizes(batches [][][]byte) [][]int {
	var out [][]int
	for _, b := range batches {
		var s []int
		for _, e := range b {
			s = append(s, len(e))
		}
		out = append(out, s)
	}
	return out
}

func equal(a, b [][]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return false
		}
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

func TestCutterRules(t *testing.T) {
	cfg := Config{MaxMessageCount: 3, AbsoluteMaxBytes: 100, PreferredMaxBytes: 50, BatchTimeout: time.Second}
	for _, c := range []struct {
		name string
		in   []int
		want [][]int // the batches cut, in order
		left int     // envelopes left pending
	}{
		{"count", []int{1, 2, 3, 4}, [][]int{{1, 2, 3}}, 1},
		{"preferred: cut before", []int{20, 20, 20}, [][]int{{20, 20}}, 1},
		{"preferred: exactly full", []int{25, 25, 1}, [][]int{{25, 25}}, 1},
		{"larger than preferred alone", []int{10, 60, 10}, [][]int{{10}, {60}}, 1},
		{"larger than preferred first", []int{60}, [][]int{{60}}, 0},
	} {
		ct := NewCutter(cfg)
		var got [][][]byte
		for i, n := range c.in {
			out, err := ct.Ordered(env(n, byte(i)), t0)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out...)
		}
		if !equal(sizes(got), c.want) || len(ct.Pending()) != c.left {
			t.Errorf("%s: cut %v with %d pending, want %v with %d", c.name, sizes(got), len(ct.Pending()), c.want, c.left)
		}
	}
	ct := NewCutter(cfg)
	if _, err := ct.Ordered(env(101, 0), t0); err == nil || len(ct.Pending()) != 0 {
		t.Fatal("an envelope above AbsoluteMaxBytes was taken")
	}
}

func TestCutterTimeout(t *testing.T) {
	ct := NewCutter(Config{BatchTimeout: time.Second})
	if ct.Due(t0.Add(time.Hour)) {
		t.Fatal("due with nothing pending")
	}
	ct.Ordered(env(1, 0), t0)
	ct.Ordered(env(1, 1), t0.Add(900*time.Millisecond))
	if !ct.Since().Equal(t0) {
		t.Fatalf("Since = %v, want the first envelope's time", ct.Since())
	}
	if ct.Due(t0.Add(999 * time.Millisecond)) {
		t.Fatal("due before BatchTimeout")
	}
	if !ct.Due(t0.Add(time.Second)) {
		t.Fatal("not due at BatchTimeout")
	}
	if b := ct.Cut(); len(b) != 2 || ct.Due(t0.Add(time.Hour)) || !ct.Since().IsZero() {
		t.Fatalf("Cut gave %d envelopes and left due=%v", len(b), ct.Due(t0.Add(time.Hour)))
	}
}

// TestCutterDeterministic: two cutters restored from the same state and
// fed the same envelopes cut the same batches.
func TestCutterDeterministic(t *testing.T) {
	cfg := Config{MaxMessageCount: 7, AbsoluteMaxBytes: 300, PreferredMaxBytes: 200}
	a := NewCutter(cfg)
	var fromA [][][]byte
	for i := range 40 {
		out, _ := a.Ordered(env((i*37)%250, byte(i)), t0)
		fromA = append(fromA, out...)
		if i == 19 {
			b := NewCutter(cfg)
			if err := b.Restore(a.Pending(), a.Since()); err != nil {
				t.Fatal(err)
			}
			var fromB [][][]byte
			for j := 20; j < 40; j++ {
				out, _ := b.Ordered(env((j*37)%250, byte(j)), t0)
				fromB = append(fromB, out...)
			}
			defer func() {
				if !equal(sizes(fromA[len(fromA)-len(fromB):]), sizes(fromB)) || len(a.Pending()) != len(b.Pending()) {
					t.Errorf("a restored cutter cut %v, the original %v", sizes(fromB), sizes(fromA))
				}
			}()
		}
	}
	if err := NewCutter(cfg).Restore([][]byte{env(201, 0)}, t0); err == nil {
		t.Fatal("Restore took an envelope that would have been cut")
	}
}
