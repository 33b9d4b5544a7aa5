// Package leakcheck finds goroutines and file descriptors that a test left
// behind. It counts runtime.NumGoroutine and the entries of /proc/self/fd
// when a test starts and, when it ends, polls until both are back to that
// baseline or a timeout passes; then it fails the test with the descriptors
// that are new and a dump of every goroutine.
//
// Counts are process-wide: a test that uses Check must not run in parallel
// with other tests (no t.Parallel).
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// DefaultTimeout is how long Check waits for goroutines and descriptors to
// go away.
const DefaultTimeout = 5 * time.Second

// A Snapshot is the number of goroutines and the open descriptors at one
// moment.
type Snapshot struct {
	Goroutines int
	FDs        map[int]string // descriptor number to what it refers to
}

var warm sync.Once

// warmUp makes the Go runtime open the descriptors it keeps for the life of
// the process (the netpoller's epoll instance and its wake-up descriptor),
// so that the first test to touch them is not blamed for them.
func warmUp() {
	warm.Do(func() {
		r, w, err := os.Pipe()
		if err == nil {
			r.Close()
			w.Close()
		}
	})
}

// Take returns the current goroutine count and descriptors.
func Take() Snapshot {
	warmUp()
	return Snapshot{Goroutines: runtime.NumGoroutine(), FDs: fds()}
}

// fds lists /proc/self/fd. The descriptor used to read the directory is
// included; it is there in every snapshot.
func fds() map[int]string {
	m := make(map[int]string)
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return m
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		n, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + name)
		if err != nil {
			target = "?"
		}
		m[n] = target
	}
	return m
}

// Check takes a snapshot now and registers a cleanup that verifies, with
// DefaultTimeout, that goroutines and descriptors are back to it. Call it
// first in a test, so that its cleanup runs after the test's others.
func Check(t testing.TB) {
	t.Helper()
	base := Take()
	t.Cleanup(func() { Verify(t, base, DefaultTimeout) })
}

// Verify polls until at most base.Goroutines goroutines and len(base.FDs)
// descriptors exist, and fails t with the difference if that does not
// happen within timeout.
func Verify(t testing.TB, base Snapshot, timeout time.Duration) {
	t.Helper()
	if msg := Wait(base, timeout); msg != "" {
		t.Error(msg)
	}
}

// Wait polls until goroutines and descriptors are back to base or timeout
// passes. It returns "" on success, and otherwise a report of what leaked.
func Wait(base Snapshot, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		g := runtime.NumGoroutine()
		f := fds()
		if g <= base.Goroutines && len(f) <= len(base.FDs) {
			return ""
		}
		if time.Now().After(deadline) {
			return report(base, g, f)
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

func report(base Snapshot, g int, f map[int]string) string {
	var b strings.Builder
	if len(f) > len(base.FDs) {
		fmt.Fprintf(&b, "leaked %d file descriptors (%d open, %d at start):\n", len(f)-len(base.FDs), len(f), len(base.FDs))
		var nums []int
		for n, target := range f {
			if old, ok := base.FDs[n]; !ok || old != target {
				nums = append(nums, n)
			}
		}
		sort.Ints(nums)
		for _, n := range nums {
			fmt.Fprintf(&b, "\tfd %d -> %s\n", n, f[n])
		}
	}
	if g > base.Goroutines {
		fmt.Fprintf(&b, "leaked %d goroutines (%d running, %d at start):\n", g-base.Goroutines, g, base.Goroutines)
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		b.Write(buf)
	}
	return b.String()
}
