package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

const line64 = "transport=tcp size=64 conns=1 msgs=10000 p50_us=12.3 p99_us=45.6 p999_us=78.9 msgs_per_s=12345 MBps=0.79 api=conn spin_us=0 depth=1"

func TestParseSummary(t *testing.T) {
	s, err := parseSummary(line64)
	if err != nil {
		t.Fatal(err)
	}
	if s.p50 != 12.3 || s.p99 != 45.6 || s.p999 != 78.9 || s.rate != 12345 || s.mbps != 0.79 || s.spinUS != "0" {
		t.Errorf("parseSummary = %+v", s)
	}
	for _, bad := range []string{
		"transport=tcp size=64",
		strings.Replace(line64, "p50_us=12.3", "p50_us=x", 1),
		line64 + " stray",
	} {
		if _, err := parseSummary(bad); err == nil {
			t.Errorf("parseSummary(%q) succeeded", bad)
		}
	}
}

func TestSummaryLine(t *testing.T) {
	out := "progress noise\n" + line64 + "\n"
	if got := summaryLine(out); got != line64 {
		t.Errorf("summaryLine = %q", got)
	}
	if got := summaryLine("no summary\n"); got != "" {
		t.Errorf("summaryLine without one = %q", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 1, 1}, 1},
	} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

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
	if cfg.rounds != 2 || cfg.md != "x.md" {
		t.Errorf("-quick overrode explicit flags: %+v", cfg)
	}
	for _, bad := range [][]string{{"-sizes", "64,x"}, {"-conns", "0"}, {"-apis", ","}, {"-rounds", "0"}, {"extra"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

// testResults returns results for two sizes at one connection, in which
// "conn" failed at the larger size.
func testResults(t *testing.T) *results {
	t.Helper()
	points := []point{{64, 1}, {1024, 1}}
	res := newResults([]string{"gonet", "conn"}, points)
	for _, round := range []float64{1, 2, 3} {
		for _, p := range points {
			g, err := parseSummary(line64)
			if err != nil {
				t.Fatal(err)
			}
			g.p50, g.rate = 10*round, 1000*round
			res.add(p, "gonet", g, nil)
			c := g
			c.p50, c.rate = 5*round, 4000*round
			if p.size == 1024 && round == 2 {
				res.add(p, "conn", sample{}, errors.New("client: exit status 1: echo: boom"))
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
	tab.writeText(&text)
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
	var md bytes.Buffer
	tab.writeMarkdown(&md)
	for i, line := range strings.Split(strings.TrimSpace(md.String()), "\n") {
		if got, want := strings.Count(line, "|"), len(tab.header)+1; got != want {
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
	for _, want := range []string{"](x.svg)", "conn reported spin_us=0", line64, "error: client: exit status 1"} {
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

func TestNiceScale(t *testing.T) {
	for _, c := range []struct{ max, top, step float64 }{
		{0, 1, 0.2},
		{81, 100, 20},
		{95, 100, 20},
		{99, 125, 25},
		{0.3, 0.4, 0.1},
		{1234, 1500, 500},
	} {
		top, step := niceScale(c.max)
		if top != c.top || step != c.step {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", c.max, top, step, c.top, c.step)
		}
	}
	if got := formatTick(0.75, 0.25); got != "0.75" {
		t.Errorf("formatTick(0.75, 0.25) = %q", got)
	}
	if got := formatTick(50, 25); got != "50" {
		t.Errorf("formatTick(50, 25) = %q", got)
	}
}

func TestWatcher(t *testing.T) {
	w := newWatcher("listening on ")
	io.WriteString(w, "noise\nlisten")
	io.WriteString(w, "ing on 127.0.0.1:5\nprogress: 1/2\necho: it broke\n")
	select {
	case addr := <-w.found:
		if addr != "127.0.0.1:5" {
			t.Errorf("found %q", addr)
		}
	default:
		t.Fatal("the listening line was not found")
	}
	if got := w.brief(); got != "echo: it broke" {
		t.Errorf("brief() = %q", got)
	}
}
