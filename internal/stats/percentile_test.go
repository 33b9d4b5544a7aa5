package stats

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// naivePercentile is the nearest-rank percentile straight from its
// definition: the smallest value v of the sample such that at least p
// percent of the values are <= v. Counting p percent as 1000*count >= 10*p*n
// in integers, with p in tenths of a percent, keeps it free of rounding.
func naivePercentile(values []time.Duration, tenths int) time.Duration {
	best, found := time.Duration(0), false
	for _, v := range values {
		atOrBelow := 0
		for _, w := range values {
			if w <= v {
				atOrBelow++
			}
		}
		if 1000*atOrBelow >= tenths*len(values) && (!found || v < best) {
			best, found = v, true
		}
	}
	return best
}

func TestPercentileMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tenthsToTry := []int{1, 10, 250, 500, 900, 990, 999, 1000}
	for trial := range 300 {
		n := 1 + rng.IntN(400)
		if trial%5 == 0 {
			n = 1 + rng.IntN(10)
		}
		values := make([]time.Duration, n)
		spread := 1 + rng.Int64N(500) // small spreads make many ties
		for i := range values {
			values[i] = time.Duration(rng.Int64N(spread))
		}
		sorted := slices.Clone(values)
		slices.Sort(sorted)
		for _, tenths := range tenthsToTry {
			got := Percentile(sorted, float64(tenths)/10)
			want := naivePercentile(values, tenths)
			if got != want {
				t.Fatalf("n=%d p=%.1f: percentile = %v, naive = %v", n, float64(tenths)/10, got, want)
			}
		}
	}
}

func TestPercentileEdges(t *testing.T) {
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil, 50) = %v, want 0", got)
	}
	sorted := make([]time.Duration, 1000)
	for i := range sorted {
		sorted[i] = time.Duration(i + 1)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{
		{50, 500},
		{99, 990},
		{99.9, 999},
		{100, 1000},
		{0.01, 1},
	} {
		if got := Percentile(sorted, c.p); got != c.want {
			t.Errorf("Percentile(1..1000, %v) = %v, want %v", c.p, got, c.want)
		}
	}
}
