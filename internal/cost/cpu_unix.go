//go:build unix

package cost

import (
	"time"

	"golang.org/x/sys/unix"
)

// cpuTime returns the process's user and system CPU time.
func cpuTime() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
