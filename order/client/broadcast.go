package client

import (
	"context"
	"errors"
	"fmt"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/grpc"
)

// BroadcastConfig configures a Broadcaster. Orderers is required.
type BroadcastConfig struct {
	// Orderers are the orderers' AtomicBroadcast addresses.
	Orderers []string
	// Options: Patience is how long an orderer may take to answer an
	// envelope before the client gives it to the next.
	Options
}

// A Broadcaster submits envelopes so that a silent orderer cannot stall
// them: it sends an envelope to one orderer and, if that one does not
// answer within its patience, fails, or answers SERVICE_UNAVAILABLE, to
// the next.
//
// The orderers do not forward envelopes to one another; resistance to an
// orderer that drops what it is given is this retry. It is safe: an
// envelope ordered twice (the first orderer did order it, late) is
// ordered once, since the orderers remember the payloads they ordered
// lately (order.Config.DedupWindow) and answer the repeat SUCCESS,
// "duplicate". A Byzantine orderer can still answer SUCCESS without
// ordering the envelope; a client that must know sees the envelope in a
// delivered block (Deliverer) and submits again if not.
//
// Its methods must not be called concurrently.
type Broadcaster struct {
	cfg  BroadcastConfig
	next int // the orderer to try first
}

// NewBroadcaster returns a Broadcaster.
func NewBroadcaster(cfg BroadcastConfig) (*Broadcaster, error) {
	if len(cfg.Orderers) == 0 {
		return nil, errors.New("client: a broadcaster needs the orderers")
	}
	cfg.Options = cfg.Options.normalized()
	return &Broadcaster{cfg: cfg}, nil
}

// Submit broadcasts env through the orderers in turn, from the one that
// last answered, until one answers with a status other than
// SERVICE_UNAVAILABLE, and returns that answer. It returns an error if no
// orderer answered so, each tried once, or when ctx ends.
func (c *Broadcaster) Submit(ctx context.Context, env *cb.Envelope) (*ab.BroadcastResponse, error) {
	var errs []error
	for k := range len(c.cfg.Orderers) {
		i := (c.next + k) % len(c.cfg.Orderers)
		r, err := c.submit(ctx, i, env)
		if err == nil && r.Status != cb.Status_SERVICE_UNAVAILABLE {
			c.next = i
			return r, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil {
			err = fmt.Errorf("%v: %s", r.Status, r.Info)
		}
		c.cfg.Logger.Debug("orderer passed over", "orderer", i, "err", err)
		errs = append(errs, fmt.Errorf("orderer %d: %w", i, err))
	}
	return nil, fmt.Errorf("client: no orderer answered: %w", errors.Join(errs...))
}

func (c *Broadcaster) submit(ctx context.Context, i int, env *cb.Envelope) (*ab.BroadcastResponse, error) {
	conn, err := grpc.NewClient(c.cfg.Orderers[i], c.cfg.DialOptions...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Patience)
	defer cancel()
	stream, err := ab.NewAtomicBroadcastClient(conn).Broadcast(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(env); err != nil {
		return nil, err
	}
	r, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	stream.CloseSend()
	return r, nil
}
