package main

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/rubin-go/rubin/internal/rdmatest"
)

// runOneway streams one way to addr and checks the summary line: every
// message counted by the server (the client fails otherwise), the rate
// reported, the line marked oneway=1.
func runOneway(t *testing.T, transport, addr string, size, n, conns int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := []string{"client", "-transport", transport, "-api", "channel", "-addr", addr, "-oneway",
		"-size", strconv.Itoa(size), "-n", strconv.Itoa(n), "-conns", strconv.Itoa(conns)}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("%q: client exited with status %d; stderr:\n%s", args, code, &stderr)
	}
	m := parseSummary(t, strings.TrimSuffix(stdout.String(), "\n"))
	t.Logf("%s", strings.TrimSuffix(stdout.String(), "\n"))
	checkCosts(t, m, stderr.String(), true)
	if m["msgs"] != strconv.Itoa(n) || m["oneway"] != "1" {
		t.Errorf("%q: msgs=%s oneway=%s, want msgs=%d oneway=1", args, m["msgs"], m["oneway"], n)
	}
	if rate, _ := strconv.ParseFloat(m["msgs_per_s"], 64); rate <= 0 {
		t.Errorf("%q: msgs_per_s=%s", args, m["msgs_per_s"])
	}
}

func TestOneway(t *testing.T) {
	addr, _ := startServer(t, "-api", "channel", "-addr", "127.0.0.1:0")
	for _, c := range []struct{ size, n, conns int }{
		{64, 5000, 1},
		{4 << 10, 2000, 3},
		{64 << 10, 200, 2},
	} {
		runOneway(t, "tcp", addr, c.size, c.n, c.conns)
	}
	// The server echoes again once a stream has ended.
	var stdout, stderr bytes.Buffer
	args := []string{"client", "-api", "channel", "-addr", addr, "-n", "100"}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("%q after one-way streams: exit status %d; stderr:\n%s", args, code, &stderr)
	}
}

func TestOnewayNeedsChannelAPI(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"client", "-api", "gonet", "-addr", "127.0.0.1:1", "-oneway"}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitUsage {
		t.Errorf("%q: exit status %d, want %d", args, code, exitUsage)
	}
	if !strings.Contains(stderr.String(), "no one-way mode") {
		t.Errorf("%q: stderr %q does not say that gonet has no one-way mode", args, &stderr)
	}
}

// TestRDMAOneway streams one way over RDMA; it needs an RDMA device (see
// package rdmatest).
func TestRDMAOneway(t *testing.T) {
	ip := rdmatest.Addr(t)
	addr, _ := startServer(t, "-transport", "rdma", "-api", "channel", "-addr", net.JoinHostPort(ip, "0"))
	runOneway(t, "rdma", addr, 4<<10, 2000, 1)
	runOneway(t, "rdma", addr, 64<<10, 200, 2)
}
