package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rubin-go/rubin/internal/netns"
)

// The Jepsen-style test: clients on a few keys while a nemesis kills,
// pauses, restarts and cuts off replicas, and a linearizability checker
// over the whole history.
const (
	jepsenReplicas = 4
	jepsenPort     = 7000 // every host has a namespace of its own: no port can be taken
	// jepsenFaults is how long the nemesis works; jepsenCalm is how long the
	// clients go on after it healed everything, and must still complete
	// operations in.
	jepsenFaults = 35 * time.Second
	jepsenCalm   = 8 * time.Second
	// jepsenFault is how long one fault lasts, jepsenRest the pause between
	// two.
	jepsenFault = 3 * time.Second
	jepsenRest  = 2 * time.Second
	// jepsenCatchUp bounds the wait for a replica restarted empty to catch
	// up before the next fault.
	jepsenCatchUp = 15 * time.Second
)

// jepsenAddr is host i's address: the replicas' from .10, the clients' .100.
func jepsenAddr(i int) netip.Addr {
	if i == jepsenReplicas {
		return netip.MustParseAddr("198.51.100.100")
	}
	return netip.AddrFrom4([4]byte{198, 51, 100, byte(10 + i)})
}

// TestJepsen runs four replicas and a client process, each in a network
// namespace of its own on a bridge in a namespace of its own, so that
// nothing routes out; every replica keeps a data directory. While the
// clients put and get on a few keys, a nemesis makes replicas faulty, one
// at a time (f=1): killed with SIGKILL and restarted on its data directory,
// killed and restarted with its data directory deleted (it must catch up
// before the next fault), paused with SIGSTOP and resumed, or cut off from
// the bridge and healed; and once a round, all four are killed and
// restarted together, as after a power loss, which the data directories
// must survive. Afterwards the history must be linearizable (checked
// by porcupine) and the clients must have completed operations after the
// nemesis stopped.
//
// With RUBIN_JEPSEN_CLIENT set, the test binary is the client process
// instead (see jepsenClient).
func TestJepsen(t *testing.T) {
	if cfg := os.Getenv(jepsenClientEnv); cfg != "" {
		jepsenClient(t, cfg)
		return
	}
	if err := netns.Available(); err != nil {
		t.Skipf("skipping: the test needs network namespaces: %v", err)
	}
	dir := t.TempDir()
	addrs := make([]netip.Addr, jepsenReplicas+1)
	var replicaAddrs []string
	for i := range addrs {
		addrs[i] = jepsenAddr(i)
		if i < jepsenReplicas {
			replicaAddrs = append(replicaAddrs, netip.AddrPortFrom(addrs[i], jepsenPort).String())
		}
	}
	lab, err := netns.New(fmt.Sprintf("rubin-j%d-%d", os.Getpid(), time.Now().UnixNano()%1e6), addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Error(err)
		}
	})
	file := filepath.Join(dir, "cluster.json")
	if code, _, stderr := runCmd(t, "keygen", "-addrs", strings.Join(replicaAddrs, ","), "-clients", fmt.Sprint(jepsenWorkers), "-out", file); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	dataDirs := make([]string, jepsenReplicas)
	for i := range dataDirs {
		dataDirs[i] = filepath.Join(dir, fmt.Sprintf("replica-%d", i))
	}
	start := func(i int) *replicaProc {
		cmd := lab.Host(i).Command(os.Args[0], "replica", "-id", fmt.Sprint(i), "-cluster", file, "-data-dir", dataDirs[i])
		cmd.Env = append(os.Environ(), "RUBIN_BFT_EXEC=1")
		return startReplicaCmd(t, cmd, i)
	}
	procs := make([]*replicaProc, jepsenReplicas)
	for i := range procs {
		procs[i] = start(i)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("nemesis seed %d", seed)
	histPath := filepath.Join(dir, "history.json")
	client := startJepsenClient(t, lab.Host(jepsenReplicas), jepsenClientConfig{
		Cluster: file,
		History: histPath,
		Run:     jepsenFaults + jepsenCalm,
		Calm:    jepsenCalm,
		Seed:    seed,
	})

	n := nemesis{t: t, lab: lab, procs: procs, dataDirs: dataDirs, start: start, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), begin: time.Now()}
	n.run(jepsenFaults)
	n.healAll()

	if err := client.wait(); err != nil {
		t.Errorf("client process: %v\n%s", err, client.output())
	}
	hist, err := readHistory(histPath)
	if err != nil {
		t.Fatalf("history: %v\nclient output:\n%s", err, client.output())
	}
	t.Logf("client:\n%s", client.output())
	checkLinearizable(t, hist)
}

// nemesis makes replicas faulty: one at a time, except that all may crash
// together, which their data directories must survive.
type nemesis struct {
	t        *testing.T
	lab      *netns.Lab
	procs    []*replicaProc
	dataDirs []string
	start    func(i int) *replicaProc
	rng      *rand.Rand
	begin    time.Time
}

func (n *nemesis) logf(format string, args ...any) {
	n.t.Logf("%5.1fs nemesis: %s", time.Since(n.begin).Seconds(), fmt.Sprintf(format, args...))
}

// run applies faults for d, each healed before the next, in rounds that
// take every kind of fault once in a random order, each on a random
// replica.
func (n *nemesis) run(d time.Duration) {
	faults := []func(i int){n.crash, n.crashAll, n.wipe, n.pause, n.cut}
	deadline := time.Now().Add(d)
	for {
		for _, f := range n.rng.Perm(len(faults)) {
			if time.Until(deadline) < jepsenFault+jepsenRest {
				return
			}
			time.Sleep(jepsenRest)
			faults[f](n.rng.IntN(len(n.procs)))
		}
	}
}

// crash kills replica i with SIGKILL and restarts it on its data directory.
func (n *nemesis) crash(i int) {
	n.logf("kill -9 replica %d", i)
	n.procs[i].kill()
	time.Sleep(jepsenFault)
	n.procs[i] = n.start(i)
	n.logf("restarted replica %d on its data directory", i)
}

// crashAll kills every replica with SIGKILL and restarts them all on their
// data directories, as after a power loss.
func (n *nemesis) crashAll(int) {
	n.logf("kill -9 every replica")
	for _, p := range n.procs {
		p.kill()
	}
	time.Sleep(jepsenFault)
	for i := range n.procs {
		n.procs[i] = n.start(i)
	}
	n.logf("restarted every replica on its data directory")
}

// wipe kills replica i, deletes its data directory and restarts it empty,
// then waits for it to catch up.
func (n *nemesis) wipe(i int) {
	n.logf("kill -9 replica %d and delete its data directory", i)
	n.procs[i].kill()
	if err := os.RemoveAll(n.dataDirs[i]); err != nil {
		n.t.Fatal(err)
	}
	time.Sleep(jepsenFault)
	n.procs[i] = n.start(i)
	n.logf("restarted replica %d, empty", i)
	n.awaitCatchUp(i)
}

// pause stops replica i with SIGSTOP and resumes it with SIGCONT.
func (n *nemesis) pause(i int) {
	n.logf("pause replica %d (SIGSTOP)", i)
	n.signal(i, syscall.SIGSTOP)
	time.Sleep(jepsenFault)
	n.signal(i, syscall.SIGCONT)
	n.logf("resumed replica %d (SIGCONT)", i)
}

// cut takes replica i's bridge port down and up again.
func (n *nemesis) cut(i int) {
	n.logf("cut replica %d off", i)
	if err := n.lab.Host(i).Cut(); err != nil {
		n.t.Fatal(err)
	}
	time.Sleep(jepsenFault)
	if err := n.lab.Host(i).Heal(); err != nil {
		n.t.Fatal(err)
	}
	n.logf("healed replica %d", i)
}

// awaitCatchUp waits until replica i, restarted empty, reports that it
// fetched the certified state, or jepsenCatchUp passed. A replica that lost
// its state counts as faulty until it has caught up: the next fault must
// not come before, or two replicas would be faulty at once.
func (n *nemesis) awaitCatchUp(i int) {
	deadline := time.Now().Add(jepsenCatchUp)
	for time.Now().Before(deadline) {
		if strings.Contains(n.procs[i].stderr.String(), "state transfer done") {
			n.logf("replica %d caught up", i)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.logf("replica %d reported no state transfer within %v", i, jepsenCatchUp)
}

func (n *nemesis) signal(i int, sig syscall.Signal) {
	if err := n.procs[i].cmd.Process.Signal(sig); err != nil {
		n.t.Errorf("replica %d: %v: %v", i, sig, err)
	}
}

// healAll makes sure every replica runs, is not paused and is on the bridge.
func (n *nemesis) healAll() {
	for i, p := range n.procs {
		if err := n.lab.Host(i).Heal(); err != nil {
			n.t.Error(err)
		}
		select {
		case err := <-p.done:
			p.done <- err
			n.t.Errorf("replica %d exited by itself: %v\n%s", i, err, p.stderr)
		default:
			n.signal(i, syscall.SIGCONT)
		}
	}
	n.logf("all healed")
}

// readHistory reads the client process's history file.
func readHistory(path string) ([]jepsenOp, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h []jepsenOp
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}
