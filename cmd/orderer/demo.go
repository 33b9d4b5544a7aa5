package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/internal/cli"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/envelope"
	"github.com/rubin-go/rubin/order/ordertest"
	"github.com/rubin-go/rubin/order/server"
)

const demoChannel = "demochannel"

// demoCluster is the demo's four orderers, each with its own context so
// that one can crash.
type demoCluster struct {
	orderers []*server.Orderer
	stops    []context.CancelFunc
	done     []chan error
	keys     [][]byte
}

// startDemoCluster runs four orderers of demoChannel in this process,
// their replicas on host (gRPC on loopback), cutting blocks as bc says; with dataDir set, orderer i is durable in
// dataDir/i (its PBFT log and snapshots, and its ledger of blocks). Each
// orderer gets only its own secrets, as orderer keygen -split deploys a
// cluster.
func startDemoCluster(ctx context.Context, transport *rubin.Config, host string, writers, readers *envelope.Policy, bc block.Config, dataDir string) (*demoCluster, error) {
	cl, err := auth.Generate(4, 8, "127.0.0.1", 1, nil) // two clients an orderer: order.ClientIDs
	if err != nil {
		return nil, err
	}
	d := &demoCluster{}
	var rlns []net.Listener
	defer func() {
		for _, ln := range rlns {
			ln.Close()
		}
	}()
	for i := range cl.Replicas {
		ln, err := rubin.Listen(transport.Transport, net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, err
		}
		rlns = append(rlns, ln)
		cl.Replicas[i].Addr = ln.Addr().String()
		d.keys = append(d.keys, cl.Replicas[i].PublicKey)
	}
	for i := range cl.Replicas {
		own, err := cl.ForReplica(bft.ReplicaID(i), ownClients(cl.N(), bft.ReplicaID(i))...)
		if err != nil {
			d.stop()
			return nil, err
		}
		gl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			d.stop()
			return nil, err
		}
		dir := ""
		if dataDir != "" {
			dir = filepath.Join(dataDir, strconv.Itoa(i))
		}
		o, err := server.NewOrderer(server.OrdererConfig{
			Cluster: own, ID: bft.ReplicaID(i), Transport: transport,
			Channel: demoChannel, Writers: writers, Readers: readers,
			Block: bc, DataDir: dir,
			Listener: gl, ReplicaListener: rlns[i],
		})
		if err != nil {
			gl.Close()
			d.stop()
			return nil, err
		}
		rlns[i] = nil
		octx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- o.Run(octx) }()
		d.orderers, d.stops, d.done = append(d.orderers, o), append(d.stops, cancel), append(d.done, done)
	}
	rlns = nil
	return d, nil
}

// dial returns an AtomicBroadcast client of each orderer, and a func
// that closes them.
func (d *demoCluster) dial() ([]ab.AtomicBroadcastClient, func(), error) {
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	var clients []ab.AtomicBroadcastClient
	for _, o := range d.orderers {
		conn, err := grpc.NewClient(o.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, conn)
		clients = append(clients, ab.NewAtomicBroadcastClient(conn))
	}
	return clients, closeAll, nil
}

// identities makes a CA named org, the policy that names it, and a
// writer and a reader it certifies.
func identities(org string) (*envelope.Policy, *ordertest.Signer, *ordertest.Signer, error) {
	ca, err := ordertest.NewCA(org)
	if err != nil {
		return nil, nil, nil, err
	}
	policy, err := envelope.NewPolicy(ca.PEM)
	if err != nil {
		return nil, nil, nil, err
	}
	writer, err := ca.Issue("writer", org+"MSP")
	if err != nil {
		return nil, nil, nil, err
	}
	reader, err := ca.Issue("reader", org+"MSP")
	if err != nil {
		return nil, nil, nil, err
	}
	return policy, writer, reader, nil
}

// crash stops orderer i and waits for it; its error stays for stop.
func (d *demoCluster) crash(i int) error {
	d.stops[i]()
	err := <-d.done[i]
	d.done[i] <- err
	return err
}

// stop stops every orderer and waits for them.
func (d *demoCluster) stop() error {
	var errs []error
	for i := range d.stops {
		if err := d.crash(i); err != nil {
			errs = append(errs, fmt.Errorf("orderer %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	var envelopes int
	var transport rubin.Config
	err = parseFlags("demo", args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&envelopes, "envelopes", 400, "envelopes the writer broadcasts")
		transport.RegisterFlags(fs)
	})
	if err != nil {
		return err
	}
	if envelopes < 2 {
		return fmt.Errorf("%w: -envelopes %d: at least 2", cli.ErrUsage, envelopes)
	}
	if t := transport.Transport; t != "tcp" && t != "rdma" {
		return fmt.Errorf("%w: -transport %q is neither tcp nor rdma", cli.ErrUsage, t)
	}
	start := time.Now()
	policy, writer, reader, err := identities("DemoOrg")
	if err != nil {
		return err
	}
	d, err := startDemoCluster(ctx, &transport, "127.0.0.1", policy, policy, block.Config{MaxMessageCount: 20, BatchTimeout: 200 * time.Millisecond}, "")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.stop()) }()
	fmt.Fprintf(stdout, "four orderers of channel %q over %s, AtomicBroadcast on %s, %s, %s, %s\n", demoChannel, transport.Transport, d.orderers[0].Addr(), d.orderers[1].Addr(), d.orderers[2].Addr(), d.orderers[3].Addr())
	clients, closeClients, err := d.dial()
	if err != nil {
		return err
	}
	defer closeClients()

	// The writer broadcasts through orderer 1; orderer 0, the primary,
	// crashes halfway.
	envs := make([]*cb.Envelope, envelopes)
	for i := range envs {
		if envs[i], err = writer.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, demoChannel, fmt.Appendf(nil, "demo transaction %d", i)); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var crashErr error
	var once sync.Once
	resps, err := ordertest.Broadcast(wctx, clients[1], envs, func(i int) {
		if (i+1)%(max(envelopes/4, 1)) == 0 {
			fmt.Fprintf(stdout, "%v: %d envelopes ordered\n", time.Since(start).Round(time.Millisecond), i+1)
		}
		if i+1 == envelopes/2 {
			once.Do(func() {
				fmt.Fprintf(stdout, "%v: crashing orderer 0, the primary\n", time.Since(start).Round(time.Millisecond))
				crashErr = d.crash(0)
			})
		}
	})
	if err != nil {
		return fmt.Errorf("broadcast: %w", err)
	}
	if crashErr != nil {
		return fmt.Errorf("orderer 0: %w", crashErr)
	}
	for i, r := range resps {
		if r.Status != cb.Status_SUCCESS {
			return fmt.Errorf("envelope %d: %v %s", i, r.Status, r.Info)
		}
	}
	st := d.orderers[1].Replica().Status()
	if st.View == 0 {
		return errors.New("the view did not change after the primary crashed")
	}
	fmt.Fprintf(stdout, "%v: all %d envelopes ordered; view %d, primary orderer %d\n", time.Since(start).Round(time.Millisecond), envelopes, st.View, st.Primary)

	// The reader takes the chain from orderers 2 and 3 and checks it.
	var chains [2][]*cb.Block
	for k, i := range []int{2, 3} {
		if chains[k], err = ordertest.DeliverChain(wctx, clients[i], reader, demoChannel, d.keys, 3, envelopes); err != nil {
			return fmt.Errorf("deliver from orderer %d: %w", i, err)
		}
	}
	if err := ordertest.CheckDelivered(chains[:], envs, nil); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%v: verified: orderers 2 and 3 deliver the same %d blocks, chained by Fabric's hash rules, each signed by 3 of 4 orderers, holding each of the %d envelopes once\n", time.Since(start).Round(time.Millisecond), len(chains[0]), envelopes)
	return nil
}
