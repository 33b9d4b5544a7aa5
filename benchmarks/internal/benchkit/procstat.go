package benchkit

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// ProcCounters are what the kernel has counted for a process so far: the
// costs a runner reads of a server before and after a run, and subtracts.
type ProcCounters struct {
	// Switches counts the context switches, voluntary and not, of the
	// process's live threads. A thread that exits takes its count with
	// it: Linux reports per thread only (/proc/PID/task/TID/status).
	Switches int64
	// CPU is the CPU time of the process's live threads, to the
	// nanosecond (/proc/PID/task/TID/schedstat). Where the kernel keeps
	// no schedstat it is the user and system time of all the threads,
	// exited ones too, in whole clock ticks (/proc/PID/stat): a tick is
	// 10 ms, as much as a short run of a server takes in all.
	CPU time.Duration
}

// Sub returns c minus old: what the process spent in between.
func (c ProcCounters) Sub(old ProcCounters) ProcCounters {
	return ProcCounters{Switches: c.Switches - old.Switches, CPU: c.CPU - old.CPU}
}

// parseStatCPU returns the user and system time in a /proc/PID/stat line,
// fields 14 and 15 (proc(5)), in ticks of tick each. The second field,
// the command name in parentheses, may hold spaces and parentheses of its
// own, so the fields are counted from the last ')'.
func parseStatCPU(stat []byte, tick time.Duration) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no command name", stat)
	}
	// After the name: state (field 3), ..., utime (14), stime (15).
	fields := bytes.Fields(stat[i+1:])
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("stat %q: %d fields after the command name, want at least %d", stat, len(fields), stime+1)
	}
	var ticks int64
	for _, f := range fields[utime : stime+1] {
		n, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("stat %q: %q is not a count of clock ticks", stat, f)
		}
		ticks += n
	}
	return time.Duration(ticks) * tick, nil
}

// parseSchedstat returns the time on a CPU in a /proc/PID/task/TID/schedstat
// line, its first field, in nanoseconds.
func parseSchedstat(schedstat []byte) (time.Duration, error) {
	fields := bytes.Fields(schedstat)
	if len(fields) == 0 {
		return 0, fmt.Errorf("schedstat is empty")
	}
	ns, err := strconv.ParseInt(string(fields[0]), 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("schedstat %q: %q is not a count of nanoseconds", schedstat, fields[0])
	}
	return time.Duration(ns), nil
}

// parseStatusSwitches returns the sum of voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches in a /proc/PID/task/TID/status file.
func parseStatusSwitches(status []byte) (int64, error) {
	var sum int64
	found := 0
	for line := range bytes.Lines(status) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		if k := string(k); k != "voluntary_ctxt_switches" && k != "nonvoluntary_ctxt_switches" {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("status: %s: %q is not a count", k, bytes.TrimSpace(v))
		}
		sum += n
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("status has %d of voluntary_ctxt_switches and nonvoluntary_ctxt_switches, want both", found)
	}
	return sum, nil
}
