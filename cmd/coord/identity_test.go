package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/internal/proctest"
)

// TestTwoGatewaysWithDefaults starts a cluster and a gateway with the
// defaults, then a second gateway with the same defaults: it would take
// every identity the first uses, and its gateway ID. The second must
// refuse to start, say why, and leave the first serving its clients.
func TestTwoGatewaysWithDefaults(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	if code, _, stderr := runCmd(t, "keygen", "-n", "4", "-clients", "8", "-out", file); code != exitOK {
		t.Fatalf("keygen: %d\n%s", code, stderr)
	}
	proctest.FreePorts(t, file)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	type exit struct {
		code   int
		stderr string
	}
	startIn := func(ctx context.Context, args ...string) (*syncBuffer, chan exit) {
		out, done := new(syncBuffer), make(chan exit, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var stderr syncBuffer
			code := run(ctx, args, out, &stderr)
			done <- exit{code, stderr.String()}
		}()
		return out, done
	}
	start := func(args ...string) (*syncBuffer, chan exit) { return startIn(ctx, args...) }
	for i := range 4 {
		start("replica", "-id", strconv.Itoa(i), "-cluster", file)
	}
	ctxA, stopA := context.WithCancel(ctx)
	outA, doneA := startIn(ctxA, "gateway", "-cluster", file, "-listen", "127.0.0.1:0")
	a := announced(t, outA)
	za, _, err := zk.Connect([]string{a}, 10*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer za.Close()
	if _, err := za.Create("/a", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}

	outB, doneB := start("gateway", "-cluster", file, "-listen", "127.0.0.1:0")
	select {
	case e := <-doneB:
		if e.code != exitFailure || !strings.Contains(e.stderr, "held by another gateway") {
			t.Fatalf("the second gateway: exit status %d, stderr:\n%s", e.code, e.stderr)
		}
		t.Logf("the second gateway refused: %s", strings.TrimSpace(e.stderr))
	case <-time.After(30 * time.Second):
		b := announced(t, outB)
		zb, _, err := zk.Connect([]string{b}, 10*time.Second, zk.WithLogger(quietLogger{}))
		if err == nil {
			defer zb.Close()
			t.Logf("with both running: a create through the second: %v; through the first: %v",
				createWithin(zb, "/b", 10*time.Second), createWithin(za, "/a-again", 10*time.Second))
		}
		t.Fatalf("the second gateway, started with the first's identities, is still running after 30s")
	}
	// The first gateway serves on: the second ordered nothing under its
	// identities.
	if err := createWithin(za, "/a-after", 10*time.Second); err != nil {
		t.Fatalf("the first gateway after the second refused: %v", err)
	}

	// The first gateway stops; started again at once, with the same
	// defaults, it finds its old claim not renewed, waits for it to
	// lapse, and serves.
	za.Close()
	stopA()
	if e := <-doneA; e.code != exitOK {
		t.Fatalf("the first gateway: exit status %d\n%s", e.code, e.stderr)
	}
	began := time.Now()
	outC, doneC := start("gateway", "-cluster", file, "-listen", "127.0.0.1:0")
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(outC.String(), "listening"); time.Sleep(20 * time.Millisecond) {
		select {
		case e := <-doneC:
			t.Fatalf("the restarted gateway: exit status %d\n%s", e.code, e.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted gateway does not serve after 20s")
		}
	}
	t.Logf("the restarted gateway serves after %v", time.Since(began).Round(100*time.Millisecond))
	zc, _, err := zk.Connect([]string{announced(t, outC)}, 10*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	if err := createWithin(zc, "/c", 10*time.Second); err != nil {
		t.Fatalf("through the restarted gateway: %v", err)
	}
}

// TestGatewaysShareIdentitiesOut: keygen -gateways 2 gives each gateway
// its own identities; both run with -gateway 0 and 1 and serve, and a
// gateway started without -gateway is refused at once.
func TestGatewaysShareIdentitiesOut(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	if code, stdout, stderr := runCmd(t, "keygen", "-clients", "8", "-gateways", "2", "-out", file); code != exitOK || !strings.Contains(stdout, "cluster.gateways.json") {
		t.Fatalf("keygen: %d\n%s%s", code, stdout, stderr)
	}
	if code, _, stderr := runCmd(t, "gateway", "-cluster", file); code != exitUsage || !strings.Contains(stderr, "-gateway I") {
		t.Fatalf("a gateway without -gateway: exit status %d\n%s", code, stderr)
	}
	proctest.FreePorts(t, file)
	start, _ := inProcess(t)
	for i := range 4 {
		start("replica", "-id", strconv.Itoa(i), "-cluster", file)
	}
	for i := range 2 {
		addr := announced(t, start("gateway", "-cluster", file, "-listen", "127.0.0.1:0", "-gateway", strconv.Itoa(i)))
		createThrough(t, addr, "/g"+strconv.Itoa(i))
	}
}

// TestSplitSecrets deploys a cluster as docs/coord.md does: keygen -split
// gives every replica and every gateway a file of its own with only its
// secrets. Each party runs from its own file; a replica's file cannot act
// as another replica or as a gateway, and a gateway's cannot act as a
// replica or take another gateway's identities.
func TestSplitSecrets(t *testing.T) {
	dir := t.TempDir()
	parties := filepath.Join(dir, "parties")
	code, stdout, stderr := runCmd(t, "keygen", "-clients", "8", "-gateways", "2", "-out", filepath.Join(dir, "cluster.json"), "-split", parties)
	if code != exitOK || !strings.Contains(stdout, "gateway-1.json") {
		t.Fatalf("keygen: %d\n%s%s", code, stdout, stderr)
	}
	file := func(name string) string { return filepath.Join(parties, name+".json") }
	proctest.FreePorts(t, file("replica-0"), file("replica-1"), file("replica-2"), file("replica-3"), file("gateway-0"), file("gateway-1"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replica", "-id", "2", "-cluster", file("replica-1")}, "replica 2's secrets are not in replica 1's configuration"},
		{[]string{"replica", "-id", "0", "-cluster", file("gateway-0")}, "replica 0's secrets are not in the holder of clients 0-3's configuration"},
		{[]string{"gateway", "-cluster", file("replica-1"), "-listen", "127.0.0.1:0"}, "is replica 1's file"},
		{[]string{"gateway", "-cluster", file("gateway-1"), "-ids", "0-3", "-listen", "127.0.0.1:0"}, "the cluster file has 0 of those clients"},
	} {
		if code, _, stderr := runCmd(t, tc.args...); code == exitOK || !strings.Contains(stderr, tc.want) {
			t.Errorf("coord %s: exit status %d, want an error saying %q\n%s", strings.Join(tc.args, " "), code, tc.want, stderr)
		}
	}

	start, _ := inProcess(t)
	for i := range 4 {
		start("replica", "-id", strconv.Itoa(i), "-cluster", file("replica-"+strconv.Itoa(i)))
	}
	for i := range 2 {
		addr := announced(t, start("gateway", "-cluster", file("gateway-"+strconv.Itoa(i)), "-listen", "127.0.0.1:0"))
		createThrough(t, addr, "/g"+strconv.Itoa(i))
	}
}

// createThrough creates a znode through the gateway at addr, within 10 s.
func createThrough(t *testing.T, addr, path string) {
	t.Helper()
	zc, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	if err := createWithin(zc, path, 10*time.Second); err != nil {
		t.Fatalf("create %s through %s: %v", path, addr, err)
	}
}

// createWithin creates a znode, giving up after d.
func createWithin(c *zk.Conn, path string, d time.Duration) error {
	errc := make(chan error, 1)
	go func() {
		_, err := c.Create(path, nil, 0, zk.WorldACL(zk.PermAll))
		errc <- err
	}()
	select {
	case err := <-errc:
		return err
	case <-time.After(d):
		return fmt.Errorf("no answer after %v", d)
	}
}
