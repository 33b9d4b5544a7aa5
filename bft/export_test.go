package bft

// ComputeNewView exposes the new-view rule to the external tests, which
// check it against simnet.Decide, a separate, naive writing of it.
func ComputeNewView(view uint64, vcs []ViewChange, f int) (minS uint64, pps []PrePrepare, ok bool) {
	minS, _, pps, ok = computeNewView(view, vcs, f)
	return minS, pps, ok
}
