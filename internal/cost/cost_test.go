package cost

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestClosedMeterDoesNotKnowSyscalls(t *testing.T) {
	m := Open(Config{Syscalls: true})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if r := m.Read(); r.HasSyscalls {
		t.Errorf("a closed meter read %d system calls", r.Syscalls)
	}
	if m.SyscallsErr() == nil {
		t.Error("a closed meter has no reason not to count system calls")
	}
}

func TestMeterCountsSyscallsOnlyIfAsked(t *testing.T) {
	m := Open(Config{})
	defer m.Close()
	if r := m.Read(); r.HasSyscalls {
		t.Errorf("a meter not asked to count system calls read %d", r.Syscalls)
	}
	if !errors.Is(m.SyscallsErr(), errNotAsked) {
		t.Errorf("SyscallsErr() = %v, want %v", m.SyscallsErr(), errNotAsked)
	}
}

func TestSubKnowsWhatBothKnow(t *testing.T) {
	a := Reading{CPU: 10, Cgo: 3, Syscalls: 7, Switches: 2, HasCPU: true, HasSyscalls: true}
	b := Reading{CPU: 25, Cgo: 8, Syscalls: 20, Switches: 9, HasCPU: true, HasSyscalls: true}
	want := Reading{CPU: 15, Cgo: 5, Syscalls: 13, Switches: 7, HasCPU: true, HasSyscalls: true}
	if got := b.Sub(a); got != want {
		t.Errorf("Sub = %+v, want %+v", got, want)
	}
	a.HasSyscalls, b.HasCPU = false, false
	if got := b.Sub(a); got.HasCPU || got.HasSyscalls {
		t.Errorf("Sub of readings that each lack a figure knows %+v", got)
	}
}

// TestCgoCalls builds and runs testdata/cgocalls, a program that calls C
// a known number of times between two readings.
func TestCgoCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program with cgo")
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build testdata/cgocalls")
	}
	env, err := exec.Command(goCmd, "env", "CGO_ENABLED", "CC").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	fields := strings.Fields(string(env))
	if len(fields) < 2 || fields[0] != "1" {
		t.Skip("cgo is disabled")
	}
	if _, err := exec.LookPath(fields[1]); err != nil {
		t.Skipf("no C compiler: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "cgocalls")
	build := exec.Command(goCmd, "build", "-o", bin, "./testdata/cgocalls")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/cgocalls: %v\n%s", err, out)
	}
	for _, n := range []int{0, 1, 12345} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, "-n", strconv.Itoa(n))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("cgocalls -n %d: %v\n%s", n, err, &stderr)
		}
		if got := strings.TrimSpace(stdout.String()); got != strconv.Itoa(n) {
			t.Errorf("cgocalls -n %d: the meter saw %s cgo calls", n, got)
		}
	}
}
