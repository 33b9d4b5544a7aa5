package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"github.com/hyperledger/fabric-protos-go-apiv2/msp"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/envelope"
)

// fetchTimeout bounds one fetch from one orderer.
const fetchTimeout = 30 * time.Second

// catchUp closes the chain's gaps (order.Chain.Missing) with blocks from
// the other orderers until ctx ends: it asks them in turn, from the one
// after the last that failed, with a seek request signed as an orderer,
// and takes a block only if it carries 2f+1 valid signatures and follows
// the block before by Fabric's hash rules, so a Byzantine orderer can
// delay the catch-up but not corrupt it. After a round in which no
// orderer gave a block it waits a second.
func (o *Orderer) catchUp(ctx context.Context) {
	chain := o.app.Chain()
	next := 0
	for {
		from, to, more := chain.Missing()
		if from >= to {
			select {
			case <-ctx.Done():
				return
			case <-more:
			}
			continue
		}
		got := 0
		for k := range len(o.cfg.Peers) {
			i := (next + k) % len(o.cfg.Peers)
			if i == int(o.cfg.ID) || o.cfg.Peers[i] == "" {
				continue
			}
			n, err := o.fetchFrom(ctx, i, from, to)
			got += n
			if err == nil {
				break
			}
			o.cfg.Logger.Debug("fetching blocks", "from", i, "blocks", fmt.Sprintf("[%d, %d)", from, to), "got", n, "err", err)
			next = i + 1
		}
		if got > 0 {
			o.cfg.Logger.Info("fetched missing blocks", "blocks", got, "height", from+uint64(got))
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// fetchFrom fetches blocks [from, to) from orderer i, adding each to the
// chain, and returns how many it added.
func (o *Orderer) fetchFrom(ctx context.Context, i int, from, to uint64) (int, error) {
	conn, err := grpc.NewClient(o.cfg.Peers[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	stream, err := ab.NewAtomicBroadcastClient(conn).Deliver(ctx)
	if err != nil {
		return 0, err
	}
	seek, err := o.seek(from, to-1)
	if err != nil {
		return 0, err
	}
	if err := stream.Send(seek); err != nil {
		return 0, err
	}
	quorum := 2*o.cfg.Cluster.F + 1
	for n := 0; ; n++ {
		r, err := stream.Recv()
		if err != nil {
			return n, err
		}
		b := r.GetBlock()
		if b == nil {
			if st := r.GetStatus(); st != cb.Status_SUCCESS {
				return n, fmt.Errorf("status %v", st)
			}
			return n, nil
		}
		if err := order.VerifySignatures(b, o.keys, quorum); err != nil {
			return n, err
		}
		raw, err := deterministic.Marshal(b)
		if err != nil {
			return n, err
		}
		if err := o.app.Chain().Fill(b.GetHeader().GetNumber(), raw, func(prev *cb.BlockHeader) error { return block.Check(prev, b) }); err != nil {
			return n, err
		}
	}
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// seek returns a request for blocks first to last, failing if not ready,
// signed as this orderer (envelope.OrdererMSPID).
func (o *Orderer) seek(first, last uint64) (*cb.Envelope, error) {
	nonce := make([]byte, 24)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	creator, err := proto.Marshal(&msp.SerializedIdentity{Mspid: envelope.OrdererMSPID, IdBytes: []byte(strconv.Itoa(int(o.cfg.ID)))})
	if err != nil {
		return nil, err
	}
	ch, err := proto.Marshal(&cb.ChannelHeader{Type: int32(cb.HeaderType_DELIVER_SEEK_INFO), ChannelId: o.cfg.Channel, Timestamp: timestamppb.Now()})
	if err != nil {
		return nil, err
	}
	sh, err := proto.Marshal(&cb.SignatureHeader{Creator: creator, Nonce: nonce})
	if err != nil {
		return nil, err
	}
	spec := func(n uint64) *ab.SeekPosition {
		return &ab.SeekPosition{Type: &ab.SeekPosition_Specified{Specified: &ab.SeekSpecified{Number: n}}}
	}
	data, err := proto.Marshal(&ab.SeekInfo{Start: spec(first), Stop: spec(last), Behavior: ab.SeekInfo_FAIL_IF_NOT_READY})
	if err != nil {
		return nil, err
	}
	payload, err := proto.Marshal(&cb.Payload{Header: &cb.Header{ChannelHeader: ch, SignatureHeader: sh}, Data: data})
	if err != nil {
		return nil, err
	}
	return &cb.Envelope{Payload: payload, Signature: ed25519.Sign(o.key, payload)}, nil
}
