//go:build linux || darwin || freebsd

package cost

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the calling thread's CPU time.
func threadCPU(t *testing.T) time.Duration {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// TestCPUTime spends a known CPU time on one thread, by that thread's own
// clock, and checks the process's CPU time against it: at least that much,
// and no more than every CPU could have spent meanwhile.
func TestCPUTime(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const spend = 50 * time.Millisecond
	// The kernel brings a running thread's CPU time up to date at least
	// every scheduler tick.
	const tick = 10 * time.Millisecond
	m := Open(Config{})
	defer m.Close()
	began := time.Now()
	start := m.Read()
	if !start.HasCPU {
		t.Fatal("no CPU time on a Unix system")
	}
	for t0 := threadCPU(t); threadCPU(t)-t0 < spend; {
	}
	d := m.Read().Sub(start)
	wall := time.Since(began)
	if !d.HasCPU {
		t.Fatal("no CPU time on a Unix system")
	}
	if limit := time.Duration(runtime.NumCPU())*wall + tick; d.CPU < spend-tick || d.CPU > limit {
		t.Errorf("%v of process CPU time for %v spent on one thread in %v of wall time", d.CPU, spend, wall)
	}
}

// TestContextSwitches puts a thread to sleep a known number of times and
// checks that the process counted at least that many context switches:
// each sleep of a locked thread blocks it in the kernel.
func TestContextSwitches(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const sleeps = 20
	m := Open(Config{})
	defer m.Close()
	start := m.Read()
	for range sleeps {
		time.Sleep(time.Millisecond)
	}
	d := m.Read().Sub(start)
	if !d.HasCPU {
		t.Fatal("no context switches on a Unix system")
	}
	if d.Switches < sleeps {
		t.Errorf("%d context switches counted over %d sleeps", d.Switches, sleeps)
	}
}
