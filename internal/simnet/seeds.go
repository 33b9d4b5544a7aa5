package simnet

import (
	"slices"
	"time"
)

// Seeds returns the seeds a family of simulations runs: only, if it is
// not zero (a replay of one seed), else the fixed seeds followed by fresh
// ones drawn from the clock, each passed to drawn so the caller can log
// how to replay it. A fresh seed has at most 12 digits, short enough to
// type.
func Seeds(fixed []uint64, only uint64, fresh int, drawn func(seed uint64)) []uint64 {
	if only != 0 {
		return []uint64{only}
	}
	seeds := slices.Clone(fixed)
	base := uint64(time.Now().UnixNano())
	for i := range fresh {
		s := (base+uint64(i)*0x9e3779b97f4a7c15)%1e12 + 1
		drawn(s)
		seeds = append(seeds, s)
	}
	return seeds
}
