package bft_test

import (
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
)

// validApp is simnet's App as a Validator that refuses every request of
// client refused, unless it is a Byzantine replica's, which accepts
// everything.
type validApp struct {
	*simnet.App
	refused   bft.ClientID
	byzantine bool
	asked     int
}

func (a *validApp) Valid(ctx bft.ValidContext, _ []byte) bool {
	a.asked++
	return a.byzantine || ctx.Client != a.refused
}

// TestValidatorRefusals: a client whose requests the App refuses floods
// every replica, and the primary of view 0 is Byzantine and proposes
// them with the correct clients' requests. The correct backups refuse
// them when they arrive and reject the primary's pre-prepares that hold
// them; the primary is replaced, no correct replica executes a request
// of that client, and the correct clients' requests all complete.
func TestValidatorRefusals(t *testing.T) {
	const forger = bft.ClientID(4)
	for _, seed := range []uint64{51, 52, 53} {
		apps := make([]*validApp, 4)
		n := newNet(t, simnet.Options{Clients: 3, Seed: seed, Config: simCfg, Codec: true, ExtraClients: 1,
			NewApp: func(i int) bft.App {
				apps[i] = &validApp{App: new(simnet.App), refused: forger, byzantine: i == 0}
				return apps[i]
			}})
		n.MakeByzantine(0)
		n.DropRate, n.MaxDelay, n.Reorder = 0.02, 2, true
		// Every other tick, a request of the forger to every replica,
		// flagged Restart so that the primary may propose each one
		// whatever became of the one before.
		ts := uint64(1 << 20)
		n.OnTick = append(n.OnTick, func() {
			if n.Now%2 != 0 {
				return
			}
			ts++
			r := &bft.Request{Client: forger, Timestamp: ts, Restart: true, Op: []byte("refused")}
			n.SignRequest(r)
			for i := range 4 {
				n.Send(bft.ToClient(forger), bft.Envelope{To: bft.ToReplica(bft.ReplicaID(i)), Msg: r})
			}
		})
		// Two rounds of load, the flood on throughout: the primary's
		// pre-prepares of the flood stall the log, and the log timer
		// replaces it.
		for range 2 {
			if _, err := n.LoadLive(40, liveBound, op); err != nil {
				t.Fatalf("seed %d: %v\n%s", seed, err, n.Report())
			}
		}
		if err := n.CheckAgreement(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if apps[0].asked == 0 {
			t.Fatalf("seed %d: the Byzantine primary was never asked: the flood did not reach it", seed)
		}
		for i, a := range apps[1:] {
			for _, ctx := range a.Contexts {
				if ctx.Client == forger {
					t.Fatalf("seed %d: replica %d executed a request of client %d, which its App refuses (seq %d)", seed, i+1, forger, ctx.Seq)
				}
			}
		}
		for i := 1; i < 4; i++ {
			if v := n.Replicas[i].Status().View; v == 0 {
				t.Errorf("seed %d: replica %d still in view 0 under a primary whose pre-prepares it rejects", seed, i)
			}
		}
		if n.Errors[bft.ErrForged] == 0 {
			t.Errorf("seed %d: no request or pre-prepare was refused", seed)
		}
		t.Logf("seed %d: done by tick %d, %d requests or pre-prepares refused", seed, n.Now, n.Errors[bft.ErrForged])
	}
}
