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

// TestPressureVerdict: the verdict is busy after busyWindows windows in a
// row with more than half their time stalled, taken at most once per
// window, and clears with the first window under.
func TestPressureVerdict(t *testing.T) {
	var stall time.Duration
	reads := 0
	p := cpuPressure{read: func() (time.Duration, bool) { reads++; return stall, true }}
	t0 := time.Now()
	if p.check(t0) {
		t.Fatal("busy before a window was measured")
	}
	at := t0
	for i := range busyWindows {
		stall += 30 * time.Millisecond // 60% of the next 50 ms
		at = at.Add(pressureWindow)
		if busy := p.check(at); busy != (i == busyWindows-1) {
			t.Fatalf("busy %v after %d windows with 60%% stall", busy, i+1)
		}
	}
	stall += 5 * time.Millisecond // 10% of the next window
	if !p.check(at.Add(time.Millisecond)) {
		t.Error("the verdict changed within a window")
	}
	if reads != busyWindows+1 {
		t.Errorf("%d reads within %d windows, want %d", reads, busyWindows+1, busyWindows+1)
	}
	at = at.Add(pressureWindow)
	if p.check(at) {
		t.Error("busy after a window with 10% stall")
	}
}

// TestPressureBurstsDoNotCede: windows of heavy stall between calm ones,
// as a burst of other work makes (a peer's connection set up or torn
// down), never end a spin: the spin yields to such work anyway, and a
// sleep would cost a wake-up.
func TestPressureBurstsDoNotCede(t *testing.T) {
	var stall time.Duration
	p := cpuPressure{read: func() (time.Duration, bool) { return stall, true }}
	at := time.Now()
	p.check(at)
	for i := range 40 {
		if i%busyWindows == 0 {
			stall += 5 * time.Millisecond // a calm window now and then
		} else {
			stall += pressureWindow // the rest fully stalled
		}
		at = at.Add(pressureWindow)
		if p.check(at) {
			t.Fatalf("busy after window %d, though every %dth window was calm", i, busyWindows)
		}
	}
}

// TestPressureOff: without pressure information, never busy, and the
// missing file is looked for once.
func TestPressureOff(t *testing.T) {
	t0 := time.Now()
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
