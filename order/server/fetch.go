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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/client"
	"github.com/rubin-go/rubin/order/envelope"
)

// catchUp closes the chain's gaps (order.Chain.Missing) with blocks from
// the other orderers until ctx ends, through a client.Deliverer: a block is
// taken only with 2f+1 valid signatures and Fabric's hash link to the
// block before, and an orderer that fails, lies or withholds is left for
// the next, so a Byzantine orderer can delay the catch-up but not
// corrupt it.
func (o *Orderer) catchUp(ctx context.Context) error {
	peers := append([]string{}, o.cfg.Peers...)
	peers[o.cfg.ID] = ""
	dc, err := client.NewDeliverer(client.DeliverConfig{Orderers: peers, Keys: o.keys, Quorum: 2*o.cfg.Cluster.F + 1, Seek: o.seek, SeekHeaders: o.seekHeaders, Options: client.Options{Logger: o.cfg.Logger}})
	if err != nil {
		return err
	}
	chain := o.app.Chain()
	for {
		from, to, more := chain.Missing()
		if from >= to {
			select {
			case <-ctx.Done():
				return nil
			case <-more:
			}
			continue
		}
		err := dc.Blocks(ctx, from, to-1, nil, func(b *cb.Block) error {
			raw, err := deterministic.Marshal(b)
			if err != nil {
				return err
			}
			return chain.Fill(b.GetHeader().GetNumber(), raw, func(prev *cb.BlockHeader) error { return block.Check(prev, b) })
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			// The App stored a block first, or the store failed: look again
			// after a pause.
			o.cfg.Logger.Debug("catching up", "blocks", fmt.Sprintf("[%d, %d)", from, to), "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		o.cfg.Logger.Info("fetched missing blocks", "from", from, "to", to)
	}
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// seek returns a request for blocks first to last, waiting for them,
// signed as this orderer (envelope.OrdererMSPID).
func (o *Orderer) seek(first, last uint64) (*cb.Envelope, error) {
	return o.seekContent(first, last, ab.SeekInfo_BLOCK)
}

// seekHeaders is seek for the blocks' headers and signatures only
// (HEADER_WITH_SIG), by which the Deliverer notices a peer that
// withholds blocks the others have.
func (o *Orderer) seekHeaders(first, last uint64) (*cb.Envelope, error) {
	return o.seekContent(first, last, ab.SeekInfo_HEADER_WITH_SIG)
}

func (o *Orderer) seekContent(first, last uint64, content ab.SeekInfo_SeekContentType) (*cb.Envelope, error) {
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
	data, err := proto.Marshal(&ab.SeekInfo{Start: spec(first), Stop: spec(last), Behavior: ab.SeekInfo_BLOCK_UNTIL_READY, ContentType: content})
	if err != nil {
		return nil, err
	}
	payload, err := proto.Marshal(&cb.Payload{Header: &cb.Header{ChannelHeader: ch, SignatureHeader: sh}, Data: data})
	if err != nil {
		return nil, err
	}
	return &cb.Envelope{Payload: payload, Signature: ed25519.Sign(o.key, payload)}, nil
}
