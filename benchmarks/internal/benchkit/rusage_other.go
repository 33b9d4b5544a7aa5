//go:build !unix

package benchkit

import "os"

// ExitedSwitches reports false: only Unix systems count a process's
// context switches in its resource usage.
func ExitedSwitches(ps *os.ProcessState) (int64, bool) {
	return 0, false
}
