//go:build !linux

package selector

import "time"

// readCPUPressure reports no pressure information: spins are never cut
// short for it.
func readCPUPressure() (time.Duration, bool) { return 0, false }
