//go:build linux

package cost

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tracefsRoots are where tracefs may be mounted, in the order tried: its
// own mount point, and its place under debugfs.
var tracefsRoots = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// sysEnterID returns the id of the raw_syscalls:sys_enter tracepoint, the
// perf event's config.
func sysEnterID() (uint64, error) {
	var first error
	for _, root := range tracefsRoots {
		b, err := os.ReadFile(filepath.Join(root, "events/raw_syscalls/sys_enter/id"))
		if err != nil {
			first = cmp.Or(first, err)
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("the id of raw_syscalls:sys_enter under %s: %w", root, err)
		}
		return id, nil
	}
	return 0, fmt.Errorf("no tracefs with raw_syscalls:sys_enter under %s: %w", strings.Join(tracefsRoots, " or "), first)
}

// threads returns the ids of the process's threads, sorted.
func threads() ([]int, error) {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			return nil, fmt.Errorf("/proc/self/task/%s: not a thread id", e.Name())
		}
		tids = append(tids, tid)
	}
	slices.Sort(tids)
	return tids, nil
}

// A syscallCounter counts the system calls of every thread of the
// process: one perf event per thread that existed when it opened, each
// inherited by the threads that thread creates later, and by theirs. The
// kernel adds an event's inherited copies into what it reads, live
// threads' and exited ones'.
type syscallCounter struct {
	fds []int
}

// openAttempts bounds how often openSyscallCounter starts over because
// the process created a thread while it opened the events.
const openAttempts = 10

// openSyscallCounter opens a counter for every thread of the process.
// A thread created while the events open may have inherited one from its
// creator, or not, depending on which opened first: the set of threads
// must be the same before and after, or it starts over, so that every
// thread is counted exactly once.
func openSyscallCounter() (*syscallCounter, error) {
	id, err := sysEnterID()
	if err != nil {
		return nil, err
	}
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_TRACEPOINT,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config: id,
		Bits:   unix.PerfBitInherit,
	}
	for range openAttempts {
		before, err := threads()
		if err != nil {
			return nil, err
		}
		c := &syscallCounter{fds: make([]int, 0, len(before))}
		for _, tid := range before {
			fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
			if errors.Is(err, unix.ESRCH) {
				continue // the thread has exited
			}
			if err != nil {
				c.close()
				return nil, fmt.Errorf("perf_event_open(raw_syscalls:sys_enter) on thread %d: %w", tid, err)
			}
			c.fds = append(c.fds, fd)
		}
		after, err := threads()
		if err != nil {
			c.close()
			return nil, err
		}
		if !slices.ContainsFunc(after, func(tid int) bool { _, found := slices.BinarySearch(before, tid); return !found }) {
			return c, nil
		}
		c.close()
	}
	return nil, fmt.Errorf("the process kept creating threads while its system call counters opened (%d attempts)", openAttempts)
}

// read returns the system calls counted, over every thread.
func (c *syscallCounter) read() (uint64, bool) {
	var total uint64
	var buf [8]byte
	for _, fd := range c.fds {
		n, err := unix.Read(fd, buf[:])
		if err != nil || n != len(buf) {
			return 0, false
		}
		total += binary.NativeEndian.Uint64(buf[:])
	}
	return total, true
}

// close closes the events, and with them their inherited copies.
func (c *syscallCounter) close() error {
	var errs []error
	for _, fd := range c.fds {
		errs = append(errs, unix.Close(fd))
	}
	c.fds = nil
	return errors.Join(errs...)
}
