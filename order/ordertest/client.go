package ordertest

import (
	"context"
	"fmt"
	"io"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/protobuf/proto"
)

// Broadcast sends envs on one Broadcast stream of c, each after the
// previous one's response, calls after(i) (if not nil) once envelope i is
// answered, and returns the responses. It checks that the stream ends
// after the last.
func Broadcast(ctx context.Context, c ab.AtomicBroadcastClient, envs []*cb.Envelope, after func(i int)) ([]*ab.BroadcastResponse, error) {
	stream, err := c.Broadcast(ctx)
	if err != nil {
		return nil, err
	}
	var out []*ab.BroadcastResponse
	for i, e := range envs {
		if err := stream.Send(e); err != nil {
			return out, err
		}
		r, err := stream.Recv()
		if err != nil {
			return out, err
		}
		out = append(out, r)
		if after != nil {
			after(i)
		}
	}
	stream.CloseSend()
	if _, err := stream.Recv(); err != io.EOF {
		return out, fmt.Errorf("after the last response: %v, want EOF", err)
	}
	return out, nil
}

// DeliverChain asks c, with reader's signed seek request, for channel's
// blocks from 0 on, reads them until they hold n envelopes, and checks
// each's signatures (CheckSignatures with keys and quorum) and the chain
// (CheckChain).
func DeliverChain(ctx context.Context, c ab.AtomicBroadcastClient, reader *Signer, channel string, keys [][]byte, quorum, n int) ([]*cb.Block, error) {
	stream, err := c.Deliver(ctx)
	if err != nil {
		return nil, err
	}
	seek, err := reader.Seek(channel, &ab.SeekInfo{Start: Oldest, Stop: Specified(1 << 62), Behavior: ab.SeekInfo_BLOCK_UNTIL_READY})
	if err != nil {
		return nil, err
	}
	if err := stream.Send(seek); err != nil {
		return nil, err
	}
	var blocks []*cb.Block
	for got := 0; got < n; {
		r, err := stream.Recv()
		if err != nil {
			return blocks, fmt.Errorf("after %d blocks holding %d envelopes: %w", len(blocks), got, err)
		}
		b := r.GetBlock()
		if b == nil {
			return blocks, fmt.Errorf("status %v after %d blocks", r.GetStatus(), len(blocks))
		}
		if err := CheckSignatures(b, keys, quorum); err != nil {
			return blocks, err
		}
		blocks = append(blocks, b)
		got += len(b.Data.Data)
	}
	return blocks, CheckChain(0, blocks)
}

// CheckDelivered checks what orderers delivered against what was
// broadcast: every chain holds the same blocks, and among their
// envelopes each accepted one is there exactly once, no refused one is,
// and nothing else.
func CheckDelivered(chains [][]*cb.Block, accepted, refused []*cb.Envelope) error {
	if len(chains) == 0 {
		return fmt.Errorf("no chain")
	}
	for k, c := range chains[1:] {
		if len(c) != len(chains[0]) {
			return fmt.Errorf("chain %d holds %d blocks, chain 0 %d", k+1, len(c), len(chains[0]))
		}
		for n := range c {
			if !proto.Equal(c[n], chains[0][n]) {
				return fmt.Errorf("block %d of chain %d differs from chain 0's", n, k+1)
			}
		}
	}
	seen := make(map[string]int)
	for _, b := range chains[0] {
		for _, d := range b.GetData().GetData() {
			seen[string(d)]++
		}
	}
	for i, e := range accepted {
		raw, err := proto.Marshal(e)
		if err != nil {
			return err
		}
		if seen[string(raw)] != 1 {
			return fmt.Errorf("accepted envelope %d is in the chain %d times", i, seen[string(raw)])
		}
	}
	for i, e := range refused {
		raw, err := proto.Marshal(e)
		if err != nil {
			return err
		}
		if seen[string(raw)] != 0 {
			return fmt.Errorf("refused envelope %d is in the chain", i)
		}
	}
	if len(seen) != len(accepted) {
		return fmt.Errorf("%d distinct envelopes in the chain, %d accepted", len(seen), len(accepted))
	}
	return nil
}
