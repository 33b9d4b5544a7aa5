package order_test

import (
	"encoding/asn1"
	"fmt"
	"math/big"
	"testing"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/envelope"
	"github.com/rubin-go/rubin/order/ordertest"
)

// The ForgingPrimary and ForgingBackup families of TestSim: an orderer
// that orders, through its own client identity, envelopes whose
// signature was tampered with, and whose App finds every op valid. A
// correct replica checks the signature of an envelope when it arrives
// and, as a backup, of an envelope of a pre-prepare unless it was relayed
// by another orderer than the primary that proposed it (order.App.Valid,
// f = 1): the forging orderer's own envelopes are checked everywhere
// but at itself.

// simForgeClient is the forging orderer's client identity, beyond
// Net.Clients (the simnet's correct clients): through it it orders the
// envelopes it relays, as order.ClientIDs's first identity.
const simForgeClient bft.ClientID = simN + 4

// simForgeEvery: while the links are faulty, the forging orderer orders
// a tampered envelope every simForgeEvery ticks.
const simForgeEvery = 20

// simForge is what the forging orderer did and what the correct
// orderers made of it.
type simForge struct {
	by   int             // the forging orderer, -1 if none
	ops  map[string]bool // the ops of its tampered envelopes
	envs []*cb.Envelope  // its tampered envelopes
	ts   uint64          // its client's last request timestamp
	// signer is the identity of the channel's CA that signs them.
	signer *ordertest.Signer
	// proposed counts the pre-prepares it sent to correct orderers
	// holding a tampered envelope.
	proposed int
	// What the correct orderers' Valid answered of a tampered envelope:
	// accepted, refused on arrival (refusedByPrimary: by the primary of
	// the orderer's view), rejected in a pre-prepare of a faulty
	// primary, or of a correct one.
	accepted, refused, refusedByPrimary, rejected, rejectedCorrect int
	// executed counts the tampered envelopes the correct orderers
	// executed, by result.
	executed map[cb.Status]int
}

func (f *simForge) summary() string {
	if f.by < 0 {
		return "no forging orderer"
	}
	return fmt.Sprintf("orderer %d forged %d envelopes, proposed %d times; correct orderers refused them %d times on arrival (%d as primary), %d in a faulty primary's pre-prepares, %d in a correct one's; accepted %d, executed %v",
		f.by, len(f.envs), f.proposed, f.refused, f.refusedByPrimary, f.rejected, f.rejectedCorrect, f.accepted, f.executed)
}

// forgeBy makes orderer i the forging orderer.
func forgeBy(i int) func(c *simCluster) {
	return func(c *simCluster) {
		c.forge.by = i
		c.net.MakeByzantine(bft.ReplicaID(i), c.countProposed)
	}
}

// countProposed counts the forging orderer's pre-prepares to correct
// orderers holding a tampered envelope; it sends everything unchanged.
func (c *simCluster) countProposed(_ *simnet.Adversary, e bft.Envelope) []bft.Envelope {
	if pp, ok := e.Msg.(*bft.PrePrepare); ok && !e.To.Client && !c.net.Faulty[e.To.ID] {
		for _, r := range pp.Batch {
			if c.forge.ops[string(r.Op)] {
				c.forge.proposed++
				break
			}
		}
	}
	return []bft.Envelope{e}
}

// forgeTick: while the links are faulty, every simForgeEvery ticks the
// forging orderer orders an envelope signed by a certificate of the
// channel's CA, its signature then altered, through its client: a
// request with a valid authenticator sent to every orderer, once. Each is
// flagged Restart, so that a primary may propose it whatever became of
// the one before (a client's requests are otherwise proposed in
// timestamp order, each after its predecessor, which for these never
// executes or was lost).
func forgeTick(c *simCluster) {
	if c.net.Now >= simFaultTicks || c.net.Now%simForgeEvery != 0 {
		return
	}
	e := c.tampered(fmt.Appendf(nil, "tampered at tick %d", c.net.Now))
	raw, err := proto.Marshal(e)
	if err != nil {
		c.t.Fatal(err)
	}
	op := order.EnvelopeOp(raw)
	c.forge.envs, c.forge.ops[string(op)] = append(c.forge.envs, e), true
	c.forge.ts++
	r := &bft.Request{Client: simForgeClient, Timestamp: c.forge.ts, Restart: true, Op: op}
	c.net.SignRequest(r)
	for i := range simN {
		c.net.Send(bft.ToClient(simForgeClient), bft.Envelope{To: bft.ToReplica(bft.ReplicaID(i)), Msg: r})
	}
}

// tampered returns an envelope holding data, signed by the forging
// orderer's identity of the channel's CA, with its signature's R increased by one:
// a well-formed, low-S ECDSA signature that does not verify. Only the
// signature check refuses it: its creator is authorized.
func (c *simCluster) tampered(data []byte) *cb.Envelope {
	t := c.t
	if c.forge.signer == nil {
		s, err := c.ca.Issue(fmt.Sprintf("orderer%d", c.forge.by), "Org1MSP")
		if err != nil {
			t.Fatal(err)
		}
		c.forge.signer = s
	}
	e, err := c.forge.signer.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, data)
	if err != nil {
		t.Fatal(err)
	}
	var sig struct{ R, S *big.Int }
	if _, err := asn1.Unmarshal(e.Signature, &sig); err != nil {
		t.Fatal(err)
	}
	sig.R.Add(sig.R, big.NewInt(1))
	if e.Signature, err = asn1.Marshal(sig); err != nil {
		t.Fatal(err)
	}
	p, err := envelope.ParseEnvelope(e, channel)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := envelope.NewPolicy(c.ca.PEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := pol.CheckCreator(p, c.net.Clock(c.forge.by)); err != nil {
		t.Fatalf("the tampered envelope's creator: %v", err)
	}
	if err := pol.CheckSignature(p); err == nil {
		t.Fatal("the tampered envelope's signature verifies")
	}
	return e
}

// checkForgedNowhere: the forging orderer did order tampered envelopes;
// none executed at a correct orderer, so none was answered (checkCommon
// asserts that none is in a correct orderer's final blocks), and no
// correct orderer found one valid.
func checkForgedNowhere(t *testing.T, c *simCluster) {
	f := &c.forge
	if len(f.envs) == 0 {
		t.Fatal("the forging orderer forged no envelope")
	}
	if len(f.executed) > 0 {
		t.Fatalf("correct orderers executed tampered envelopes: %s", f.summary())
	}
	if f.accepted > 0 {
		t.Fatalf("correct orderers found tampered envelopes valid: %s", f.summary())
	}
}

// checkForgingPrimary: checkForgedNowhere; the forging primary proposed
// tampered envelopes, correct backups rejected its pre-prepares for
// them, and a view change replaced it; correct backups took envelopes of
// the writers unchecked, relayed by other orderers than the one that
// proposed them.
func checkForgingPrimary(t *testing.T, c *simCluster) {
	checkForgedNowhere(t, c)
	f := &c.forge
	if f.proposed == 0 || f.rejected == 0 {
		t.Fatalf("no pre-prepare of the forging primary with a tampered envelope was rejected: %s", f.summary())
	}
	if f.rejectedCorrect > 0 {
		t.Fatalf("a correct primary proposed a tampered envelope: %s", f.summary())
	}
	for _, i := range c.correct() {
		if v := c.net.Replicas[i].Status().View; v == 0 {
			t.Fatalf("orderer %d is still in view 0: the forging primary was not replaced", i)
		}
	}
	if c.skipped == 0 {
		t.Fatal("no correct backup took an envelope unchecked")
	}
}

// checkForgingBackup: checkForgedNowhere; the correct primaries refused
// the tampered envelopes on arrival and proposed none, and no correct
// orderer held one (accepted is 0), so none waited for a view change at a
// correct orderer.
func checkForgingBackup(t *testing.T, c *simCluster) {
	checkForgedNowhere(t, c)
	f := &c.forge
	if f.refusedByPrimary == 0 {
		t.Fatalf("no correct primary refused a tampered envelope: %s", f.summary())
	}
	if f.rejectedCorrect > 0 {
		t.Fatalf("a correct primary proposed a tampered envelope: %s", f.summary())
	}
}
