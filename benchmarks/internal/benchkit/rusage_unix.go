//go:build unix

package benchkit

import (
	"os"
	"syscall"
)

// ExitedSwitches returns the context switches, voluntary and not, of an
// exited child process over its life, all its threads together, from the
// resource usage its parent collected; false if ps has none.
func ExitedSwitches(ps *os.ProcessState) (int64, bool) {
	if ps == nil {
		return 0, false
	}
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return 0, false
	}
	return int64(ru.Nvcsw) + int64(ru.Nivcsw), true
}
