package bft

import "github.com/rubin-go/rubin/bft/internal/quorum"

// ComputeNewView exposes the new-view rule of a cluster of n replicas to
// the external tests, which check it against simnet.Decide, a separate,
// naive writing of it.
func ComputeNewView(view uint64, vcs []ViewChange, n int) (minS uint64, pps []PrePrepare, ok bool) {
	minS, _, pps, ok = computeNewView(view, vcs, quorum.Quorum(n), quorum.Faults(n))
	return minS, pps, ok
}
