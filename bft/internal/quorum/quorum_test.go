package quorum

import "testing"

// naive finds f and the quorum by search, from the definitions alone.
func naive(n int) (f, q int) {
	for 3*(f+1)+1 <= n {
		f++
	}
	for q = 1; q <= n; q++ {
		// The worst-case overlap of two q-sets among n replicas.
		overlap := 2*q - n
		if overlap >= f+1 {
			return f, q
		}
	}
	return f, -1
}

func TestAgainstNaive(t *testing.T) {
	for n := 1; n <= 400; n++ {
		f, q := naive(n)
		if Faults(n) != f || Quorum(n) != q || Weak(n) != f+1 {
			t.Fatalf("n=%d: Faults=%d Quorum=%d Weak=%d, want %d %d %d", n, Faults(n), Quorum(n), Weak(n), f, q, f+1)
		}
		// A quorum must be reachable with f replicas silent (liveness).
		if n >= 4 && q > n-f {
			t.Fatalf("n=%d: quorum %d needs more than the %d correct replicas", n, q, n-f)
		}
	}
	for f := 1; f <= 50; f++ {
		if Quorum(3*f+1) != 2*f+1 {
			t.Fatalf("f=%d: quorum of 3f+1 is %d, want 2f+1", f, Quorum(3*f+1))
		}
	}
}
