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
	// /proc/PID/status and schedstat are the main thread's only; the
	// process's are the sums over its threads.
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		return ProcCounters{}, err
	}
	var c ProcCounters
	_, err = os.Stat(dir + "/schedstat")
	schedstat := err == nil // else the kernel keeps none (CONFIG_SCHED_INFO)
	for _, t := range tasks {
		task := dir + "/task/" + t.Name()
		status, err := os.ReadFile(task + "/status")
		if gone(err) {
			continue // the thread exited since the listing
		}
		if err != nil {
			return ProcCounters{}, err
		}
		n, err := parseStatusSwitches(status)
		if err != nil {
			return ProcCounters{}, fmt.Errorf("%s/%w", task, err)
		}
		c.Switches += n
		if !schedstat {
			continue
		}
		line, err := os.ReadFile(task + "/schedstat")
		if gone(err) {
			continue
		}
		if err != nil {
			return ProcCounters{}, err
		}
		cpu, err := parseSchedstat(line)
		if err != nil {
			return ProcCounters{}, fmt.Errorf("%s/%w", task, err)
		}
		c.CPU += cpu
	}
	if schedstat {
		return c, nil
	}
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return ProcCounters{}, err
	}
	if c.CPU, err = parseStatCPU(stat, clockTick()); err != nil {
		return ProcCounters{}, fmt.Errorf("%s/%w", dir, err)
	}
	return c, nil
}

// gone reports whether err says that a thread's file is gone, as it is
// once the thread exits.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
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
