// Package rdmatest finds the RDMA device that tests may use. RDMA tests
// run for real in a Soft-RoCE virtual machine started by
// scripts/rdma-test.sh, which tells them the device's address in
// RUBIN_RDMA_ADDR; anywhere else they skip and say how to run them.
package rdmatest

import (
	"os"
	"testing"
)

// Command is what runs the RDMA tests.
const Command = "scripts/rdma-test.sh"

// Addr returns the IP address of the RDMA device to test over. Without
// one it skips the test, or fails it if RUBIN_RDMA_REQUIRED is set.
func Addr(tb testing.TB) string {
	tb.Helper()
	if a := os.Getenv("RUBIN_RDMA_ADDR"); a != "" {
		return a
	}
	if os.Getenv("RUBIN_RDMA_REQUIRED") != "" {
		tb.Fatal("RUBIN_RDMA_REQUIRED is set but RUBIN_RDMA_ADDR, the RDMA device's address, is not")
	}
	tb.Skipf("no RDMA device (RUBIN_RDMA_ADDR is not set): run %s, which runs this test over Soft-RoCE in a virtual machine", Command)
	return ""
}
