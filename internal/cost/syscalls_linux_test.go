package cost

import (
	"runtime"
	"syscall"
	"testing"
)

// countingMeter opens a Meter, closed when the test ends, and skips the
// test if the Meter does not count system calls here.
func countingMeter(t *testing.T) *Meter {
	t.Helper()
	m := Open(Config{Syscalls: true})
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := m.SyscallsErr(); err != nil {
		t.Skipf("system calls are not counted here: %v", err)
	}
	return m
}

// syscallLoop makes n getpid system calls.
func syscallLoop(n int) {
	for range n {
		syscall.Getpid()
	}
}

// checkSyscalls checks that the system calls counted between start and
// end are at least n, the getpid calls made, and not so many more that
// some were counted twice; the runtime makes a few of its own meanwhile.
func checkSyscalls(t *testing.T, what string, start, end Reading, n int) {
	t.Helper()
	d := end.Sub(start)
	if !d.HasSyscalls {
		t.Fatalf("%s: system calls unknown", what)
	}
	if d.Syscalls < uint64(n) || d.Syscalls > uint64(n+n/10) {
		t.Errorf("%s: %d system calls counted around %d getpid calls", what, d.Syscalls, n)
	}
}

func TestSyscallsCounted(t *testing.T) {
	m := countingMeter(t)
	const n = 20000
	start := m.Read()
	syscallLoop(n)
	checkSyscalls(t, "getpid loop", start, m.Read(), n)
}

// TestSyscallsOfLaterThreads makes system calls on a thread created after
// the Meter opened: its creator's counter is inherited, once.
func TestSyscallsOfLaterThreads(t *testing.T) {
	m := countingMeter(t)
	tids, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	known := make(map[int]bool)
	for _, tid := range tids {
		known[tid] = true
	}
	const n = 20000
	start := m.Read()
	// Goroutines that lock their threads and keep them make the runtime
	// start new ones, until one runs on a thread the process did not
	// have when the Meter opened.
	release := make(chan struct{})
	defer close(release)
	newThread := false
	for range 64 {
		ran := make(chan bool)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			fresh := !known[syscall.Gettid()]
			if fresh {
				syscallLoop(n)
			}
			ran <- fresh
			<-release
		}()
		if newThread = <-ran; newThread {
			break
		}
	}
	if !newThread {
		t.Fatal("64 goroutines with locked threads, and no new thread")
	}
	checkSyscalls(t, "getpid loop on a new thread", start, m.Read(), n)
}
