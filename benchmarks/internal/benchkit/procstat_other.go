//go:build !linux

package benchkit

import (
	"errors"
	"fmt"
)

// ReadProcCounters fails: only Linux offers another process's counters
// in /proc.
func ReadProcCounters(pid int) (ProcCounters, error) {
	return ProcCounters{}, fmt.Errorf("process %d's counters: %w", pid, errors.ErrUnsupported)
}
