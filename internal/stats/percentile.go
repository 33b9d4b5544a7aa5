// Package stats holds the order statistics rubin's measuring commands
// report.
package stats

import (
	"math"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted, which must
// be in ascending order, by the nearest-rank method: the smallest value that
// at least p percent of the values are less than or equal to. It returns 0
// for an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	// The rank is ceil(p/100 * n). The small subtraction keeps a product
	// that floating point leaves a hair above a whole number, such as
	// 99.9/100 * 1000 = 999.0000000000001, from rounding up to the next rank;
	// for percentiles given to three decimals the true fractional part is
	// either 0 or at least 1e-5, so it changes no other rank.
	rank := int(math.Ceil(p/100*float64(n) - 1e-6))
	rank = max(rank, 1)
	rank = min(rank, n)
	return sorted[rank-1]
}
