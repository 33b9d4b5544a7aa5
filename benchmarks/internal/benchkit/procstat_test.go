package benchkit

import (
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses; utime 7, stime 5.
	stat := "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 3 0 123 4096 10 18446744073709551615\n"
	got, err := parseStatCPU([]byte(stat), 10*time.Millisecond)
	if err != nil || got != 120*time.Millisecond {
		t.Errorf("parseStatCPU = %v, %v; want 120ms", got, err)
	}
	for _, bad := range []string{
		"4242 no name S 1 2 3",
		"4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 7",
		"4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 x 0",
	} {
		if _, err := parseStatCPU([]byte(bad), time.Millisecond); err == nil {
			t.Errorf("parseStatCPU(%q) succeeded", bad)
		}
	}
}

func TestParseSchedstat(t *testing.T) {
	if got, err := parseSchedstat([]byte("140575526 43348640 570\n")); err != nil || got != 140575526*time.Nanosecond {
		t.Errorf("parseSchedstat = %v, %v; want 140.575526ms", got, err)
	}
	for _, bad := range []string{"", "\n", "-1 2 3", "x 2 3"} {
		if _, err := parseSchedstat([]byte(bad)); err == nil {
			t.Errorf("parseSchedstat(%q) succeeded", bad)
		}
	}
}

func TestParseStatusSwitches(t *testing.T) {
	status := "Name:\tbft\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t3\n"
	if got, err := parseStatusSwitches([]byte(status)); err != nil || got != 123 {
		t.Errorf("parseStatusSwitches = %d, %v; want 123", got, err)
	}
	for _, bad := range []string{
		"Name:\tbft\nvoluntary_ctxt_switches:\t120\n",
		"voluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\tmany\n",
	} {
		if _, err := parseStatusSwitches([]byte(bad)); err == nil {
			t.Errorf("parseStatusSwitches(%q) succeeded", bad)
		}
	}
}

func TestMediansCosts(t *testing.T) {
	known := func(x float64) Cost { return Cost{Value: x, Known: true} }
	r := NewRuns[string]()
	r.Add("a", OpsSample{Rate: 3, Switches: known(9), CPUUS: known(30)}, nil)
	r.Add("a", OpsSample{Rate: 1, Switches: known(7), CPUUS: Cost{}}, nil)
	r.Add("a", OpsSample{Rate: 2, Switches: known(8), CPUUS: known(10)}, nil)
	m, ok := r.Medians("a")
	if !ok || m.Rate != 2 || m.Switches != known(8) || m.CPUUS.Known {
		t.Errorf("Medians = %+v, %v; want rate 2, 8 switches, CPU time unknown (one run lacks it)", m, ok)
	}
	if strings.Contains(m.Line, "=") {
		t.Errorf("a median has a summary line: %q", m.Line)
	}
}
