package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/coordtest"
	"github.com/rubin-go/rubin/internal/proctest"
)

// TestMain lets the test binary stand in for the coord command: with
// RUBIN_COORD_EXEC=1 it runs main with its arguments, so tests can run
// replicas as processes and kill them. With RUBIN_COORD_LIAR=1 besides, a
// replica's application is a coordtest.Liar, which says "lying" on
// stderr when it first falsifies an answer.
func TestMain(m *testing.M) {
	if os.Getenv("RUBIN_COORD_EXEC") == "1" {
		if os.Getenv("RUBIN_COORD_LIAR") == "1" {
			var once sync.Once
			newApp = func(c coord.Config) bft.App {
				return coordtest.Liar{App: coord.New(c), OnLie: func() {
					once.Do(func() { fmt.Fprintln(os.Stderr, "lying") })
				}}
			}
		}
		main()
	}
	os.Exit(m.Run())
}

// startProcess runs coord replica id as a process of this test binary,
// with env added to its environment, and waits until it listens; the
// test's cleanup kills it. It returns the process and its stderr.
func startProcess(t *testing.T, file, dataDir string, id int, env ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "replica", "-id", strconv.Itoa(id), "-cluster", file, "-data-dir", dataDir, "-transport", "tcp")
	cmd.Env = append(append(os.Environ(), "RUBIN_COORD_EXEC=1"), env...)
	_, stderr := proctest.Start(t, cmd, regexp.MustCompile(fmt.Sprintf(`^replica %d listening`, id)), 30*time.Second)
	return cmd, stderr
}

// startGateway runs coord gateway for the cluster in file in this
// process and returns the address it listens on; the test's cleanup
// stops it.
func startGateway(t *testing.T, file string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	gwDone := make(chan int, 1)
	out := new(syncBuffer)
	go func() {
		gwDone <- run(ctx, []string{"gateway", "-cluster", file, "-listen", "127.0.0.1:0"}, out, new(syncBuffer))
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-gwDone; code != exitOK {
			t.Errorf("gateway: exit status %d", code)
		}
	})
	return announced(t, out)
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
	proctest.FreePorts(t, file)
	procs := make([]*exec.Cmd, 4)
	for i := range procs {
		procs[i], _ = startProcess(t, file, filepath.Join(dir, strconv.Itoa(i)), i)
	}
	addr := startGateway(t, file)

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

// TestByzantineReplicaProcess runs the four replicas as processes, one of
// them a liar (coordtest.Liar: every answer it sends, ordered or
// read-only, has its data falsified and an invented watch event), and a
// gateway: a ZooKeeper client reads, watches and writes through it and
// sees only the truth, each watch firing once, for the right change. The
// liar's stderr shows that it did lie. With two liars, more than f, the
// client does read lies: the test sees them when they get through.
func TestByzantineReplicaProcess(t *testing.T) {
	t.Run("one", func(t *testing.T) {
		if got := byzantineProcesses(t, 1); got != "" {
			t.Fatal(got)
		}
	})
	t.Run("f+1", func(t *testing.T) {
		if got := byzantineProcesses(t, 2); got == "" {
			t.Fatal("two lying replicas of four were outvoted")
		}
	})
}

// byzantineProcesses runs TestByzantineReplicaProcess's cluster with the
// last liars replicas lying, and says what the client saw that was not
// the truth ("" if nothing).
func byzantineProcesses(t *testing.T, liars int) string {
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	if code, _, stderr := runCmd(t, "keygen", "-clients", "8", "-out", file); code != exitOK {
		t.Fatalf("keygen: %d\n%s", code, stderr)
	}
	proctest.FreePorts(t, file)
	var liarErrs []*syncBuffer
	for i := range 4 {
		var env []string
		if i >= 4-liars {
			env = []string{"RUBIN_COORD_LIAR=1"}
		}
		_, stderr := startProcess(t, file, filepath.Join(dir, strconv.Itoa(i)), i, env...)
		if env != nil {
			liarErrs = append(liarErrs, stderr)
		}
	}
	c, _, err := zk.Connect([]string{startGateway(t, file)}, 20*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Create("/truth", []byte("truth"), 0, openACL); err != nil {
		t.Fatal(err)
	}
	// At least 20 rounds, and on until every liar lied: a replica that
	// joined its links late catches up on the first slots while the
	// others already answer, and a test in which no replica lied
	// would prove nothing. More than f liars win a round only while
	// none of them lags behind, which can take more than 20 rounds:
	// with them the rounds go on until a lie gets through.
	lied := func() bool {
		for _, e := range liarErrs {
			if !strings.Contains(e.String(), "lying") {
				return false
			}
		}
		return true
	}
	const f = 1 // of four replicas
	more := func() bool { return liars > f || !lied() }
	deadline := time.Now().Add(20 * time.Second)
	for k := 0; k < 20 || (more() && time.Now().Before(deadline)); k++ {
		data, _, w, err := c.GetW("/truth")
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != "truth" {
			return fmt.Sprintf("round %d: the client read %q", k, data)
		}
		if data, _, err := c.Get("/truth"); err != nil || string(data) != "truth" {
			return fmt.Sprintf("round %d: the client read %q (%v)", k, data, err)
		}
		select {
		case ev := <-w:
			return fmt.Sprintf("round %d: an event that did not happen: %+v", k, ev)
		default:
		}
		if _, err := c.Set("/truth", []byte("truth"), -1); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-w:
			if ev.Type != zk.EventNodeDataChanged || ev.Path != "/truth" {
				return fmt.Sprintf("round %d: watch event %+v, want NodeDataChanged of /truth", k, ev)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: the watch did not fire", k)
		}
	}
	for i, e := range liarErrs {
		if !strings.Contains(e.String(), "lying") {
			t.Fatalf("liar %d never lied; its stderr: %s", i, e.String())
		}
	}
	return ""
}
