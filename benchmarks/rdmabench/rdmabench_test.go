package main

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

// Outputs of perftest 4.5 under TCG emulation, as seen in the Soft-RoCE
// virtual machine (trimmed).
const (
	latOut = `---------------------------------------------------------------------------------------
                    Send Latency Test
 Dual-port       : OFF		Device         : rxe0
 rdma_cm QPs	 : ON
---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 64      200          12.44          200.16       14.29    	       16.29       	14.18  		198.41  		200.16 
---------------------------------------------------------------------------------------
`
	latInfOut = `---------------------------------------------------------------------------------------
 #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 64      200          inf            inf          inf      	       inf         	-nan   		inf     		inf    
---------------------------------------------------------------------------------------
`
	bwOut = `Correlation coefficient r^2: 0.749288 < 0.9
---------------------------------------------------------------------------------------
                    Send BW Test
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 102400     300              0.00               36.04  		   0.000369
---------------------------------------------------------------------------------------
`
	bwZeroOut = `---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 16384      1000             0.00               0.00   		   0.000000
---------------------------------------------------------------------------------------
`
)

func TestParseLatency(t *testing.T) {
	r, err := parseLatency(latOut)
	if err != nil {
		t.Fatal(err)
	}
	if r.iters != 200 || r.typical != 14.29 || r.avg != 16.29 || r.min != 12.44 || r.max != 200.16 || r.p99 != 198.41 {
		t.Errorf("parseLatency = %+v", r)
	}
	if err := r.check(200, time.Second); err != nil {
		t.Errorf("check: %v", err)
	}
	if err := r.check(200, 5*time.Millisecond); err == nil {
		t.Error("check accepted 6.5 ms of ping-pong in a 5 ms run")
	}
	if err := r.check(100, time.Second); err == nil {
		t.Error("check accepted the wrong iteration count")
	}
	if _, err := parseLatency(latInfOut); !errors.Is(err, errNotFinite) {
		t.Errorf("parseLatency of inf output: %v, want errNotFinite", err)
	}
	if _, err := parseLatency("Couldn't connect to 192.0.2.1:18516\n"); err == nil || !strings.Contains(err.Error(), "Couldn't connect") {
		t.Errorf("parseLatency without a result: %v, want the failure line", err)
	}
}

func TestParseBandwidth(t *testing.T) {
	r, err := parseBandwidth(bwOut)
	if err != nil {
		t.Fatal(err)
	}
	if r.iters != 300 || r.avg != 36.04 {
		t.Errorf("parseBandwidth = %+v", r)
	}
	// 300 x 100 KiB at 36.04 MiB/s is 0.81 s.
	if err := r.check(102400, 300, time.Second); err != nil {
		t.Errorf("check: %v", err)
	}
	if err := r.check(102400, 300, 500*time.Millisecond); err == nil {
		t.Error("check accepted 0.81 s of transfer in a 0.5 s run")
	}
	if _, err := parseBandwidth(bwZeroOut); !errors.Is(err, errNotFinite) {
		t.Errorf("parseBandwidth of 0.00: %v, want errNotFinite", err)
	}
}

func TestPickSide(t *testing.T) {
	parse := func(s side) (latReport, error) { return parseLatency(s.out) }
	server := side{name: "server", out: latInfOut}
	client := side{name: "client", out: latOut}
	r, err := pickSide(server, client, parse)
	if err != nil || r.side != "client" || r.typical != 14.29 {
		t.Errorf("pickSide(inf, good) = %+v, %v; want the client's", r, err)
	}
	if _, err := pickSide(server, server, parse); err == nil || !strings.HasPrefix(err.Error(), "server: ") {
		t.Errorf("pickSide(inf, inf) error = %v", err)
	}
}

func TestPerftestBrief(t *testing.T) {
	out := "----\n Couldn't connect to 192.0.2.1:18516\n Unable to init the socket connection\n"
	if got := perftestBrief(out); got != "Couldn't connect to 192.0.2.1:18516" {
		t.Errorf("perftestBrief = %q", got)
	}
	if got := perftestBrief(""); got != "(no output)" {
		t.Errorf("perftestBrief(\"\") = %q", got)
	}
}

func TestMessages(t *testing.T) {
	cfg := &config{n: 2000}
	for size, want := range map[int]int{64: 2000, 4096: 2000, 16384: 500, 102400: 200} {
		if got := cfg.latencyMessages(size); got != want {
			t.Errorf("latencyMessages(%d) = %d, want %d", size, got, want)
		}
		if got := cfg.throughputMessages(size); got != 2*want {
			t.Errorf("throughputMessages(%d) = %d, want %d", size, got, 2*want)
		}
	}
	if got := (&config{n: 50}).latencyMessages(102400); got != 50 {
		t.Errorf("latencyMessages with -n 50 = %d, want 50", got)
	}
}

func TestFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-addr", "192.0.2.1", "-quick"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.sizes) != 2 || cfg.rounds != 1 || cfg.n != 400 || len(cfg.contenders) != 5 || cfg.spin != 0 {
		t.Errorf("-quick gave %+v", cfg)
	}
	cfg, err = parseFlags([]string{"-addr", "192.0.2.1", "-contenders", "tcp-channel,perftest", "-rounds", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.contenders) != 2 || cfg.contenders[0].name != perftest || cfg.rounds != 2 {
		t.Errorf("-contenders tcp-channel,perftest gave %+v", cfg.contenders)
	}
	for _, bad := range [][]string{
		{"-addr", "192.0.2.1", "-contenders", "nope"},
		{"-addr", "192.0.2.1", "-sizes", "0"},
		{"-addr", "not-an-ip"},
		{"-addr", "192.0.2.1", "-retries", "0"},
		{"-addr", "192.0.2.1", "extra"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

// known returns a cost that was measured.
func known(x float64) benchkit.Cost { return benchkit.Cost{Value: x, Known: true} }

// testResults returns two sizes of every contender, in which rdma-conn's
// throughput failed at 1 KiB, and tcp-channel's system calls were not
// counted in one round.
func testResults() *results {
	sizes := []int{64, 1024}
	res := newResults(allContenders, sizes)
	for _, size := range sizes {
		f := float64(size) / 64
		for round := range 3 {
			jitter := float64(round)
			res.add(size, perftest, latency{oneWay: 10 * f, p99: 20 * f, line: "perftest"}, nil, throughput{mbps: 100, rate: 1000}, nil)
			res.add(size, rdmaChannel, latency{oneWay: 11 * f, p99: 30 * f, spinUS: "50"}, nil, throughput{mbps: 90 + jitter, costs: benchkit.Costs{
				CPUNs: known(4000 + 100*jitter), Cgo: known(3 - jitter/10), Syscalls: known(0.5 * f), Switches: known(jitter)}}, nil)
			tcpCosts := benchkit.Costs{CPUNs: known(9000), Cgo: known(0), Syscalls: known(4), Switches: known(2)}
			if round == 2 {
				tcpCosts.Syscalls = benchkit.Cost{} // not counted
			}
			res.add(size, tcpChannel, latency{oneWay: 30 * f, spinUS: "50"}, nil, throughput{mbps: 50, costs: tcpCosts}, nil)
			var bwErr error
			if size == 1024 && round == 1 {
				bwErr = errors.New("client: exit status 1: echo: boom")
			}
			res.add(size, rdmaConn, latency{oneWay: 13 * f, spinUS: "50"}, nil, throughput{mbps: 70}, bwErr)
			res.add(size, rdmaOneway, latency{}, errNoLatency, throughput{mbps: 80}, nil)
		}
	}
	return res
}

func TestJudge(t *testing.T) {
	res := testResults()
	for _, c := range []struct {
		target int
		size   int
		want   string
	}{
		{0, 64, "1.10 met"},    // rdma-channel 11 / perftest 10
		{1, 64, "1.30 MISSED"}, // rdma-conn 13 / 10
		{2, 64, "2.73 met"},    // rdma-channel's p99 30 / its p50 11
		{3, 64, "1.36 met"},    // rdma-channel's tail 30/11 over perftest's 20/10
		{4, 64, "1.18 met"},    // rdma-conn 13 / rdma-channel 11
		{5, 64, "0.37 met"},    // rdma-channel 11 / tcp 30
		{6, 1024, "0.43 met"},
		{7, 64, "0.80"}, // rdma-oneway 80 MB/s / 100, at a size with no target
		{8, 64, "0.91"}, // rdma-channel 91 MB/s (median of 90, 91, 92) / 100: no target
		{9, 1024, "-"},  // rdma-conn failed a throughput run
		{7, 4096, "-"},  // not measured at 4 KiB
	} {
		if got := res.judge(targets[c.target], c.size).String(); got != c.want {
			t.Errorf("%s at %d = %q, want %q", targets[c.target].header, c.size, got, c.want)
		}
	}
	// Out of range: a ratio, no verdict.
	tg := targets[5]
	tg.maxSize = 64
	if got := res.judge(tg, 1024).String(); got != "0.37" {
		t.Errorf("out-of-range verdict = %q, want a bare ratio", got)
	}
	// The limit itself is met, however the ratio rounds.
	tg = target{ours: rdmaChannel, base: perftest, metric: "latency", atMost: true, limit: 1.10}
	if v := res.judge(tg, 64); !v.met {
		t.Errorf("ratio 1.10 against limit 1.10: %+v, want met", v)
	}
	if got := res.summary(targets[7]); got != "not measured: no size in its range" {
		t.Errorf("summary = %q, want its sizes not run", got)
	}
	tg = targets[7]
	tg.at = []int{64, 1024}
	if got := res.summary(tg); got != "missed at 64 B (0.80), 1 KiB (0.80)" {
		t.Errorf("summary = %q", got)
	}
}

// TestMeasurementTableCosts checks the medians of the echo client's costs
// in the measurement table: "-" where a round did not measure one, and
// for perftest, which has none.
func TestMeasurementTableCosts(t *testing.T) {
	tab := testResults().measurementTable()
	costCol := len(tab.Header) - len(benchkit.CostsHeader)
	if got := tab.Header[costCol:]; !slices.Equal(got, []string{"CPU ns/msg", "cgo/msg", "syscalls/msg", "switches/msg"}) {
		t.Fatalf("the last columns are %q", got)
	}
	want := map[[2]string]string{
		{"64 B", rdmaChannel}:  "4100 2.90 0.50 1.00",
		{"1 KiB", rdmaChannel}: "4100 2.90 8.00 1.00",
		{"64 B", tcpChannel}:   "9000 0.00 - 2.00",
		{"64 B", perftest}:     "- - - -",
		{"64 B", rdmaOneway}:   "- - - -",
		{"1 KiB", rdmaConn}:    "failed failed failed failed", // a throughput run failed
	}
	for i, row := range tab.Rows {
		key := [2]string{row[0], row[1]}
		w, ok := want[key]
		if !ok {
			continue
		}
		delete(want, key)
		got := ""
		if tab.Errs[i] == "" {
			got = strings.Join(row[costCol:], " ")
		}
		if got != w {
			t.Errorf("%s %s costs %q, want %q", key[0], key[1], got, w)
		}
	}
	for key := range want {
		t.Errorf("no row for %s %s", key[0], key[1])
	}
}

func TestReport(t *testing.T) {
	cfg, err := parseFlags([]string{"-addr", "192.0.2.1", "-sizes", "64,1024", "-md", "docs/x.md", "-svg", "docs/x.svg"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := &report{cfg: cfg, res: testResults(), placement: "test", when: time.Now(), perftestRetries: []string{"ib_send_lat size=64 attempt 1: inf"}}
	var text bytes.Buffer
	r.writeText(&text)
	for _, want := range []string{"rdma-conn / ib_send_lat", "1.30 MISSED", "failed: 1 KiB rdma-conn throughput: 1 of 3 runs failed"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, &text)
		}
	}
	var md bytes.Buffer
	if err := r.writeMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"](x.svg)", "| target |", "retried: ib_send_lat size=64", "perftest\n", "1 perftest attempt failed and retried"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	var svg bytes.Buffer
	if err := r.writeSVG(&svg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(svg.String(), ">ib_send_lat<") || strings.Contains(svg.String(), "NaN") {
		t.Errorf("SVG lacks the ib_send_lat series or has NaN:\n%s", &svg)
	}
}
