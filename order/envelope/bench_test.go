package envelope_test

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"testing"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"

	"github.com/rubin-go/rubin/order/envelope"
)

// BenchmarkCheck times what an orderer does to one broadcast envelope
// of 1 KiB of data (check: Parse, CheckTransaction, Authorize), and
// reports it in units of one ECDSA P-256 verification of the envelope's
// signature, timed in the same run: the bound of issue 25 assumes a
// check costs about one.
func BenchmarkCheck(b *testing.B) {
	f := newFixture(b)
	env, err := f.writer.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, make([]byte, 1024))
	if err != nil {
		b.Fatal(err)
	}
	raw := marshal(b, env)
	p, err := envelope.Parse(raw, channel)
	if err != nil {
		b.Fatal(err)
	}
	pub := p.Cert.PublicKey.(*ecdsa.PublicKey)
	digest := sha256.Sum256(env.Payload)
	var verify, checks int64
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if !ecdsa.VerifyASN1(pub, digest[:], env.Signature) {
				b.Fatal("the envelope's signature does not verify")
			}
		}
		verify = b.Elapsed().Nanoseconds() / int64(b.N)
	})
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := check(f.policy, raw); err != nil {
				b.Fatal(err)
			}
		}
		checks = b.Elapsed().Nanoseconds() / int64(b.N)
		if verify > 0 {
			b.ReportMetric(float64(checks)/float64(verify), "verifies/check")
		}
	})
}
