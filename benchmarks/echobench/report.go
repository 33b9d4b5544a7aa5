package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A point is one configuration the contenders are measured at.
type point struct {
	size  int
	conns int
}

// A cell holds the runs of one contender at one point.
type cell struct {
	samples []sample
	err     error // the first failed run's error; a cell with one is not reported
}

// results holds every run of a benchmark, by point and contender.
type results struct {
	apis   []string
	points []point
	cells  map[point]map[string]*cell
}

func newResults(apis []string, points []point) *results {
	r := &results{apis: apis, points: points, cells: make(map[point]map[string]*cell)}
	for _, p := range points {
		r.cells[p] = make(map[string]*cell)
		for _, a := range apis {
			r.cells[p][a] = &cell{}
		}
	}
	return r
}

// add records the outcome of one run.
func (r *results) add(p point, api string, s sample, err error) {
	c := r.cells[p][api]
	if err != nil {
		if c.err == nil {
			c.err = err
		}
		return
	}
	c.samples = append(c.samples, s)
}

// median returns the median of each metric over the cell's runs, and false
// if the cell failed or has no runs.
func (c *cell) median() (sample, bool) {
	if c.err != nil || len(c.samples) == 0 {
		return sample{}, false
	}
	metric := func(get func(sample) float64) float64 {
		xs := make([]float64, len(c.samples))
		for i, s := range c.samples {
			xs[i] = get(s)
		}
		return median(xs)
	}
	return sample{
		p50:    metric(func(s sample) float64 { return s.p50 }),
		p99:    metric(func(s sample) float64 { return s.p99 }),
		p999:   metric(func(s sample) float64 { return s.p999 }),
		rate:   metric(func(s sample) float64 { return s.rate }),
		mbps:   metric(func(s sample) float64 { return s.mbps }),
		spinUS: c.samples[0].spinUS,
	}, true
}

// median returns the median of xs, the mean of the middle two for an even
// count. It sorts xs.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// failed reports whether any cell of api failed.
func (r *results) failed(api string) bool {
	for _, p := range r.points {
		if r.cells[p][api].err != nil {
			return true
		}
	}
	return false
}

// A table is the report's table, in cells of text.
type table struct {
	header []string
	right  []bool // whether a column is right-aligned
	rows   [][]string
	// errs holds, for a failed row, the error shown from column errCol on.
	errs []string
}

// errCol is the first column an error message spans.
const errCol = 3

// buildTable lays out the medians of r, with ratios to baseline if it was
// measured.
func (r *results) buildTable(baseline string) *table {
	t := &table{
		header: []string{"size", "conns", "api", "p50 us", "p99 us", "msgs/s", "MB/s",
			"p50 vs " + baseline, "p99 vs " + baseline, "msgs/s vs " + baseline},
		right: []bool{true, true, false, true, true, true, true, true, true, true},
	}
	for _, p := range r.points {
		base, haveBase := r.cells[p][baseline].median()
		for _, api := range r.apis {
			c := r.cells[p][api]
			row := []string{formatSize(p.size), strconv.Itoa(p.conns), api}
			m, ok := c.median()
			if !ok {
				msg := "no runs"
				if c.err != nil {
					msg = "error: " + c.err.Error()
				}
				t.rows = append(t.rows, append(row, make([]string, len(t.header)-len(row))...))
				t.errs = append(t.errs, msg)
				continue
			}
			row = append(row,
				fmt.Sprintf("%.1f", m.p50),
				fmt.Sprintf("%.1f", m.p99),
				fmt.Sprintf("%.0f", m.rate),
				fmt.Sprintf("%.2f", m.mbps))
			switch {
			case api == baseline:
				row = append(row, "base", "base", "base")
			case haveBase:
				row = append(row, ratio(m.p50, base.p50), ratio(m.p99, base.p99), ratio(m.rate, base.rate))
			default:
				row = append(row, "-", "-", "-")
			}
			t.rows = append(t.rows, row)
			t.errs = append(t.errs, "")
		}
	}
	return t
}

// ratio formats ours/base.
func ratio(ours, base float64) string {
	if base == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", ours/base)
}

// writeText writes t as aligned columns of plain text.
func (t *table) writeText(w io.Writer) {
	widths := make([]int, len(t.header))
	for i, h := range t.header {
		widths[i] = len(h)
	}
	for i, row := range t.rows {
		for j, c := range row {
			if t.errs[i] != "" && j >= errCol {
				break
			}
			widths[j] = max(widths[j], len(c))
		}
	}
	line := func(cells []string, errMsg string) {
		var b strings.Builder
		for j, c := range cells {
			if j > 0 {
				b.WriteString("  ")
			}
			if errMsg != "" && j == errCol {
				b.WriteString(errMsg)
				break
			}
			pad := strings.Repeat(" ", widths[j]-len(c))
			if t.right[j] {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.header, "")
	for i, row := range t.rows {
		line(row, t.errs[i])
	}
}

// writeMarkdown writes t as a Markdown table.
func (t *table) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.header, " | "))
	aligns := make([]string, len(t.header))
	for j := range aligns {
		aligns[j] = ":---"
		if t.right[j] {
			aligns[j] = "---:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(aligns, "|"))
	for i, row := range t.rows {
		cells := slices.Clone(row)
		if t.errs[i] != "" {
			cells[errCol] = markdownEscape(t.errs[i])
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// markdownEscape makes s safe inside a Markdown table cell.
func markdownEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}

// formatSize writes a byte count the short way: 64 B, 1 KiB, 100 KiB.
func formatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// A report presents the results of a benchmark.
type report struct {
	cfg       *config
	res       *results
	placement string
	elapsed   time.Duration
	when      time.Time
}

// notes returns what a reader needs to know to judge the figures, as
// (label, text) pairs.
func (r *report) notes() [][2]string {
	ours := slices.DeleteFunc(slices.Clone(r.cfg.apis), func(a string) bool { return a == baseline })
	spin := "0 (no busy polling)"
	if r.cfg.spin > 0 {
		spin = fmt.Sprintf("%v, passed to %s", r.cfg.spin, strings.Join(ours, ", "))
	}
	notes := [][2]string{
		{"machine", fmt.Sprintf("%d CPUs (%s), Linux %s, %s %s/%s",
			runtime.NumCPU(), cpuModel(), kernelRelease(), runtime.Version(), runtime.GOOS, runtime.GOARCH)},
		{"placement", r.placement},
		{"spin", spin},
		{"method", fmt.Sprintf("median of %d round%s; in each round the contenders run in turn (%s), each with a fresh server and client process over 127.0.0.1",
			r.cfg.rounds, plural(r.cfg.rounds), strings.Join(r.cfg.apis, ", "))},
		{"messages", fmt.Sprintf("%d measured per run with 1 connection and up to 64 KiB, five times that with more connections, half above 64 KiB, at least 100 per connection; "+
			"warmup min(1000, n/10) unmeasured; 1 message in flight per connection", r.cfg.n)},
		{"units", "round-trip times in us, from the start of a write to the end of reading the whole echo; MB/s counts the payload one way; " +
			"ratios are api/" + baseline + ": below 1 is faster for p50 and p99, above 1 is more msgs/s"},
		{"duration", r.elapsed.String()},
	}
	if r.cfg.spin > 0 {
		want := strconv.FormatFloat(float64(r.cfg.spin)/float64(time.Microsecond), 'f', -1, 64)
		for _, api := range ours {
			for _, p := range r.res.points {
				if m, ok := r.res.cells[p][api].median(); ok && m.spinUS != want {
					notes = append(notes, [2]string{"note", fmt.Sprintf("%s reported spin_us=%s: it has no busy-poll setting and ran without one", api, m.spinUS)})
					break
				}
			}
		}
	}
	return notes
}

// writeText writes the report for a terminal.
func (r *report) writeText(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "echo benchmark, tcp")
	for _, n := range r.notes() {
		fmt.Fprintf(w, "  %-10s %s\n", n[0]+":", n[1])
	}
	fmt.Fprintln(w)
	r.res.buildTable(baseline).writeText(w)
	fmt.Fprintln(w)
}

// writeMarkdown writes the report as a Markdown document that shows the plot
// written beside it.
func (r *report) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Echo benchmark: TCP\n\n")
	cmd := "go run ./benchmarks/echobench"
	if len(r.cfg.args) > 0 {
		cmd += " " + strings.Join(r.cfg.args, " ")
	}
	fmt.Fprintf(&b, "Generated by `%s` on %s.\n\n", cmd, r.when.UTC().Format("2006-01-02 15:04 MST"))
	for _, n := range r.notes() {
		fmt.Fprintf(&b, "- **%s:** %s\n", n[0], markdownEscape(n[1]))
	}
	b.WriteString("\n")
	r.res.buildTable(baseline).writeMarkdown(&b)
	if r.cfg.svg != "" {
		rel, err := filepath.Rel(filepath.Dir(r.cfg.md), r.cfg.svg)
		if err != nil {
			rel = r.cfg.svg
		}
		fmt.Fprintf(&b, "\n![p50 round-trip time against message size](%s)\n", filepath.ToSlash(rel))
	}
	b.WriteString("\n<details><summary>Every run's summary line</summary>\n\n```\n")
	for _, p := range r.res.points {
		for _, api := range r.res.apis {
			c := r.res.cells[p][api]
			for _, s := range c.samples {
				b.WriteString(s.line + "\n")
			}
			if c.err != nil {
				fmt.Fprintf(&b, "size=%d conns=%d api=%s error: %v\n", p.size, p.conns, api, c.err)
			}
		}
	}
	b.WriteString("```\n\n</details>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSVG writes the plot of p50 latency against message size, at one
// connection or the fewest measured.
func (r *report) writeSVG(w io.Writer) error {
	conns := r.cfg.conns[0]
	placement := "server on CPU " + serverCPU + ", client on CPU " + clientCPU
	if strings.HasPrefix(r.placement, "UNPINNED") {
		placement = "unpinned"
	}
	spin := "no spin"
	if r.cfg.spin > 0 {
		spin = "spin " + r.cfg.spin.String() + " (not gonet)"
	}
	p := &plot{
		title: fmt.Sprintf("Echo p50 round-trip time vs message size (TCP, %d connection%s)", conns, plural(conns)),
		subtitle: fmt.Sprintf("median of %d round%s; %s; %s; %s",
			r.cfg.rounds, plural(r.cfg.rounds), placement, spin, r.when.UTC().Format("2006-01-02")),
		xLabel: "message size (log scale)",
		yLabel: "p50 round-trip time (\u00b5s)",
	}
	for _, size := range r.cfg.sizes {
		p.xTicks = append(p.xTicks, float64(size))
		p.xTickLabels = append(p.xTickLabels, formatSize(size))
	}
	// The baseline first, so that it takes the baseline's color.
	apis := slices.Clone(r.cfg.apis)
	if i := slices.Index(apis, baseline); i > 0 {
		apis = slices.Insert(slices.Delete(apis, i, i+1), 0, baseline)
	}
	for _, api := range apis {
		s := series{name: api, baseline: api == baseline}
		for _, size := range r.cfg.sizes {
			m, ok := r.res.cells[point{size: size, conns: conns}][api].median()
			if !ok {
				s.failed = true
				continue
			}
			s.xs = append(s.xs, float64(size))
			s.ys = append(s.ys, m.p50)
		}
		p.series = append(p.series, s)
	}
	return p.writeSVG(w)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// cpuModel returns the CPU model Linux reports, or "unknown CPU".
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown CPU"
}

// kernelRelease returns the running kernel's release, or "unknown".
func kernelRelease() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(data))
}
