package benchkit

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
)

const line64 = "transport=tcp size=64 conns=1 msgs=10000 p50_us=12.3 p99_us=45.6 p999_us=78.9 msgs_per_s=12345 MBps=0.79 api=conn spin_us=0 depth=1"

func TestParseSummary(t *testing.T) {
	s, err := ParseSummary(line64)
	if err != nil {
		t.Fatal(err)
	}
	if s.P50 != 12.3 || s.P99 != 45.6 || s.P999 != 78.9 || s.Rate != 12345 || s.MBps != 0.79 || s.SpinUS != "0" {
		t.Errorf("ParseSummary = %+v", s)
	}
	for _, bad := range []string{
		"transport=tcp size=64",
		strings.Replace(line64, "p50_us=12.3", "p50_us=x", 1),
		line64 + " stray",
	} {
		if _, err := ParseSummary(bad); err == nil {
			t.Errorf("ParseSummary(%q) succeeded", bad)
		}
	}
}

func TestParseSummaryCosts(t *testing.T) {
	known := func(x float64) Cost { return Cost{Value: x, Known: true} }
	for _, c := range []struct {
		line string
		want Costs
	}{
		{line64, Costs{}}, // from before the costs were printed
		{line64 + " wall_s=0.810 cpu_ns_per_msg=20346 cgo_per_msg=3.02 syscalls_per_msg=4.02",
			Costs{CPUNs: known(20346), Cgo: known(3.02), Syscalls: known(4.02)}},
		{line64 + " wall_s=0.810 cpu_ns_per_msg=20346 cgo_per_msg=3.02 syscalls_per_msg=4.02 switches_per_msg=0.75",
			Costs{CPUNs: known(20346), Cgo: known(3.02), Syscalls: known(4.02), Switches: known(0.75)}},
		{line64 + " wall_s=0.810 oneway=1 cpu_ns_per_msg=812 cgo_per_msg=0.00 syscalls_per_msg=-",
			Costs{CPUNs: known(812), Cgo: known(0)}},
	} {
		s, err := ParseSummary(c.line)
		if err != nil {
			t.Fatal(err)
		}
		if s.Costs != c.want {
			t.Errorf("ParseSummary(%q).Costs = %+v, want %+v", c.line, s.Costs, c.want)
		}
	}
	for _, bad := range []string{
		line64 + " cpu_ns_per_msg=x cgo_per_msg=0.00 syscalls_per_msg=-",
		line64 + " cpu_ns_per_msg=100 cgo_per_msg=-1 syscalls_per_msg=-",
		line64 + " cpu_ns_per_msg=100 cgo_per_msg=0.00 syscalls_per_msg=",
	} {
		if _, err := ParseSummary(bad); err == nil {
			t.Errorf("ParseSummary(%q) succeeded", bad)
		}
	}
}

func TestMedianCosts(t *testing.T) {
	known := func(x float64) Cost { return Cost{Value: x, Known: true} }
	runs := []Costs{
		{CPUNs: known(300), Cgo: known(3), Syscalls: known(5), Switches: known(0.5)},
		{CPUNs: known(100), Cgo: known(2), Syscalls: Cost{}, Switches: known(1.5)},
		{CPUNs: known(200), Cgo: known(4), Syscalls: known(1), Switches: known(2)},
	}
	m := MedianCosts(runs)
	if want := (Costs{CPUNs: known(200), Cgo: known(3), Switches: known(1.5)}); m != want {
		t.Errorf("MedianCosts = %+v, want %+v (system calls unknown in one run)", m, want)
	}
	if got, want := strings.Join(m.Cells(), " "), "200 3.00 - 1.50"; got != want {
		t.Errorf("Cells = %q, want %q", got, want)
	}
	if got := MedianCosts(nil); got != (Costs{}) {
		t.Errorf("MedianCosts(nil) = %+v, want every cost unknown", got)
	}
}

func TestSummaryLine(t *testing.T) {
	out := "progress noise\n" + line64 + "\n"
	if got := SummaryLine(out); got != line64 {
		t.Errorf("SummaryLine = %q", got)
	}
	if got := SummaryLine("no summary\n"); got != "" {
		t.Errorf("SummaryLine without one = %q", got)
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
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

func TestTable(t *testing.T) {
	tab := &Table{Header: []string{"size", "name", "value"}, Right: []bool{true, false, true}, ErrCol: 2}
	tab.Add("64 B", "a", "1.00")
	tab.AddError("error: it | broke", "64 B", "b")
	var text bytes.Buffer
	tab.WriteText(&text)
	want := "size  name  value\n64 B  a      1.00\n64 B  b     error: it | broke\n"
	if text.String() != want {
		t.Errorf("text table:\n%s\nwant:\n%s", &text, want)
	}
	var md bytes.Buffer
	tab.WriteMarkdown(&md)
	for i, line := range strings.Split(strings.TrimSpace(md.String()), "\n") {
		if got, want := strings.Count(line, "|")-strings.Count(line, `\|`), len(tab.Header)+1; got != want {
			t.Errorf("markdown line %d has %d unescaped pipes, want %d: %q", i, got, want, line)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int]string{64: "64 B", 1024: "1 KiB", 102400: "100 KiB", 1 << 20: "1 MiB", 1500: "1500 B"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
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

func TestLogTicks(t *testing.T) {
	got := logTicks(1, 3)
	want := []float64{10, 20, 50, 100, 200, 500, 1000}
	if len(got) != len(want) {
		t.Fatalf("logTicks(1, 3) = %v, want %v", got, want)
	}
	for i := range want {
		if d := got[i] - want[i]; d > 1e-9*want[i] || d < -1e-9*want[i] {
			t.Fatalf("logTicks(1, 3) = %v, want %v", got, want)
		}
	}
	if got := logTicks(0, 5); len(got) != 6 {
		t.Errorf("logTicks(0, 5) = %v, want the 6 powers of ten", got)
	}
}

// svgElements parses an SVG document and counts its elements by name.
func svgElements(t *testing.T, svg []byte) map[string]int {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	elements := make(map[string]int)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return elements
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			elements[se.Name.Local]++
		}
	}
}

func TestPlotLogY(t *testing.T) {
	p := &Plot{
		Title: "t <&>", XTicks: []float64{64, 1024}, XTickLabels: []string{"64 B", "1 KiB"}, LogY: true,
		Series: []Series{
			{Name: "base", Baseline: true, Xs: []float64{64, 1024}, Ys: []float64{15, 2000}},
			{Name: "ours", Xs: []float64{64}, Ys: []float64{20}, Failed: true},
		},
	}
	var svg bytes.Buffer
	if err := p.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	el := svgElements(t, svg.Bytes())
	if el["polyline"] != 1 || el["circle"] != 3+2 {
		t.Errorf("SVG elements %v: want 1 polyline, 5 circles (3 points, 2 legend markers)", el)
	}
	// 10 to 10000: three decades of 1, 2, 5, and 10000.
	for _, label := range []string{">10<", ">20<", ">5000<", ">10000<", "ours (failed)"} {
		if !strings.Contains(svg.String(), label) {
			t.Errorf("the SVG lacks %q", label)
		}
	}
	if strings.Contains(svg.String(), "NaN") || strings.Contains(svg.String(), "Inf") {
		t.Error("the SVG has a NaN or Inf coordinate")
	}
}

func TestWatcher(t *testing.T) {
	w := NewWatcher("listening on ")
	io.WriteString(w, "noise\nlisten")
	io.WriteString(w, "ing on 127.0.0.1:5\nprogress: 1/2\necho: it broke\n")
	select {
	case addr := <-w.Found():
		if addr != "127.0.0.1:5" {
			t.Errorf("found %q", addr)
		}
	default:
		t.Fatal("the listening line was not found")
	}
	if got := w.Brief(); got != "echo: it broke" {
		t.Errorf("Brief() = %q", got)
	}
	for i := range watcherKeep {
		fmt.Fprintf(w, "line %d\n", i)
	}
	io.WriteString(w, "replica: wal: disk full\n\n")
	if got := w.Last(); got != "replica: wal: disk full" {
		t.Errorf("Last() = %q", got)
	}
	if got := w.String(); !strings.HasPrefix(got, "noise\nlistening on") {
		t.Errorf("String() = %q", got)
	}
}
