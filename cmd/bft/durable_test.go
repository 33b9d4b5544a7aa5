package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/node"
)

// durableCluster is four replica processes, each with its own data
// directory, and a multiplexing client.
type durableCluster struct {
	t      *testing.T
	file   string
	dirs   []string
	procs  []*replicaProc
	client *node.Client
	ctx    context.Context
}

func newDurableCluster(t *testing.T, ctx context.Context) *durableCluster {
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	addrs := freeAddrs(t, "127.0.0.1", 4)
	if code, _, stderr := runCmd(t, "keygen", "-addrs", strings.Join(addrs, ","), "-clients", "8", "-out", file); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}
	c := &durableCluster{t: t, file: file, ctx: ctx, procs: make([]*replicaProc, 4)}
	for i := range c.procs {
		c.dirs = append(c.dirs, filepath.Join(dir, fmt.Sprintf("data%d", i)))
		c.start(i)
	}
	cl, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var ids []bft.ClientID
	for _, k := range cl.Clients {
		ids = append(ids, k.ID)
	}
	c.client, err = node.NewClient(ctx, node.ClientConfig{Cluster: cl, IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.client.Close() })
	return c
}

func (c *durableCluster) start(i int) {
	c.procs[i] = startReplica(c.t, c.file, "tcp", i, "-data-dir", c.dirs[i])
}

// crash kills the replicas at once (kill -9) and restarts them on their
// data directories.
func (c *durableCluster) crash(ids ...int) {
	for _, i := range ids {
		c.procs[i].kill()
	}
	for _, i := range ids {
		c.start(i)
	}
}

// workload runs writers that put distinct keys until stop is closed, and
// returns every put a writer saw acknowledged.
func (c *durableCluster) workload(writers int, stop <-chan struct{}) func() map[string]string {
	var (
		mu    sync.Mutex
		acked = make(map[string]string)
		wg    sync.WaitGroup
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("v%d-%d-%x", w, i, rand.Uint32())
				ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
				res, err := c.client.Invoke(ctx, kv.EncodePut([]byte(k), []byte(v)))
				cancel()
				if err != nil {
					continue // not acknowledged
				}
				if _, _, err := kv.DecodeResult(res); err == nil {
					mu.Lock()
					acked[k] = v
					mu.Unlock()
				}
			}
		}()
	}
	return func() map[string]string {
		wg.Wait()
		return acked
	}
}

// checkAcked reads back every acknowledged put.
func (c *durableCluster) checkAcked(acked map[string]string) {
	c.t.Helper()
	for k, want := range acked {
		ctx, cancel := context.WithTimeout(c.ctx, 20*time.Second)
		res, err := c.client.Invoke(ctx, kv.EncodeGet([]byte(k)))
		cancel()
		if err != nil {
			c.t.Fatalf("get %s: %v", k, err)
		}
		v, found, err := kv.DecodeResult(res)
		if err != nil || !found || string(v) != want {
			c.t.Fatalf("acknowledged put %s=%s lost: got %q (found %v, err %v)", k, want, v, found, err)
		}
	}
}

// runCrashes runs a workload, crashes the replicas rounds times at random
// moments, and checks that no acknowledged put was lost.
func runCrashes(t *testing.T, rounds int, victims func(r *rand.Rand) []int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newDurableCluster(t, ctx)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	stop := make(chan struct{})
	wait := c.workload(8, stop)
	for range rounds {
		time.Sleep(time.Duration(200+rng.IntN(1300)) * time.Millisecond)
		ids := victims(rng)
		c.crash(ids...)
		t.Logf("killed and restarted replicas %v", ids)
	}
	time.Sleep(time.Second)
	close(stop)
	acked := wait()
	if len(acked) < 50 {
		t.Fatalf("only %d puts acknowledged: the cluster made no progress", len(acked))
	}
	c.checkAcked(acked)
	t.Logf("%d acknowledged puts all readable", len(acked))
}

// TestDurableAllKilled: kill -9 of all four replicas at random moments of
// a write workload, three times, each time restarted on their data
// directories: every acknowledged put is readable afterwards. (Without
// -data-dir the replicas come back empty and the first read fails.)
func TestDurableAllKilled(t *testing.T) {
	runCrashes(t, 3, func(*rand.Rand) []int { return []int{0, 1, 2, 3} })
}

// TestDurableTwoKilled: two of four replicas (one a random pair, so
// sometimes the primary) killed and restarted at once, three times.
func TestDurableTwoKilled(t *testing.T) {
	runCrashes(t, 3, func(r *rand.Rand) []int {
		p := r.Perm(4)
		return p[:2]
	})
}

// TestDurableDataDirLost: a replica whose data directory was deleted
// rejoins through state transfer; then another replica stops, so the
// cluster can only go on with the rejoined one in its quorum.
func TestDurableDataDirLost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newDurableCluster(t, ctx)
	put := func(k, v string) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := c.client.Invoke(cctx, kv.EncodePut([]byte(k), []byte(v))); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	for i := range 50 {
		put(fmt.Sprintf("before-%d", i), "a")
	}
	c.procs[3].kill()
	if err := os.RemoveAll(c.dirs[3]); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		put(fmt.Sprintf("without-3-%d", i), "b")
	}
	c.start(3)
	for i := range 300 {
		put(fmt.Sprintf("after-%d", i), "c")
	}
	c.procs[1].kill() // 0, 2 and 3 must form the quorum now
	put("last", "d")
	c.checkAcked(map[string]string{"before-7": "a", "without-3-299": "b", "after-299": "c", "last": "d"})
}
