package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/internal/rdmatest"
)

// TestMain lets the test binary stand in for the bft command: with
// RUBIN_BFT_EXEC=1 it runs main with its arguments, so tests can start
// replicas as separate processes and kill them.
func TestMain(m *testing.M) {
	if os.Getenv("RUBIN_BFT_EXEC") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// runCmd runs the command in this process and returns its exit status and
// output.
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
		{"keygen", "-addrs", "nocolon"},
		{"replica", "-cluster", "/nonexistent/cluster.json", "-id", "0", "-transport", "udp"},
		{"replica", "-cluster", "/nonexistent/cluster.json", "-id", "0", "-pollers", "4"},
		{"bench", "-cluster", "/nonexistent/cluster.json", "-pollers", "1"},
		{"bench", "-clients", "0"},
		{"bench", "-size", "-1"},
		{"put", "onlykey"},
		{"get"},
		{"demo", "-n", "3"},
		{"demo", "-transport", "udp"},
	} {
		if code, _, stderr := runCmd(t, args...); code != exitUsage {
			t.Errorf("bft %s: exit status %d, want %d; stderr:\n%s", strings.Join(args, " "), code, exitUsage, stderr)
		}
	}
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "cluster.json")
	split := filepath.Join(dir, "parties")
	code, stdout, stderr := runCmd(t, "keygen", "-n", "7", "-base-port", "9000", "-clients", "3", "-out", out, "-split", split)
	if code != exitOK {
		t.Fatalf("exit status %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "7 replicas (f=2)") {
		t.Errorf("stdout %q does not announce 7 replicas with f=2", stdout)
	}
	c, err := auth.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.N() != 7 || c.F != 2 || len(c.Clients) != 3 || c.Replicas[6].Addr != "127.0.0.1:9006" {
		t.Errorf("cluster: n=%d f=%d clients=%d last addr %s", c.N(), c.F, len(c.Clients), c.Replicas[6].Addr)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("cluster file mode: %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if _, err := auth.Load(filepath.Join(split, "replica-3.json")); err != nil {
		t.Errorf("split file: %v", err)
	}

	code, _, stderr = runCmd(t, "keygen", "-addrs", "10.0.0.1:7100,10.0.0.2:7100,10.0.0.3:7100,10.0.0.4:7100", "-out", out)
	if code != exitOK {
		t.Fatalf("keygen -addrs: exit status %d; stderr:\n%s", code, stderr)
	}
	if c, err := auth.Load(out); err != nil || c.Replicas[3].Addr != "10.0.0.4:7100" {
		t.Errorf("keygen -addrs: %v, %+v", err, c)
	}
}

func TestDemo(t *testing.T) {
	code, stdout, stderr := runCmd(t, "demo", "-n", "600", "-clients", "4", "-progress", "50ms")
	if code != exitOK {
		t.Fatalf("exit status %d; stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"crashing the primary, replica 0", "view change: view 1", "done: 600 puts", "identical stores"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
}

// replicaProc is a replica running as a separate process.
type replicaProc struct {
	cmd    *exec.Cmd
	done   chan error
	stderr *lockedBuffer
}

// lockedBuffer is a bytes.Buffer that a process writes while a test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startReplica starts replica id of the cluster file, over transport, as
// a process of this test binary with the extra flags, and waits until it
// listens.
func startReplica(t *testing.T, file, transport string, id int, extra ...string) *replicaProc {
	t.Helper()
	args := append([]string{"replica", "-id", fmt.Sprint(id), "-cluster", file, "-transport", transport}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RUBIN_BFT_EXEC=1")
	return startReplicaCmd(t, cmd, id)
}

// startReplicaCmd starts cmd, which runs replica id, and waits until it
// listens; the test's cleanup kills it.
func startReplicaCmd(t *testing.T, cmd *exec.Cmd, id int) *replicaProc {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(lockedBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &replicaProc{cmd: cmd, done: make(chan error, 1), stderr: stderr}
	listening := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		found := false
		for s.Scan() {
			if !found && strings.HasPrefix(s.Text(), fmt.Sprintf("replica %d listening", id)) {
				found = true
				listening <- true
			}
		}
		if !found {
			listening <- false
		}
		io.Copy(io.Discard, stdout)
		p.done <- cmd.Wait()
	}()
	select {
	case ok := <-listening:
		if !ok {
			t.Fatalf("replica %d exited before listening: %s", id, stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("replica %d did not listen within 30s: %s", id, stderr.String())
	}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("replica %d's log:\n%s", id, stderr)
		}
	})
	return p
}

// kill kills the process at once, as a crash would.
func (p *replicaProc) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
	}
}

// TestProcessCluster runs four replicas as processes over TCP on
// loopback, kills the primary, checks that the others carry on after a
// view change, restarts it empty, and then kills another replica: the
// cluster can only go on if the restarted one caught up and counts in the
// quorum.
func TestProcessCluster(t *testing.T) {
	processCluster(t, "tcp", "127.0.0.1")
}

// TestProcessClusterRDMA is TestProcessCluster over RDMA. It needs an RDMA
// device: scripts/rdma-test.sh runs it in a Soft-RoCE virtual machine.
func TestProcessClusterRDMA(t *testing.T) {
	processCluster(t, "rdma", rdmatest.Addr(t))
}

func processCluster(t *testing.T, transport, host string) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	addrs := freeAddrs(t, host, 4)
	if code, _, stderr := runCmd(t, "keygen", "-addrs", strings.Join(addrs, ","), "-clients", "4", "-out", file); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	procs := make([]*replicaProc, 4)
	for i := range procs {
		procs[i] = startReplica(t, file, transport, i)
	}
	if code, stdout, stderr := runCmd(t, "put", "-cluster", file, "-transport", transport, "-client", "0", "k1", "v1"); code != exitOK || strings.TrimSpace(stdout) != "ok" {
		t.Fatalf("put: status %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runCmd(t, "get", "-cluster", file, "-transport", transport, "-client", "1", "k1"); code != exitOK || strings.TrimSpace(stdout) != "v1" {
		t.Fatalf("get: status %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}

	c, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client, err := node.NewClient(ctx, node.ClientConfig{Cluster: c, ID: c.Clients[2].ID, Network: transport})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	put := func(k, v string) {
		t.Helper()
		res, err := client.Invoke(ctx, kv.EncodePut([]byte(k), []byte(v)))
		if err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		if _, _, err := kv.DecodeResult(res); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}

	start := time.Now()
	phase := func(what string) { t.Logf("%6.1fs: %s", time.Since(start).Seconds(), what) }
	procs[0].kill() // the primary of view 0
	phase("killed replica 0")
	for i := range 50 {
		put(fmt.Sprintf("after-crash-%d", i), "x")
	}
	phase("50 puts without replica 0")
	procs[0] = startReplica(t, file, transport, 0) // empty: it has to catch up
	phase("restarted replica 0")
	// Enough requests for stable checkpoints beyond what it missed, so it
	// can fetch the state.
	for i := range 400 {
		put(fmt.Sprintf("after-restart-%d", i), "y")
	}
	phase("400 puts")
	procs[1].kill() // now 0, 2 and 3 must form the quorum
	phase("killed replica 1")
	put("last", "z")
	phase("put with replicas 0, 2 and 3")
	if code, stdout, stderr := runCmd(t, "get", "-cluster", file, "-transport", transport, "-client", "3", "-timeout", "2m", "after-crash-7"); code != exitOK || strings.TrimSpace(stdout) != "x" {
		t.Fatalf("get after the second crash: status %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
}

// freeAddrs returns n addresses of host whose ports were free a moment
// ago: each replica's address must be in the cluster file before it starts.
func freeAddrs(t *testing.T, host string, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// TestPollersRefused: -pollers sizes the net.Conn face's pollers, which a
// replica or client does not have; it is refused, not ignored.
func TestPollersRefused(t *testing.T) {
	code, _, stderr := runCmd(t, "replica", "-cluster", "/nonexistent/cluster.json", "-id", "0", "-pollers", "4")
	if code != exitUsage || !strings.Contains(stderr, "-pollers has no effect on bft replica") {
		t.Errorf("bft replica -pollers 4: exit status %d, stderr:\n%s\nwant %d and why -pollers is refused", code, stderr, exitUsage)
	}
}
