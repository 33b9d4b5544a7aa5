package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

// The goals, as ratios to the ensemble measured in the same run.
const (
	goalThroughput    = 1.0 // coord's ops/s over the ensemble's, at every count of goalThroughputAt
	stretchThroughput = 2.0
	goalP50           = 1.5 // coord's p50 over the ensemble's, with goalP50Clients
	goalP50Clients    = 1
)

// goalThroughputAt are the client counts the throughput goal is judged at.
var goalThroughputAt = []int{16, 64}

// key names one measured point.
type key struct {
	system  string
	clients int
}

// results holds every run, by point.
type results struct {
	cfg     config
	systems map[string]*system
	benchkit.Runs[key]
	duration  time.Duration
	placement string
	retries   []string // baseline runs that failed and were tried again
}

func newResults(cfg config) *results {
	return &results{cfg: cfg, systems: make(map[string]*system), Runs: benchkit.NewRuns[key]()}
}

func (r *results) add(system string, clients int, s sample, err error) {
	r.Add(key{system, clients}, s, err)
}

// retried records a baseline run that failed and was tried again.
func (r *results) retried(system string, clients int, err error) {
	r.retries = append(r.retries, fmt.Sprintf("%s with %d client%s: %v", system, clients, benchkit.Plural(clients), err))
}

// baseline returns the system every figure is compared with: the
// ensemble, or without it coord over TCP (so that coord over RDMA compares
// with it); "" if the run measures neither.
func (r *results) baseline() string {
	for _, name := range []string{ensemble, ours} {
		if slices.Contains(r.cfg.systems, name) {
			return name
		}
	}
	return ""
}

// table returns the medians, with every figure's ratio to the baseline's
// at the same client count, if there is a baseline.
func (r *results) table() *benchkit.Table {
	base := r.baseline()
	t := &benchkit.Table{
		Header: []string{"system", "clients", "ops/s", "p50 us", "p99 us"},
		Right:  []bool{false, true, true, true, true},
		ErrCol: 2,
	}
	if base != "" {
		t.Header = append(t.Header, "ops/s vs "+base, "p50 vs "+base, "p99 vs "+base)
		t.Right = append(t.Right, true, true, true)
	}
	for _, clients := range r.cfg.clients {
		for _, name := range r.cfg.systems {
			k := key{name, clients}
			cells := []string{name, fmt.Sprint(clients)}
			s, ok := r.Medians(k)
			if !ok {
				t.AddError(fmt.Sprint(r.Errs[k][0]), cells...)
				continue
			}
			cells = append(cells, fmt.Sprintf("%.0f", s.Rate), fmt.Sprintf("%.0f", s.P50), fmt.Sprintf("%.0f", s.P99))
			switch {
			case base == "":
			case name == base:
				cells = append(cells, "base", "base", "base")
			default:
				vs := []string{"-", "-", "-"}
				if b, ok := r.Medians(key{base, clients}); ok {
					vs = []string{benchkit.Ratio(s.Rate, b.Rate), benchkit.Ratio(s.P50, b.P50), benchkit.Ratio(s.P99, b.P99)}
				}
				cells = append(cells, vs...)
			}
			t.Add(cells...)
		}
	}
	return t
}

func (r *results) writeText(w io.Writer) {
	fmt.Fprintln(w)
	r.table().WriteText(w)
	for _, line := range r.verdicts() {
		fmt.Fprintln(w, line)
	}
	for _, line := range r.retries {
		fmt.Fprintln(w, "tried again after a failed run:", line)
	}
}

// verdicts judges the goals, where this run measured what they need:
// ours and the ensemble at the same client count.
func (r *results) verdicts() []string {
	var out []string
	for _, c := range goalThroughputAt {
		o, ok1 := r.Medians(key{ours, c})
		b, ok2 := r.Medians(key{ensemble, c})
		if !ok1 || !ok2 {
			continue
		}
		ratio := o.Rate / b.Rate
		stretch := ""
		if ratio >= stretchThroughput {
			stretch = fmt.Sprintf(" (stretch goal of %.0fx met too)", stretchThroughput)
		}
		out = append(out, fmt.Sprintf("goal: coord ops/s >= ensemble's with %d clients: %.0f vs %.0f (%.2fx): %s%s",
			c, o.Rate, b.Rate, ratio, verdict(ratio >= goalThroughput), stretch))
	}
	o, ok1 := r.Medians(key{ours, goalP50Clients})
	b, ok2 := r.Medians(key{ensemble, goalP50Clients})
	if ok1 && ok2 {
		ratio := o.P50 / b.P50
		out = append(out, fmt.Sprintf("goal: coord p50 <= %.1fx ensemble's with %d client: %.0f vs %.0f us (%.2fx): %s",
			goalP50, goalP50Clients, o.P50, b.P50, ratio, verdict(ratio <= goalP50)))
	}
	return out
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

// title names what the run compares.
func (r *results) title() string {
	if slices.ContainsFunc(r.cfg.systems, zooKeeper) {
		return "Coordination service against Apache ZooKeeper"
	}
	var over []string
	for _, name := range r.cfg.systems {
		switch name {
		case ours:
			over = append(over, "TCP")
		case oursRDMA:
			over = append(over, "RDMA")
		}
	}
	return "Coordination service over " + strings.Join(over, " and ")
}

// systemNotes describes the named system for the report.
func (r *results) systemNotes(name string) string {
	where := ""
	if r.cfg.host != "127.0.0.1" {
		where = " on " + r.cfg.host
	}
	switch name {
	case ensemble:
		return "three Apache ZooKeeper 3.8 servers (Debian package `zookeeper`, default settings, synced transaction log) on loopback; client i connects to server i mod 3"
	case standalone:
		return "one Apache ZooKeeper server"
	case ours:
		return "four `coord replica` processes (f = 1) over TCP" + where + ", each persisting to its own data directory, and one `coord gateway` that every client connects to; every read is linearizable"
	case oursRDMA:
		return "the same over RDMA" + where + ": the replicas talk to each other, and the gateway to them, over the rdma transport; the clients reach the gateway over TCP"
	}
	return ""
}

func (r *results) writeMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "# %s\n\n", r.title())
	if r.cfg.generatedBy != "" {
		fmt.Fprintf(w, "Generated by `%s`.\n\n", r.cfg.generatedBy)
	}
	fmt.Fprintf(w, "Closed-loop clients of go-zookeeper/zk, each with its own session and znode, alternating setData and getData of a %s value; "+
		"%v of warm-up, then %v measured; medians of %d round%s, the systems alternating within each round.",
		benchkit.FormatSize(r.cfg.size), r.cfg.warmup, r.cfg.duration, r.cfg.rounds, benchkit.Plural(r.cfg.rounds))
	switch r.baseline() {
	case ensemble:
		fmt.Fprintf(w, " Ratios are to the Apache ZooKeeper ensemble measured in the same run.")
	case ours:
		fmt.Fprintf(w, " Ratios are to coord over TCP measured in the same run.")
	}
	fmt.Fprintf(w, "\n\n")
	for _, name := range r.cfg.systems {
		fmt.Fprintf(w, "- **%s:** %s\n", name, r.systemNotes(name))
	}
	fmt.Fprintf(w, "- **machine:** %s\n", benchkit.Machine())
	shared := ""
	if r.cfg.pin {
		shared = "; every server process of a system (JVMs, or replicas and gateway) shares the server CPU"
	}
	fmt.Fprintf(w, "- **placement:** %s%s\n", r.placement, shared)
	fmt.Fprintf(w, "- **duration:** %s\n\n", r.duration.Round(time.Second))
	r.table().WriteMarkdown(w)
	if v := r.verdicts(); len(v) > 0 {
		fmt.Fprintln(w)
		for _, line := range v {
			fmt.Fprintf(w, "- %s\n", line)
		}
	}
	if len(r.retries) > 0 {
		fmt.Fprintln(w, "\nBaseline runs that failed and were tried once more (ours never are):")
		for _, line := range r.retries {
			fmt.Fprintf(w, "\n- %s", line)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\nEvery run's summary line:\n\n```")
	for _, clients := range r.cfg.clients {
		for _, name := range r.cfg.systems {
			k := key{name, clients}
			for _, s := range r.Samples[k] {
				fmt.Fprintln(w, s.Line)
			}
			for _, err := range r.Errs[k] {
				fmt.Fprintf(w, "system=%s clients=%d error: %v\n", name, clients, err)
			}
		}
	}
	fmt.Fprintln(w, "```")
	return nil
}

// plot draws throughput against the number of clients, a line per system.
func (r *results) plot() *benchkit.Plot {
	p := &benchkit.Plot{
		Title:    r.title(),
		Subtitle: "median ops/s, 50% setData / 50% getData; " + r.placement,
		XLabel:   "clients",
		YLabel:   "operations per second",
	}
	for _, c := range r.cfg.clients {
		p.XTicks = append(p.XTicks, float64(c))
		p.XTickLabels = append(p.XTickLabels, fmt.Sprint(c))
	}
	for _, name := range r.cfg.systems {
		s := benchkit.Series{Name: name, Baseline: name == r.baseline() && len(r.cfg.systems) > 1}
		for _, c := range r.cfg.clients {
			m, ok := r.Medians(key{name, c})
			if !ok {
				s.Failed = true
				continue
			}
			s.Xs, s.Ys = append(s.Xs, float64(c)), append(s.Ys, m.Rate)
		}
		p.Series = append(p.Series, s)
	}
	return p
}
