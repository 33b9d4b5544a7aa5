// Package cost measures what a stretch of a program's run costs its
// process: CPU time, calls from Go to C, and system calls. The echo
// command reports them per message, so that a transport's work per
// message shows beside its latency and throughput.
//
// Each figure covers the whole process, every thread of it, whatever it
// was doing; a figure a system cannot provide is reported as unknown,
// never estimated:
//
//   - CPU time is user plus system time from getrusage(RUSAGE_SELF), on
//     Unix systems.
//   - Context switches, voluntary (the thread waited) and involuntary
//     (the kernel, or a sched_yield, gave its CPU to another thread), come
//     from the same getrusage call. They show a Go program's threads
//     taking turns on a CPU: a goroutine that sleeps and wakes, or the
//     runtime handing a processor to another thread while a thread is
//     in a long call into C.
//   - Cgo calls are runtime.NumCgoCall's count, everywhere.
//   - System calls are counted by the kernel, on Linux only: a perf event
//     on the raw_syscalls:sys_enter tracepoint, one per thread of the
//     process, inherited by the threads each creates after it. It needs
//     tracefs mounted (or debugfs) and the right to open the event (root,
//     or a perf_event_paranoid of 1 or less); without them, system calls
//     are not counted. While a Meter counts system calls, every system
//     call on the machine takes the kernel's slower, traced path: a
//     measurement of latency had better not count them. The Soft-RoCE
//     machine of scripts/rdmavm.sh mounts no tracefs: its kernel (6.1,
//     under emulation) has locked up (a soft lockup of both CPUs) in a
//     test process that opened and closed Meters many times over, with
//     many threads; on 6.18 that has not been seen.
package cost

import (
	"errors"
	"runtime"
	"time"
)

// A Reading is what the process has spent so far. The difference of two
// readings of one Meter, Sub, is what the stretch between them cost.
type Reading struct {
	CPU      time.Duration // user and system CPU time; valid if HasCPU
	Cgo      int64         // calls from Go to C
	Syscalls uint64        // system calls since the Meter opened; valid if HasSyscalls
	Switches int64         // context switches of every thread; valid if HasCPU

	HasCPU      bool
	HasSyscalls bool
}

// Sub returns what r's process spent since start, an earlier reading of
// the same Meter. A figure is known only if both readings know it.
func (r Reading) Sub(start Reading) Reading {
	return Reading{
		CPU:         r.CPU - start.CPU,
		Cgo:         r.Cgo - start.Cgo,
		Syscalls:    r.Syscalls - start.Syscalls,
		Switches:    r.Switches - start.Switches,
		HasCPU:      r.HasCPU && start.HasCPU,
		HasSyscalls: r.HasSyscalls && start.HasSyscalls,
	}
}

// A Meter reads what the process spends. Read may be called from any
// number of goroutines at once, but not while Close runs.
type Meter struct {
	sys    *syscallCounter // nil when system calls are not counted
	sysErr error           // why they are not
}

// Config says what a Meter measures beyond CPU time and cgo calls.
type Config struct {
	// Syscalls asks to count the process's system calls, where the
	// system can (see the package documentation).
	Syscalls bool
}

// Open returns a Meter that reads the process's CPU time where the system
// has it and its cgo calls, and, if cfg asks, counts its system calls from
// now on. It does not fail: what it cannot measure, its readings mark
// unknown, and SyscallsErr says why for system calls.
func Open(cfg Config) *Meter {
	if !cfg.Syscalls {
		return &Meter{sysErr: errNotAsked}
	}
	sys, err := openSyscallCounter()
	return &Meter{sys: sys, sysErr: err}
}

// errNotAsked is SyscallsErr's answer when the Meter was not asked to count
// system calls.
var errNotAsked = errors.New("not asked to count system calls")

// SyscallsErr returns why m does not count system calls, or nil if it
// does.
func (m *Meter) SyscallsErr() error { return m.sysErr }

// Read returns what the process has spent so far. It makes a system call
// for the CPU time and one for each thread's system call counter; the
// counters count those too.
func (m *Meter) Read() Reading {
	var r Reading
	r.CPU, r.Switches, r.HasCPU = usage()
	r.Cgo = runtime.NumCgoCall()
	if m.sys != nil {
		r.Syscalls, r.HasSyscalls = m.sys.read()
	}
	return r
}

// Close stops counting system calls. Readings taken afterwards do not
// know them.
func (m *Meter) Close() error {
	if m.sys == nil {
		return nil
	}
	err := m.sys.close()
	m.sys, m.sysErr = nil, errClosed
	return err
}

var errClosed = errors.New("the meter is closed")
