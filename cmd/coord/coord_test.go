package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/internal/proctest"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nosuch"},
		{"keygen", "-n", "5"},
		{"keygen", "-clients", "0"},
		{"keygen", "extra"},
		{"replica", "-cluster", "/nonexistent/cluster.json", "-id", "0", "-transport", "udp"},
		{"gateway", "-nosuchflag"},
		{"gateway", "-max-client-cnxns", "-1"},
		{"gateway", "-max-client-sessions", "-1"},
		{"gateway", "-four-letter-words", "ruok,dump"},
		{"gateway", "-four-letter-words", "what"},
		{"demo", "-clients", "1"},
		{"demo", "-transport", "udp"},
	} {
		if code, _, stderr := runCmd(t, args...); code != exitUsage {
			t.Errorf("coord %s: exit status %d, want %d; stderr:\n%s", strings.Join(args, " "), code, exitUsage, stderr)
		}
	}
}

// syncBuffer is a buffer a command writes while the test reads it.
type syncBuffer = proctest.Buffer

// announced waits for a gateway's announcement on its output and returns
// its address.
func announced(t *testing.T, out *syncBuffer) string {
	t.Helper()
	announce := regexp.MustCompile(`gateway listening on (\S+)\n`)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := announce.FindStringSubmatch(out.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("no announcement from the gateway: %q", out.String())
	return ""
}

// inProcess returns a function that runs a coord command in this process
// and returns its standard output, and one that stops every command it
// started (at the latest when the test ends): each must then exit with
// status 0.
func inProcess(t *testing.T) (start func(args ...string) *syncBuffer, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stop = func() {
		cancel()
		wg.Wait()
	}
	t.Cleanup(stop)
	start = func(args ...string) *syncBuffer {
		out := new(syncBuffer)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var stderr syncBuffer
			if code := run(ctx, args, out, &stderr); code != exitOK {
				t.Errorf("coord %s: exit status %d\n%s", strings.Join(args, " "), code, stderr.String())
			}
		}()
		return out
	}
	return start, stop
}

// fourLetter asks a gateway a four-letter word and returns its answer.
// It asks again while the connection is refused: with -max-client-cnxns
// 2, the previous word's connection may not be gone yet.
func fourLetter(t *testing.T, addr, word string) string {
	t.Helper()
	var err error
	for range 50 {
		var b []byte
		var nc net.Conn
		if nc, err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err = io.WriteString(nc, word); err == nil {
			b, err = io.ReadAll(nc)
		}
		nc.Close()
		if err == nil && len(b) > 0 {
			return string(b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: no answer: %v", word, err)
	return ""
}

// scrape returns the metrics served at url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// TestCommands runs keygen, four replicas and a gateway as the commands,
// in this process, and a ZooKeeper client through the gateway.
func TestCommands(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	if code, _, stderr := runCmd(t, "keygen", "-n", "4", "-clients", "8", "-base-port", "7100", "-out", file); code != exitOK {
		t.Fatalf("keygen: %d\n%s", code, stderr)
	}
	c, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if c.N() != 4 || len(c.Clients) != 8 || c.Replicas[3].Addr != "127.0.0.1:7103" {
		t.Fatalf("cluster: %d replicas, %d clients, %s", c.N(), len(c.Clients), c.Replicas[3].Addr)
	}
	proctest.FreePorts(t, file)

	start, stop := inProcess(t)
	var r0Out *syncBuffer
	for i := range c.Replicas {
		out := start("replica", "-id", strconv.Itoa(i), "-cluster", file, "-data-dir", filepath.Join(dir, "r"+strconv.Itoa(i)), "-transport", "tcp", "-metrics-addr", "127.0.0.1:0")
		if i == 0 {
			r0Out = out
		}
	}
	prof := filepath.Join(dir, "gateway.prof")
	gwOut := start("gateway", "-cluster", file, "-listen", "127.0.0.1:0", "-ids", "0-3", "-transport", "tcp", "-cpuprofile", prof, "-max-client-cnxns", "2",
		"-metrics-addr", "127.0.0.1:0", "-four-letter-words", "ruok,mntr")
	addr := announced(t, gwOut)
	metricsURL := regexp.MustCompile(`gateway metrics on (\S+)\n`).FindStringSubmatch(gwOut.String())
	if metricsURL == nil {
		t.Fatalf("no metrics address in the gateway's output: %q", gwOut.String())
	}

	zc, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	if _, err := zc.Create("/hello", []byte("world"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if data, _, err := zc.Get("/hello"); err != nil || string(data) != "world" {
		t.Fatalf("get: %q %v", data, err)
	}
	// The four-letter words -four-letter-words lets through, and the
	// metrics of -metrics-addr, which count them.
	if got := fourLetter(t, addr, "mntr"); !strings.Contains(got, "zk_znode_count\t5\n") || !strings.Contains(got, "zk_ephemerals_count\t1\n") {
		t.Fatalf("mntr:\n%s", got)
	}
	if got := fourLetter(t, addr, "stat"); got != "stat is not executed because it is not in the whitelist.\n" {
		t.Fatalf("stat: %q", got)
	}
	replicaURL := regexp.MustCompile(`replica 0 metrics on (\S+)\n`).FindStringSubmatch(r0Out.String())
	if replicaURL == nil {
		t.Fatalf("no metrics address in replica 0's output: %q", r0Out.String())
	}
	if body := scrape(t, replicaURL[1]); !strings.Contains(body, `rubin_bft_committed_requests_total{replica="0"} `) {
		t.Errorf("replica 0's metrics lack its committed requests:\n%s", body)
	}
	body := scrape(t, metricsURL[1])
	for _, want := range []string{
		`rubin_coord_gateway_sessions{gateway="0"} 1` + "\n",
		`rubin_coord_gateway_four_letter_words_total{gateway="0",word="mntr"} 1` + "\n",
		`rubin_coord_gateway_four_letter_words_total{gateway="0",word="stat"} 1` + "\n",
		`rubin_coord_gateway_outstanding_requests{gateway="0"} 0` + "\n",
		`rubin_bft_client_completed_requests_total{client="0"} `,
		`rubin_bft_client_mismatched_replies_total{client="0",replica="3"} 0` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the metrics lack %q:\n%s", want, body)
		}
	}
	// -max-client-cnxns 2: with zc connected, one more connection from
	// this address stays and the next is closed (once the gateway has
	// seen the four-letter words' connections close).
	time.Sleep(200 * time.Millisecond)
	var held []net.Conn
	for range 2 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		held = append(held, nc)
	}
	time.Sleep(200 * time.Millisecond)
	for i, nc := range held {
		nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := nc.Read(make([]byte, 1))
		var ne net.Error
		if open := errors.As(err, &ne) && ne.Timeout(); open != (i == 0) {
			t.Errorf("connection %d beside the client: open %v (%v)", i+2, open, err)
		}
	}

	// The gateway writes its CPU profile when it stops: a gzipped
	// protocol buffer.
	zc.Close()
	stop()
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("CPU profile: %v", err)
	}
	if n, err := io.Copy(io.Discard, zr); err != nil || n == 0 {
		t.Fatalf("CPU profile: %d bytes, %v", n, err)
	}
}

func TestDemo(t *testing.T) {
	code, stdout, stderr := runCmd(t, "demo", "-clients", "3", "-rounds", "20", "-progress", "50ms")
	if code != exitOK {
		t.Fatalf("exit status %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"==> crashing the primary", "==> view change: view 1", "the counter the lock guards is 60 of 60", "identical states"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
}
