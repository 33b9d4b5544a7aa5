package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// TestMain lets the test binary stand in for the coord command: with
// RUBIN_COORD_EXEC=1 it runs main with its arguments, so tests can run
// replicas as processes and kill them.
func TestMain(m *testing.M) {
	if os.Getenv("RUBIN_COORD_EXEC") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// startProcess runs coord replica id as a process of this test binary and
// waits until it listens; the test's cleanup kills it.
func startProcess(t *testing.T, file, dataDir string, id int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "replica", "-id", strconv.Itoa(id), "-cluster", file, "-data-dir", dataDir, "-transport", "tcp")
	cmd.Env = append(os.Environ(), "RUBIN_COORD_EXEC=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
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
	}()
	select {
	case ok := <-listening:
		if !ok {
			t.Fatalf("replica %d exited before listening: %s", id, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("replica %d did not listen within 30s: %s", id, stderr.String())
	}
	return cmd
}

// TestKillPrimaryProcess runs the replicas as processes and a gateway, two
// ZooKeeper clients taking turns with a lock, and kills the primary's
// process with SIGKILL midway; the clients carry on, and the killed
// replica, restarted from its data directory, rejoins.
func TestKillPrimaryProcess(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	if code, _, stderr := runCmd(t, "keygen", "-clients", "8", "-out", file); code != exitOK {
		t.Fatalf("keygen: %d\n%s", code, stderr)
	}
	freePorts(t, file)
	procs := make([]*exec.Cmd, 4)
	for i := range procs {
		procs[i] = startProcess(t, file, filepath.Join(dir, strconv.Itoa(i)), i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gwDone := make(chan int, 1)
	out := new(syncBuffer)
	go func() {
		gwDone <- run(ctx, []string{"gateway", "-cluster", file, "-listen", "127.0.0.1:0"}, out, new(syncBuffer))
	}()
	defer func() {
		cancel()
		if code := <-gwDone; code != exitOK {
			t.Errorf("gateway: exit status %d", code)
		}
	}()
	addr := announced(t, out)

	const clients, rounds = 2, 30
	var conns []*zk.Conn
	for range clients + 1 {
		c, _, err := zk.Connect([]string{addr}, 20*time.Second, zk.WithLogger(quietLogger{}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	if _, err := conns[clients].Create("/counter", []byte("0"), 0, openACL); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var half sync.WaitGroup
	half.Add(clients)
	errs := make(chan error, clients)
	for i, c := range conns[:clients] {
		wg.Go(func() {
			lock := zk.NewLock(c, "/lock", openACL)
			var w workload
			for r := range rounds {
				if r == rounds/2 {
					half.Done()
				}
				if err := w.incrementPath(c, lock, "/counter"); err != nil {
					errs <- fmt.Errorf("client %d round %d: %w", i, r, err)
					return
				}
			}
		})
	}
	half.Wait()
	procs[0].Process.Kill() // replica 0 is the first view's primary
	procs[0].Wait()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	data, _, err := conns[clients].Get("/counter")
	if n, _ := strconv.Atoi(string(data)); err != nil || n != clients*rounds {
		t.Fatalf("counter %s (%v), want %d", data, err, clients*rounds)
	}

	// Back from its data directory, replica 0 serves again: with another
	// replica killed, the cluster needs it.
	startProcess(t, file, filepath.Join(dir, "0"), 0)
	procs[1].Process.Kill()
	procs[1].Wait()
	done := make(chan error, 1)
	go func() {
		_, err := conns[clients].Set("/counter", []byte("done"), -1)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no progress with the restarted replica and two others")
	}
}
