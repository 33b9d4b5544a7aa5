package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

func names(cs []contender) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.name())
	}
	return out
}

func TestContenders(t *testing.T) {
	for _, c := range []struct {
		transports []string
		durable    bool
		base       string
		want       []string
	}{
		{[]string{"tcp"}, false, "", []string{"tcp"}},
		{[]string{"tcp", "rdma"}, true, "", []string{"tcp", "tcp+disk", "rdma", "rdma+disk"}},
		// Every contender is followed by its twin, so they alternate.
		{[]string{"tcp", "rdma"}, true, "0d94671", []string{
			"tcp", "tcp@0d94671", "tcp+disk", "tcp+disk@0d94671",
			"rdma", "rdma@0d94671", "rdma+disk", "rdma+disk@0d94671"}},
	} {
		if got := names(contenders(c.transports, c.durable, c.base)); !slices.Equal(got, c.want) {
			t.Errorf("contenders(%v, %v, %q) = %v, want %v", c.transports, c.durable, c.base, got, c.want)
		}
	}
	rdma := contender{transport: "rdma", durable: true, build: "old"}
	if got := rdma.tcp().name(); got != "tcp@old" {
		t.Errorf("rdma+disk@old compares to %s, want tcp@old, tcp of its own build", got)
	}
}

// testResults returns results of tcp and rdma, each with a baseline twin
// "old", whose medians are easy to divide.
func testResults() *results {
	cfg := config{
		contenders: contenders([]string{"tcp", "rdma"}, false, "old"),
		baseline:   baseline{name: "old"},
		sizes:      []int{0},
		clients:    []int{1},
		n:          100,
		rounds:     3,
	}
	r := newResults(cfg)
	known := func(x float64) benchkit.Cost { return benchkit.Cost{Value: x, Known: true} }
	add := func(name string, rates ...float64) {
		for _, c := range cfg.contenders {
			if c.name() == name {
				for _, rate := range rates {
					r.add(c, 0, 1, sample{Rate: rate, P50: 1e6 / rate, Switches: known(rate / 100), CPUUS: known(10)}, nil)
				}
				return
			}
		}
		panic(name)
	}
	add("tcp", 1000, 3000, 2000) // median 2000
	add("tcp@old", 1000)
	add("rdma", 8000)
	r.add(contender{transport: "rdma", build: "old"}, 0, 1, sample{}, errors.New("replica 2 exited"))
	return r
}

func TestTableRatios(t *testing.T) {
	r := testResults()
	tab := r.table()
	wantHeader := []string{"transport", "size", "clients", "ops/s", "p50 us", "p99 us", "cs/req", "cpu us/req",
		"ops/s vs tcp", "p50 vs tcp", "ops/s vs old", "p50 vs old"}
	if !slices.Equal(tab.Header, wantHeader) || len(tab.Right) != len(wantHeader) {
		t.Fatalf("header %v (%d alignments), want %v", tab.Header, len(tab.Right), wantHeader)
	}
	want := [][]string{
		{"tcp", "0 B", "1", "2000", "500", "0", "20.00", "10.0", "base", "base", "2.00", "0.50"},
		{"tcp@old", "0 B", "1", "1000", "1000", "0", "10.00", "10.0", "base", "base", "base", "base"},
		// rdma's twin failed: no ratio to it.
		{"rdma", "0 B", "1", "8000", "125", "0", "80.00", "10.0", "4.00", "0.25", "-", "-"},
	}
	for i, row := range want {
		if !slices.Equal(tab.Rows[i], row) {
			t.Errorf("row %d = %v, want %v", i, tab.Rows[i], row)
		}
	}
	if len(tab.Rows) != 4 || tab.Errs[3] != "replica 2 exited" || tab.Rows[3][0] != "rdma@old" {
		t.Errorf("the failed twin's row: %v, error %q", tab.Rows[len(tab.Rows)-1], tab.Errs[len(tab.Errs)-1])
	}

	// Without a baseline, the table has no columns for one.
	r.cfg.baseline = baseline{}
	r.cfg.contenders = contenders([]string{"tcp", "rdma"}, false, "")
	tab = r.table()
	if len(tab.Header) != len(wantHeader)-2 || !slices.Equal(tab.Rows[1], want[2][:len(wantHeader)-2]) {
		t.Errorf("without a baseline: header %v, rdma %v", tab.Header, tab.Rows[1])
	}
}

func TestMarkdownNamesContenders(t *testing.T) {
	r := testResults()
	r.cfg.baseline.desc = "cmd/bft at 0d94671 (a | subject)"
	var md bytes.Buffer
	if err := r.writeMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| ops/s vs old | p50 vs old |", "**baseline:** contenders named @old", `(a \| subject)`, "contender=tcp@old ", "contender=rdma@old size=0 clients=1 error: replica 2 exited"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the Markdown report lacks %q:\n%s", want, &md)
		}
	}
}

func TestPerOp(t *testing.T) {
	spent := benchkit.ProcCounters{Switches: 100, CPU: 2 * time.Millisecond}
	switches, cpu := perOp(spent, 20, true, 10)
	if switches != (benchkit.Cost{Value: 12, Known: true}) || cpu != (benchkit.Cost{Value: 200, Known: true}) {
		t.Errorf("perOp = %+v, %+v; want 12 switches and 200 us per operation", switches, cpu)
	}
	if switches, _ := perOp(spent, 0, false, 10); switches.Known {
		t.Errorf("perOp without the client's count knows the switches: %+v", switches)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-baseline", "HEAD", "-baseline-bft", "/bin/true"},
		{"-baseline-name", "old"},
		{"-baseline-bft", "/bin/true", "-baseline-name", "an old one"},
		{"-transports", "udp"},
		{"stray"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		if !errors.Is(err, errUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

// TestBaselineTree resolves and extracts this repository's HEAD, as
// -baseline HEAD does before it builds: the whole tree, though the test
// runs in a subdirectory.
func TestBaselineTree(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar")
	}
	ctx := context.Background()
	if _, err := git(ctx, "rev-parse", "--show-toplevel"); err != nil {
		t.Skipf("not in a git work tree: %v", err)
	}
	b := baseline{rev: "HEAD"}
	if err := b.resolve(ctx); err != nil {
		t.Fatal(err)
	}
	if len(b.rev) < 40 || !strings.HasPrefix(b.rev, b.name) || !strings.Contains(b.desc, b.name) {
		t.Errorf("resolved HEAD to %+v: want the full hash, named by its short one", b)
	}
	dir := t.TempDir()
	if err := extract(ctx, b.repo, b.rev, dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.mod", "go.sum", "cmd/bft/main.go"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the tree of HEAD lacks %s: %v", f, err)
		}
	}
	if err := (&baseline{rev: "no-such-revision"}).resolve(ctx); err == nil {
		t.Error("resolve of no-such-revision succeeded")
	}
	if err := extract(ctx, b.repo, "no-such-revision", t.TempDir()); err == nil {
		t.Error("extract of no-such-revision succeeded")
	}
}
