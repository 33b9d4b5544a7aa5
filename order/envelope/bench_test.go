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
	var verify int64
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if !ecdsa.VerifyASN1(pub, digest[:], env.Signature) {
				b.Fatal("the envelope's signature does not verify")
			}
		}
		verify = b.Elapsed().Nanoseconds() / int64(b.N)
	})
	b.Run("check", func(b *testing.B) { benchCheck(b, f.policy, raw, verify) })
	// An orderer's second check of an envelope, at execution: the
	// signature and the chain remembered from the first.
	b.Run("recheck-memoized", func(b *testing.B) { benchCheck(b, f.policy.Memoized(), raw, verify) })
	// A new envelope from a certificate seen before: the chain
	// remembered, the signature verified.
	b.Run("check-memoized-chain", func(b *testing.B) {
		memo := f.policy.Memoized()
		if err := check(memo, raw); err != nil {
			b.Fatal(err)
		}
		envs := make([][]byte, 64)
		for i := range envs {
			e, err := f.writer.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, make([]byte, 1024))
			if err != nil {
				b.Fatal(err)
			}
			envs[i] = marshal(b, e)
		}
		i := 0
		for b.Loop() {
			// Beyond the 64, a signature remembered: a bound on
			// b.N, not a measure.
			if err := check(memo, envs[i%len(envs)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
		if verify > 0 {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds()/int64(b.N))/float64(verify), "verifies/check")
		}
	})
}

func benchCheck(b *testing.B, pol *envelope.Policy, raw []byte, verify int64) {
	b.ReportAllocs()
	for b.Loop() {
		if err := check(pol, raw); err != nil {
			b.Fatal(err)
		}
	}
	if verify > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds()/int64(b.N))/float64(verify), "verifies/check")
	}
}
