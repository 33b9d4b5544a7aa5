package selector

import (
	"math"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestParsePressure(t *testing.T) {
	got, ok := parsePressure([]byte("some avg10=3.26 avg60=0.58 avg300=0.12 total=453890\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	if !ok || got != 453890*time.Microsecond {
		t.Errorf("parsePressure: %v %v, want 453.89ms", got, ok)
	}
	for _, bad := range []string{"", "full avg10=0.00 total=5\n", "some avg10=1.00\n", "some total=-4\n", "some total=x\n"} {
		if got, ok := parsePressure([]byte(bad)); ok {
			t.Errorf("parsePressure(%q) = %v, want no reading", bad, got)
		}
	}
}

// TestPressureVerdict: the verdict is the stall share of the last window,
// taken at most once per window; without pressure information, never busy.
func TestPressureVerdict(t *testing.T) {
	var stall time.Duration
	reads := 0
	p := cpuPressure{read: func() (time.Duration, bool) { reads++; return stall, true }}
	t0 := time.Now()
	if p.check(t0) {
		t.Fatal("busy before a window was measured")
	}
	stall = 30 * time.Millisecond // 60% of the next 50 ms
	if !p.check(t0.Add(pressureWindow)) {
		t.Error("not busy after a window with 60% stall")
	}
	stall = 35 * time.Millisecond // 10% of the next window
	if !p.check(t0.Add(pressureWindow + time.Millisecond)) {
		t.Error("the verdict changed within a window")
	}
	if reads != 2 {
		t.Errorf("%d reads within two windows, want 2", reads)
	}
	if p.check(t0.Add(2 * pressureWindow)) {
		t.Error("busy after a window with 10% stall")
	}

	offReads := 0
	off := cpuPressure{read: func() (time.Duration, bool) { offReads++; return 0, false }}
	for i := range 3 {
		if off.check(t0.Add(time.Duration(i) * pressureWindow)) {
			t.Fatal("busy without pressure information")
		}
	}
	if offReads != 1 {
		t.Errorf("%d reads of a missing pressure file, want 1", offReads)
	}
	if off.next.Load() != math.MaxInt64 {
		t.Error("without pressure information, spins still take the sampling lock at every clock reading")
	}
}

// TestCPUsBusyUnderLoad: on Linux with pressure information, more
// spinning threads than CPUs make cpusBusy report it within a few
// windows. (That it clears is TestPressureVerdict's: on a loaded test
// machine it may not.)
func TestCPUsBusyUnderLoad(t *testing.T) {
	if !pressureAvailable() {
		t.Skip("no /proc/pressure/cpu")
	}
	hogs := 3 * runtime.NumCPU()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(hogs + 1))
	var stop atomic.Bool
	done := make(chan struct{})
	for range hogs {
		go func() {
			defer func() { done <- struct{}{} }()
			runtime.LockOSThread()
			for !stop.Load() {
			}
		}()
	}
	busy := false
	for deadline := time.Now().Add(2 * time.Second); !busy && time.Now().Before(deadline); time.Sleep(pressureWindow / 5) {
		busy = cpusBusy(time.Now())
	}
	stop.Store(true)
	for range hogs {
		<-done
	}
	if !busy {
		t.Fatalf("%d threads spinning on %d CPUs for 2 s: cpusBusy never reported it", hogs, runtime.NumCPU())
	}
}

func TestReadPressureDoesNotAllocate(t *testing.T) {
	if !pressureAvailable() {
		t.Skip("no /proc/pressure/cpu")
	}
	pressure.mu.Lock()
	defer pressure.mu.Unlock()
	if n := testing.AllocsPerRun(100, func() { readCPUPressure() }); n != 0 {
		t.Errorf("%v allocations per reading; spins read it, and a message must not allocate", n)
	}
}

func pressureAvailable() bool {
	pressure.mu.Lock()
	defer pressure.mu.Unlock()
	_, ok := readCPUPressure()
	return ok
}
