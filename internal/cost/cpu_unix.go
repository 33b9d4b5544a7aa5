//go:build unix

package cost

import (
	"time"

	"golang.org/x/sys/unix"
)

// usage returns the process's user and system CPU time and its context
// switches, voluntary and involuntary.
func usage() (cpu time.Duration, switches int64, ok bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), int64(ru.Nvcsw + ru.Nivcsw), true
}
