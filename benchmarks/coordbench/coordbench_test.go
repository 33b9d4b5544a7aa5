package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

func TestParseSummary(t *testing.T) {
	line := "system=coord clients=16 size=64 seconds=2.00 ops=4000 ops_per_s=2000 p50_us=6904 p99_us=20021"
	s, err := benchkit.ParseOps(line)
	if err != nil {
		t.Fatal(err)
	}
	if s.Rate != 2000 || s.P50 != 6904 || s.P99 != 20021 || s.Line != line {
		t.Errorf("parseSummary = %+v", s)
	}
	for _, bad := range []string{"", "system=coord ops_per_s=1 p50_us=2", strings.Replace(line, "p99_us=20021", "p99_us=x", 1)} {
		if _, err := benchkit.ParseOps(bad); err == nil {
			t.Errorf("benchkit.ParseOps(%q) succeeded", bad)
		}
	}
}

// TestVerdicts judges the goals from medians against the ensemble's at the
// same client count, and only where both were measured.
func TestVerdicts(t *testing.T) {
	r := newResults(config{systems: []string{ensemble, ours}, clients: []int{1, 16, 64}})
	r.add(ensemble, 1, sample{Rate: 1000, P50: 1000}, nil)
	r.add(ours, 1, sample{Rate: 900, P50: 1400}, nil)
	r.add(ours, 1, sample{Rate: 900, P50: 1600}, nil)
	r.add(ours, 1, sample{Rate: 900, P50: 1450}, nil)
	r.add(ensemble, 16, sample{Rate: 5000}, nil)
	r.add(ours, 16, sample{Rate: 4999}, nil)
	r.add(ensemble, 64, sample{Rate: 5000}, nil)
	r.add(ours, 64, sample{}, errors.New("it broke"))
	got := strings.Join(r.verdicts(), "\n")
	for _, want := range []string{
		"with 16 clients: 4999 vs 5000 (1.00x): MISSED",
		"with 1 client: 1450 vs 1000 us (1.45x): met",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("verdicts lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "64 clients") {
		t.Errorf("a goal judged without coord's figure at 64 clients:\n%s", got)
	}
	if r.Failures() != 1 {
		t.Errorf("failures = %d, want 1", r.Failures())
	}
	var b strings.Builder
	r.table().WriteText(&b)
	if !strings.Contains(b.String(), "it broke") || !strings.Contains(b.String(), "1.45") {
		t.Errorf("table:\n%s", &b)
	}
}

// TestLoadAgainstZooKeeper runs the load against a real standalone
// ZooKeeper, started and stopped as the runner does, and checks what the
// clients left in it.
func TestLoadAgainstZooKeeper(t *testing.T) {
	if _, err := os.Stat(zkServerScript); err != nil {
		t.Skip("Apache ZooKeeper is not installed (Debian package zookeeper)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java to run Apache ZooKeeper")
	}
	ctx := context.Background()
	s, err := startSystem(ctx, &benchkit.Launcher{}, config{}, standalone, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	spec := loadSpec{servers: s.addrs, clients: 3, warmup: 100 * time.Millisecond, duration: 500 * time.Millisecond, size: 5}
	res, err := spec.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ops < 3 || len(res.lat) != res.ops || res.lat[0] <= 0 || res.lat[0] > res.lat[len(res.lat)-1] {
		t.Errorf("result: %d ops, %d latencies, from %v to %v", res.ops, len(res.lat), res.lat[0], res.lat[len(res.lat)-1])
	}
	line := res.line(spec)
	if _, err := benchkit.ParseOps(line); err != nil || !strings.HasPrefix(line, "clients=3 size=5 seconds=0.50 ") {
		t.Errorf("summary %q: %v", line, err)
	}
	c, _, err := zk.Connect(s.addrs, sessionTimeout, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		data, st, err := c.Get(znode(i))
		if err != nil || string(data) != "vvvvv" || st.Version < 1 {
			t.Errorf("%s: %q, %+v, %v: want the value set at least once", znode(i), data, st, err)
		}
	}
	if _, _, err := c.Get(znode(3)); !errors.Is(err, zk.ErrNoNode) {
		t.Errorf("%s: %v, want no node", znode(3), err)
	}
	c.Close()
	s.stop()
	if err := s.check(); err == nil {
		t.Error("the server still runs after stop")
	}
}

func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig([]string{"-systems", "coord,coord-rdma", "-host", "192.0.2.1", "-quick", "-duration", "5s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.systems, []string{ours, oursRDMA}) || cfg.host != "192.0.2.1" {
		t.Errorf("systems %q, host %q", cfg.systems, cfg.host)
	}
	if cfg.rounds != 1 || cfg.warmup != time.Second || cfg.duration != 2*time.Second {
		t.Errorf("-quick: %d rounds, %v warm-up, %v measured", cfg.rounds, cfg.warmup, cfg.duration)
	}
	cfg, err = parseConfig(nil, io.Discard)
	if err != nil || cfg.host != "127.0.0.1" || !slices.Equal(cfg.systems, []string{ensemble, standalone, ours}) {
		t.Errorf("defaults: systems %q, host %q, %v", cfg.systems, cfg.host, err)
	}
	for _, bad := range [][]string{
		{"-systems", "coord,coord-ib"},
		{"-systems", ""},
		{"-host", "rxe0"},
		{"-clients", "0"},
		{"extra"},
	} {
		if _, err := parseConfig(bad, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("parseConfig(%q) = %v, want a usage error", bad, err)
		}
	}
}

// TestReportWithoutEnsemble compares coord over RDMA with coord over TCP
// when no ensemble is measured, and judges no goal.
func TestReportWithoutEnsemble(t *testing.T) {
	r := newResults(config{systems: []string{ours, oursRDMA}, clients: []int{1, 16}, host: "192.0.2.1", rounds: 1})
	r.add(ours, 1, sample{Rate: 1000, P50: 1000, P99: 2000}, nil)
	r.add(oursRDMA, 1, sample{Rate: 1500, P50: 500, P99: 1000}, nil)
	r.add(ours, 16, sample{}, errors.New("no tcp"))
	r.add(oursRDMA, 16, sample{Rate: 3000, P50: 700, P99: 900}, nil)
	if r.baseline() != ours {
		t.Errorf("baseline = %q, want %q", r.baseline(), ours)
	}
	if v := r.verdicts(); len(v) != 0 {
		t.Errorf("verdicts without an ensemble: %q", v)
	}
	var md strings.Builder
	if err := r.writeMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# Coordination service over TCP and RDMA\n",
		"Ratios are to coord over TCP",
		"ops/s vs coord",
		"- **coord-rdma:** the same over RDMA on 192.0.2.1:",
		"| coord-rdma | 1 | 1500 | 500 | 1000 | 1.50",
		"| coord-rdma | 16 | 3000 | 700 | 900 | - | - | - |",
		"no tcp",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "ZooKeeper 3.8") || strings.Contains(md.String(), "ensemble") {
		t.Errorf("report describes a ZooKeeper that was not measured:\n%s", md.String())
	}
	r = newResults(config{systems: []string{oursRDMA}, clients: []int{1}})
	r.add(oursRDMA, 1, sample{Rate: 1500, P50: 500, P99: 1000}, nil)
	var b strings.Builder
	r.table().WriteText(&b)
	if r.baseline() != "" || strings.Contains(b.String(), " vs ") {
		t.Errorf("a ratio with no baseline measured:\n%s", &b)
	}
}

// TestReportNamesRetries: a baseline run tried again is in both the text
// and the Markdown report, and does not count as a failure once the
// second try succeeds.
func TestReportNamesRetries(t *testing.T) {
	r := newResults(config{systems: []string{ensemble, ours}, clients: []int{1}, rounds: 1})
	r.retried(ensemble, 1, errors.New("no operation completed within the measured time"))
	r.add(ensemble, 1, sample{Rate: 1000, P50: 1000, P99: 2000}, nil)
	r.add(ours, 1, sample{Rate: 900, P50: 1100, P99: 2100}, nil)
	if n := r.Failures(); n != 0 {
		t.Errorf("%d failures after a retry that succeeded, want 0", n)
	}
	var text, md strings.Builder
	r.writeText(&text)
	if err := r.writeMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	want := "ensemble with 1 client: no operation completed within the measured time"
	for name, got := range map[string]string{"text": text.String(), "Markdown": md.String()} {
		if !strings.Contains(got, want) {
			t.Errorf("%s report lacks %q:\n%s", name, want, got)
		}
	}
}
