package envelope_test

import (
	"testing"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"

	"github.com/rubin-go/rubin/order/envelope"
	"github.com/rubin-go/rubin/order/ordertest"
)

// FuzzEnvelope feeds arbitrary bytes to what the orderer runs on a
// broadcast envelope: it must never panic, every refusal must carry one
// of the statuses the API answers with, and nothing but the seeds' own
// signed envelope may pass.
func FuzzEnvelope(f *testing.F) {
	fx := newFixture(f)
	good, _ := fx.writer.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, []byte("tx"))
	stranger, _ := fx.stranger.Envelope(cb.HeaderType_MESSAGE, channel, nil)
	goodRaw := marshal(f, good)
	f.Add(goodRaw)
	f.Add(marshal(f, stranger))
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, raw []byte) {
		err := check(fx.policy, raw)
		switch envelope.StatusOf(err) {
		case cb.Status_SUCCESS:
			p, _ := envelope.Parse(raw, channel)
			if string(p.Envelope.Payload) != string(good.Payload) || string(p.Envelope.Signature) != string(good.Signature) {
				t.Fatalf("a forged envelope passed: %x", raw)
			}
		case cb.Status_BAD_REQUEST, cb.Status_FORBIDDEN, cb.Status_NOT_FOUND:
		default:
			t.Fatalf("status %s: %v", envelope.StatusOf(err), err)
		}
	})
}

// FuzzSeekInfo feeds arbitrary seek data inside a well-formed, signed
// DELIVER_SEEK_INFO envelope to the decoding Deliver runs.
func FuzzSeekInfo(f *testing.F) {
	fx := newFixture(f)
	for _, si := range []*ab.SeekInfo{
		{Start: ordertest.Oldest, Stop: ordertest.Newest},
		{Start: ordertest.Specified(5), Stop: ordertest.Specified(7), Behavior: ab.SeekInfo_FAIL_IF_NOT_READY},
		{Start: ordertest.Newest},
	} {
		f.Add(marshal(f, si))
	}
	f.Add([]byte{0x0a, 0x02, 0x1a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := fx.writer.Envelope(cb.HeaderType_DELIVER_SEEK_INFO, channel, data)
		if err != nil {
			t.Fatal(err)
		}
		p, err := envelope.ParseEnvelope(e, channel)
		if err != nil {
			t.Fatal(err)
		}
		if err := fx.policy.Authorize(p, time.Now()); err != nil {
			t.Fatal(err)
		}
		si, err := envelope.SeekInfo(p)
		if err != nil {
			if envelope.StatusOf(err) != cb.Status_BAD_REQUEST {
				t.Fatalf("status %s", envelope.StatusOf(err))
			}
			return
		}
		if si.GetStart().GetType() == nil {
			t.Fatal("a seek info without a start passed")
		}
	})
}
