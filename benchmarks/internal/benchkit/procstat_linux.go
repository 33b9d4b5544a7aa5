package benchkit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ReadProcCounters reads the counters of process pid from /proc.
func ReadProcCounters(pid int) (ProcCounters, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return ProcCounters{}, err
	}
	cpu, err := parseStatCPU(stat, clockTick())
	if err != nil {
		return ProcCounters{}, fmt.Errorf("%s/%w", dir, err)
	}
	// /proc/PID/status counts the switches of the main thread only; the
	// process's are the sum over its threads.
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		return ProcCounters{}, err
	}
	c := ProcCounters{CPU: cpu}
	for _, t := range tasks {
		status, err := os.ReadFile(dir + "/task/" + t.Name() + "/status")
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // the thread exited since the listing
		}
		if err != nil {
			return ProcCounters{}, err
		}
		n, err := parseStatusSwitches(status)
		if err != nil {
			return ProcCounters{}, fmt.Errorf("%s/task/%s/%w", dir, t.Name(), err)
		}
		c.Switches += n
	}
	return c, nil
}

// atClkTck is AT_CLKTCK of <elf.h>: the auxiliary vector's entry for the
// ticks per second in which /proc states CPU time.
const atClkTck = 17

// clockTick returns the length of the clock tick of /proc/PID/stat, from
// this process's auxiliary vector: the kernel gives every process the
// same. Without one, it assumes the 100 ticks per second Linux has on
// every architecture Go supports.
var clockTick = sync.OnceValue(func() time.Duration {
	if auxv, err := unix.Auxv(); err == nil {
		for _, kv := range auxv {
			if kv[0] == atClkTck && kv[1] > 0 {
				return time.Second / time.Duration(kv[1])
			}
		}
	}
	return time.Second / 100
})
