package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/internal/cli"
	"github.com/rubin-go/rubin/internal/stats"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/ordertest"
)

// benchConfig is what orderer bench measures.
type benchConfig struct {
	streams  int           // Broadcast streams, spread over the orderers
	window   int           // envelopes a stream sends before it waits for an answer
	size     int           // data bytes of each envelope
	duration time.Duration // of the load
	warmup   time.Duration // before the steady window
	samples  int           // ECDSA verifications timed
	envs     int           // envelopes signed beforehand; 0: enough for the bound
	dataDir  string        // "": a temporary directory
	observe  int           // the orderer whose Deliver is observed
	block    block.Config  // how blocks are cut; zero: Fabric's defaults
	profile  string        // a CPU profile of the run goes there, if set
	net      rubin.Config  // the orderers' transport among themselves
	host     string        // the address the orderers' replicas listen on
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseBench(args, stderr)
	if err != nil {
		return err
	}
	if cfg.dataDir == "" {
		dir, err := os.MkdirTemp("", "orderer-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.dataDir = dir
	}
	return cli.Profiled(cfg.profile, func() error { return bench(ctx, cfg, stdout) })
}

// parseBench parses orderer bench's flags.
func parseBench(args []string, stderr io.Writer) (benchConfig, error) {
	cfg := benchConfig{}
	var quick bool
	var flags *flag.FlagSet
	err := parseFlags("bench", args, stderr, func(fs *flag.FlagSet) {
		flags = fs
		fs.IntVar(&cfg.streams, "streams", 32, "Broadcast streams, spread over the four orderers")
		cfg.net.RegisterFlags(fs)
		fs.StringVar(&cfg.host, "host", "127.0.0.1", "the address the orderers' replicas listen on (over rdma: the RDMA device's)")
		fs.IntVar(&cfg.window, "window", 16, "envelopes each stream has sent and not had answered, at most (32 streams of 16: twice what the four orderers order at once)")
		fs.IntVar(&cfg.size, "size", 1024, "data bytes in each envelope")
		fs.DurationVar(&cfg.duration, "duration", 30*time.Second, "how long the streams write")
		fs.DurationVar(&cfg.warmup, "warmup", 5*time.Second, "the start of the load left out of the steady window")
		fs.IntVar(&cfg.samples, "verify-samples", 5000, "ECDSA P-256 verifications timed for the bound")
		fs.IntVar(&cfg.envs, "envelopes", 0, "envelopes to sign beforehand (default: enough to write at the bound for -duration)")
		fs.StringVar(&cfg.dataDir, "data-dir", "", "keep the orderers' data in `dir`/0..3, which must not hold an earlier run's (default: a temporary directory, removed after)")
		fs.IntVar(&cfg.observe, "observe", 0, "the orderer whose Deliver stream is observed")
		fs.StringVar(&cfg.profile, "cpuprofile", "", "write a CPU profile of the whole run, orderers and load, to `file`")
		fs.BoolVar(&quick, "quick", false, "a run of a few seconds for CI: -duration 3s -warmup 1s -verify-samples 300, unless given")
	})
	if err != nil {
		return cfg, err
	}
	if quick {
		// The flags given beside -quick stand.
		set := make(map[string]bool)
		flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			cfg.duration = 3 * time.Second
		}
		if !set["warmup"] {
			cfg.warmup = time.Second
		}
		if !set["verify-samples"] {
			cfg.samples = 300
		}
	}
	switch {
	case cfg.streams < 1, cfg.window < 1, cfg.size < 0, cfg.samples < 1, cfg.envs < 0:
		return cfg, fmt.Errorf("%w: -streams and -verify-samples must be positive, -size and -envelopes not negative", cli.ErrUsage)
	case cfg.warmup < 0 || cfg.duration <= cfg.warmup:
		return cfg, fmt.Errorf("%w: -duration %v must be longer than -warmup %v", cli.ErrUsage, cfg.duration, cfg.warmup)
	case cfg.net.Transport != "tcp" && cfg.net.Transport != "rdma":
		return cfg, fmt.Errorf("%w: -transport %q is neither tcp nor rdma", cli.ErrUsage, cfg.net.Transport)
	case cfg.observe < 0 || cfg.observe > 3:
		return cfg, fmt.Errorf("%w: -observe %d is not an orderer (0 to 3)", cli.ErrUsage, cfg.observe)
	}
	return cfg, nil
}

func bench(ctx context.Context, cfg benchConfig, stdout io.Writer) (err error) {
	cpus := runtime.NumCPU()
	fmt.Fprintf(stdout, "placement: the four orderers and the load client share this process's %d CPUs %s (GOMAXPROCS %d), not pinned apart\n", cpus, affinity(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(stdout, "  the bound grants the orderers all %d CPUs, so the client's own work counts against the ratio; pinning the orderers to one CPU and the client to another, as bftbench does, would halve the bound\n", cpus)
	verify, err := verifyTime(cfg.samples)
	if err != nil {
		return err
	}
	bound := float64(cpus) / (4 * verify.Seconds())
	fmt.Fprintf(stdout, "ECDSA P-256 verify (Go crypto/ecdsa, median of %d): %.1f µs\n", cfg.samples, float64(verify.Nanoseconds())/1e3)
	fmt.Fprintf(stdout, "bound: %d CPUs / (4 orderers × %.1f µs) = %.0f tx/s\n", cpus, float64(verify.Nanoseconds())/1e3, bound)

	policy, writer, reader, err := identities("BenchOrg")
	if err != nil {
		return err
	}
	// By default, enough envelopes for the bound's rate over the whole
	// run: a run at the bound or below never runs out.
	n := cfg.envs
	if n == 0 {
		n = int(bound*cfg.duration.Seconds()) + cfg.streams
	}
	start := time.Now()
	envs, err := presign(writer, n, cfg.size)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "load: %d Broadcast streams (spread over the orderers), each with up to %d envelopes unanswered, %d envelopes of %d data bytes (%d bytes each), signed beforehand in %v\n", cfg.streams, cfg.window, n, cfg.size, len(envs.raw[0]), time.Since(start).Round(time.Millisecond))

	nb := cfg.block.Normalized()
	batching := "default batching"
	if cfg.block != (block.Config{}) {
		batching = "batching"
	}
	d, err := startDemoCluster(ctx, &cfg.net, cfg.host, policy, policy, cfg.block, cfg.dataDir)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.stop()) }()
	fmt.Fprintf(stdout, "cluster: four durable orderers (PBFT log and ledger in %s), replicas over %s on %s, Broadcast and Deliver over gRPC on loopback, %s (MaxMessageCount %d, PreferredMaxBytes %d, BatchTimeout %v)\n", cfg.dataDir, cfg.net.Transport, cfg.host, batching, nb.MaxMessageCount, nb.PreferredMaxBytes, nb.BatchTimeout)
	clients, closeClients, err := d.dial()
	if err != nil {
		return err
	}
	defer closeClients()

	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	seen := make(chan deliveredBlock, 1024)
	deliverErr := make(chan error, 1)
	go func() { deliverErr <- observe(lctx, clients[cfg.observe], reader, envs, seen) }()
	begin := time.Now()
	var next atomic.Int64
	var refused atomic.Int64
	var wg sync.WaitGroup
	loadErr := make(chan error, cfg.streams)
	for s := range cfg.streams {
		wg.Go(func() {
			if err := writeStream(lctx, clients[s%len(clients)], cfg.window, envs, &next, &refused); err != nil && lctx.Err() == nil {
				loadErr <- err
			}
		})
	}
	timer := time.NewTimer(cfg.duration)
	defer timer.Stop()
	var blocks []deliveredBlock
	var failure error
collect:
	for {
		select {
		case b := <-seen:
			blocks = append(blocks, b)
		case <-timer.C:
			break collect
		case err := <-loadErr:
			failure = fmt.Errorf("broadcast: %w", err)
			break collect
		case err := <-deliverErr:
			failure = fmt.Errorf("deliver from orderer %d: %w", cfg.observe, err)
			break collect
		case <-ctx.Done():
			failure = ctx.Err()
			break collect
		}
	}
	stopLoad()
	wg.Wait()
	if failure != nil {
		return failure
	}
	sent := min(next.Load(), int64(n))
	if sent >= int64(n) {
		fmt.Fprintf(stdout, "warning: the streams ran out of envelopes: the throughput is below what the cluster can do\n")
	}
	if r := refused.Load(); r > 0 {
		fmt.Fprintf(stdout, "warning: %d envelopes were not answered SUCCESS\n", r)
	}

	// The steady window: blocks delivered from warmup to the end; the
	// rate counts the envelopes of the blocks after the window's first,
	// over the time from its first block to its last.
	var win []deliveredBlock
	for _, b := range blocks {
		if b.at.Sub(begin) >= cfg.warmup {
			win = append(win, b)
		}
	}
	total := 0
	for _, b := range blocks {
		total += len(b.sent)
	}
	fmt.Fprintf(stdout, "delivered on orderer %d's Deliver: %d envelopes in %d blocks of %d broadcast in %v\n", cfg.observe, total, len(blocks), sent, cfg.duration)
	if len(win) < 2 {
		return fmt.Errorf("only %d blocks delivered in the steady window (%v to %v): run longer", len(win), cfg.warmup, cfg.duration)
	}
	count := 0
	var lat []time.Duration
	for i, b := range win {
		if i > 0 {
			count += len(b.sent)
		}
		for _, at := range b.sent {
			lat = append(lat, b.at.Sub(at))
		}
	}
	span := win[len(win)-1].at.Sub(win[0].at)
	rate := float64(count) / span.Seconds()
	slices.Sort(lat)
	fmt.Fprintf(stdout, "steady window: %d envelopes in %d blocks over %v\n", count, len(win)-1, span.Round(time.Millisecond))
	fmt.Fprintf(stdout, "throughput: %.0f tx/s\n", rate)
	verdict := "below the target"
	switch r := rate / bound; {
	case r >= 0.8:
		verdict = "meets the target and the stretch 0.8"
	case r >= 0.6:
		verdict = "meets the target"
	}
	fmt.Fprintf(stdout, "ratio to the bound: %.2f (target 0.6, stretch 0.8: %s)\n", rate/bound, verdict)
	fmt.Fprintf(stdout, "broadcast to delivery: p50 %v, p99 %v (%d envelopes)\n", stats.Percentile(lat, 50).Round(10*time.Microsecond), stats.Percentile(lat, 99).Round(10*time.Microsecond), len(lat))
	return nil
}

// verifyTime returns the median time of one crypto/ecdsa P-256
// verification of a signature over a SHA-256 digest, of samples timed.
func verifyTime(samples int) (time.Duration, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return 0, err
	}
	digest := sha256.Sum256(make([]byte, 1024))
	sig, err := ecdsa.SignASN1(rand.Reader, key, digest[:])
	if err != nil {
		return 0, err
	}
	times := make([]time.Duration, samples)
	for i := range times {
		t := time.Now()
		ok := ecdsa.VerifyASN1(&key.PublicKey, digest[:], sig)
		times[i] = time.Since(t)
		if !ok {
			return 0, errors.New("bench: a valid ECDSA signature does not verify")
		}
	}
	slices.Sort(times)
	return stats.Percentile(times, 50), nil
}

// presigned are the bench's envelopes, and when each was sent.
type presigned struct {
	envs   []*cb.Envelope
	raw    [][]byte
	byTail map[[32]byte]int // by the last 32 bytes of the encoding: of the signature
	sentAt []atomic.Int64   // UnixNano
}

// presign signs n envelopes of size data bytes each, on every CPU.
func presign(s *ordertest.Signer, n, size int) (*presigned, error) {
	p := &presigned{envs: make([]*cb.Envelope, n), raw: make([][]byte, n), byTail: make(map[[32]byte]int, n), sentAt: make([]atomic.Int64, n)}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, runtime.NumCPU())
	for range runtime.NumCPU() {
		wg.Go(func() {
			data := make([]byte, size)
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				e, err := s.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, demoChannel, data)
				if err == nil {
					p.raw[i], err = proto.Marshal(e)
				}
				if err != nil {
					errs <- err
					return
				}
				p.envs[i] = e
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	for i, r := range p.raw {
		p.byTail[[32]byte(r[len(r)-32:])] = i
	}
	if len(p.byTail) != n {
		return nil, errors.New("bench: two envelopes end alike")
	}
	return p, nil
}

// writeStream broadcasts the next envelopes on one stream, keeping up to
// window of them unanswered, until ctx ends or they run out.
func writeStream(ctx context.Context, c ab.AtomicBroadcastClient, window int, p *presigned, next, refused *atomic.Int64) error {
	stream, err := c.Broadcast(ctx)
	if err != nil {
		return err
	}
	// The answers come in the order sent; credit holds a token for each
	// envelope that may be sent before the next answer.
	credit := make(chan struct{}, window)
	for range window {
		credit <- struct{}{}
	}
	answered := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				answered <- err
				return
			}
			if r.Status != cb.Status_SUCCESS {
				refused.Add(1)
			}
			credit <- struct{}{}
		}
	}()
	for {
		select {
		case <-credit:
		case err := <-answered:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
		i := next.Add(1) - 1
		if i >= int64(len(p.envs)) {
			return stream.CloseSend()
		}
		p.sentAt[i].Store(time.Now().UnixNano())
		if err := stream.Send(p.envs[i]); err != nil {
			return err
		}
	}
}

// deliveredBlock is a block as the observer saw it: when it arrived, and
// when each of its envelopes was sent.
type deliveredBlock struct {
	at   time.Time
	sent []time.Time
}

// observe reads the chain from block 0 on one Deliver stream, without
// checking it (the tests do), and reports each block on seen with the
// send times of its envelopes, found by their tails.
func observe(ctx context.Context, c ab.AtomicBroadcastClient, reader *ordertest.Signer, p *presigned, seen chan<- deliveredBlock) error {
	seek, err := reader.Seek(demoChannel, &ab.SeekInfo{Start: ordertest.Specified(0), Behavior: ab.SeekInfo_BLOCK_UNTIL_READY})
	if err != nil {
		return err
	}
	stream, err := c.Deliver(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(seek); err != nil {
		return err
	}
	for {
		r, err := stream.Recv()
		if err != nil {
			return err
		}
		b := r.GetBlock()
		if b == nil {
			return fmt.Errorf("status %v before the end", r.GetStatus())
		}
		db := deliveredBlock{at: time.Now()}
		for _, e := range b.GetData().GetData() {
			i, ok := p.byTail[[32]byte(e[len(e)-32:])]
			if !ok {
				return fmt.Errorf("block %d holds an envelope the bench did not send", b.GetHeader().GetNumber())
			}
			db.sent = append(db.sent, time.Unix(0, p.sentAt[i].Load()))
		}
		select {
		case seen <- db:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
