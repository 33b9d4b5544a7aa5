//go:build unix

package benchkit

import (
	"os/exec"
	"testing"
)

func TestExitedSwitches(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 0.01; sleep 0.01")
	if err := cmd.Run(); err != nil {
		t.Skipf("no shell to run: %v", err)
	}
	// The shell waits for each sleep: a voluntary switch at least.
	if n, ok := ExitedSwitches(cmd.ProcessState); !ok || n < 1 {
		t.Errorf("ExitedSwitches = %d, %v; want at least one switch", n, ok)
	}
	if _, ok := ExitedSwitches(nil); ok {
		t.Error("ExitedSwitches(nil) knows a count")
	}
}
