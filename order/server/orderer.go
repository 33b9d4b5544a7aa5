package server

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"

	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/envelope"
	"github.com/rubin-go/rubin/order/ledger"
)

// MaxOpSize is the largest op the orderers' PBFT core takes; an
// envelope's AbsoluteMaxBytes must stay below it.
const MaxOpSize = 1 << 20

// CoreConfig is the orderers' protocol tuning: the defaults, with room
// for envelopes up to block.Config's AbsoluteMaxBytes.
func CoreConfig() bft.Config {
	return bft.Config{MaxOpSize: MaxOpSize, MaxBatchBytes: 2 * MaxOpSize, ClientWindow: ClientWindow}
}

// ClientWindow is how many envelopes an orderer has in ordering at once
// (bft.Config.ClientWindow): enough for the Broadcast streams it serves
// to keep a batch filling while the last one is ordered.
const ClientWindow = 64

// OrdererConfig is one orderer of a cluster.
type OrdererConfig struct {
	// Cluster holds the orderers' addresses and keys. Orderer i of n
	// orders the envelopes it receives through client identity i and
	// its duties (block signatures and timeout cuts) through identity
	// n+i (order.ClientIDs), so the cluster has two clients per orderer at
	// least (orderer keygen makes them).
	Cluster *auth.Cluster
	ID      bft.ReplicaID
	// Transport is the replicas' and clients' transport (nil: TCP).
	Transport *rubin.Config
	// Channel, Writers, Readers and Block configure the channel.
	Channel          string
	Writers, Readers *envelope.Policy
	Block            block.Config
	// Store keeps the final blocks; the Orderer does not close it, its
	// caller does after Run returns. An order/ledger Ledger is one. If
	// nil, the blocks go to an order/ledger Ledger in DataDir/blocks
	// that the Orderer opens and closes, or with no DataDir to memory.
	Store order.BlockStore
	// DataDir, if set, is where the PBFT replica persists its log and
	// snapshots (node.ReplicaConfig.DataDir), and where the blocks are
	// kept (see Store).
	DataDir string
	// Peers are where the orderers serve AtomicBroadcast, by ID: a
	// restarted orderer fetches the blocks it lacks from them (none: it
	// does not; its own entry is not used).
	Peers []string
	// Listener is where gRPC is served; the Orderer closes it.
	Listener net.Listener
	// ReplicaListener, if set, gives the replica its address (see
	// node.ReplicaConfig.Listener).
	ReplicaListener net.Listener
	Logger          *slog.Logger // nil: discard
	// Registerer, if set, gets the orderer's metrics (see metrics) and
	// its replica's (node.ReplicaConfig.Registerer).
	Registerer prometheus.Registerer
}

// Orderer is one running orderer: a PBFT replica executing an order.App,
// a node.Client through which it orders envelopes, signatures and
// timeout cuts, the App's Duties, and the gRPC server of the
// AtomicBroadcast API.
type Orderer struct {
	cfg     OrdererConfig
	app     *order.App
	replica *node.Replica
	key     ed25519.PrivateKey
	keys    []ed25519.PublicKey // the orderers', by ID
	srv     *Server
	ledger  *ledger.Ledger // opened by NewOrderer, closed by Run
}

// BlocksDir is the subdirectory of an orderer's data directory that
// holds its ledger of blocks.
const BlocksDir = "blocks"

// NewOrderer makes an orderer, recovering its replica from DataDir if
// set and opening its ledger there (see OrdererConfig.Store), whose
// blocks it serves from the start. Run runs it, and closes that ledger
// when it returns: an Orderer made must be Run.
func NewOrderer(cfg OrdererConfig) (*Orderer, error) {
	c := cfg.Cluster
	if c == nil || int(cfg.ID) >= c.N() || cfg.Listener == nil {
		return nil, errors.New("server: an orderer needs its cluster, an ID in it and a listener")
	}
	envID, dutyID := order.ClientIDs(c.N(), cfg.ID)
	for _, id := range []bft.ClientID{envID, dutyID} {
		if !c.HoldsClient(id) {
			return nil, fmt.Errorf("server: the cluster holds no keys of client %d for orderer %d: an orderer needs clients i and n+i (orderer keygen makes them)", id, cfg.ID)
		}
	}
	if !c.HoldsReplica(cfg.ID) {
		return nil, fmt.Errorf("server: the cluster holds no key of orderer %d", cfg.ID)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Block.Normalized().AbsoluteMaxBytes > MaxOpSize-64 {
		return nil, fmt.Errorf("server: AbsoluteMaxBytes %d leaves no room in an op of %d bytes", cfg.Block.AbsoluteMaxBytes, MaxOpSize)
	}
	// One memo per orderer, shared by its checks on receipt and at
	// execution: an envelope it received is verified once, and every
	// orderer verifies each envelope itself.
	if cfg.Writers != nil {
		cfg.Writers = cfg.Writers.Memoized()
	}
	if cfg.Readers != nil {
		cfg.Readers = cfg.Readers.Memoized()
	}
	var led *ledger.Ledger
	switch {
	case cfg.Store != nil:
	case cfg.DataDir != "":
		var err error
		if led, err = ledger.Open(filepath.Join(cfg.DataDir, BlocksDir)); err != nil {
			return nil, fmt.Errorf("server: orderer %d's blocks: %w", cfg.ID, err)
		}
		cfg.Store = led
		cfg.Logger.Info("opened the ledger", "dir", filepath.Join(cfg.DataDir, BlocksDir), "height", led.Height())
	default:
		cfg.Store = new(order.MemStore)
	}
	o, err := newOrderer(cfg)
	if err != nil {
		if led != nil {
			led.Close()
		}
		return nil, err
	}
	o.ledger = led
	return o, nil
}

func newOrderer(cfg OrdererConfig) (*Orderer, error) {
	c := cfg.Cluster
	keys := make([]ed25519.PublicKey, c.N())
	for i, r := range c.Replicas {
		keys[i] = r.PublicKey
	}
	chain := order.NewChain(cfg.Store)
	var m *metrics
	var observer order.Observer
	if cfg.Registerer != nil {
		m = newMetrics(cfg.Registerer, int(cfg.ID))
		observer = m
	}
	app, err := order.New(order.Config{Channel: cfg.Channel, Writers: cfg.Writers, Block: cfg.Block, Orderers: keys, F: c.F, Self: uint32(cfg.ID), Chain: chain, Observer: observer})
	if err != nil {
		return nil, err
	}
	r, err := node.NewReplica(node.ReplicaConfig{
		Cluster:    c,
		ID:         cfg.ID,
		Transport:  cfg.Transport,
		App:        app,
		Core:       CoreConfig(),
		Logger:     cfg.Logger,
		DataDir:    cfg.DataDir,
		Listener:   cfg.ReplicaListener,
		Registerer: cfg.Registerer,
	})
	if err != nil {
		return nil, err
	}
	o := &Orderer{cfg: cfg, app: app, replica: r, key: ed25519.NewKeyFromSeed(c.Replicas[cfg.ID].PrivateKey), keys: keys}
	o.srv = New(Config{Channel: cfg.Channel, Writers: cfg.Writers, Readers: cfg.Readers, Orderers: keys, Chain: chain, AbsoluteMaxBytes: cfg.Block.Normalized().AbsoluteMaxBytes, Logger: cfg.Logger})
	o.srv.metrics = m
	return o, nil
}

// Chain returns the orderer's final blocks.
func (o *Orderer) Chain() *order.Chain { return o.app.Chain() }

// Addr returns the address gRPC is served on.
func (o *Orderer) Addr() string { return o.cfg.Listener.Addr().String() }

// Replica returns the orderer's PBFT replica.
func (o *Orderer) Replica() *node.Replica { return o.replica }

// Run runs the orderer until ctx ends, then stops everything it started
// and returns nil, or the first error that stopped it earlier: a failure
// of its block store stops it, so that it serves no block it did not
// store. It closes the ledger NewOrderer opened.
func (o *Orderer) Run(ctx context.Context) error {
	if o.ledger != nil {
		defer o.ledger.Close()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	chain := o.app.Chain()
	wg.Go(func() {
		if err := chain.Run(ctx); err != nil {
			o.cfg.Logger.Error("the block store failed: stopping", "err", err)
			errs <- fmt.Errorf("server: orderer %d: %w", o.cfg.ID, err)
			cancel()
		}
	})
	wg.Go(func() {
		if err := o.replica.Run(ctx); err != nil {
			errs <- err
		}
		cancel()
	})
	envID, dutyID := order.ClientIDs(o.cfg.Cluster.N(), o.cfg.ID)
	client, err := node.NewClient(ctx, node.ClientConfig{Cluster: o.cfg.Cluster, ID: envID, Window: ClientWindow, Transport: o.cfg.Transport, Logger: o.cfg.Logger})
	var duty *node.Client
	if err == nil {
		duty, err = node.NewClient(ctx, node.ClientConfig{Cluster: o.cfg.Cluster, ID: dutyID, Window: 16, Transport: o.cfg.Transport, Logger: o.cfg.Logger})
		if err != nil {
			client.Close()
		}
	}
	if err != nil {
		cancel()
		wg.Wait()
		o.cfg.Listener.Close()
		return err
	}
	o.srv.cfg.Invoker = client
	wg.Go(func() {
		if err := o.app.Duties().Run(ctx, duty, o.key, uint32(o.cfg.ID), o.replica.Suspect); err != nil && ctx.Err() == nil {
			errs <- err
		}
	})
	if len(o.cfg.Peers) > 0 {
		wg.Go(func() {
			if err := o.catchUp(ctx); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(MaxOpSize))
	ab.RegisterAtomicBroadcastServer(gs, o.srv)
	wg.Go(func() {
		if err := gs.Serve(o.cfg.Listener); err != nil && ctx.Err() == nil {
			errs <- err
		}
		cancel()
	})
	<-ctx.Done()
	gs.Stop()
	client.Close()
	duty.Close()
	wg.Wait()
	close(errs)
	return <-errs
}
