package envelope_test

import (
	"testing"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"github.com/hyperledger/fabric-protos-go-apiv2/msp"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/order/envelope"
	"github.com/rubin-go/rubin/order/ordertest"
)

const channel = "mychannel"

type fixture struct {
	ca, other *ordertest.CA
	writer    *ordertest.Signer // issued by ca
	stranger  *ordertest.Signer // issued by other
	policy    *envelope.Policy
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	var f fixture
	var err error
	if f.ca, err = ordertest.NewCA("Org1"); err != nil {
		t.Fatal(err)
	}
	if f.other, err = ordertest.NewCA("Org2"); err != nil {
		t.Fatal(err)
	}
	if f.writer, err = f.ca.Issue("writer", "Org1MSP"); err != nil {
		t.Fatal(err)
	}
	if f.stranger, err = f.other.Issue("stranger", "Org2MSP"); err != nil {
		t.Fatal(err)
	}
	if f.policy, err = envelope.NewPolicy(f.ca.PEM); err != nil {
		t.Fatal(err)
	}
	return &f
}

func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// check runs what the orderer runs on a broadcast envelope.
func check(pol *envelope.Policy, raw []byte) error {
	p, err := envelope.Parse(raw, channel)
	if err != nil {
		return err
	}
	if err := envelope.CheckTransaction(p); err != nil {
		return err
	}
	return pol.Authorize(p, time.Now())
}

func TestAuthorize(t *testing.T) {
	f := newFixture(t)
	good, err := f.writer.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, []byte("tx"))
	if err != nil {
		t.Fatal(err)
	}
	if err := check(f.policy, marshal(t, good)); err != nil {
		t.Fatalf("a good envelope: %v", err)
	}
	mutate := func(m func(e *cb.Envelope)) []byte {
		e := proto.Clone(good).(*cb.Envelope)
		m(e)
		return marshal(t, e)
	}
	stranger, _ := f.stranger.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, []byte("tx"))
	otherChannel, _ := f.writer.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, "other", []byte("tx"))
	config, _ := f.writer.Envelope(cb.HeaderType_CONFIG_UPDATE, channel, []byte("cfg"))
	seek, _ := f.writer.Seek(channel, &ab.SeekInfo{Start: ordertest.Oldest})
	highS, err := ordertest.HighS(good.Signature)
	if err != nil {
		t.Fatal(err)
	}
	// The payload of another signer with the writer's signature.
	strangerPayload := stranger.Payload
	for _, c := range []struct {
		name string
		raw  []byte
		want cb.Status
	}{
		{"not an envelope", []byte{0xff, 0xff}, cb.Status_BAD_REQUEST},
		{"no payload header", mutate(func(e *cb.Envelope) { e.Payload = marshal(t, &cb.Payload{Data: []byte("x")}) }), cb.Status_BAD_REQUEST},
		{"payload garbage", mutate(func(e *cb.Envelope) { e.Payload = []byte{0x0a, 0xff} }), cb.Status_BAD_REQUEST},
		{"other channel", marshal(t, otherChannel), cb.Status_NOT_FOUND},
		{"config update", marshal(t, config), cb.Status_BAD_REQUEST},
		{"seek as a transaction", marshal(t, seek), cb.Status_BAD_REQUEST},
		{"payload changed", mutate(func(e *cb.Envelope) { e.Payload = append(append([]byte{}, e.Payload...), 0x12, 0x01, 'x') }), cb.Status_FORBIDDEN},
		{"signature of another payload", mutate(func(e *cb.Envelope) { e.Payload = strangerPayload }), cb.Status_FORBIDDEN},
		{"high S", mutate(func(e *cb.Envelope) { e.Signature = highS }), cb.Status_FORBIDDEN},
		{"no signature", mutate(func(e *cb.Envelope) { e.Signature = nil }), cb.Status_FORBIDDEN},
		{"signature garbage", mutate(func(e *cb.Envelope) { e.Signature = []byte{0x30, 0x03, 0x02, 0x01, 0x01} }), cb.Status_FORBIDDEN},
		{"CA not in the policy", marshal(t, stranger), cb.Status_FORBIDDEN},
	} {
		// A memoized policy answers alike, the second time too, having
		// checked the good envelope first.
		memo := f.policy.Memoized()
		for _, pol := range []*envelope.Policy{f.policy, memo, memo} {
			if err := check(pol, marshal(t, good)); err != nil {
				t.Fatalf("a good envelope: %v", err)
			}
			err := check(pol, c.raw)
			if got := envelope.StatusOf(err); got != c.want {
				t.Errorf("%s: %v (%s), want %s", c.name, err, got, c.want)
			}
		}
	}
	// The stranger's envelope passes a policy naming both CAs.
	both, err := envelope.NewPolicy(append(append([]byte{}, f.ca.PEM...), f.other.PEM...))
	if err != nil {
		t.Fatal(err)
	}
	if err := check(both, marshal(t, stranger)); err != nil {
		t.Fatalf("a policy of two CAs: %v", err)
	}
	// A certificate outside its validity, at the time given, is
	// refused, by a memoized policy too once it verified the chain at a
	// time inside it; inside it again, it is accepted.
	p, _ := envelope.Parse(marshal(t, good), channel)
	memo := f.policy.Memoized()
	for _, pol := range []*envelope.Policy{f.policy, memo} {
		if err := pol.Authorize(p, time.Now()); err != nil {
			t.Fatal(err)
		}
		for _, at := range []time.Time{time.Now().Add(10 * 365 * 24 * time.Hour), p.Cert.NotAfter.Add(time.Nanosecond), p.Cert.NotBefore.Add(-time.Nanosecond)} {
			if err := pol.Authorize(p, at); envelope.StatusOf(err) != cb.Status_FORBIDDEN {
				t.Fatalf("a certificate at %v, outside its validity: %v", at, err)
			}
		}
		for _, at := range []time.Time{p.Cert.NotAfter, p.Cert.NotBefore} {
			if err := pol.Authorize(p, at); err != nil {
				t.Fatalf("a certificate at %v, the edge of its validity: %v", at, err)
			}
		}
	}
	if _, err := envelope.NewPolicy([]byte("no pem")); err == nil {
		t.Fatal("a policy without a CA")
	}
}

func TestSeekInfo(t *testing.T) {
	f := newFixture(t)
	seek, _ := f.writer.Seek(channel, &ab.SeekInfo{Start: ordertest.Specified(3), Stop: ordertest.Newest, Behavior: ab.SeekInfo_FAIL_IF_NOT_READY})
	p, err := envelope.Parse(marshal(t, seek), channel)
	if err != nil {
		t.Fatal(err)
	}
	si, err := envelope.SeekInfo(p)
	if err != nil || si.GetStart().GetSpecified().GetNumber() != 3 || si.GetStop().GetNewest() == nil || si.Behavior != ab.SeekInfo_FAIL_IF_NOT_READY {
		t.Fatalf("SeekInfo = %v, %v", si, err)
	}
	tx, _ := f.writer.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, nil)
	noStart, _ := f.writer.Seek(channel, &ab.SeekInfo{})
	for name, e := range map[string]*cb.Envelope{"a transaction": tx, "no start": noStart} {
		p, err := envelope.Parse(marshal(t, e), channel)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := envelope.SeekInfo(p); envelope.StatusOf(err) != cb.Status_BAD_REQUEST {
			t.Errorf("%s: %v, want BAD_REQUEST", name, err)
		}
	}
}

// TestOrdererCreator: a creator of the orderers' MSP parses without a
// certificate, and no CA policy authorizes it.
func TestOrdererCreator(t *testing.T) {
	f := newFixture(t)
	creator := marshal(t, &msp.SerializedIdentity{Mspid: envelope.OrdererMSPID, IdBytes: []byte("0")})
	ch := marshal(t, &cb.ChannelHeader{Type: int32(cb.HeaderType_ENDORSER_TRANSACTION), ChannelId: channel})
	sh := marshal(t, &cb.SignatureHeader{Creator: creator})
	payload := marshal(t, &cb.Payload{Header: &cb.Header{ChannelHeader: ch, SignatureHeader: sh}})
	p, err := envelope.Parse(marshal(t, &cb.Envelope{Payload: payload, Signature: []byte("sig")}), channel)
	if err != nil || p.Cert != nil || p.Creator.Mspid != envelope.OrdererMSPID {
		t.Fatalf("Parse = %v, %v", p, err)
	}
	if err := f.policy.Authorize(p, time.Now()); envelope.StatusOf(err) != cb.Status_FORBIDDEN {
		t.Fatalf("Authorize = %v, want FORBIDDEN", err)
	}
}
