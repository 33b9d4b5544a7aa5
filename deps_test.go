package rubin_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRootNeedsNeitherVerbsNorPrometheus: a program that imports only the
// root package links neither the RDMA transport with its verbs binding
// (cgo, libibverbs headers) nor Prometheus; RDMA and metrics are opt-in
// imports. (Package net itself may use cgo for its resolver.)
func TestRootNeedsNeitherVerbsNorPrometheus(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/rubin-go/rubin").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "transport/rdma") || strings.Contains(dep, "prometheus") {
			t.Errorf("the root package depends on %s", dep)
		}
	}
}
