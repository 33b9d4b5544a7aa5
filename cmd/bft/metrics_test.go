package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestReplicaMetrics starts a replica with -metrics-addr and scrapes the
// address it logs: the BFT driver's series are there, and its event loop's
// (selector, transport, buffer pool) under stack="replica-0".
func TestReplicaMetrics(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cluster.json")
	if code, _, stderr := runCmd(t, "keygen", "-addrs", strings.Join(freeAddrs(t, "127.0.0.1", 4), ","), "-out", file); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	p := startReplica(t, file, "tcp", 0, "-metrics-addr", "127.0.0.1:0")
	logged := regexp.MustCompile(`msg=metrics url=(\S+)`)
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		if m := logged.FindStringSubmatch(p.stderr.String()); m != nil {
			url = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the replica logged no metrics url:\n%s", p.stderr)
		}
	}
	want := `
# HELP rubin_bft_view Current view.
# TYPE rubin_bft_view gauge
rubin_bft_view{replica="0"} 0
`
	if err := testutil.ScrapeAndCompare(url, strings.NewReader(want), "rubin_bft_view"); err != nil {
		t.Error(err)
	}
	selects := regexp.MustCompile(`(?m)^rubin_selector_selects_total\{poller="0",stack="replica-0"\} [1-9]`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		body := scrape(t, url)
		if selects.MatchString(body) && strings.Contains(body, `rubin_pool_buffers_max{stack="replica-0"}`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no selects of the event loop, or no pool, under stack=\"replica-0\":\n%s", body)
		}
	}
}

// scrape returns the body of a GET of url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
