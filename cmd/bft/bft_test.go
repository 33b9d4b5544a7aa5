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
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/node"
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
	cmd  *exec.Cmd
	done chan error
}

// startReplica starts replica id of the cluster file as a process of this
// test binary and waits until it listens.
func startReplica(t *testing.T, file string, id int) *replicaProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "replica", "-id", fmt.Sprint(id), "-cluster", file)
	cmd.Env = append(os.Environ(), "RUBIN_BFT_EXEC=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &replicaProc{cmd: cmd, done: make(chan error, 1)}
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
	t.Cleanup(func() { p.kill() })
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
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	addrs := freeAddrs(t, 4)
	if code, _, stderr := runCmd(t, "keygen", "-addrs", strings.Join(addrs, ","), "-clients", "4", "-out", file); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	procs := make([]*replicaProc, 4)
	for i := range procs {
		procs[i] = startReplica(t, file, i)
	}
	if code, stdout, stderr := runCmd(t, "put", "-cluster", file, "-client", "0", "k1", "v1"); code != exitOK || strings.TrimSpace(stdout) != "ok" {
		t.Fatalf("put: status %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runCmd(t, "get", "-cluster", file, "-client", "1", "k1"); code != exitOK || strings.TrimSpace(stdout) != "v1" {
		t.Fatalf("get: status %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}

	c, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client, err := node.NewClient(ctx, node.ClientConfig{Cluster: c, ID: c.Clients[2].ID})
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

	procs[0].kill() // the primary of view 0
	for i := range 50 {
		put(fmt.Sprintf("after-crash-%d", i), "x")
	}
	procs[0] = startReplica(t, file, 0) // empty: it has to catch up
	// Enough requests for stable checkpoints beyond what it missed, so it
	// can fetch the state.
	for i := range 400 {
		put(fmt.Sprintf("after-restart-%d", i), "y")
	}
	procs[1].kill() // now 0, 2 and 3 must form the quorum
	put("last", "z")
	if code, stdout, stderr := runCmd(t, "get", "-cluster", file, "-client", "3", "-timeout", "2m", "after-crash-7"); code != exitOK || strings.TrimSpace(stdout) != "x" {
		t.Fatalf("get after the second crash: status %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago: each replica's address must be in the cluster file before it starts.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}
