//go:build !unix

package cost

import "time"

// cpuTime reports the CPU time unknown: there is no getrusage here.
func cpuTime() (time.Duration, bool) { return 0, false }
