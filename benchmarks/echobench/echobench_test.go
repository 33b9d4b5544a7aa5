package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

const line64 = "transport=tcp size=64 conns=1 msgs=10000 p50_us=12.3 p99_us=45.6 p999_us=78.9 msgs_per_s=12345 MBps=0.79 api=conn spin_us=0 depth=1"

func TestMessages(t *testing.T) {
	cfg := &config{n: 10000}
	for _, c := range []struct {
		p    point
		want int
	}{
		{point{64, 1}, 10000},
		{point{64, 100}, 50000},
		{point{102400, 1}, 5000},
		{point{102400, 1000}, 100000},
	} {
		if got := cfg.messages(c.p); got != c.want {
			t.Errorf("messages(%+v) = %d, want %d", c.p, got, c.want)
		}
	}
	if got := (&config{n: 100}).messages(point{64, 1000}); got != 100000 {
		t.Errorf("messages with 1000 connections and -n 100 = %d, want 100 per connection", got)
	}
}

func TestQuickFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-quick"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.sizes) != 1 || len(cfg.conns) != 1 || cfg.conns[0] != 1 || cfg.rounds != 1 || cfg.md != "" || cfg.svg != "" {
		t.Errorf("-quick gave %+v", cfg)
	}
	cfg, err = parseFlags([]string{"-quick", "-rounds", "2", "-md", "x.md"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.rounds != 2 || cfg.md != "x.md" || cfg.syscalls {
		t.Errorf("-quick overrode explicit flags, or counts system calls: %+v", cfg)
	}
	if cfg, err := parseFlags([]string{"-quick", "-syscalls"}, io.Discard); err != nil || !cfg.syscalls {
		t.Errorf("-syscalls gave %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"-sizes", "64,x"}, {"-conns", "0"}, {"-apis", ","}, {"-rounds", "0"}, {"extra"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

// known returns a cost that was measured.
func known(x float64) benchkit.Cost { return benchkit.Cost{Value: x, Known: true} }

// testResults returns results for two sizes at one connection, in which
// "conn" failed at the larger size and did not count system calls.
func testResults(t *testing.T) *results {
	t.Helper()
	points := []point{{64, 1}, {1024, 1}}
	res := newResults([]string{"gonet", "conn"}, points)
	for _, round := range []float64{1, 2, 3} {
		for _, p := range points {
			g, err := benchkit.ParseSummary(line64)
			if err != nil {
				t.Fatal(err)
			}
			g.P50, g.Rate = 10*round, 1000*round
			g.Costs = benchkit.Costs{CPUNs: known(8000 + round), Cgo: known(0), Syscalls: known(3 + round), Switches: known(round / 4)}
			res.add(p, "gonet", g, nil)
			c := g
			c.P50, c.Rate = 5*round, 4000*round
			c.Costs = benchkit.Costs{CPUNs: known(4000 * round), Cgo: known(0)} // system calls not counted
			if p.size == 1024 && round == 2 {
				res.add(p, "conn", benchkit.Sample{}, errors.New("client: exit status 1: echo: boom"))
			} else {
				res.add(p, "conn", c, nil)
			}
		}
	}
	return res
}

func TestTable(t *testing.T) {
	res := testResults(t)
	if !res.failed("conn") || res.failed("gonet") {
		t.Fatal("failed() does not match the runs")
	}
	tab := res.buildTable("gonet")
	var text bytes.Buffer
	tab.WriteText(&text)
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("text table has %d lines, want 5:\n%s", len(lines), &text)
	}
	if !strings.Contains(lines[2], "10.0") || !strings.Contains(lines[2], "0.50") || !strings.Contains(lines[2], "4.00") {
		t.Errorf("conn row %q lacks the median p50 10.0 and the ratios 0.50 and 4.00", lines[2])
	}
	if !strings.Contains(lines[4], "error: client: exit status 1: echo: boom") {
		t.Errorf("failed row %q lacks the error", lines[4])
	}
	costCol := len(tab.Header) - len(benchkit.CostsHeader)
	for i, want := range []string{"8002 0.00 5.00 0.50", "8000 0.00 - -", "8002 0.00 5.00 0.50"} {
		if got := strings.Join(tab.Rows[i][costCol:], " "); got != want {
			t.Errorf("row %q: costs %q, want the medians %q", tab.Rows[i][:3], got, want)
		}
	}
	var md bytes.Buffer
	tab.WriteMarkdown(&md)
	for i, line := range strings.Split(strings.TrimSpace(md.String()), "\n") {
		if got, want := strings.Count(line, "|"), len(tab.Header)+1; got != want {
			t.Errorf("markdown line %d has %d pipes, want %d: %q", i, got, want, line)
		}
	}
}

func TestReportFiles(t *testing.T) {
	cfg := &config{
		apis: []string{"conn", "gonet"}, sizes: []int{64, 1024}, conns: []int{1},
		n: 10, rounds: 3, spin: 20 * time.Microsecond,
		md: "docs/x.md", svg: "docs/x.svg",
	}
	r := &report{cfg: cfg, res: testResults(t), placement: "test", when: time.Now()}

	var md bytes.Buffer
	if err := r.writeMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"](x.svg)", "conn reported spin_us=0", line64, "error: client: exit status 1",
		"| CPU ns/msg | cgo/msg | syscalls/msg |", "System calls were not counted"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}

	var svg bytes.Buffer
	if err := r.writeSVG(&svg); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	elements := make(map[string]int)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			elements[se.Name.Local]++
		}
	}
	// gonet has two points, joined by a line; conn has one, and fails.
	if elements["svg"] != 1 || elements["polyline"] != 1 || elements["circle"] != 3+2 {
		t.Errorf("SVG elements %v: want 1 svg, 1 polyline, 5 circles (3 points, 2 legend markers)", elements)
	}
	if !strings.Contains(svg.String(), "conn (failed)") {
		t.Error("the legend does not mark conn as failed")
	}
}
