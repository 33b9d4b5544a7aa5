// Package server serves Fabric's orderer API, orderer.AtomicBroadcast
// over gRPC, for one orderer of the ordering service (package order), and
// runs such an orderer (Orderer): its PBFT replica, the client through
// which it orders, its Duties and its gRPC server.
//
// # Broadcast
//
// Each envelope of a stream is checked here first (decoding, channel,
// Writers policy: a refusal is answered at once, BAD_REQUEST, NOT_FOUND
// or FORBIDDEN with the reason in Info), then ordered through the
// cluster, and answered with the status its execution gave: SUCCESS once
// it is ordered, hence in the next block cut. A client may send a
// stream's envelopes without waiting for their answers: up to
// StreamWindow of them are ordered at once, and they are ordered, and
// answered, in the order they came, one response per envelope. The
// envelopes being ordered for all streams together take at most
// MaxBroadcastBytes; a stream past either bound is not read until
// answers free room.
//
// # Deliver
//
// Each DELIVER_SEEK_INFO envelope of a stream must pass the Readers
// policy, or be signed by an orderer (see Orderer's catch-up); its SeekInfo picks a start (oldest, newest, a number, or the
// next block) and a stop (oldest, newest, a number; none means no end).
// Blocks are sent from the chain's final blocks, one at a time, then
// SUCCESS after the stop. A block not yet final is waited for
// (BLOCK_UNTIL_READY) or answered with NOT_FOUND (FAIL_IF_NOT_READY).
// HEADER_WITH_SIG requests get the blocks without their data. A stream
// holds one block in memory at a time, and no goroutine besides the
// handler's.
//
// # Catching up
//
// An orderer whose chain has a gap (order.Chain.Missing: restored from a
// snapshot past what its block store holds) fetches the missing blocks
// from the other orderers' Deliver, with a seek request signed by its
// own key under envelope.OrdererMSPID, which Deliver authorizes by the
// cluster's keys instead of the Readers policy. It takes a block only if
// 2f+1 orderers signed it and it follows the block before by Fabric's
// hash rules, and asks the next orderer when one fails or withholds.
package server

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/envelope"
)

// Config is what a Server serves.
type Config struct {
	// Channel is the channel's name; Writers and Readers its policies.
	Channel          string
	Writers, Readers *envelope.Policy
	// Orderers are the orderers' public keys, by ID: a seek request of
	// an orderer's identity (envelope.OrdererMSPID) is authorized by its
	// signature instead of the Readers policy.
	Orderers []ed25519.PublicKey
	// Chain holds the final blocks Deliver sends.
	Chain *order.Chain
	// Invoker orders Broadcast's envelopes.
	Invoker Starter
	// AbsoluteMaxBytes refuses larger envelopes before ordering them (0:
	// no check here; the App checks anyway).
	AbsoluteMaxBytes int
	// StreamWindow is how many envelopes of one Broadcast stream are
	// ordered at once (default 32).
	StreamWindow int
	// MaxBroadcastBytes bounds the encoded envelopes of every stream
	// that are being ordered, together (default 64 MiB, at least
	// AbsoluteMaxBytes).
	MaxBroadcastBytes int
	Logger            *slog.Logger // nil: discard
}

// Starter starts ordering an op without waiting for its result, and
// orders the ops one goroutine starts in the order it started them;
// *node.Client is one.
type Starter interface {
	Start(ctx context.Context, op []byte) *node.Call
}

// Server implements ab.AtomicBroadcastServer. Its methods may be called
// concurrently, as gRPC does.
type Server struct {
	ab.UnimplementedAtomicBroadcastServer
	cfg     Config
	budget  *semaphore.Weighted // of MaxBroadcastBytes
	metrics *metrics            // nil: none
}

var _ ab.AtomicBroadcastServer = (*Server)(nil)

// New returns a Server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StreamWindow <= 0 {
		cfg.StreamWindow = 32
	}
	if cfg.MaxBroadcastBytes <= 0 {
		cfg.MaxBroadcastBytes = 64 << 20
	}
	cfg.MaxBroadcastBytes = max(cfg.MaxBroadcastBytes, cfg.AbsoluteMaxBytes)
	return &Server{cfg: cfg, budget: semaphore.NewWeighted(int64(cfg.MaxBroadcastBytes))}
}

// Broadcast answers each envelope of the stream, in order, ordering up
// to StreamWindow of them at once.
func (s *Server) Broadcast(stream ab.AtomicBroadcast_BroadcastServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// slots holds a token for each envelope read and not yet answered.
	slots := make(chan struct{}, s.cfg.StreamWindow)
	pending := make(chan *answer, s.cfg.StreamWindow)
	sent := make(chan error, 1)
	go func() { sent <- s.answer(ctx, cancel, stream, pending, slots) }()
	for {
		env, err := stream.Recv()
		if err != nil {
			break // io.EOF or the stream's end: answer what was read
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		pending <- s.broadcast(ctx, env) // room: a slot was free
	}
	close(pending)
	return <-sent
}

// answer sends the answers of pending in order as they come, freeing a
// slot for each, until pending is closed or a send fails; then it waits
// for the rest, so that the envelopes' budget is back when Broadcast
// returns.
func (s *Server) answer(ctx context.Context, cancel func(), stream ab.AtomicBroadcast_BroadcastServer, pending <-chan *answer, slots <-chan struct{}) error {
	var failed error
	for a := range pending {
		resp := a.wait()
		<-slots
		if failed != nil {
			continue
		}
		s.metrics.answered(resp.Status)
		if err := stream.Send(resp); err != nil {
			failed = err
		} else if resp.Status == cb.Status_SERVICE_UNAVAILABLE && ctx.Err() != nil {
			failed = ctx.Err()
		}
		if failed != nil {
			cancel()
		}
	}
	return failed
}

// answer is the answer to one envelope, there at once (resp) or once
// its ordering ends (call), with the budget it holds till then.
type answer struct {
	s    *Server
	resp *ab.BroadcastResponse
	call *node.Call
	held int64
}

// broadcast checks env and starts ordering it if it passes.
func (s *Server) broadcast(ctx context.Context, env *cb.Envelope) *answer {
	raw, err := proto.Marshal(env)
	if err != nil {
		return &answer{resp: &ab.BroadcastResponse{Status: cb.Status_BAD_REQUEST, Info: err.Error()}}
	}
	if s.cfg.AbsoluteMaxBytes > 0 && len(raw) > s.cfg.AbsoluteMaxBytes {
		return &answer{resp: &ab.BroadcastResponse{Status: cb.Status_BAD_REQUEST, Info: "the envelope exceeds AbsoluteMaxBytes"}}
	}
	p, err := envelope.ParseEnvelope(env, s.cfg.Channel)
	if err == nil {
		err = envelope.CheckTransaction(p)
	}
	if err == nil {
		err = s.cfg.Writers.Authorize(p, time.Now())
	}
	if err != nil {
		return &answer{resp: refusal(err)}
	}
	held := int64(min(len(raw), s.cfg.MaxBroadcastBytes))
	if err := s.budget.Acquire(ctx, held); err != nil {
		return &answer{resp: &ab.BroadcastResponse{Status: cb.Status_SERVICE_UNAVAILABLE, Info: "not ordered: " + err.Error()}}
	}
	return &answer{s: s, call: s.cfg.Invoker.Start(ctx, order.EnvelopeOp(raw)), held: held}
}

// wait returns the answer, once there.
func (a *answer) wait() *ab.BroadcastResponse {
	if a.call == nil {
		return a.resp
	}
	res, err := a.call.Wait()
	a.call = nil
	a.s.budget.Release(a.held)
	if err != nil {
		a.resp = &ab.BroadcastResponse{Status: cb.Status_SERVICE_UNAVAILABLE, Info: "not ordered: " + err.Error()}
		return a.resp
	}
	r, err := order.ParseResult(res)
	if err != nil {
		a.resp = &ab.BroadcastResponse{Status: cb.Status_INTERNAL_SERVER_ERROR, Info: err.Error()}
		return a.resp
	}
	a.resp = &ab.BroadcastResponse{Status: r.Status, Info: r.Info}
	return a.resp
}

func refusal(err error) *ab.BroadcastResponse {
	var e *envelope.Error
	if errors.As(err, &e) {
		return &ab.BroadcastResponse{Status: e.Status, Info: e.Reason}
	}
	return &ab.BroadcastResponse{Status: cb.Status_INTERNAL_SERVER_ERROR, Info: err.Error()}
}

func status(st cb.Status) *ab.DeliverResponse {
	return &ab.DeliverResponse{Type: &ab.DeliverResponse_Status{Status: st}}
}

// Deliver serves each seek request of the stream in turn.
func (s *Server) Deliver(stream ab.AtomicBroadcast_DeliverServer) error {
	for {
		env, err := stream.Recv()
		if err != nil {
			return nil
		}
		st, err := s.deliver(stream, env)
		if err != nil {
			return err
		}
		if err := stream.Send(status(st)); err != nil {
			return err
		}
	}
}

// authorizeReader checks that p's creator may read the chain: an
// identity of the Readers policy, or an orderer.
func (s *Server) authorizeReader(p *envelope.Parsed) error {
	if p.Creator.GetMspid() != envelope.OrdererMSPID {
		return s.cfg.Readers.Authorize(p, time.Now())
	}
	id, err := strconv.ParseUint(string(p.Creator.GetIdBytes()), 10, 32)
	if err != nil || id >= uint64(len(s.cfg.Orderers)) || !ed25519.Verify(s.cfg.Orderers[id], p.Envelope.GetPayload(), p.Envelope.GetSignature()) {
		return &envelope.Error{Status: cb.Status_FORBIDDEN, Reason: "not an orderer's signature"}
	}
	return nil
}

// deliver serves one seek request and returns the status that ends it,
// or the error that ends the stream.
func (s *Server) deliver(stream ab.AtomicBroadcast_DeliverServer, env *cb.Envelope) (cb.Status, error) {
	ctx := stream.Context()
	p, err := envelope.ParseEnvelope(env, s.cfg.Channel)
	if err == nil {
		err = s.authorizeReader(p)
	}
	var si *ab.SeekInfo
	if err == nil {
		si, err = envelope.SeekInfo(p)
	}
	if err != nil {
		s.cfg.Logger.Debug("deliver refused", "err", err)
		return envelope.StatusOf(err), nil
	}
	height, grown := s.cfg.Chain.Height()
	start, _ := position(si.Start, height)
	stop, ok := uint64(math.MaxUint64), true
	if si.GetStop().GetType() != nil {
		stop, ok = position(si.Stop, height)
	}
	if !ok {
		return cb.Status_BAD_REQUEST, nil
	}
	if stop < start {
		return cb.Status_BAD_REQUEST, nil
	}
	for n := start; ; n++ {
		for n >= height {
			if si.Behavior == ab.SeekInfo_FAIL_IF_NOT_READY {
				return cb.Status_NOT_FOUND, nil
			}
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-s.cfg.Chain.Failed():
				return cb.Status_SERVICE_UNAVAILABLE, nil
			case <-grown:
			}
			height, grown = s.cfg.Chain.Height()
		}
		b, err := s.cfg.Chain.Block(n)
		if err != nil {
			s.cfg.Logger.Error("reading a final block", "block", n, "err", err)
			return cb.Status_INTERNAL_SERVER_ERROR, nil
		}
		if si.ContentType == ab.SeekInfo_HEADER_WITH_SIG {
			b.Data = nil
		}
		if err := stream.Send(&ab.DeliverResponse{Type: &ab.DeliverResponse_Block{Block: b}}); err != nil {
			return 0, err
		}
		if n == stop {
			return cb.Status_SUCCESS, nil
		}
	}
}

// position returns the block a seek position names in a chain of height
// blocks, and false for a position of no known type.
func position(p *ab.SeekPosition, height uint64) (uint64, bool) {
	switch pos := p.GetType().(type) {
	case *ab.SeekPosition_Oldest:
		return 0, true
	case *ab.SeekPosition_Newest:
		return max(height, 1) - 1, true
	case *ab.SeekPosition_Specified:
		return pos.Specified.GetNumber(), true
	case *ab.SeekPosition_NextCommit:
		return height, true
	}
	return 0, false
}
