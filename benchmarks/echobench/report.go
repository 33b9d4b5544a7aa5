package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

// A point is one configuration the contenders are measured at.
type point struct {
	size  int
	conns int
}

// A cell holds the runs of one contender at one point.
type cell struct {
	samples []benchkit.Sample
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
func (r *results) add(p point, api string, s benchkit.Sample, err error) {
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
func (c *cell) median() (benchkit.Sample, bool) {
	if c.err != nil || len(c.samples) == 0 {
		return benchkit.Sample{}, false
	}
	metric := func(get func(benchkit.Sample) float64) float64 {
		xs := make([]float64, len(c.samples))
		for i, s := range c.samples {
			xs[i] = get(s)
		}
		return benchkit.Median(xs)
	}
	costs := make([]benchkit.Costs, len(c.samples))
	for i, s := range c.samples {
		costs[i] = s.Costs
	}
	return benchkit.Sample{
		Costs:  benchkit.MedianCosts(costs),
		P50:    metric(func(s benchkit.Sample) float64 { return s.P50 }),
		P99:    metric(func(s benchkit.Sample) float64 { return s.P99 }),
		P999:   metric(func(s benchkit.Sample) float64 { return s.P999 }),
		Rate:   metric(func(s benchkit.Sample) float64 { return s.Rate }),
		MBps:   metric(func(s benchkit.Sample) float64 { return s.MBps }),
		SpinUS: c.samples[0].SpinUS,
	}, true
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

// errCol is the first column of the table an error message spans.
const errCol = 3

// buildTable lays out the medians of r, with ratios to baseline if it was
// measured.
func (r *results) buildTable(baseline string) *benchkit.Table {
	t := &benchkit.Table{
		Header: append([]string{"size", "conns", "api", "p50 us", "p99 us", "msgs/s", "MB/s",
			"p50 vs " + baseline, "p99 vs " + baseline, "msgs/s vs " + baseline}, benchkit.CostsHeader...),
		Right:  append([]bool{true, true, false, true, true, true, true, true, true, true}, benchkit.CostsRight...),
		ErrCol: errCol,
	}
	for _, p := range r.points {
		base, haveBase := r.cells[p][baseline].median()
		for _, api := range r.apis {
			c := r.cells[p][api]
			row := []string{benchkit.FormatSize(p.size), strconv.Itoa(p.conns), api}
			m, ok := c.median()
			if !ok {
				msg := "no runs"
				if c.err != nil {
					msg = "error: " + c.err.Error()
				}
				t.AddError(msg, row...)
				continue
			}
			row = append(row,
				fmt.Sprintf("%.1f", m.P50),
				fmt.Sprintf("%.1f", m.P99),
				fmt.Sprintf("%.0f", m.Rate),
				fmt.Sprintf("%.2f", m.MBps))
			switch {
			case api == baseline:
				row = append(row, "base", "base", "base")
			case haveBase:
				row = append(row, benchkit.Ratio(m.P50, base.P50), benchkit.Ratio(m.P99, base.P99), benchkit.Ratio(m.Rate, base.Rate))
			default:
				row = append(row, "-", "-", "-")
			}
			t.Add(append(row, m.Costs.Cells()...)...)
		}
	}
	return t
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
		{"machine", benchkit.Machine()},
		{"placement", r.placement},
		{"spin", spin},
		{"method", fmt.Sprintf("median of %d round%s; in each round the contenders run in turn (%s), each with a fresh server and client process over 127.0.0.1",
			r.cfg.rounds, benchkit.Plural(r.cfg.rounds), strings.Join(r.cfg.apis, ", "))},
		{"messages", fmt.Sprintf("%d measured per run with 1 connection and up to 64 KiB, five times that with more connections, half above 64 KiB, at least 100 per connection; "+
			"warmup min(1000, n/10) unmeasured; 1 message in flight per connection", r.cfg.n)},
		{"units", "round-trip times in us, from the start of a write to the end of reading the whole echo; MB/s counts the payload one way; " +
			"ratios are api/" + baseline + ": below 1 is faster for p50 and p99, above 1 is more msgs/s"},
		{"costs", "CPU ns/msg, cgo/msg, syscalls/msg and switches/msg are what the client process (not the server) spent per message: " +
			"CPU time, user and system, by getrusage; calls from Go to C, by the Go runtime; system calls, counted by the kernel (raw_syscalls:sys_enter); " +
			"context switches of its threads, voluntary and involuntary, by getrusage; " +
			"- where not measured. " + syscallsNote(r.cfg.syscalls)},
		{"duration", r.elapsed.String()},
	}
	if r.cfg.spin > 0 {
		want := strconv.FormatFloat(float64(r.cfg.spin)/float64(time.Microsecond), 'f', -1, 64)
		for _, api := range ours {
			for _, p := range r.res.points {
				if m, ok := r.res.cells[p][api].median(); ok && m.SpinUS != want {
					notes = append(notes, [2]string{"note", fmt.Sprintf("%s reported spin_us=%s: it has no busy-poll setting and ran without one", api, m.SpinUS)})
					break
				}
			}
		}
	}
	return notes
}

// syscallsNote says whether the clients counted system calls.
func syscallsNote(counted bool) string {
	if counted {
		return "System calls were counted (-syscalls), which slows every system call: latencies are a little higher than without"
	}
	return "System calls were not counted (no -syscalls), since counting slows every system call"
}

// writeText writes the report for a terminal.
func (r *report) writeText(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "echo benchmark, tcp")
	for _, n := range r.notes() {
		fmt.Fprintf(w, "  %-10s %s\n", n[0]+":", n[1])
	}
	fmt.Fprintln(w)
	r.res.buildTable(baseline).WriteText(w)
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
		fmt.Fprintf(&b, "- **%s:** %s\n", n[0], benchkit.MarkdownEscape(n[1]))
	}
	b.WriteString("\n")
	r.res.buildTable(baseline).WriteMarkdown(&b)
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
				b.WriteString(s.Line + "\n")
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
	placement := "server on CPU " + benchkit.ServerCPU + ", client on CPU " + benchkit.ClientCPU
	if strings.HasPrefix(r.placement, "UNPINNED") {
		placement = "unpinned"
	}
	spin := "no spin"
	if r.cfg.spin > 0 {
		spin = "spin " + r.cfg.spin.String() + " (not gonet)"
	}
	p := &benchkit.Plot{
		Title: fmt.Sprintf("Echo p50 round-trip time vs message size (TCP, %d connection%s)", conns, benchkit.Plural(conns)),
		Subtitle: fmt.Sprintf("median of %d round%s; %s; %s; %s",
			r.cfg.rounds, benchkit.Plural(r.cfg.rounds), placement, spin, r.when.UTC().Format("2006-01-02")),
		XLabel: "message size (log scale)",
		YLabel: "p50 round-trip time (\u00b5s)",
	}
	for _, size := range r.cfg.sizes {
		p.XTicks = append(p.XTicks, float64(size))
		p.XTickLabels = append(p.XTickLabels, benchkit.FormatSize(size))
	}
	// The baseline first, so that it takes the baseline's color.
	apis := slices.Clone(r.cfg.apis)
	if i := slices.Index(apis, baseline); i > 0 {
		apis = slices.Insert(slices.Delete(apis, i, i+1), 0, baseline)
	}
	for _, api := range apis {
		s := benchkit.Series{Name: api, Baseline: api == baseline}
		for _, size := range r.cfg.sizes {
			m, ok := r.res.cells[point{size: size, conns: conns}][api].median()
			if !ok {
				s.Failed = true
				continue
			}
			s.Xs = append(s.Xs, float64(size))
			s.Ys = append(s.Ys, m.P50)
		}
		p.Series = append(p.Series, s)
	}
	return p.WriteSVG(w)
}
