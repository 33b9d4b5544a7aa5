package ordertest_test

import (
	"testing"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/ordertest"
)

// chainOf builds a chain holding envs, one block each.
func chainOf(t *testing.T, envs []*cb.Envelope) []*cb.Block {
	t.Helper()
	var out []*cb.Block
	var prev []byte
	for i, e := range envs {
		raw, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b := block.New(uint64(i), prev, [][]byte{raw})
		prev = block.HeaderHash(b.Header)
		out = append(out, b)
	}
	return out
}

func TestChecks(t *testing.T) {
	ca, err := ordertest.NewCA("Org")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ca.Issue("writer", "OrgMSP")
	if err != nil {
		t.Fatal(err)
	}
	var envs []*cb.Envelope
	for range 3 {
		e, err := s.Envelope(cb.HeaderType_MESSAGE, "c", nil)
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	good := chainOf(t, envs)
	if err := ordertest.CheckChain(0, good); err != nil {
		t.Fatal(err)
	}
	if err := ordertest.CheckDelivered([][]*cb.Block{good, good}, envs, nil); err != nil {
		t.Fatal(err)
	}
	swapped := chainOf(t, []*cb.Envelope{envs[1], envs[0], envs[2]})
	relinked := chainOf(t, envs)
	relinked[2].Header.PreviousHash = relinked[0].Header.DataHash
	tampered := chainOf(t, envs)
	tampered[1].Data.Data[0] = append([]byte{}, tampered[0].Data.Data[0]...)
	for name, c := range map[string][]*cb.Block{"relinked": relinked, "tampered": tampered, "from 1": good[1:]} {
		if err := ordertest.CheckChain(0, c); err == nil {
			t.Errorf("CheckChain passed a chain %s", name)
		}
	}
	for name, c := range map[string]struct {
		chains            [][]*cb.Block
		accepted, refused []*cb.Envelope
	}{
		"different chains": {[][]*cb.Block{good, swapped}, envs, nil},
		"shorter chain":    {[][]*cb.Block{good, good[:2]}, envs, nil},
		"one missing":      {[][]*cb.Block{good[:2]}, envs, nil},
		"one refused":      {[][]*cb.Block{good}, envs[:2], envs[2:]},
		"one more":         {[][]*cb.Block{good}, envs[:2], nil},
		"twice":            {[][]*cb.Block{chainOf(t, []*cb.Envelope{envs[0], envs[0]})}, envs[:1], nil},
	} {
		if err := ordertest.CheckDelivered(c.chains, c.accepted, c.refused); err == nil {
			t.Errorf("CheckDelivered passed %s", name)
		}
	}
}
