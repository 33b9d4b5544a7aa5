// Package quorum holds the quorum arithmetic of the BFT core, apart so a
// property test can pin it against a brute-force definition.
package quorum

// Faults is f, the number of Byzantine replicas n replicas tolerate:
// the largest f with 3f+1 <= n.
func Faults(n int) int {
	if n < 1 {
		return 0
	}
	return (n - 1) / 3
}

// Quorum is the smallest q such that any two sets of q replicas out of n
// share at least f+1 replicas, so at least one correct one: 2f+1 when
// n = 3f+1. Prepared and committed certificates and stable checkpoints
// need a quorum.
func Quorum(n int) int {
	f := Faults(n)
	// 2q - n >= f+1  <=>  q >= (n+f+1)/2, rounded up.
	return (n + f + 2) / 2
}

// Weak is f+1: enough replicas that at least one is correct. A client
// accepts a result on f+1 matching replies; a replica joins a higher view
// when f+1 replicas ask for one.
func Weak(n int) int { return Faults(n) + 1 }
