package server_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/client"
	"github.com/rubin-go/rubin/order/envelope"
	"github.com/rubin-go/rubin/order/ledger"
	"github.com/rubin-go/rubin/order/ordertest"
	"github.com/rubin-go/rubin/order/server"
)

const channel = "mychannel"

type cluster struct {
	auth     *auth.Cluster // with a client identity no orderer uses, 4
	orderers []*server.Orderer
	cfgs     []server.OrdererConfig
	stops    []func() // stop orderer i and wait for it
	// ended[i] gets what orderer i's Run returned; an error fails the
	// test unless mayFail[i].
	ended   []chan error
	mayFail []bool
	keys    [][]byte
	writer  *ordertest.Signer
	reader  *ordertest.Signer // a Reader, not a Writer
	forger  *ordertest.Signer // from a CA the channel does not name
	writers *ordertest.CA     // the Writers policy's CA
}

// startCluster runs four orderers in this process over TCP on loopback;
// the test's cleanup stops them and checks that no goroutine is left.
// Options may ask for more.
func startCluster(t *testing.T, bc block.Config, opts ...clusterOption) *cluster {
	t.Helper()
	others := goleak.IgnoreCurrent()
	writers, err := ordertest.NewCA("Writers")
	if err != nil {
		t.Fatal(err)
	}
	readers, _ := ordertest.NewCA("Readers")
	evil, _ := ordertest.NewCA("Evil")
	c := &cluster{}
	c.writers = writers
	c.writer, _ = writers.Issue("writer", "Org1MSP")
	c.reader, _ = readers.Issue("reader", "Org2MSP")
	c.forger, _ = evil.Issue("forger", "Org1MSP")
	wpol, err := envelope.NewPolicy(writers.PEM)
	if err != nil {
		t.Fatal(err)
	}
	rpol, err := envelope.NewPolicy(append(append([]byte{}, writers.PEM...), readers.PEM...))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := auth.Generate(4, 9, "127.0.0.1", 1, nil) // the orderers' eight (order.ClientIDs) and one more
	if err != nil {
		t.Fatal(err)
	}
	c.auth = cl
	var peers []string
	for i := range cl.Replicas {
		rl, gl := listen(t), listen(t)
		cl.Replicas[i].Addr = rl.Addr().String()
		peers = append(peers, gl.Addr().String())
		c.keys = append(c.keys, cl.Replicas[i].PublicKey)
		cfg := server.OrdererConfig{
			Cluster: cl, ID: bft.ReplicaID(i), Channel: channel, Writers: wpol, Readers: rpol, Block: bc,
			Listener: gl, ReplicaListener: rl,
		}
		for _, o := range opts {
			o(t, &cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	c.orderers, c.stops = make([]*server.Orderer, len(c.cfgs)), make([]func(), len(c.cfgs))
	c.ended, c.mayFail = make([]chan error, len(c.cfgs)), make([]bool, len(c.cfgs))
	for i := range c.cfgs {
		if c.cfgs[i].DataDir != "" {
			c.cfgs[i].Peers = peers
		}
		c.start(t, i)
	}
	t.Cleanup(func() {
		for _, stop := range c.stops {
			stop()
		}
		goleak.VerifyNone(t, others)
	})
	return c
}

// A clusterOption changes the configuration of every orderer.
type clusterOption func(t *testing.T, cfg *server.OrdererConfig)

// durable gives each orderer a data directory of its own, and the
// others' addresses to fetch blocks it lacks from.
func durable(t *testing.T, cfg *server.OrdererConfig) { cfg.DataDir = t.TempDir() }

// start runs orderer i, on its listeners if they are still open, else on
// the same addresses again.
func (c *cluster) start(t *testing.T, i int) {
	t.Helper()
	cfg := c.cfgs[i]
	c.cfgs[i].Listener, c.cfgs[i].ReplicaListener = nil, nil
	if cfg.Listener == nil {
		ln, err := net.Listen("tcp", c.orderers[i].Addr())
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listener = ln
	}
	o, err := server.NewOrderer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	ended := make(chan error, 1)
	c.ended[i] = ended
	go func() {
		defer close(done)
		err := o.Run(ctx)
		if err != nil && !c.mayFail[i] {
			t.Errorf("orderer %d: %v", i, err)
		}
		ended <- err
	}()
	c.orderers[i] = o
	c.stops[i] = func() {
		cancel()
		<-done
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// dial returns an AtomicBroadcast client of orderer i.
func (c *cluster) dial(t *testing.T, i int) ab.AtomicBroadcastClient {
	t.Helper()
	conn, err := grpc.NewClient(c.orderers[i].Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ab.NewAtomicBroadcastClient(conn)
}

func mustEnvelope(t *testing.T, s *ordertest.Signer, typ cb.HeaderType, ch, data string) *cb.Envelope {
	t.Helper()
	e, err := s.Envelope(typ, ch, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// broadcast sends envs on one stream and returns the responses.
func broadcast(t *testing.T, client ab.AtomicBroadcastClient, envs []*cb.Envelope) []*ab.BroadcastResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := ordertest.Broadcast(ctx, client, envs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deliverUntil reads blocks from orderer i, from block 0, until they hold
// want envelopes, checked by Fabric's hash rules and their signatures.
func (c *cluster) deliverUntil(t *testing.T, i int, want int) []*cb.Block {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	blocks, err := ordertest.DeliverChain(ctx, c.dial(t, i), c.reader, channel, c.keys, 3, want)
	if err != nil {
		t.Fatalf("orderer %d: %v", i, err)
	}
	return blocks
}

func TestBroadcastDeliver(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 10, BatchTimeout: 200 * time.Millisecond})
	var good []*cb.Envelope
	for i := range 35 {
		good = append(good, mustEnvelope(t, c.writer, cb.HeaderType_ENDORSER_TRANSACTION, channel, fmt.Sprintf("tx %d", i)))
	}
	tampered := proto.Clone(good[0]).(*cb.Envelope)
	tampered.Payload = append(tampered.Payload, 0x12, 0x01, 'x')
	highS := proto.Clone(good[1]).(*cb.Envelope)
	var err error
	if highS.Signature, err = ordertest.HighS(highS.Signature); err != nil {
		t.Fatal(err)
	}
	bad := []*cb.Envelope{
		mustEnvelope(t, c.forger, cb.HeaderType_ENDORSER_TRANSACTION, channel, "forged"),
		mustEnvelope(t, c.reader, cb.HeaderType_ENDORSER_TRANSACTION, channel, "a reader writes"),
		tampered,
		highS,
		mustEnvelope(t, c.writer, cb.HeaderType_ENDORSER_TRANSACTION, "other", "other channel"),
		mustEnvelope(t, c.writer, cb.HeaderType_CONFIG_UPDATE, channel, "config"),
	}
	wantBad := []cb.Status{cb.Status_FORBIDDEN, cb.Status_FORBIDDEN, cb.Status_FORBIDDEN, cb.Status_FORBIDDEN, cb.Status_NOT_FOUND, cb.Status_BAD_REQUEST}
	var wg sync.WaitGroup
	for k, part := range [][]*cb.Envelope{good[:20], good[20:]} {
		client := c.dial(t, 2*k) // orderers 0 and 2
		wg.Go(func() {
			for j, r := range broadcast(t, client, part) {
				if r.Status != cb.Status_SUCCESS {
					t.Errorf("envelope %d through orderer %d: %v", j, 2*k, r)
				}
			}
		})
	}
	for j, r := range broadcast(t, c.dial(t, 1), bad) {
		if r.Status != wantBad[j] || r.Info == "" {
			t.Errorf("bad envelope %d: %v %q, want %v with a reason", j, r.Status, r.Info, wantBad[j])
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Two orderers deliver the same chain, holding every accepted
	// envelope once and no refused one.
	a, b := c.deliverUntil(t, 1, len(good)), c.deliverUntil(t, 3, len(good))
	if err := ordertest.CheckDelivered([][]*cb.Block{a, b}, good, bad); err != nil {
		t.Fatal(err)
	}
}

// TestBroadcastPipelined sends a stream's envelopes, good and bad mixed,
// without waiting for answers: every envelope is answered, in the order
// sent, and the good ones reach the chain once each, in that order too.
func TestBroadcastPipelined(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 7, BatchTimeout: 100 * time.Millisecond})
	var envs, good, bad []*cb.Envelope
	var want []cb.Status
	for i := range 60 {
		e := mustEnvelope(t, c.writer, cb.HeaderType_ENDORSER_TRANSACTION, channel, fmt.Sprintf("tx %d", i))
		status := cb.Status_SUCCESS
		if i%9 == 4 {
			e = mustEnvelope(t, c.forger, cb.HeaderType_ENDORSER_TRANSACTION, channel, fmt.Sprintf("forged %d", i))
			status = cb.Status_FORBIDDEN
			bad = append(bad, e)
		} else {
			good = append(good, e)
		}
		envs, want = append(envs, e), append(want, status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.dial(t, 1).Broadcast(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range envs {
		if err := stream.Send(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i := range envs {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if r.Status != want[i] {
			t.Errorf("envelope %d: %v %q, want %v", i, r.Status, r.Info, want[i])
		}
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("after the last answer: %v, want EOF", err)
	}
	blocks := c.deliverUntil(t, 2, len(good))
	if err := ordertest.CheckDelivered([][]*cb.Block{blocks}, good, bad); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for _, b := range blocks {
		got = append(got, b.Data.Data...)
	}
	for i, e := range good {
		if !bytes.Equal(got[i], mustMarshal(t, e)) {
			t.Fatalf("block data %d is not the stream's envelope %d: a stream's envelopes are ordered as sent", i, i)
		}
	}
}

// seek sends one seek request on stream and returns the numbers of the
// blocks delivered and the status that ended it.
func seek(t *testing.T, stream ab.AtomicBroadcast_DeliverClient, env *cb.Envelope) ([]uint64, cb.Status) {
	t.Helper()
	if err := stream.Send(env); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if b := r.GetBlock(); b != nil {
			got = append(got, b.Header.Number)
			continue
		}
		return got, r.GetStatus()
	}
}

func TestDeliverStatuses(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 1})
	for i, r := range broadcast(t, c.dial(t, 0), []*cb.Envelope{
		mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "a"),
		mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "b"),
		mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "c"),
	}) {
		if r.Status != cb.Status_SUCCESS {
			t.Fatalf("envelope %d: %v", i, r)
		}
	}
	// Wait for the three blocks to be final on orderer 3.
	c.deliverUntil(t, 3, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.dial(t, 3).Deliver(ctx)
	if err != nil {
		t.Fatal(err)
	}
	si := func(s *ordertest.Signer, start, stop *ab.SeekPosition, behavior ab.SeekInfo_SeekBehavior) *cb.Envelope {
		e, err := s.Seek(channel, &ab.SeekInfo{Start: start, Stop: stop, Behavior: behavior})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	otherChannel, _ := c.reader.Envelope(cb.HeaderType_DELIVER_SEEK_INFO, "other", nil)
	for _, tc := range []struct {
		name   string
		env    *cb.Envelope
		blocks []uint64
		status cb.Status
	}{
		{"oldest to newest", si(c.reader, ordertest.Oldest, ordertest.Newest, 0), []uint64{0, 1, 2}, cb.Status_SUCCESS},
		{"newest", si(c.writer, ordertest.Newest, ordertest.Newest, 0), []uint64{2}, cb.Status_SUCCESS},
		{"specified", si(c.reader, ordertest.Specified(1), ordertest.Specified(1), 0), []uint64{1}, cb.Status_SUCCESS},
		{"past the end, fail", si(c.reader, ordertest.Specified(1), ordertest.Specified(9), ab.SeekInfo_FAIL_IF_NOT_READY), []uint64{1, 2}, cb.Status_NOT_FOUND},
		{"not ready, fail", si(c.reader, ordertest.Specified(7), ordertest.Specified(9), ab.SeekInfo_FAIL_IF_NOT_READY), nil, cb.Status_NOT_FOUND},
		{"stop before start", si(c.reader, ordertest.Specified(2), ordertest.Specified(1), 0), nil, cb.Status_BAD_REQUEST},
		{"not a reader", si(c.forger, ordertest.Oldest, ordertest.Newest, 0), nil, cb.Status_FORBIDDEN},
		{"other channel", otherChannel, nil, cb.Status_NOT_FOUND},
		{"not a seek", mustEnvelope(t, c.reader, cb.HeaderType_MESSAGE, channel, "x"), nil, cb.Status_BAD_REQUEST},
	} {
		got, st := seek(t, stream, tc.env)
		if fmt.Sprint(got) != fmt.Sprint(tc.blocks) || st != tc.status {
			t.Errorf("%s: blocks %v and %v, want %v and %v", tc.name, got, st, tc.blocks, tc.status)
		}
	}
	// A request past the end blocks until the block is final.
	waiting := make(chan error, 1)
	go func() {
		got, st := seek(t, stream, si(c.reader, ordertest.Specified(3), ordertest.Specified(3), ab.SeekInfo_BLOCK_UNTIL_READY))
		if fmt.Sprint(got) != "[3]" || st != cb.Status_SUCCESS {
			waiting <- fmt.Errorf("blocks %v and %v, want [3] and SUCCESS", got, st)
			return
		}
		waiting <- nil
	}()
	select {
	case err := <-waiting:
		t.Fatalf("a seek past the end returned before the block existed: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	broadcast(t, c.dial(t, 1), []*cb.Envelope{mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "d")})
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	// A stream waiting for a block that never comes ends with its client.
	stream2, err := c.dial(t, 2).Deliver(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream2.Send(si(c.reader, ordertest.Specified(100), nil, 0)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	if _, err := stream2.Recv(); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a cancelled stream: %v", err)
	}
}

// TestByzantineOrderer: a party holding a cluster client identity, as a
// Byzantine orderer does, orders ops directly, past any orderer's
// Broadcast checks: a forged envelope, a forged block signature and an
// early timeout cut. The replicas refuse the first two and ignore the
// third; the chain holds only the envelopes correctly broadcast.
func TestByzantineOrderer(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 2, BatchTimeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	byz, err := node.NewClient(ctx, node.ClientConfig{Cluster: c.auth, ID: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer byz.Close()
	invoke := func(op []byte) order.Result {
		t.Helper()
		res, err := byz.Invoke(ctx, op)
		if err != nil {
			t.Fatal(err)
		}
		r, err := order.ParseResult(res)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	forged, _ := proto.Marshal(mustEnvelope(t, c.forger, cb.HeaderType_ENDORSER_TRANSACTION, channel, "forged"))
	if r := invoke(order.EnvelopeOp(forged)); r.Status != cb.Status_FORBIDDEN {
		t.Fatalf("a forged envelope ordered directly: %v", r)
	}
	good := mustEnvelope(t, c.writer, cb.HeaderType_ENDORSER_TRANSACTION, channel, "good 0")
	if r := broadcast(t, c.dial(t, 0), []*cb.Envelope{good}); r[0].Status != cb.Status_SUCCESS {
		t.Fatalf("a good envelope: %v", r[0])
	}
	// An early cut: BatchTimeout is an hour in agreed time.
	if r := invoke(order.CutOp(0)); r.Status != cb.Status_SUCCESS {
		t.Fatalf("a cut op: %v", r)
	}
	good2 := mustEnvelope(t, c.writer, cb.HeaderType_ENDORSER_TRANSACTION, channel, "good 1")
	if r := broadcast(t, c.dial(t, 1), []*cb.Envelope{good2}); r[0].Status != cb.Status_SUCCESS {
		t.Fatalf("a good envelope: %v", r[0])
	}
	// Block 0 is cut, by count, holding both good envelopes: the early
	// cut cut nothing. A signature of it by a key that is not orderer 3's
	// is refused.
	_, wrong, _ := ed25519.GenerateKey(nil)
	hdr := block.New(0, nil, [][]byte{mustMarshal(t, good), mustMarshal(t, good2)}).Header
	if r := invoke(order.SignOp(3, 0, order.SignHeader(wrong, 3, hdr))); r.Status != cb.Status_FORBIDDEN && r.Status != cb.Status_NOT_FOUND {
		t.Fatalf("a forged block signature: %v", r)
	}
	blocks := c.deliverUntil(t, 2, 2)
	if len(blocks) != 1 || len(blocks[0].Data.Data) != 2 {
		t.Fatalf("%d blocks, the first of %d envelopes; want one of 2", len(blocks), len(blocks[0].Data.Data))
	}
	for _, d := range blocks[0].Data.Data {
		if string(d) == string(forged) {
			t.Fatal("the forged envelope is in a block")
		}
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// write broadcasts n more numbered envelopes through orderer 1, each
// of which must be accepted, and returns envs with them.
func (c *cluster) write(t *testing.T, envs []*cb.Envelope, n int) []*cb.Envelope {
	t.Helper()
	var more []*cb.Envelope
	for range n {
		more = append(more, mustEnvelope(t, c.writer, cb.HeaderType_ENDORSER_TRANSACTION, channel, fmt.Sprintf("tx %d", len(envs)+len(more))))
	}
	for i, r := range broadcast(t, c.dial(t, 1), more) {
		if r.Status != cb.Status_SUCCESS {
			t.Fatalf("envelope %d: %v", i, r)
		}
	}
	return append(envs, more...)
}

// pastCheckpoint writes until orderer 3 has a stable checkpoint (128
// sequence numbers; with one envelope a block, each block is also four
// ordered signatures).
func (c *cluster) pastCheckpoint(t *testing.T, envs []*cb.Envelope) []*cb.Envelope {
	t.Helper()
	for c.orderers[3].Replica().Status().Stable == 0 {
		envs = c.write(t, envs, 20)
		if len(envs) > 400 {
			t.Fatal("no stable checkpoint after 400 envelopes")
		}
	}
	return envs
}

// TestRestartCatchesUp: an orderer that stops after a checkpoint and
// restarts on its data directory, its ledger of blocks lost,
// recovers its ordering state from its snapshot and log, fetches the
// blocks it lacks from the other orderers, checked by their signatures
// and hashes, and then delivers the same chain as they do.
func TestRestartCatchesUp(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 1}, durable)
	var envs []*cb.Envelope
	batch := func(n int) { envs = c.write(t, envs, n) }
	envs = c.pastCheckpoint(t, envs)
	c.deliverUntil(t, 3, len(envs))
	before := len(envs)
	c.stops[3]()
	// Its ledger is lost: its store is behind its snapshot.
	if err := os.RemoveAll(filepath.Join(c.cfgs[3].DataDir, server.BlocksDir)); err != nil {
		t.Fatal(err)
	}
	batch(10)
	c.start(t, 3)
	batch(10)
	// The restarted orderer delivers the blocks it lost, the others'. (It
	// delivers later ones as its replica catches up, which a replica that
	// restarts into a view change of its own may not do until the others
	// change view too: a matter of the PBFT core's liveness, not of the
	// catch-up of blocks.)
	all := c.deliverUntil(t, 0, len(envs))
	lost := c.deliverUntil(t, 3, before)
	if err := ordertest.CheckDelivered([][]*cb.Block{all[:len(lost)], lost}, envs[:before], nil); err != nil {
		t.Fatal(err)
	}
	if c.orderers[3].Chain().Filled() == 0 {
		t.Fatal("the restarted orderer fetched no block: the test did not lose any")
	}
	t.Logf("%d envelopes; the restarted orderer fetched %d blocks", len(envs), c.orderers[3].Chain().Filled())
}

// TestRestartServesFromDisk: an orderer restarted on its data directory
// serves the chain its ledger holds at once, with every other orderer
// stopped; its ledger is ahead of its snapshot (blocks after the last
// checkpoint), so the replay of its log finalizes blocks it holds, which
// it does not store again, and with the others back it orders on and
// delivers the same chain as they do, having fetched nothing.
func TestRestartServesFromDisk(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 1}, durable)
	var envs []*cb.Envelope
	batch := func(n int) { envs = c.write(t, envs, n) }
	envs = c.pastCheckpoint(t, envs)
	batch(5)
	had := c.deliverUntil(t, 3, len(envs))
	stable := c.orderers[3].Replica().Status().Stable
	for i := range c.stops {
		c.stops[i]()
	}
	c.start(t, 3)
	if n, _ := c.orderers[3].Chain().Height(); n != uint64(len(had)) {
		t.Fatalf("restarted alone, orderer 3 serves %d blocks, had %d", n, len(had))
	}
	alone := c.deliverUntil(t, 3, len(envs))
	if err := ordertest.CheckDelivered([][]*cb.Block{had, alone}, envs, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c.start(t, i)
	}
	batch(5)
	all := [][]*cb.Block{c.deliverUntil(t, 0, len(envs)), c.deliverUntil(t, 3, len(envs))}
	if err := ordertest.CheckDelivered(all, envs, nil); err != nil {
		t.Fatal(err)
	}
	if f := c.orderers[3].Chain().Filled(); f != 0 {
		t.Fatalf("orderer 3 fetched %d blocks its ledger held", f)
	}
	if err := c.orderers[3].Chain().Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d blocks served from disk; snapshot at sequence %d", len(had), stable)
}

// TestLedgerFailureStops: an orderer whose ledger fails under it (closed
// here; a full or failing disk alike) stops with an error that says so,
// and never serves a block its ledger did not take; the others go on.
func TestLedgerFailureStops(t *testing.T) {
	var led *ledger.Ledger
	c := startCluster(t, block.Config{MaxMessageCount: 1}, func(t *testing.T, cfg *server.OrdererConfig) {
		if cfg.ID == 3 {
			var err error
			if led, err = ledger.Open(t.TempDir()); err != nil {
				t.Fatal(err)
			}
			cfg.Store = led
		}
	})
	c.mayFail[3] = true
	envs := []*cb.Envelope{mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "a")}
	broadcast(t, c.dial(t, 0), envs)
	c.deliverUntil(t, 3, 1)
	stored := led.Height()
	if err := led.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		envs = append(envs, mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, fmt.Sprintf("b%d", i)))
	}
	broadcast(t, c.dial(t, 0), envs[1:])
	select {
	case err := <-c.ended[3]:
		if !errors.Is(err, os.ErrClosed) || !strings.Contains(err.Error(), "block store") {
			t.Fatalf("orderer 3 stopped with %v, want a block store error wrapping os.ErrClosed", err)
		}
		t.Logf("orderer 3: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("orderer 3 runs on without its ledger")
	}
	if n, _ := c.orderers[3].Chain().Height(); n > stored {
		t.Fatalf("orderer 3 serves %d blocks, its ledger took %d", n, stored)
	}
	c.deliverUntil(t, 0, len(envs))
}

// byzantine is an orderer's AtomicBroadcast that lies in Deliver: it
// serves the real blocks it holds altered ("tamper"), out of order
// ("reorder"), or not at all ("withhold").
type byzantine struct {
	ab.UnimplementedAtomicBroadcastServer
	mode   string
	blocks []*cb.Block
	asked  atomic.Int32
}

func (b *byzantine) Deliver(stream ab.AtomicBroadcast_DeliverServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	b.asked.Add(1)
	send := func(blk *cb.Block) error {
		return stream.Send(&ab.DeliverResponse{Type: &ab.DeliverResponse_Block{Block: blk}})
	}
	switch b.mode {
	case "tamper":
		blk := proto.Clone(b.blocks[0]).(*cb.Block)
		blk.Data.Data[0] = []byte("not what was ordered")
		blk.Header.DataHash = block.DataHash(blk.Data.Data)
		return send(blk)
	case "reorder":
		if err := send(b.blocks[1]); err != nil {
			return err
		}
		return send(b.blocks[0])
	}
	<-stream.Context().Done()
	return nil
}

// deliverClient returns a delivery client of the orderers at addrs, by
// ID, that reads as the cluster's reader, with a patience of 300ms.
func (c *cluster) deliverClient(t *testing.T, addrs []string) *client.Deliverer {
	t.Helper()
	keys := make([]ed25519.PublicKey, len(c.keys))
	for i, k := range c.keys {
		keys[i] = k
	}
	dc, err := client.NewDeliverer(client.DeliverConfig{
		Orderers: addrs, Keys: keys, Quorum: 3, Retry: 50 * time.Millisecond, Options: client.Options{Patience: 300 * time.Millisecond},
		Seek: func(start, stop uint64) (*cb.Envelope, error) {
			return c.reader.Seek(channel, &ab.SeekInfo{Start: ordertest.Specified(start), Stop: ordertest.Specified(stop)})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return dc
}

// serve runs srv's AtomicBroadcast on a loopback port until the test
// ends, and returns its address.
func serve(t *testing.T, srv ab.AtomicBroadcastServer) string {
	t.Helper()
	ln := listen(t)
	gs := grpc.NewServer()
	ab.RegisterAtomicBroadcastServer(gs, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		gs.Serve(ln)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return ln.Addr().String()
}

// TestDeliverClientSwitches: a delivery client asking, in turn, an
// orderer that alters blocks, one that reorders them and one that
// withholds them before a correct one gets exactly the correct chain,
// having left each liar.
func TestDeliverClientSwitches(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 3, BatchTimeout: 100 * time.Millisecond})
	var envs []*cb.Envelope
	for i := range 12 {
		envs = append(envs, mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, fmt.Sprint(i)))
	}
	broadcast(t, c.dial(t, 0), envs)
	real := c.deliverUntil(t, 0, len(envs))
	liars := []*byzantine{{mode: "tamper", blocks: real}, {mode: "reorder", blocks: real}, {mode: "withhold", blocks: real}}
	var addrs []string
	for _, l := range liars {
		addrs = append(addrs, serve(t, l))
	}
	addrs = append(addrs, c.orderers[2].Addr())
	dc := c.deliverClient(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*cb.Block
	last := uint64(len(real) - 1)
	if err := dc.Blocks(ctx, 0, last, nil, func(b *cb.Block) error { got = append(got, b); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := ordertest.CheckDelivered([][]*cb.Block{real, got}, envs, nil); err != nil {
		t.Fatal(err)
	}
	for _, l := range liars {
		if l.asked.Load() == 0 {
			t.Errorf("the %s orderer was never asked", l.mode)
		}
	}
	// From the middle, with the header before, the client goes on alike;
	// and fn's error ends it.
	stop := errors.New("enough")
	n := 0
	err := dc.Blocks(ctx, 1, last, real[0].Header, func(*cb.Block) error {
		if n++; n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("Blocks = %v after %d blocks, want fn's error after 2", err, n)
	}
}

// TestMetrics: an orderer's metrics count its Broadcast answers by status
// and the blocks it cut and made final.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := startCluster(t, block.Config{MaxMessageCount: 2}, func(_ *testing.T, cfg *server.OrdererConfig) {
		if cfg.ID == 0 {
			cfg.Registerer = reg
		}
	})
	envs := []*cb.Envelope{
		mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "a"),
		mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "b"),
		mustEnvelope(t, c.forger, cb.HeaderType_MESSAGE, channel, "forged"),
		mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "c"),
		mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "d"),
	}
	broadcast(t, c.dial(t, 0), envs)
	c.deliverUntil(t, 0, 4)
	want := map[string]float64{
		`rubin_order_broadcast_total{orderer="0",status="SUCCESS"}`:   4,
		`rubin_order_broadcast_total{orderer="0",status="FORBIDDEN"}`: 1,
		`rubin_order_blocks_cut_total{orderer="0"}`:                   2,
		`rubin_order_blocks_final_total{orderer="0"}`:                 2,
		`rubin_order_block_envelopes_sum{orderer="0"}`:                4,
	}
	got := make(map[string]float64)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := name + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				got[key] = m.Counter.GetValue()
			case m.Histogram != nil:
				got[name+"_sum{"+strings.Join(labels, ",")+"}"] = m.Histogram.GetSampleSum()
			}
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := got[`rubin_bft_committed_requests_total{replica="0"}`]; !ok {
		t.Error("the replica's metrics are not registered")
	}
}

// TestMiscuttingOrderer: an orderer that cuts blocks differently from
// the others (its MaxMessageCount differs) signs headers no correct
// orderer cut, so its signatures are refused and its own blocks never
// gather 2f+1 signatures: the correct orderers' chain is final without
// it, and a delivery client that asks it first moves on to them.
func TestMiscuttingOrderer(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 2, BatchTimeout: 100 * time.Millisecond}, func(_ *testing.T, cfg *server.OrdererConfig) {
		if cfg.ID == 3 {
			cfg.Block.MaxMessageCount = 3
		}
	})
	var envs []*cb.Envelope
	for i := range 12 {
		envs = append(envs, mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, fmt.Sprint(i)))
	}
	for i, r := range broadcast(t, c.dial(t, 3), envs) {
		if r.Status != cb.Status_SUCCESS {
			t.Fatalf("envelope %d: %v", i, r)
		}
	}
	chains := [][]*cb.Block{c.deliverUntil(t, 0, len(envs)), c.deliverUntil(t, 2, len(envs))}
	if err := ordertest.CheckDelivered(chains, envs, nil); err != nil {
		t.Fatal(err)
	}
	for _, b := range chains[0] {
		if len(b.Data.Data) != 2 {
			t.Fatalf("block %d holds %d envelopes: not the correct orderers' cut", b.Header.Number, len(b.Data.Data))
		}
	}
	if h, _ := c.orderers[3].Chain().Height(); h != 0 {
		t.Fatalf("the miscutting orderer made %d blocks final", h)
	}
	dc := c.deliverClient(t, []string{c.orderers[3].Addr(), c.orderers[1].Addr()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*cb.Block
	if err := dc.Blocks(ctx, 0, uint64(len(chains[0])-1), nil, func(b *cb.Block) error { got = append(got, b); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := ordertest.CheckDelivered([][]*cb.Block{chains[0], got}, envs, nil); err != nil {
		t.Fatal(err)
	}
}

// Broadcast of a byzantine orderer takes an envelope and never answers
// ("drop") or answers SERVICE_UNAVAILABLE ("unavailable").
func (b *byzantine) Broadcast(stream ab.AtomicBroadcast_BroadcastServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
		b.asked.Add(1)
		if b.mode == "drop" {
			<-stream.Context().Done()
			return nil
		}
		if err := stream.Send(&ab.BroadcastResponse{Status: cb.Status_SERVICE_UNAVAILABLE}); err != nil {
			return err
		}
	}
}

// TestBroadcastClientPassesSilentOrderer: a broadcast client given an
// orderer that drops envelopes and one that is always unavailable before
// a correct one gets every envelope ordered, once; an envelope submitted
// again is answered as a duplicate and is not ordered twice.
func TestBroadcastClientPassesSilentOrderer(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 2, BatchTimeout: 100 * time.Millisecond})
	liars := []*byzantine{{mode: "drop"}, {mode: "unavailable"}}
	bc, err := client.NewBroadcaster(client.BroadcastConfig{Orderers: []string{serve(t, liars[0]), serve(t, liars[1]), c.orderers[1].Addr()}, Options: client.Options{Patience: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var envs []*cb.Envelope
	for i := range 4 {
		e := mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, fmt.Sprint(i))
		r, err := bc.Submit(ctx, e)
		if err != nil || r.Status != cb.Status_SUCCESS || r.Info != "" {
			t.Fatalf("envelope %d: %v, %v", i, r, err)
		}
		envs = append(envs, e)
	}
	for _, l := range liars {
		if l.asked.Load() != 1 {
			t.Errorf("the %s orderer was asked %d times, want once: the client should stay with the one that answered", l.mode, l.asked.Load())
		}
	}
	again, err := client.NewBroadcaster(client.BroadcastConfig{Orderers: []string{c.orderers[2].Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := again.Submit(ctx, envs[0]); err != nil || r.Status != cb.Status_SUCCESS || !strings.Contains(r.Info, "duplicate") {
		t.Fatalf("a repeat: %v, %v; want SUCCESS, duplicate", r, err)
	}
	envs = append(envs, mustEnvelope(t, c.writer, cb.HeaderType_MESSAGE, channel, "last"))
	if r, err := again.Submit(ctx, envs[4]); err != nil || r.Status != cb.Status_SUCCESS {
		t.Fatalf("the last envelope: %v, %v", r, err)
	}
	chains := [][]*cb.Block{c.deliverUntil(t, 0, len(envs)), c.deliverUntil(t, 3, len(envs))}
	if err := ordertest.CheckDelivered(chains, envs, nil); err != nil {
		t.Fatal(err)
	}
	// Only silent or unavailable orderers: Submit says so.
	none, _ := client.NewBroadcaster(client.BroadcastConfig{Orderers: []string{serve(t, &byzantine{mode: "unavailable"})}})
	if _, err := none.Submit(ctx, envs[0]); err == nil {
		t.Fatal("Submit through an unavailable orderer only succeeded")
	}
}

// TestCensoringPrimary: the primary of view 0, orderer 0, never
// proposes what one writer broadcasts through orderer 1: its cluster
// file holds a wrong key for orderer 1's client, so it takes each of
// that client's requests for a forgery and drops it, and it keeps
// ordering another writer's envelopes, broadcast through orderer 2,
// meanwhile. Orderer 1's client sends each request to every replica;
// the backups time each request they hold on its own, replace the
// primary, and the censored writer's envelopes reach blocks, each once,
// delivered alike by the correct orderers.
func TestCensoringPrimary(t *testing.T) {
	c := startCluster(t, block.Config{MaxMessageCount: 4, BatchTimeout: 50 * time.Millisecond}, func(_ *testing.T, cfg *server.OrdererConfig) {
		if cfg.ID != 0 {
			return
		}
		// Replicas is shared, so the addresses startCluster fills in
		// later reach orderer 0 too.
		cl := *cfg.Cluster
		cl.Clients = append([]auth.Client(nil), cl.Clients...)
		for i, k := range cl.Clients {
			if k.ID == 1 {
				keys := append([][]byte(nil), k.Keys...)
				keys[0] = make([]byte, len(keys[0]))
				cl.Clients[i].Keys = keys
			}
		}
		cfg.Cluster = &cl
	})
	other, err := c.writers.Issue("other", "Org1MSP")
	if err != nil {
		t.Fatal(err)
	}
	var censored, busy []*cb.Envelope
	for i := range 12 {
		censored = append(censored, mustEnvelope(t, c.writer, cb.HeaderType_ENDORSER_TRANSACTION, channel, fmt.Sprintf("censored %d", i)))
		busy = append(busy, mustEnvelope(t, other, cb.HeaderType_ENDORSER_TRANSACTION, channel, fmt.Sprintf("busy %d", i)))
	}
	var wg sync.WaitGroup
	var got [2][]*ab.BroadcastResponse
	wg.Go(func() { got[0] = broadcast(t, c.dial(t, 1), censored) })
	wg.Go(func() { got[1] = broadcast(t, c.dial(t, 2), busy) })
	wg.Wait()
	for k, rs := range got {
		for i, r := range rs {
			if r.Status != cb.Status_SUCCESS {
				t.Fatalf("stream %d envelope %d: %v", k, i, r)
			}
		}
	}
	all := append(append([]*cb.Envelope{}, censored...), busy...)
	chains := [][]*cb.Block{c.deliverUntil(t, 1, len(all)), c.deliverUntil(t, 3, len(all))}
	if err := ordertest.CheckDelivered(chains, all, nil); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 4; i++ {
		if st := c.orderers[i].Replica().Status(); st.View == 0 {
			t.Fatalf("orderer %d is still in view 0: the censoring primary was not replaced", i)
		}
	}
	t.Logf("view %d, primary orderer %d", c.orderers[1].Replica().Status().View, c.orderers[1].Replica().Status().Primary)
}
