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

// A latency is what one latency run measured: one-way times in
// microseconds, perftest's own or half an echo's round trip.
type latency struct {
	oneWay float64 // the median
	p99    float64
	spinUS string // the echo client's spin budget; empty for perftest
	line   string // what the run printed, for the report
}

func (l latency) status(err error) string {
	if err == errNoLatency {
		return "no latency run (one-way stream)"
	}
	if err != nil {
		return "latency error: " + err.Error()
	}
	return fmt.Sprintf("one-way p50 %.1f us", l.oneWay)
}

// A throughput is what one throughput run measured.
type throughput struct {
	mbps  float64        // payload MB (10^6 bytes) per second, one way
	rate  float64        // messages per second
	costs benchkit.Costs // the echo client's, per message; unknown for perftest
	line  string
}

func (t throughput) status(err error) string {
	if err != nil {
		return "throughput error: " + err.Error()
	}
	return fmt.Sprintf("%.2f MB/s", t.mbps)
}

// A cell holds the runs of one contender at one size.
type cell struct {
	lat     []latency
	bw      []throughput
	latErr  error // the first failed latency run's error; a cell with one reports no latency
	bwErr   error
	latErrs int // failed latency runs
	bwErrs  int
}

// results holds every run of a benchmark, by size and contender.
type results struct {
	contenders []contender
	sizes      []int
	cells      map[int]map[string]*cell
}

func newResults(contenders []contender, sizes []int) *results {
	r := &results{contenders: contenders, sizes: sizes, cells: make(map[int]map[string]*cell)}
	for _, size := range sizes {
		r.cells[size] = make(map[string]*cell)
		for _, c := range contenders {
			r.cells[size][c.name] = &cell{}
		}
	}
	return r
}

// add records the outcome of one round of a contender at size.
func (r *results) add(size int, name string, lat latency, latErr error, bw throughput, bwErr error) {
	c := r.cells[size][name]
	if latErr == errNoLatency {
		// A one-way contender: nothing failed.
	} else if latErr != nil {
		c.latErr = firstError(c.latErr, latErr)
		c.latErrs++
	} else {
		c.lat = append(c.lat, lat)
	}
	if bwErr != nil {
		c.bwErr = firstError(c.bwErr, bwErr)
		c.bwErrs++
	} else {
		c.bw = append(c.bw, bw)
	}
}

// failedAll reports whether every run of the contender failed.
func (r *results) failedAll(name string) bool {
	for _, size := range r.sizes {
		if c := r.cells[size][name]; len(c.lat) > 0 || len(c.bw) > 0 {
			return false
		}
	}
	return true
}

// medianOf returns the median of get over xs.
func medianOf[T any](xs []T, get func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = get(x)
	}
	return benchkit.Median(v)
}

// latency returns the medians of the cell's latency runs, and false if one
// failed or there are none: a figure is the median of all its rounds or
// is not reported.
func (c *cell) latency() (latency, bool) {
	if c.latErr != nil || len(c.lat) == 0 {
		return latency{}, false
	}
	return latency{
		oneWay: medianOf(c.lat, func(l latency) float64 { return l.oneWay }),
		p99:    medianOf(c.lat, func(l latency) float64 { return l.p99 }),
		spinUS: c.lat[0].spinUS,
	}, true
}

// throughput returns the medians of the cell's throughput runs, and false
// if one failed or there are none.
func (c *cell) throughput() (throughput, bool) {
	if c.bwErr != nil || len(c.bw) == 0 {
		return throughput{}, false
	}
	costs := make([]benchkit.Costs, len(c.bw))
	for i, t := range c.bw {
		costs[i] = t.costs
	}
	return throughput{
		mbps:  medianOf(c.bw, func(t throughput) float64 { return t.mbps }),
		rate:  medianOf(c.bw, func(t throughput) float64 { return t.rate }),
		costs: benchkit.MedianCosts(costs),
	}, true
}

// A target is a ratio between two contenders' figures that the RDMA
// transport is meant to reach. One with no limit is a ratio shown for
// comparison only.
type target struct {
	header string // the table's column header
	ours   string // contender
	base   string // contender
	// metric is "latency" (one-way p50), "tail" (ours' p99 over its
	// p50), "relative tail" (ours' p99 over its p50, over base's p99 over
	// its p50) or "throughput" (MB/s).
	metric  string
	atMost  bool // ours/base must be at most limit; else at least
	limit   float64
	maxSize int   // the target applies up to this size; 0 for every size
	at      []int // or only at these sizes
}

var targets = []target{
	{header: "rdma-channel / ib_send_lat", ours: rdmaChannel, base: perftest, metric: "latency", atMost: true, limit: 1.2, maxSize: 16 << 10},
	{header: "rdma-conn / ib_send_lat", ours: rdmaConn, base: perftest, metric: "latency", atMost: true, limit: 1.2, maxSize: 16 << 10},
	{header: "rdma-channel p99 / p50", ours: rdmaChannel, base: rdmaChannel, metric: "tail", atMost: true, limit: 3, maxSize: 16 << 10},
	// The emulator makes a tail of its own, which perftest meets too:
	// ours may be at most twice as long, relative to each one's median.
	{header: "rdma-channel p99/p50 / ib_send_lat p99/p50", ours: rdmaChannel, base: perftest, metric: "relative tail", atMost: true, limit: 2,
		at: []int{64, 1 << 10, 16 << 10}},
	{header: "rdma-conn / rdma-channel p50", ours: rdmaConn, base: rdmaChannel, metric: "latency", atMost: true, limit: 1.3},
	{header: "rdma-channel / tcp-channel p50", ours: rdmaChannel, base: tcpChannel, metric: "latency", atMost: true, limit: 0.60, maxSize: 1 << 10},
	{header: "rdma-conn / tcp-channel p50", ours: rdmaConn, base: tcpChannel, metric: "latency", atMost: true, limit: 0.60, maxSize: 1 << 10},
	{header: "rdma-oneway / ib_send_bw", ours: rdmaOneway, base: perftest, metric: "throughput", limit: 0.85, at: []int{4 << 10, 64 << 10}},
	// An echo with 16 messages in flight is no stream: for comparison.
	{header: "rdma-channel / ib_send_bw", ours: rdmaChannel, base: perftest, metric: "throughput"},
	{header: "rdma-conn / ib_send_bw", ours: rdmaConn, base: perftest, metric: "throughput"},
}

// describe says what the target asks, in a table cell.
func (t target) describe() string {
	if t.limit == 0 {
		return "none"
	}
	op := ">="
	if t.atMost {
		op = "<="
	}
	s := fmt.Sprintf("%s %.2f", op, t.limit)
	switch {
	case len(t.at) > 0:
		sizes := make([]string, len(t.at))
		for i, size := range t.at {
			sizes[i] = benchkit.FormatSize(size)
		}
		s += " at " + strings.Join(sizes, ", ")
	case t.maxSize > 0:
		s += " up to " + benchkit.FormatSize(t.maxSize)
	}
	return s
}

// applies reports whether the target holds at size.
func (t target) applies(size int) bool {
	switch {
	case t.limit == 0:
		return false
	case len(t.at) > 0:
		return slices.Contains(t.at, size)
	}
	return t.maxSize == 0 || size <= t.maxSize
}

// A verdict is a target's ratio at one size.
type verdict struct {
	ratio    float64
	measured bool // both figures were measured
	applies  bool // the target holds at this size
	met      bool
}

// judge computes the target's ratio at size.
func (r *results) judge(t target, size int) verdict {
	ours, okOurs := r.cells[size][t.ours]
	base, okBase := r.cells[size][t.base]
	if !okOurs || !okBase {
		return verdict{}
	}
	var a, b float64
	switch t.metric {
	case "latency":
		lo, ok1 := ours.latency()
		lb, ok2 := base.latency()
		if !ok1 || !ok2 || lb.oneWay == 0 {
			return verdict{}
		}
		a, b = lo.oneWay, lb.oneWay
	case "tail":
		lo, ok := ours.latency()
		if !ok || lo.oneWay == 0 {
			return verdict{}
		}
		a, b = lo.p99, lo.oneWay
	case "relative tail":
		lo, ok1 := ours.latency()
		lb, ok2 := base.latency()
		if !ok1 || !ok2 || lo.oneWay == 0 || lb.oneWay == 0 || lb.p99 == 0 {
			return verdict{}
		}
		a, b = lo.p99/lo.oneWay, lb.p99/lb.oneWay
	default:
		to, ok1 := ours.throughput()
		tb, ok2 := base.throughput()
		if !ok1 || !ok2 || tb.mbps == 0 {
			return verdict{}
		}
		a, b = to.mbps, tb.mbps
	}
	v := verdict{ratio: a / b, measured: true, applies: t.applies(size)}
	// Compare the ratio as printed, so that a cell never reads "1.15
	// missed" against a target of 1.15.
	rounded := float64(int(v.ratio*100+0.5)) / 100
	if t.atMost {
		v.met = rounded <= t.limit
	} else {
		v.met = rounded >= t.limit
	}
	return v
}

func (v verdict) String() string {
	switch {
	case !v.measured:
		return "-"
	case !v.applies:
		return fmt.Sprintf("%.2f", v.ratio)
	case v.met:
		return fmt.Sprintf("%.2f met", v.ratio)
	}
	return fmt.Sprintf("%.2f MISSED", v.ratio)
}

// summary says how a target fared over all the sizes it applies at.
func (r *results) summary(t target) string {
	var met, missed, unmeasured []string
	for _, size := range r.sizes {
		if !t.applies(size) {
			continue
		}
		v := r.judge(t, size)
		s := fmt.Sprintf("%s (%.2f)", benchkit.FormatSize(size), v.ratio)
		switch {
		case !v.measured:
			unmeasured = append(unmeasured, benchkit.FormatSize(size))
		case v.met:
			met = append(met, s)
		default:
			missed = append(missed, s)
		}
	}
	var parts []string
	switch {
	case len(met)+len(missed)+len(unmeasured) == 0:
		return "not measured: no size in its range"
	case len(missed) == 0 && len(unmeasured) == 0:
		return "met at " + strings.Join(met, ", ")
	case len(met) == 0 && len(unmeasured) == 0:
		return "missed at " + strings.Join(missed, ", ")
	}
	if len(met) > 0 {
		parts = append(parts, "met at "+strings.Join(met, ", "))
	}
	if len(missed) > 0 {
		parts = append(parts, "missed at "+strings.Join(missed, ", "))
	}
	if len(unmeasured) > 0 {
		parts = append(parts, "not measured at "+strings.Join(unmeasured, ", "))
	}
	return strings.Join(parts, "; ")
}

// activeTargets returns the targets whose contenders were both run.
func (r *results) activeTargets() []target {
	var out []target
	for _, t := range targets {
		if r.has(t.ours) && r.has(t.base) {
			out = append(out, t)
		}
	}
	return out
}

func (r *results) has(name string) bool {
	return slices.ContainsFunc(r.contenders, func(c contender) bool { return c.name == name })
}

// measurementTable lays out the medians of every contender.
func (r *results) measurementTable() *benchkit.Table {
	t := &benchkit.Table{
		Header: append([]string{"size", "contender", "one-way p50 us", "one-way p99 us", "MB/s", "msgs/s"}, benchkit.CostsHeader...),
		Right:  append([]bool{true, false, true, true, true, true}, benchkit.CostsRight...),
		ErrCol: 2,
	}
	for _, size := range r.sizes {
		for _, c := range r.contenders {
			cl := r.cells[size][c.name]
			row := []string{benchkit.FormatSize(size), c.name}
			lat, okLat := cl.latency()
			bw, okBW := cl.throughput()
			if !okLat && !okBW {
				t.AddError(cellError(cl.latErr, cl.bwErr), row...)
				continue
			}
			if c.oneway {
				row = append(row, "-", "-")
			} else if okLat {
				row = append(row, fmt.Sprintf("%.1f", lat.oneWay), fmt.Sprintf("%.1f", lat.p99))
			} else {
				row = append(row, "failed", "failed")
			}
			if okBW {
				row = append(row, fmt.Sprintf("%.2f", bw.mbps), fmt.Sprintf("%.0f", bw.rate))
				row = append(row, bw.costs.Cells()...)
			} else {
				row = append(row, "failed", "failed")
				for range benchkit.CostsHeader {
					row = append(row, "failed")
				}
			}
			t.Add(row...)
		}
	}
	return t
}

// cellError says why a contender has no figures at a size.
func cellError(latErr, bwErr error) string {
	switch {
	case latErr != nil && bwErr != nil && latErr.Error() == bwErr.Error():
		return "error: " + latErr.Error()
	case latErr != nil && bwErr != nil:
		return "latency error: " + latErr.Error() + "; throughput error: " + bwErr.Error()
	case latErr != nil:
		return "latency error: " + latErr.Error()
	case bwErr != nil:
		return "throughput error: " + bwErr.Error()
	}
	return "no runs"
}

// ratioTable lays out every target's ratio at every size, after a row of
// the targets themselves.
func (r *results) ratioTable() *benchkit.Table {
	ts := r.activeTargets()
	t := &benchkit.Table{Header: []string{"size"}, Right: []bool{true}, ErrCol: 1}
	row := []string{"target"}
	for _, tg := range ts {
		t.Header = append(t.Header, tg.header)
		t.Right = append(t.Right, true)
		row = append(row, tg.describe())
	}
	t.Add(row...)
	for _, size := range r.sizes {
		row := []string{benchkit.FormatSize(size)}
		for _, tg := range ts {
			row = append(row, r.judge(tg, size).String())
		}
		t.Add(row...)
	}
	return t
}

// failures lists every failed run, for the report.
func (r *results) failures() []string {
	var out []string
	for _, size := range r.sizes {
		for _, c := range r.contenders {
			cl := r.cells[size][c.name]
			if cl.latErr != nil {
				out = append(out, fmt.Sprintf("%s %s latency: %d of %d runs failed; the first: %v",
					benchkit.FormatSize(size), c.name, cl.latErrs, cl.latErrs+len(cl.lat), cl.latErr))
			}
			if cl.bwErr != nil {
				out = append(out, fmt.Sprintf("%s %s throughput: %d of %d runs failed; the first: %v",
					benchkit.FormatSize(size), c.name, cl.bwErrs, cl.bwErrs+len(cl.bw), cl.bwErr))
			}
		}
	}
	return out
}

// A report presents the results of a benchmark.
type report struct {
	cfg             *config
	res             *results
	placement       string
	elapsed         time.Duration
	when            time.Time
	perftestRetries []string
}

// spinSetting names the echo contenders' spin setting.
func spinSetting(spin time.Duration) string {
	if spin == 0 {
		return "adaptive (the default configuration)"
	}
	return spin.String() + " (fixed)"
}

// notes returns what a reader needs to know to judge the figures, as
// (label, text) pairs.
func (r *report) notes() [][2]string {
	cfg := r.cfg
	names := make([]string, len(cfg.contenders))
	for i, c := range cfg.contenders {
		names[i] = c.name
	}
	cm := "rdma_cm (-R)"
	if !cfg.cm {
		cm = "a TCP exchange (no -R)"
	}
	notes := [][2]string{
		{"machine", benchkit.Machine()},
		{"address", fmt.Sprintf("%s, the RDMA device's; TCP uses it too, and the kernel loops it back", cfg.addr)},
		{"placement", r.placement},
		{"spin", spinSetting(cfg.spin) + " on both server and client of every echo contender; perftest always busy-polls"},
		{"method", fmt.Sprintf("median of %d round%s; in each round, at each size, the contenders run in turn (%s), each with fresh processes",
			cfg.rounds, benchkit.Plural(cfg.rounds), strings.Join(names, ", "))},
		{"latency runs", fmt.Sprintf("1 connection, 1 message in flight; messages per run: %s (-n %d up to 4 KiB, proportionally fewer above); "+
			"echo warms up with min(1000, n/10) unmeasured messages first",
			r.messageCounts(cfg.latencyMessages), cfg.n)},
		{"throughput runs", fmt.Sprintf("echo: 1 connection, %d messages in flight, each echoed back; messages per run: %s",
			cfg.depth, r.messageCounts(cfg.throughputMessages))},
	}
	if r.res.has(perftest) {
		notes = append(notes, [2]string{"perftest", fmt.Sprintf("%s and %s on %s, queue pairs connected through %s, as many iterations as echo's messages; "+
			"one-way latency is ib_send_lat's t_typical (the median) and 99%% percentile; "+
			"ib_send_bw streams one way with 128 sends in flight, and its figure is the receiver's (the sender's where the receiver's is unusable)",
			latencyTool, bandwidthTool, cfg.device, cm)})
	}
	notes = append(notes, [][2]string{
		{"units", "one-way latency in us: perftest's own, half the echo round trip for the others; " +
			"MB/s are 10^6 bytes of payload per second one way (perftest's MiB/s converted); " +
			"the echo throughput run moves every byte back too, ib_send_bw one way only"},
		{"costs", "CPU ns/msg, cgo/msg, syscalls/msg and switches/msg are what the echo client process (not the server) spent per message in the throughput run: " +
			"CPU time, user and system, by getrusage; calls from Go to C, by the Go runtime; system calls, counted by the kernel (raw_syscalls:sys_enter); " +
			"context switches of its threads, voluntary and involuntary, by getrusage; " +
			"- where not measured, and always for perftest; system calls are counted only where tracefs is mounted, which the Soft-RoCE VM does not do. " +
			"Latency runs do not count system calls, since counting slows every one"},
		{"duration", r.elapsed.String()},
	}...)
	if n := len(r.perftestRetries); n > 0 {
		notes = append(notes, [2]string{"retries", fmt.Sprintf("%d perftest attempt%s failed and retried (inf, figures its run time contradicts, or a failed start); listed below", n, benchkit.Plural(n))})
	}
	if cfg.spin > 0 {
		want := strconv.FormatFloat(float64(cfg.spin)/float64(time.Microsecond), 'f', -1, 64)
		for _, c := range cfg.contenders {
			for _, size := range r.res.sizes {
				if l, ok := r.res.cells[size][c.name].latency(); ok && l.spinUS != "" && l.spinUS != want {
					notes = append(notes, [2]string{"note", fmt.Sprintf("%s reported spin_us=%s: it has no busy-poll setting and ran without one", c.name, l.spinUS)})
					break
				}
			}
		}
	}
	return notes
}

// messageCounts lists the messages per run at each size.
func (r *report) messageCounts(count func(int) int) string {
	var parts []string
	for _, size := range r.cfg.sizes {
		parts = append(parts, fmt.Sprintf("%d at %s", count(size), benchkit.FormatSize(size)))
	}
	return strings.Join(parts, ", ")
}

// writeText writes the report for a terminal.
func (r *report) writeText(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "RDMA echo benchmark")
	for _, n := range r.notes() {
		fmt.Fprintf(w, "  %-16s %s\n", n[0]+":", n[1])
	}
	fmt.Fprintln(w)
	r.res.measurementTable().WriteText(w)
	if ts := r.res.activeTargets(); len(ts) > 0 {
		fmt.Fprintln(w)
		r.res.ratioTable().WriteText(w)
		fmt.Fprintln(w)
		for _, t := range ts {
			if t.limit != 0 {
				fmt.Fprintf(w, "  %-32s %s: %s\n", t.header, t.describe(), r.res.summary(t))
			}
		}
	}
	if f := r.res.failures(); len(f) > 0 {
		fmt.Fprintln(w)
		for _, line := range f {
			fmt.Fprintln(w, "  failed: "+line)
		}
	}
	fmt.Fprintln(w)
}

// writeMarkdown writes the report as a Markdown document that shows the
// plot written beside it.
func (r *report) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Echo benchmark: RDMA (Soft-RoCE)\n\n")
	cmd := r.cfg.generatedBy
	if cmd == "" {
		cmd = strings.Join(append([]string{"rdmabench"}, r.cfg.args...), " ")
	}
	fmt.Fprintf(&b, "Generated by `%s` on %s.\n\n", cmd, r.when.UTC().Format("2006-01-02 15:04 MST"))
	for _, n := range r.notes() {
		fmt.Fprintf(&b, "- **%s:** %s\n", n[0], benchkit.MarkdownEscape(n[1]))
	}
	b.WriteString("\n## Medians\n\n")
	r.res.measurementTable().WriteMarkdown(&b)
	if ts := r.res.activeTargets(); len(ts) > 0 {
		b.WriteString("\n## Ratios and targets\n\n")
		b.WriteString("Each ratio is between medians of this run. Latency ratios compare one-way p50 " +
			"(below 1: ours is faster), except p99 / p50, a contender's own tail, and that tail over perftest's own; throughput ratios compare MB/s " +
			"(above 1: ours moves more). A ratio outside a target's sizes, or with no target, has no verdict.\n\n")
		r.res.ratioTable().WriteMarkdown(&b)
		b.WriteString("\n")
		for _, t := range ts {
			if t.limit != 0 {
				fmt.Fprintf(&b, "- **%s %s:** %s\n", t.header, t.describe(), r.res.summary(t))
			}
		}
	}
	if f := r.res.failures(); len(f) > 0 {
		b.WriteString("\nFailed runs:\n\n")
		for _, line := range f {
			fmt.Fprintf(&b, "- %s\n", benchkit.MarkdownEscape(line))
		}
	}
	if r.cfg.svg != "" && r.cfg.md != "" {
		rel, err := filepath.Rel(filepath.Dir(r.cfg.md), r.cfg.svg)
		if err != nil {
			rel = r.cfg.svg
		}
		fmt.Fprintf(&b, "\n![one-way latency against message size](%s)\n", filepath.ToSlash(rel))
	}
	b.WriteString("\n<details><summary>Every run's figures</summary>\n\n```\n")
	for _, size := range r.res.sizes {
		for _, c := range r.res.contenders {
			cl := r.res.cells[size][c.name]
			for _, l := range cl.lat {
				b.WriteString(l.line + "\n")
			}
			for _, t := range cl.bw {
				b.WriteString(t.line + "\n")
			}
		}
	}
	for _, line := range r.perftestRetries {
		b.WriteString("retried: " + line + "\n")
	}
	b.WriteString("```\n\n</details>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSVG writes the plot of one-way p50 latency against message size.
func (r *report) writeSVG(w io.Writer) error {
	placement := "server on CPU " + benchkit.ServerCPU + ", client on CPU " + benchkit.ClientCPU
	if strings.HasPrefix(r.placement, "UNPINNED") {
		placement = "unpinned"
	}
	p := &benchkit.Plot{
		Title: "One-way latency vs message size (RDMA, Soft-RoCE, emulated)",
		Subtitle: fmt.Sprintf("p50, median of %d round%s; echo: half the round trip, spin %s; %s; %s",
			r.cfg.rounds, benchkit.Plural(r.cfg.rounds), spinSetting(r.cfg.spin), placement, r.when.UTC().Format("2006-01-02")),
		XLabel: "message size (log scale)",
		YLabel: "one-way p50 latency (\u00b5s, log scale)",
		LogY:   true,
	}
	for _, size := range r.cfg.sizes {
		p.XTicks = append(p.XTicks, float64(size))
		p.XTickLabels = append(p.XTickLabels, benchkit.FormatSize(size))
	}
	for _, c := range r.res.contenders {
		if c.oneway {
			continue // no latency
		}
		s := benchkit.Series{Name: c.name, Baseline: c.name == perftest}
		if c.name == perftest {
			s.Name = latencyTool
		}
		for _, size := range r.cfg.sizes {
			l, ok := r.res.cells[size][c.name].latency()
			if !ok || l.oneWay <= 0 {
				s.Failed = true
				continue
			}
			s.Xs = append(s.Xs, float64(size))
			s.Ys = append(s.Ys, l.oneWay)
		}
		p.Series = append(p.Series, s)
	}
	return p.WriteSVG(w)
}
