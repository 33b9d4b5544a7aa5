package benchkit

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// procOrSkip skips a test where this process has no /proc to read.
func procOrSkip(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
}

// TestReadProcCountersThreads reads this process's own /proc: the
// switches of a thread other than the main one must count.
func TestReadProcCountersThreads(t *testing.T) {
	procOrSkip(t)
	pid := os.Getpid()
	before, err := ReadProcCounters(pid)
	if err != nil {
		t.Fatal(err)
	}
	// A thread of its own that sleeps switches out voluntarily each time.
	const sleeps = 20
	slept, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range sleeps {
			time.Sleep(time.Millisecond)
		}
		close(slept)
		<-release // keep the thread, and its count, until the reading
	}()
	<-slept
	// The main thread's own count (/proc/PID/status), read first, is
	// less than the sum over the threads read after it.
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	main, err := parseStatusSwitches(status)
	if err != nil {
		t.Fatal(err)
	}
	after, err := ReadProcCounters(pid)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before).Switches; d < sleeps {
		t.Errorf("%d context switches across %d sleeps of a thread, want at least as many", d, sleeps)
	}
	if main >= after.Switches {
		t.Errorf("the main thread's %d switches are not fewer than all threads' %d", main, after.Switches)
	}
}

// TestReadProcCountersCPU burns CPU time and reads it back, against what
// the process itself says it used.
func TestReadProcCountersCPU(t *testing.T) {
	procOrSkip(t)
	pid := os.Getpid()
	before, err := ReadProcCounters(pid)
	if err != nil {
		t.Fatal(err)
	}
	const burn = 100 * time.Millisecond
	start := selfCPU(t)
	for x := 0; selfCPU(t)-start < burn; x++ {
		for i := range 100000 {
			x ^= i
		}
	}
	after, err := ReadProcCounters(pid)
	if err != nil {
		t.Fatal(err)
	}
	got := after.Sub(before).CPU
	// Ticks are whole: each reading may be short by one, and other
	// threads (the test's, the garbage collector's) may add some.
	if tick := clockTick(); got < burn-2*tick || got > burn+100*time.Millisecond {
		t.Errorf("/proc says %v of CPU time across a loop that burned %v (clock tick %v)", got, burn, tick)
	}
}

// TestParseStatCPUOfSelf parses this process's /proc/PID/stat, what
// ReadProcCounters reads where the kernel keeps no schedstat.
func TestParseStatCPUOfSelf(t *testing.T) {
	procOrSkip(t)
	before := selfCPU(t)
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	after := selfCPU(t)
	tick := clockTick()
	got, err := parseStatCPU(stat, tick)
	if err != nil {
		t.Fatal(err)
	}
	// Each of user and system time is short of the truth by a tick at most.
	if got < before-2*tick || got > after {
		t.Errorf("/proc/self/stat says %v of CPU time, the process %v to %v (clock tick %v)", got, before, after, tick)
	}
}

// selfCPU returns the CPU time this process used so far, by its own
// account.
func selfCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
