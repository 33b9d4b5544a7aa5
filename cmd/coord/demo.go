package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/gateway"
)

// demoConfig is what the demo runs.
type demoConfig struct {
	network  string
	host     string
	clients  int
	rounds   int
	progress time.Duration
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var d demoConfig
	err := parseFlags("demo", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&d.network, "transport", "tcp", "the replicas' transport: tcp or rdma")
		fs.StringVar(&d.host, "host", "127.0.0.1", "address the replicas listen on (with rdma: an address of the RDMA device)")
		fs.IntVar(&d.clients, "clients", 4, "ZooKeeper clients, each in the lock and in the election")
		fs.IntVar(&d.rounds, "rounds", 50, "times each client takes the lock")
		fs.DurationVar(&d.progress, "progress", 250*time.Millisecond, "interval of the progress line")
	})
	if err != nil {
		return err
	}
	switch {
	case d.network != "tcp" && d.network != "rdma":
		return fmt.Errorf("%w: -transport %q is neither tcp nor rdma", errUsage, d.network)
	case d.clients < 2:
		return fmt.Errorf("%w: -clients %d is below 2", errUsage, d.clients)
	case d.rounds < 2:
		return fmt.Errorf("%w: -rounds %d is below 2", errUsage, d.rounds)
	case d.progress <= 0:
		return fmt.Errorf("%w: -progress %v is not positive", errUsage, d.progress)
	}
	return demo(ctx, d, stdout, stderr)
}

// demoReplica is one of the demo's replicas.
type demoReplica struct {
	r    *node.Replica
	app  *coord.App
	stop context.CancelFunc
	done chan error
}

// demo runs four replicas and a gateway in this process, and ZooKeeper
// clients that take a lock and elect a leader through it; the primary
// crashes halfway.
func demo(ctx context.Context, d demoConfig, stdout, stderr io.Writer) error {
	const n = 4
	c, err := auth.Generate(n, 2*d.clients+2, d.host, 1, nil)
	if err != nil {
		return err
	}
	// Errors only: the demo's replicas keep their state in memory, which
	// each would warn about.
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	replicas := make([]*demoReplica, n)
	defer func() {
		for _, dr := range replicas {
			if dr != nil {
				dr.stop()
				<-dr.done
			}
		}
	}()
	listeners := make([]net.Listener, n)
	for i := range listeners {
		if listeners[i], err = rubin.Listen(d.network, net.JoinHostPort(d.host, "0")); err != nil {
			for _, ln := range listeners[:i] {
				ln.Close()
			}
			return err
		}
		c.Replicas[i].Addr = listeners[i].Addr().String()
	}
	// Every party gets only its own secrets, as coord keygen -split
	// deploys a cluster.
	for i := range replicas {
		app := coord.New(coord.Config{Clients: clientIDs(c)})
		var r *node.Replica
		own, err := c.ForReplica(bft.ReplicaID(i))
		if err == nil {
			r, err = node.NewReplica(node.ReplicaConfig{
				Cluster: own, ID: bft.ReplicaID(i), Network: d.network, App: app, Core: coreConfig(),
				Listener: listeners[i], Logger: logger,
			})
		}
		if err != nil {
			for _, ln := range listeners[i:] {
				ln.Close()
			}
			return err
		}
		rctx, stop := context.WithCancel(ctx)
		dr := &demoReplica{r: r, app: app, stop: stop, done: make(chan error, 1)}
		go func() { dr.done <- r.Run(rctx) }()
		replicas[i] = dr
	}

	ids, err := identities(c, "")
	if err != nil {
		return err
	}
	own, err := c.ForClients(ids)
	if err != nil {
		return err
	}
	client, gw, err := newGateway(ctx, node.ClientConfig{Cluster: own, IDs: ids, Network: d.network, Logger: logger}, gateway.Config{}, claimLapse)
	if err != nil {
		return err
	}
	defer client.Close()
	defer gw.Close()
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go gw.Serve(gln)
	fmt.Fprintf(stdout, "4 replicas (f=1) over %s, a gateway on %s; %d ZooKeeper clients take a lock %d times each and elect leaders\n",
		d.network, gln.Addr(), d.clients, d.rounds)

	w, err := startWorkload(ctx, gln.Addr().String(), d)
	if err != nil {
		return err
	}
	defer w.shutdown()

	start := time.Now()
	tick := time.NewTicker(d.progress)
	defer tick.Stop()
	total := int64(d.clients * d.rounds)
	crashed, view := -1, uint64(0)
	var crashedAt time.Time
	var termsAtCrash int64
	// The primary crashes when half the lock rounds are done, not at the
	// next progress line: on a fast machine the other half could be
	// done by then, and there would be no view change to show.
	half := w.half
	for running := true; running; {
		select {
		case <-w.locked:
			running = false
		case <-w.ctx.Done():
			return context.Cause(w.ctx)
		case <-tick.C:
		case <-half:
			half = nil
		}
		var st bft.Status
		for i, dr := range replicas {
			if i != crashed {
				st = dr.r.Status()
				break
			}
		}
		leader, _ := w.leader.Load().(string)
		fmt.Fprintf(stdout, "[%6.2fs] lock taken %4d/%d  leader terms %4d  leader %-9s  view %d  primary %d  executed seq %d\n",
			time.Since(start).Seconds(), w.increments.Load(), total, w.terms.Load(), leader, st.View, st.Primary, st.LastExecuted)
		if st.View != view {
			fmt.Fprintf(stdout, "==> view change: view %d, replica %d is the primary (%.0f ms after the crash)\n",
				st.View, st.Primary, float64(time.Since(crashedAt).Milliseconds()))
			view = st.View
		}
		if crashed < 0 && w.increments.Load() >= total/2 {
			crashed = int(st.Primary)
			crashedAt, termsAtCrash = time.Now(), w.terms.Load()
			fmt.Fprintf(stdout, "==> crashing the primary, replica %d\n", crashed)
			replicas[crashed].stop()
			<-replicas[crashed].done
		}
	}
	if err := w.finish(); err != nil {
		return err
	}
	counter, err := w.counter()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "done in %.2fs: the counter the lock guards is %d of %d; %d leader terms, %d after the crash, never two leaders at once; %d view change(s)\n",
		time.Since(start).Seconds(), counter, total, w.terms.Load(), w.terms.Load()-termsAtCrash, view)
	if counter != total {
		return fmt.Errorf("the lock let updates be lost: counter %d, want %d", counter, total)
	}
	if crashed >= 0 {
		replicas[crashed] = nil
	}
	// Nothing may reach the replicas while they are compared: the
	// gateway's session pings and closes would keep them executing.
	w.shutdown()
	gw.Close()
	client.Close()
	return sameState(ctx, replicas, stdout)
}

// sameState waits until the running replicas, which no client reaches any
// more, have executed as far as each other, stops them and compares their
// states.
func sameState(ctx context.Context, replicas []*demoReplica, stdout io.Writer) error {
	deadline := time.Now().Add(10 * time.Second)
	var seqs []uint64
	for {
		seqs = seqs[:0]
		for _, dr := range replicas {
			if dr != nil {
				seqs = append(seqs, dr.r.Status().LastExecuted)
			}
		}
		if slices.Min(seqs) == slices.Max(seqs) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the surviving replicas did not converge: executed %v", seqs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	var snaps [][]byte
	for i, dr := range replicas {
		if dr == nil {
			continue
		}
		dr.stop()
		<-dr.done
		replicas[i] = nil
		snaps = append(snaps, dr.app.Snapshot())
	}
	for _, s := range snaps[1:] {
		if !bytes.Equal(s, snaps[0]) {
			return fmt.Errorf("the surviving replicas' states differ, each having executed up to %d", seqs[0])
		}
	}
	fmt.Fprintf(stdout, "the %d surviving replicas hold identical states\n", len(snaps))
	return nil
}

// workload is the demo's ZooKeeper clients: each takes the lock
// /demo/lock d.rounds times to increment /demo/counter, and meanwhile
// stands in the election under /demo/election.
type workload struct {
	ctx        context.Context // ends at a failure, with its cause
	cancel     context.CancelCauseFunc
	conns      []*zk.Conn
	locked     chan struct{} // closed when every lock round is done
	half       chan struct{} // closed when half the lock rounds are done
	halfAt     int64
	stop       chan struct{} // closed to end the election
	wg         sync.WaitGroup
	stopOnce   sync.Once
	increments atomic.Int64
	terms      atomic.Int64
	leaders    atomic.Int64 // clients that believe they lead; never above 1
	leader     atomic.Value // the current leader's name
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

var openACL = zk.WorldACL(zk.PermAll)

func startWorkload(ctx context.Context, addr string, d demoConfig) (*workload, error) {
	w := &workload{locked: make(chan struct{}), half: make(chan struct{}), halfAt: int64(d.clients*d.rounds) / 2, stop: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	for range d.clients + 1 {
		c, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quietLogger{}))
		if err != nil {
			w.shutdown()
			return nil, err
		}
		w.conns = append(w.conns, c)
	}
	setup := w.conns[d.clients]
	for _, p := range []string{"/demo", "/demo/election"} {
		if _, err := setup.Create(p, nil, 0, openACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			w.shutdown()
			return nil, err
		}
	}
	if _, err := setup.Create("/demo/counter", []byte("0"), 0, openACL); err != nil {
		w.shutdown()
		return nil, err
	}
	var lockers sync.WaitGroup
	for i, c := range w.conns[:d.clients] {
		name := "client-" + strconv.Itoa(i)
		lockers.Add(1)
		w.wg.Go(func() {
			defer lockers.Done()
			lock := zk.NewLock(c, "/demo/lock", openACL)
			for range d.rounds {
				if err := w.increment(c, lock); err != nil {
					w.cancel(fmt.Errorf("%s: lock: %w", name, err))
					return
				}
			}
		})
		w.wg.Go(func() {
			if err := w.elect(c, name); err != nil {
				w.cancel(fmt.Errorf("%s: election: %w", name, err))
			}
		})
	}
	go func() { lockers.Wait(); close(w.locked) }()
	return w, nil
}

// increment adds one to the counter under the lock.
func (w *workload) increment(c *zk.Conn, lock *zk.Lock) error {
	return w.incrementPath(c, lock, "/demo/counter")
}

// incrementPath adds one to the counter at path under the lock, without a
// version check: only the lock keeps two clients from losing an update.
func (w *workload) incrementPath(c *zk.Conn, lock *zk.Lock, path string) error {
	if err := lock.Lock(); err != nil {
		return err
	}
	data, _, err := c.Get(path)
	if err == nil {
		v, _ := strconv.Atoi(string(data))
		_, err = c.Set(path, []byte(strconv.Itoa(v+1)), -1)
	}
	if uerr := lock.Unlock(); err == nil {
		err = uerr
	}
	if err == nil && w.increments.Add(1) == w.halfAt {
		close(w.half)
	}
	return err
}

// elect runs the election recipe until stop: an ephemeral sequential
// candidate node; the lowest leads, for a short term, then steps down and
// stands again; each other candidate watches the one before it.
func (w *workload) elect(c *zk.Conn, name string) error {
	for {
		me, err := c.Create("/demo/election/n-", []byte(name), zk.FlagEphemeral|zk.FlagSequence, openACL)
		if err != nil {
			return err
		}
		me = me[len("/demo/election/"):]
		for {
			kids, _, err := c.Children("/demo/election")
			if err != nil {
				return err
			}
			slices.Sort(kids)
			i := slices.Index(kids, me)
			if i < 0 {
				return fmt.Errorf("candidate %s vanished", me)
			}
			if i == 0 {
				if w.leaders.Add(1) > 1 {
					return errors.New("two leaders at once")
				}
				w.leader.Store(name)
				w.terms.Add(1)
				select {
				case <-time.After(20 * time.Millisecond):
				case <-w.stop:
				}
				w.leaders.Add(-1)
				if err := c.Delete("/demo/election/"+me, -1); err != nil {
					return err
				}
				break
			}
			ok, _, ch, err := c.ExistsW("/demo/election/" + kids[i-1])
			if err != nil {
				return err
			}
			if ok {
				select {
				case <-ch:
				case <-w.stop:
					return nil
				}
			}
		}
		select {
		case <-w.stop:
			return nil
		default:
		}
	}
}

// counter reads the counter the lock guards.
func (w *workload) counter() (int64, error) {
	data, _, err := w.conns[len(w.conns)-1].Get("/demo/counter")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(data), 10, 64)
}

// finish ends the election once the lock rounds are done, waits for the
// clients and returns the first failure.
func (w *workload) finish() error {
	w.stopOnce.Do(func() { close(w.stop) })
	w.wg.Wait()
	if w.ctx.Err() != nil {
		return context.Cause(w.ctx)
	}
	return nil
}

// shutdown closes the clients, which ends what they wait for, and waits
// for them.
func (w *workload) shutdown() {
	w.stopOnce.Do(func() { close(w.stop) })
	for _, c := range w.conns {
		c.Close()
	}
	w.wg.Wait()
	w.cancel(nil)
}
