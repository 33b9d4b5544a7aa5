//go:build linux

package gateway

import (
	"os"
	"syscall"
)

// fileDescriptors returns the file descriptors the process has open and
// the most it may (its soft RLIMIT_NOFILE), which mntr reports.
func fileDescriptors() (open, most uint64, ok bool) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, 0, false
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, false
	}
	// ReadDir's own descriptor is among those listed.
	return uint64(len(ents) - 1), lim.Cur, true
}
