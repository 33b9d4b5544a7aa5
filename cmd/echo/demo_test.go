package main

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/rubin-go/rubin/internal/rdmatest"
	"github.com/rubin-go/rubin/transport/rdma"
)

// testDemoRuns are small demo runs, two sizes, one of them larger than a
// TCP segment.
var testDemoRuns = []demoRun{{size: 64, n: 200}, {size: 16 << 10, n: 100}}

// demoRow is one row of the demo's table.
type demoRow struct {
	api, transport, size string
	p50, p99, rate, mbps float64
}

// parseDemoTable checks the demo's output and returns its rows: two header
// lines naming ip and the transports, a blank line, the column header and
// one well-formed row per run.
func parseDemoTable(t *testing.T, out, ip, transports string) []demoRow {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 4 {
		t.Fatalf("demo printed %d lines, want a table:\n%s", len(lines), out)
	}
	if want := "echo demo: server and client in this process on " + ip + ", " + transports + ","; !strings.HasPrefix(lines[0], want) {
		t.Errorf("first line %q, want it to start with %q", lines[0], want)
	}
	if lines[2] != "" || strings.Join(strings.Fields(lines[3]), " ") != "api transport size p50 us p99 us msgs/s MB/s" {
		t.Fatalf("no column header on line 4:\n%s", out)
	}
	var rows []demoRow
	for _, line := range lines[4:] {
		f := strings.Fields(line)
		if len(f) != 8 {
			t.Fatalf("row %q has %d fields, want 8 (a size is two)", line, len(f))
		}
		r := demoRow{api: f[0], transport: f[1], size: f[2] + " " + f[3]}
		for i, p := range []*float64{&r.p50, &r.p99, &r.rate, &r.mbps} {
			v, err := strconv.ParseFloat(f[4+i], 64)
			if err != nil || v <= 0 {
				t.Fatalf("row %q: field %q is not a positive number", line, f[4+i])
			}
			*p = v
		}
		if r.p99 < r.p50 {
			t.Errorf("row %q: p99 below p50", line)
		}
		rows = append(rows, r)
	}
	return rows
}

// wantDemoRows returns the rows the demo should print, in order, as
// "api transport size".
func wantDemoRows(networks ...string) []string {
	var want []string
	for _, name := range apiNames() {
		for _, network := range networks {
			if name == baselineAPI && network != "tcp" {
				continue
			}
			for _, r := range testDemoRuns {
				want = append(want, name+" "+network+" "+formatSize(r.size))
			}
		}
	}
	return want
}

func checkDemoRows(t *testing.T, rows []demoRow, want []string) {
	t.Helper()
	var got []string
	for _, r := range rows {
		got = append(got, r.api+" "+r.transport+" "+r.size)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDemo runs the demo over TCP, as echo with no arguments does, and
// checks its table: a row for every api and size, in order.
func TestDemo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := runDemo(context.Background(), demoConfig{ip: "127.0.0.1", runs: testDemoRuns}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("demo: %v; stderr:\n%s", err, &stderr)
	}
	rows := parseDemoTable(t, stdout.String(), "127.0.0.1", "tcp")
	checkDemoRows(t, rows, wantDemoRows("tcp"))
}

// TestDemoRDMA runs the demo with -rdma: after each api's TCP rows come its
// RDMA rows, except for gonet. It needs an RDMA device (see package
// rdmatest).
func TestDemoRDMA(t *testing.T) {
	ip := rdmatest.Addr(t)
	var stdout, stderr bytes.Buffer
	err := runDemo(context.Background(), demoConfig{ip: ip, rdma: true, runs: testDemoRuns}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("demo: %v; stderr:\n%s", err, &stderr)
	}
	rows := parseDemoTable(t, stdout.String(), ip, "tcp and rdma")
	checkDemoRows(t, rows, wantDemoRows("tcp", "rdma"))
}

// TestDemoRDMAUnavailable checks that echo demo -rdma, where RDMA cannot
// run, fails at once with an error that says why, and runs nothing.
func TestDemoRDMAUnavailable(t *testing.T) {
	tr, err := rdma.New(rdma.Config{})
	if err == nil {
		tr.Close()
		t.Skip("this machine has an RDMA device")
	}
	if !errors.Is(err, rdma.ErrNoDevice) && !errors.Is(err, rdma.ErrNotSupported) {
		t.Fatalf("rdma.New: %v, want rdma.ErrNoDevice or rdma.ErrNotSupported", err)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "-rdma", "192.0.2.1"}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), err.Error()) {
		t.Errorf("status %d, stderr %q; want %d and %q", code, &stderr, exitFailure, err)
	}
	if stdout.Len() != 0 {
		t.Errorf("it printed %q, want nothing", &stdout)
	}
}

// TestDemoUsageErrors checks echo demo's flags.
func TestDemoUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "-rdma", "rxe0"}, `-rdma "rxe0" is not an IP address`},
		{[]string{"demo", "extra"}, "unexpected argument"},
		{[]string{"demo", "-nosuchflag"}, "flag provided but not defined"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), c.args, &stdout, &stderr); code != exitUsage {
			t.Errorf("%q: exit status %d, want %d", c.args, code, exitUsage)
		}
		if !strings.Contains(stderr.String(), c.want) || !strings.Contains(stderr.String(), "usage:") {
			t.Errorf("%q: stderr %q does not contain %q and the usage", c.args, &stderr, c.want)
		}
	}
}
