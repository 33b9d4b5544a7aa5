package benchkit

import (
	"fmt"
	"strconv"
	"strings"
)

// An OpsSample is what one closed-loop run of operations reported in its
// summary line (bft bench, coordbench load).
type OpsSample struct {
	Rate     float64 // operations per second
	P50, P99 float64 // latency, in microseconds
	Line     string  // the summary line itself
	// What the runner measured around the run, where it could: context
	// switches and server CPU time, in microseconds, per operation.
	Switches, CPUUS Cost
}

// ParseOps parses a summary line whose key=value fields include
// ops_per_s, p50_us and p99_us; other fields are kept only in Line.
func ParseOps(line string) (OpsSample, error) {
	s := OpsSample{Line: line}
	fields := make(map[string]string)
	for _, f := range strings.Fields(line) {
		if k, v, ok := strings.Cut(f, "="); ok {
			fields[k] = v
		}
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"ops_per_s", &s.Rate}, {"p50_us", &s.P50}, {"p99_us", &s.P99}} {
		v, err := strconv.ParseFloat(fields[f.key], 64)
		if err != nil {
			return OpsSample{}, fmt.Errorf("summary line %q: %s: %w", line, f.key, err)
		}
		*f.dst = v
	}
	return s, nil
}

// LastLine returns the last line of s, without surrounding space.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Runs holds a benchmark's runs by the point they measured (K), and the
// errors of the runs that failed.
type Runs[K comparable] struct {
	Samples map[K][]OpsSample
	Errs    map[K][]error
}

// NewRuns returns an empty Runs.
func NewRuns[K comparable]() Runs[K] {
	return Runs[K]{Samples: make(map[K][]OpsSample), Errs: make(map[K][]error)}
}

// Add records one run at k: its sample, or its error.
func (r Runs[K]) Add(k K, s OpsSample, err error) {
	if err != nil {
		r.Errs[k] = append(r.Errs[k], err)
		return
	}
	r.Samples[k] = append(r.Samples[k], s)
}

// Failures returns how many runs failed.
func (r Runs[K]) Failures() int {
	n := 0
	for _, errs := range r.Errs {
		n += len(errs)
	}
	return n
}

// Medians returns the medians of k's runs, each figure on its own, and
// whether k has any. A cost is known only if every run knew it.
func (r Runs[K]) Medians(k K) (OpsSample, bool) {
	runs := r.Samples[k]
	if len(runs) == 0 {
		return OpsSample{}, false
	}
	pick := func(f func(OpsSample) float64) float64 {
		xs := make([]float64, len(runs))
		for i, s := range runs {
			xs[i] = f(s)
		}
		return Median(xs)
	}
	pickCost := func(f func(OpsSample) Cost) Cost {
		xs := make([]float64, len(runs))
		for i, s := range runs {
			c := f(s)
			if !c.Known {
				return Cost{}
			}
			xs[i] = c.Value
		}
		return Cost{Value: Median(xs), Known: true}
	}
	return OpsSample{
		Rate:     pick(func(s OpsSample) float64 { return s.Rate }),
		P50:      pick(func(s OpsSample) float64 { return s.P50 }),
		P99:      pick(func(s OpsSample) float64 { return s.P99 }),
		Switches: pickCost(func(s OpsSample) Cost { return s.Switches }),
		CPUUS:    pickCost(func(s OpsSample) Cost { return s.CPUUS }),
	}, true
}
