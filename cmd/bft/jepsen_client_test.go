package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/internal/netns"
)

// The client side of TestJepsen.
const (
	jepsenClientEnv = "RUBIN_JEPSEN_CLIENT"
	jepsenWorkers   = 6
	jepsenKeys      = 3
	// jepsenMaxOps bounds the history, so that checking it stays quick.
	jepsenMaxOps = 6000
	// jepsenOpBound is how long a worker waits for one operation before
	// it counts its outcome as unknown and goes on as a new client.
	jepsenOpBound = 5 * time.Second
	// jepsenFinalBound is how long the final get of each key, once every
	// fault is healed, may take.
	jepsenFinalBound = 30 * time.Second
	// jepsenThink bounds a worker's pause between two operations, which
	// spreads the operations over the whole run.
	jepsenThink = 30 * time.Millisecond
)

// jepsenClientConfig is what the client process runs, passed as a JSON
// file.
type jepsenClientConfig struct {
	Cluster string        // the cluster file
	History string        // where to write the history
	Run     time.Duration // how long the workers run
	Calm    time.Duration // the last part of Run, without faults
	Seed    uint64
}

// jepsenOp is one operation of the history: a put of Value, or a get that
// found Value (or, with Found false, nothing). Times are nanoseconds since
// the client started; Return is -1 for a put whose outcome is unknown.
type jepsenOp struct {
	Client int    `json:"client"`
	Put    bool   `json:"put"`
	Key    string `json:"key"`
	Value  string `json:"value"`
	Found  bool   `json:"found"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
}

// jepsenClientProc is the client process as TestJepsen sees it.
type jepsenClientProc struct {
	p   *replicaProc
	out *lockedBuffer
}

// startJepsenClient starts this test binary in h's namespace as the client
// process of cfg.
func startJepsenClient(t *testing.T, h *netns.Host, cfg jepsenClientConfig) *jepsenClientProc {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(cfg.History), "client.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(os.Args[0], "-test.run=^TestJepsen$", "-test.v")
	cmd.Env = append(os.Environ(), jepsenClientEnv+"="+path)
	out := new(lockedBuffer)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &replicaProc{cmd: cmd, done: make(chan error, 1), stderr: out}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(p.kill)
	return &jepsenClientProc{p: p, out: out}
}

// wait waits for the client process to exit and returns its error.
func (c *jepsenClientProc) wait() error {
	err := <-c.p.done
	c.p.done <- err
	return err
}

func (c *jepsenClientProc) output() string { return c.out.String() }

// jepsenClient is the client process: jepsenWorkers workers, each with an
// operation outstanding, put unique values to and get jepsenKeys keys
// until cfg.Run has passed or jepsenMaxOps operations were made (a
// quarter of them kept for the calm at the end), then one
// get of each key; it writes the history to cfg.History. It fails if a
// final get fails or no operation completed during the calm at the end.
func jepsenClient(t *testing.T, cfgPath string) {
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg jepsenClientConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Run+2*jepsenFinalBound)
	defer cancel()
	cl := newMultiClient(ctx, t, cfg.Cluster, jepsenWorkers)

	begin := time.Now()
	now := func() int64 { return int64(time.Since(begin)) }
	h := &history{}
	do := func(client int, put bool, key, value string, bound time.Duration) error {
		op := jepsenOp{Client: client, Put: put, Key: key, Value: value}
		req := kv.EncodeGet([]byte(key))
		if put {
			req = kv.EncodePut([]byte(key), []byte(value))
		}
		octx, ocancel := context.WithTimeout(ctx, bound)
		op.Call = now()
		res, err := cl.Invoke(octx, req)
		op.Return = now()
		ocancel()
		if err != nil {
			if put {
				op.Return = -1 // it may still take effect
				h.add(op)
			}
			return err
		}
		v, found, err := kv.DecodeResult(res)
		if err != nil {
			return fmt.Errorf("%s: %w", key, errors.Join(errStoreRefused, err))
		}
		if !put {
			op.Value, op.Found = string(v), found
		}
		h.add(op)
		return nil
	}
	calmFrom := cfg.Run - cfg.Calm
	// budget bounds the history; a quarter of it is kept for the calm at
	// the end, so that a fast cluster does not spend it all under faults
	// and leave the calm with no operation to check.
	budget := func() int {
		if time.Since(begin) < calmFrom {
			return jepsenMaxOps * 3 / 4
		}
		return jepsenMaxOps
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []error
	timedOut := 0
	for w := range jepsenWorkers {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
		wg.Go(func() {
			client := w
			for seq := 0; time.Since(begin) < cfg.Run; seq++ {
				if h.len() >= budget() {
					if time.Since(begin) >= calmFrom {
						break
					}
					// Spent before the calm: wait for it, whose
					// operations the check needs.
					time.Sleep(jepsenThink)
					continue
				}
				key := fmt.Sprintf("k%d", rng.IntN(jepsenKeys))
				err := do(client, rng.IntN(2) == 0, key, fmt.Sprintf("w%d-%d", w, seq), jepsenOpBound)
				switch {
				case errors.Is(err, errStoreRefused):
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
					return
				case err != nil:
					// The outcome is unknown: a new client identity in the
					// history, as the old one may still be in progress.
					mu.Lock()
					timedOut++
					mu.Unlock()
					client += jepsenWorkers
				}
				time.Sleep(time.Duration(rng.Int64N(int64(jepsenThink))))
			}
		})
	}
	wg.Wait()
	for k := range jepsenKeys {
		if err := do(1<<20, false, fmt.Sprintf("k%d", k), "", jepsenFinalBound); err != nil {
			failed = append(failed, fmt.Errorf("final get of k%d: %w", k, err))
		}
	}
	ops := h.snapshot()
	calm := 0
	for _, op := range ops {
		if op.Call >= int64(calmFrom) && op.Return >= 0 {
			calm++
		}
	}
	fmt.Printf("%d operations, %d with an unknown outcome, %d completed in the last %v without faults\n", len(ops), timedOut, calm, cfg.Calm)
	b, err = json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.History, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, err := range failed {
		t.Error(err)
	}
	if calm == 0 {
		t.Errorf("no operation completed in the last %v, after every fault was healed", cfg.Calm)
	}
}

// newMultiClient returns a client of the cluster in file that multiplexes
// its first n client identities, closed when the test ends.
func newMultiClient(ctx context.Context, t *testing.T, file string, n int) *node.Client {
	t.Helper()
	c, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]bft.ClientID, n)
	for i := range ids {
		ids[i] = c.Clients[i].ID
	}
	cl, err := node.NewClient(ctx, node.ClientConfig{Cluster: c, IDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// errStoreRefused marks an operation the store answered with an error,
// which no operation of this test should get.
var errStoreRefused = errors.New("the store refused the operation")

// history is the operations of all workers, safe for concurrent use.
type history struct {
	mu  sync.Mutex
	ops []jepsenOp
}

func (h *history) add(op jepsenOp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

func (h *history) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

func (h *history) snapshot() []jepsenOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]jepsenOp(nil), h.ops...)
}
