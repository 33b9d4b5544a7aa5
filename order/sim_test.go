package order_test

import (
	"bytes"
	"crypto/ed25519"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/internal/simnet"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/envelope"
	"github.com/rubin-go/rubin/order/ordertest"
)

// Seeded simulations of Byzantine orderers: four replicas of the ordering
// service on internal/simnet, with lossy, delaying, duplicating and
// reordering links, Byzantine behaviours of one orderer, and every
// replica's Duties done on the simulated clock. Each family (TestSim) runs
// fixed seeds plus -order.fresh fresh ones drawn from the clock and
// logged. A run is a function of its seed: the keys, certificates and
// envelopes too come from it (testing/cryptotest, and testing/synctest's
// clock for their times). A failure prints the command that replays it,
// e.g.
//
//	go test ./order -run 'TestSim/^CensoringPrimary$' -count=1 -v -order.seed=123
var (
	simSeed  = flag.Uint64("order.seed", 0, "run only this seed in each TestSim family selected by -run (0: the fixed seeds plus -order.fresh fresh ones)")
	simFresh = flag.Int("order.fresh", 1, "fresh clock-drawn seeds per TestSim family, besides the fixed ones")
)

const (
	simN         = 4  // orderers
	simF         = 1  // faulty orderers tolerated
	simEnvelopes = 10 // envelopes of each writer
	simWindow    = 4  // requests each simulated client keeps in flight
	// simFaultTicks is how long the links are faulty; the writers
	// broadcast meanwhile.
	simFaultTicks = 300
	// simBound: every envelope of a correct writer is in a final block
	// at f+1 correct orderers within this many ticks of its broadcast,
	// or of the healing of the links if it was broadcast before.
	simBound = 1000
	// simPoll: a delivery client asks an orderer for blocks every
	// simPoll ticks.
	simPoll = 3
	// simFinality is the orderers' FinalityTimeout: 100 ticks.
	simFinality = 100 * simnet.TickDuration
)

// simFamily is a Byzantine behaviour of one orderer, run over many seeds.
type simFamily struct {
	name  string
	seeds []uint64
	// block is orderer i's block cutting.
	block func(i int) block.Config
	// setup makes one orderer Byzantine.
	setup func(c *simCluster)
	// tick, if set, runs every tick before the network's.
	tick func(c *simCluster)
	// done, if set, must also hold for the run to end.
	done func(c *simCluster) bool
	// check asserts what the family shows, after the common checks.
	check func(t *testing.T, c *simCluster)
}

// TestSim runs the Byzantine simnet families of the ordering service: two
// correct writers and a forger broadcast while the links are faulty,
// then the links heal, and the cluster goes quiet. A writer
// stands for a correct orderer relaying its clients' envelopes: the
// Apps' OrdererOf names that orderer behind the writer's client
// identity (assignRelays), so a backup takes the writer's envelope in a
// pre-prepare of another orderer unchecked, as order.App.Valid does. Every run
// asserts, besides the simnet Checker's safety of the core: the
// correct orderers' final blocks are the same bytes (a correct orderer
// may hold fewer: one left behind alone in a view of its own on a quiet
// cluster waits for the next view change or checkpoint), a chain by Fabric's
// hash rules, each block signed by 2f+1 orderers; every envelope of the
// correct writers is in it exactly once, at f+1 correct orderers (what
// the core's liveness promises: 2f+1 replicas execute) within simBound
// ticks, and answered SUCCESS; no envelope of a forger (a certificate
// from a CA the channel does not name) ever is, each answered
// FORBIDDEN; nor is any tampered envelope of a forging orderer
// (simForge).
func TestSim(t *testing.T) {
	twoPerBlock := func(int) block.Config {
		return block.Config{MaxMessageCount: 2, BatchTimeout: 100 * time.Millisecond}
	}
	fams := []simFamily{
		// The primary of view 0, orderer 0, drops every request that
		// carries an envelope of one writer, from the writer or
		// forwarded by a backup, and orders the other writers'. The
		// backups time the censored requests, replace it, and the
		// censored envelopes are ordered, each once.
		{name: "CensoringPrimary", seeds: []uint64{1, 2, 3}, block: twoPerBlock,
			setup: censor, check: checkCensored},
		// An orderer the seed picks, the liar, serves a delivery client,
		// and the correct orderers catching up on blocks they missed
		// (lies included), blocks it altered,
		// forged, reordered, replayed or stripped of a signature, or
		// none; it also orders forged envelopes, forged block signatures
		// and early cuts through its client, and forges some of its
		// consensus messages. The client and the orderers take only
		// blocks that follow by Fabric's hash rules and carry 2f+1 valid
		// signatures, and get the correct chain from the others.
		{name: "LyingOrderer", seeds: []uint64{11, 12, 13}, block: twoPerBlock,
			setup: lie, tick: lieTick, done: deliveredAll, check: checkLies},
		// Orderer miscut cuts blocks of three envelopes where the others
		// cut two, with a longer timeout, and signs and asks timeout
		// cuts for its blocks; its links lose nothing, so that it keeps
		// up and cuts blocks of its own rather than taking the others'
		// state by transfer. Its signatures of other headers count for
		// nothing, so no block is final with its header, and the correct
		// orderers' chain goes on without it: every block needs all three
		// correct orderers' signatures, so one of them left alone in a
		// view of its own signs nothing until the others' Duties find
		// the view stalled (Duties.Stalled) and change view to it.
		{name: "MiscuttingOrderer", seeds: []uint64{21, 22, 23},
			block: func(i int) block.Config {
				bc := twoPerBlock(i)
				if i == miscut {
					bc.MaxMessageCount, bc.BatchTimeout = 3, 3*bc.BatchTimeout
				}
				return bc
			},
			setup: func(c *simCluster) {
				c.net.MakeByzantine(miscut)
				c.lossless = miscut
			},
			check: checkMiscut},
		// The primary of view 0, orderer 0, finds every op valid and
		// orders, through its own client, envelopes of an identity of
		// the channel's CA whose signature was tampered with: it
		// proposes them. The correct backups check the signature of
		// an envelope the proposing primary relayed, reject its
		// pre-prepares, and replace it; no tampered envelope is ever
		// in a block.
		{name: "ForgingPrimary", seeds: []uint64{31, 32, 33}, block: twoPerBlock,
			setup: forgeBy(0), tick: forgeTick, check: checkForgingPrimary},
		// Orderer 2, a backup in view 0, does the same: the correct
		// primaries refuse its tampered envelopes on arrival and
		// propose none, no correct orderer holds one (so none waits
		// for a view change), and none is ever in a block. (Should a
		// view change make orderer 2 primary, it proposes those it
		// holds, as in ForgingPrimary.)
		{name: "ForgingBackup", seeds: []uint64{41, 42, 43}, block: twoPerBlock,
			setup: forgeBy(2), tick: forgeTick, check: checkForgingBackup},
	}
	for _, fam := range fams {
		t.Run(fam.name, func(t *testing.T) {
			seeds := simnet.Seeds(fam.seeds, *simSeed, *simFresh, func(s uint64) {
				t.Logf("fresh seed %d: reproduce with: %s", s, simReproduce(fam.name, s))
			})
			for _, seed := range seeds {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					// cryptotest's source is the process's: the seeds of
					// a family run one after another.
					synctest.Test(t, func(t *testing.T) { runSim(t, fam, seed) })
				})
			}
		})
	}
}

func simReproduce(fam string, seed uint64) string {
	return fmt.Sprintf("go test ./order -run 'TestSim/^%s$' -count=1 -v -order.seed=%d", fam, seed)
}

// simWriter is a client of the channel broadcasting its envelopes through
// one simulated client identity.
type simWriter struct {
	client int // index in Net.Clients
	signer *ordertest.Signer
	forger bool // its certificate is from a CA the channel does not name
	envs   []*cb.Envelope
	raws   [][]byte
	sent   []uint64          // the tick each envelope was broadcast
	byTS   map[uint64]int    // request timestamp -> envelope
	status map[int]cb.Status // the result each envelope got
}

// simDuty is what orderer i's duties ordered and have yet to order.
type simDuty struct {
	queue   [][]byte
	asked   uint64 // the block a timeout cut was last asked for
	askedAt time.Time
	ops     map[uint64][]byte // request timestamp -> op
	next    uint64            // the next block to cut, as the App last said
	signed  []*cb.BlockHeader // the headers it signed
}

// simCluster is four orderers on a simulated network: client i (ID i+1)
// is orderer i's, through which its duties order signatures and cuts;
// the writers' clients follow.
type simCluster struct {
	t       *testing.T
	fam     simFamily
	seed    uint64
	net     *simnet.Net
	rng     *rand.Rand
	keys    []ed25519.PrivateKey
	pubs    []ed25519.PublicKey
	stores  []*order.MemStore
	writers []*simWriter // writers[0] and [1] are correct, [2] a forger
	duty    []simDuty
	results []int // results of each client handled
	healed  uint64
	// finalAt[w][k] is the tick writer w's envelope k was final at f+1
	// correct orderers (0: not yet).
	finalAt [][]uint64
	where   map[string][2]int // raw envelope -> (writer, index)
	inChain []map[string]int  // per orderer: raw envelope -> times final
	scanned []uint64          // per orderer: the final blocks scan looked at
	catchUp []*simDeliverer   // per orderer, for the blocks it misses
	liar    int               // the orderer that lies in deliveries, -1 if none
	lieRng  *rand.Rand        // the liar's choices
	evil    *ordertest.Signer
	lies    map[string]int // lies served, by kind
	told    int            // requests the liar answered
	// lossless is an orderer whose links lose no packet, -1 if none.
	lossless  int
	suspected int           // times a correct orderer's Duties found the view stalled
	client    *simDeliverer // the LyingOrderer family's delivery client
	got       [][]byte      // the blocks it took, encoded
	prevGot   *cb.BlockHeader
	forgedBy  []*cb.Envelope // envelopes the liar ordered directly
	// evilCA is the CA of the forger, which the channel does not name.
	evilCA *ordertest.CA
	censor struct {
		dropped int
		seen    map[string]bool // op -> censored
	}
	// ca is the channel's CA.
	ca *ordertest.CA
	// relay[w] is the orderer that relays writer w's envelopes: its
	// client identity is the writer's to OrdererOf (ordererOf).
	relay []int
	// skipped counts the envelopes a correct backup found valid in a
	// pre-prepare without checking them, relayed by an orderer other
	// than the primary that proposed them.
	skipped int
	forge   simForge
}

func runSim(t *testing.T, fam simFamily, seed uint64) {
	cryptotest.SetGlobalRandom(t, seed)
	c := &simCluster{t: t, fam: fam, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x0de5)), liar: -1, lossless: -1, lies: map[string]int{}, where: map[string][2]int{}}
	c.forge.by, c.forge.ops, c.forge.executed = -1, map[string]bool{}, map[cb.Status]int{}
	defer func() {
		if t.Failed() {
			t.Logf("reproduce: %s", simReproduce(fam.name, seed))
		}
	}()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\n%s", fmt.Sprintf(format, args...), c.net.Report())
	}
	ca, err := ordertest.NewCA("Org1")
	if err != nil {
		t.Fatal(err)
	}
	evil, err := ordertest.NewCA("Evil")
	if err != nil {
		t.Fatal(err)
	}
	writers, err := envelope.NewPolicy(ca.PEM)
	if err != nil {
		t.Fatal(err)
	}
	for range simN {
		pub, priv, err := ed25519.GenerateKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		c.keys, c.pubs = append(c.keys, priv), append(c.pubs, pub)
	}
	for w, from := range []*ordertest.CA{ca, ca, evil} {
		s, err := from.Issue(fmt.Sprintf("writer%d", w), "Org1MSP")
		if err != nil {
			t.Fatal(err)
		}
		wr := &simWriter{client: simN + w, signer: s, forger: from == evil, byTS: map[uint64]int{}, status: map[int]cb.Status{}}
		for k := range simEnvelopes {
			e, err := s.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, channel, fmt.Appendf(nil, "writer %d envelope %d", w, k))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := proto.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			wr.envs, wr.raws = append(wr.envs, e), append(wr.raws, raw)
			c.where[string(raw)] = [2]int{w, k}
		}
		c.writers = append(c.writers, wr)
		c.finalAt = append(c.finalAt, make([]uint64, simEnvelopes))
	}
	c.evilCA, c.ca = evil, ca
	c.stores = make([]*order.MemStore, simN)
	c.net, err = simnet.New(simnet.Options{
		N: simN, Clients: simN + len(c.writers), Seed: seed, Codec: true,
		Epoch: time.Now(), // synctest's: the certificates' time
		Config: func(cfg *bft.Config) {
			// Checkpoints, log truncation and state transfer, with the
			// catch-up of the blocks a transfer skipped, happen in runs.
			cfg.CheckpointInterval, cfg.WatermarkWindow = 16, 32
		},
		ClientConfig: func(cc *bft.ClientConfig) { cc.Window = simWindow },
		NewApp: func(i int) bft.App {
			c.stores[i] = new(order.MemStore)
			a, err := order.New(order.Config{Channel: channel, Writers: writers, Block: fam.block(i), Orderers: c.pubs, F: simF,
				Self: uint32(i), Chain: order.NewChain(c.stores[i]), OrdererOf: c.ordererOf, FinalityTimeout: simFinality})
			if err != nil {
				t.Fatal(err)
			}
			return &simApp{App: a, c: c, self: i}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.results = make([]int, len(c.net.Clients))
	c.duty = make([]simDuty, simN)
	for i := range c.duty {
		c.duty[i] = simDuty{asked: ^uint64(0), ops: map[uint64][]byte{}}
	}
	c.inChain = make([]map[string]int, simN)
	c.scanned = make([]uint64, simN)
	for i := range simN {
		c.inChain[i] = map[string]int{}
		c.catchUp = append(c.catchUp, &simDeliverer{c: c, self: i, next: (i + 1) % simN})
	}
	fam.setup(c)
	c.assignRelays()

	n := c.net
	n.DropRate = 0.02 + 0.08*c.rng.Float64()
	if c.lossless >= 0 {
		// Its links lose nothing: it keeps up, so it executes (and cuts)
		// what the others do rather than catching up by state transfer.
		drops, rate := rand.New(rand.NewPCG(seed, 0xd0)), n.DropRate
		n.DropRate = 0
		n.Drop = func(from, to bft.Target, _ bft.Message) bool {
			for _, end := range []bft.Target{from, to} {
				if !end.Client && int(end.ID) == c.lossless {
					return false
				}
			}
			return drops.Float64() < rate
		}
	}
	n.DupRate = 0.05 * c.rng.Float64()
	n.MaxDelay = 1 + c.rng.IntN(4)
	n.Reorder = true
	rate := 0.03 + 0.03*c.rng.Float64() // each writer's chance to broadcast per tick
	c.healed = ^uint64(0)
	for {
		if n.Now == simFaultTicks {
			n.Heal()
			c.healed = n.Now
		}
		if n.Now >= simFaultTicks && c.done() {
			break
		}
		if n.Now > simFaultTicks+simBound+200 {
			fail("not done %d ticks after the links healed: %s (%v)", n.Now-c.healed, c.progress(), n.CheckAgreement())
		}
		for _, w := range c.writers {
			switch {
			case n.Now == 0: // a burst first: blocks cut by count
				for range simWindow {
					c.broadcast(w)
				}
			case c.rng.Float64() < rate || n.Now >= simFaultTicks:
				c.broadcast(w)
			}
		}
		for i := range simN {
			c.doDuties(i)
		}
		if fam.tick != nil {
			fam.tick(c)
		}
		for i := range simN {
			c.catchUp[i].fill()
		}
		n.Tick()
		c.handleResults()
		c.scan()
		if err := n.Check.Err(); err != nil {
			fail("%v", err)
		}
	}
	if err := n.CheckAgreement(); err != nil {
		fail("%v", err)
	}
	c.checkCommon()
	fam.check(t, c)
	var heights []uint64
	for i := range simN {
		heights = append(heights, c.stores[i].Height())
	}
	t.Logf("seed %d: %d ticks, view %d, final blocks by orderer %v, %d stalls suspected, %d taken unchecked, lies %v, %s, errors %v", seed, n.Now, n.Replicas[c.longest()].Status().View, heights, c.suspected, c.skipped, c.lies, c.forge.summary(), n.Errors)
}

// Client identities: client i (ID i+1) is orderer i's, for its duties;
// client simN+w is writer w's, which stands for the correct orderer
// relay[w] relaying the envelopes of the channel's clients; the forging
// orderer's own client (simForgeClient) is outside Net.Clients.
//
// assignRelays has the writers' envelopes relayed by the correct
// orderers, the primary of view 0 last: the envelopes of writers 0 and 1
// are relayed by other orderers than the one that proposes them in view
// 0, so correct backups take them unchecked there (order.App.Valid).
func (c *simCluster) assignRelays() {
	var relays []int
	for _, i := range c.correct() {
		if i != 0 {
			relays = append(relays, i)
		}
	}
	if !c.net.Faulty[0] {
		relays = append(relays, 0)
	}
	c.relay = nil
	for w := range c.writers {
		c.relay = append(c.relay, relays[w%len(relays)])
	}
}

// ordererOf is order.Config.OrdererOf for the simulated identities.
func (c *simCluster) ordererOf(id bft.ClientID) (bft.ReplicaID, bool) {
	switch k := int(id) - 1; {
	case k >= 0 && k < simN:
		return bft.ReplicaID(k), true
	case k >= simN && k < simN+len(c.relay):
		return bft.ReplicaID(c.relay[k-simN]), true
	case c.forge.by >= 0 && id == simForgeClient:
		return bft.ReplicaID(c.forge.by), true
	}
	return 0, false
}

// app returns orderer i's order.App.
func (c *simCluster) app(i int) *order.App { return c.net.App(i).(*simApp).App }

// simApp is orderer i's App in the simulations: an order.App whose
// Valid and Execute the run watches (see simForge). The forging
// orderer's finds every op valid.
type simApp struct {
	*order.App
	c    *simCluster
	self int
}

func (a *simApp) Valid(ctx bft.ValidContext, op []byte) bool {
	c := a.c
	if a.self == c.forge.by {
		return true
	}
	ok := a.App.Valid(ctx, op)
	if c.net.Faulty[a.self] {
		return ok
	}
	if c.forge.ops[string(op)] {
		f := &c.forge
		switch {
		case ok:
			f.accepted++
		case !ctx.Proposed:
			f.refused++
			if c.net.Replicas[a.self].Status().Primary == bft.ReplicaID(a.self) {
				f.refusedByPrimary++
			}
		case c.net.Faulty[ctx.Proposer]:
			f.rejected++
		default:
			f.rejectedCorrect++
		}
	}
	if _, env := bytes.CutPrefix(op, order.EnvelopeOp(nil)); env && ok && ctx.Proposed {
		if k, known := c.ordererOf(ctx.Client); known && k != ctx.Proposer {
			c.skipped++
		}
	}
	return ok
}

func (a *simApp) Execute(ctx bft.ExecContext, op []byte) []byte {
	r := a.App.Execute(ctx, op)
	if c := a.c; c.forge.ops[string(op)] && !c.net.Faulty[a.self] {
		res, err := order.ParseResult(r)
		if err != nil {
			c.t.Fatal(err)
		}
		c.forge.executed[res.Status]++
	}
	return r
}

// longest returns the correct orderer that holds the most final blocks.
func (c *simCluster) longest() int {
	best := c.correct()[0]
	for _, i := range c.correct() {
		if c.stores[i].Height() > c.stores[best].Height() {
			best = i
		}
	}
	return best
}

// correct returns the correct orderers.
func (c *simCluster) correct() []int {
	var out []int
	for i := range simN {
		if !c.net.Faulty[i] {
			out = append(out, i)
		}
	}
	return out
}

// broadcast has w send its next envelope, if its window has room.
func (c *simCluster) broadcast(w *simWriter) {
	cl := c.net.Clients[w.client]
	k := len(w.sent)
	if k >= len(w.raws) || cl.InFlight() >= simWindow {
		return
	}
	ts, err := cl.Propose(order.EnvelopeOp(w.raws[k]))
	if err != nil {
		c.t.Fatal(err)
	}
	w.byTS[ts] = k
	w.sent = append(w.sent, c.net.Now)
}

// doDuties does orderer i's duties as Duties.Run does, on the simulated
// clock: it signs every block its App cut, asks for a timeout cut when
// BatchTimeout passed by its clock since the first pending envelope was
// ordered (again only after another BatchTimeout), and orders those ops
// through its client as its window allows.
func (c *simCluster) doDuties(i int) {
	d := &c.duty[i]
	headers, next, since, timeout := c.app(i).Duties().Take()
	for _, h := range headers {
		d.queue = append(d.queue, order.SignOp(uint32(i), h.Number, order.SignHeader(c.keys[i], uint32(i), h)))
		d.signed = append(d.signed, h)
	}
	d.next = next
	now := c.net.Clock(i)
	if c.app(i).Duties().Stalled(now) {
		c.suspected++
		c.net.Replicas[i].Suspect()
	}
	if !since.IsZero() && now.Sub(since) >= timeout && (d.asked != next || now.Sub(d.askedAt) >= timeout) {
		d.asked, d.askedAt = next, now
		d.queue = append(d.queue, order.CutOp(next))
	}
	c.order(i, &d.queue)
}

// order proposes the ops of queue through orderer i's client as its
// window allows.
func (c *simCluster) order(i int, queue *[][]byte) {
	cl := c.net.Clients[i]
	for len(*queue) > 0 && cl.InFlight() < simWindow {
		ts, err := cl.Propose((*queue)[0])
		if err != nil {
			c.t.Fatal(err)
		}
		c.duty[i].ops[ts] = (*queue)[0]
		*queue = (*queue)[1:]
	}
}

// handleResults takes the results the clients accepted since the last
// tick.
func (c *simCluster) handleResults() {
	for ci, rs := range c.net.Results {
		for _, r := range rs[c.results[ci]:] {
			res, err := order.ParseResult(r.Result)
			if err != nil {
				c.t.Fatalf("client %d: %v", ci+1, err)
			}
			if ci < simN {
				continue
			}
			w := c.writers[ci-simN]
			w.status[w.byTS[r.Timestamp]] = res.Status
		}
		c.results[ci] = len(rs)
	}
}

// scan looks at the blocks the correct orderers made final since the last
// tick, and notes when each writer's envelope is final at f+1 of them.
func (c *simCluster) scan() {
	correct := c.correct()
	for _, i := range correct {
		s := c.stores[i]
		for ; c.scanned[i] < s.Height(); c.scanned[i]++ {
			for _, d := range decode(c.t, s, c.scanned[i]).GetData().GetData() {
				c.inChain[i][string(d)]++
				wk, ok := c.where[string(d)]
				if !ok || c.finalAt[wk[0]][wk[1]] != 0 {
					continue
				}
				holders := 0
				for _, j := range correct {
					if c.inChain[j][string(d)] > 0 {
						holders++
					}
				}
				if holders >= simF+1 {
					c.finalAt[wk[0]][wk[1]] = c.net.Now
				}
			}
		}
	}
}

// done reports whether every writer broadcast everything and had every
// answer, every correct writer's envelope is final at f+1 correct
// orderers, and the family's own condition holds.
func (c *simCluster) done() bool {
	for w, wr := range c.writers {
		if len(wr.status) < len(wr.raws) {
			return false
		}
		for _, at := range c.finalAt[w] {
			if at == 0 && !wr.forger {
				return false
			}
		}
	}
	return c.fam.done == nil || c.fam.done(c)
}

func (c *simCluster) progress() string {
	s := ""
	for w, wr := range c.writers {
		final := 0
		for _, at := range c.finalAt[w] {
			if at != 0 {
				final++
			}
		}
		s += fmt.Sprintf("writer %d: %d sent, %d answered, %d final; ", w, len(wr.sent), len(wr.status), final)
	}
	for i := range simN {
		from, to, _ := c.app(i).Chain().Missing()
		st := c.net.Replicas[i].Status()
		s += fmt.Sprintf("orderer %d: %d blocks, missing [%d, %d), view %d, executed %d; ", i, c.stores[i].Height(), from, to, st.View, st.LastExecuted)
	}
	return s
}

// checkCommon asserts what every family must show (see TestSim).
func (c *simCluster) checkCommon() {
	t := c.t
	t.Helper()
	ref := c.stores[c.longest()]
	for _, i := range c.correct() {
		s := c.stores[i]
		for n := range s.Height() {
			a, _ := s.Block(n)
			b, _ := ref.Block(n)
			if !bytes.Equal(a, b) {
				t.Fatalf("orderer %d's final block %d differs from orderer %d's", i, n, c.longest())
			}
		}
	}
	chain := c.chain(c.longest())
	if err := ordertest.CheckChain(0, chain); err != nil {
		t.Fatal(err)
	}
	keys := make([][]byte, simN)
	for i, k := range c.pubs {
		keys[i] = k
	}
	for _, b := range chain {
		if err := ordertest.CheckSignatures(b, keys, 2*simF+1); err != nil {
			t.Fatal(err)
		}
		// Every signature the block holds is valid, each of another
		// orderer: none over another header was counted.
		if sigs := len(sigMetadata(t, b).Signatures); sigs != 2*simF+1 {
			t.Fatalf("block %d holds %d signatures, want %d", b.Header.Number, sigs, 2*simF+1)
		}
	}
	var accepted, refused []*cb.Envelope
	for w, wr := range c.writers {
		want := cb.Status_SUCCESS
		if wr.forger {
			want = cb.Status_FORBIDDEN
			refused = append(refused, wr.envs...)
		} else {
			accepted = append(accepted, wr.envs...)
		}
		for k, at := range c.finalAt[w] {
			if st := wr.status[k]; st != want {
				t.Errorf("writer %d's envelope %d was answered %v, want %v", w, k, st, want)
			}
			if wr.forger {
				continue
			}
			if from := max(wr.sent[k], c.healed); at > from+simBound {
				t.Errorf("writer %d's envelope %d, broadcast at tick %d, was final at f+1 correct orderers only at tick %d", w, k, wr.sent[k], at)
			}
		}
	}
	refused = append(refused, c.forgedBy...)
	for k, e := range c.forge.envs {
		raw, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range c.correct() {
			if c.inChain[i][string(raw)] > 0 {
				t.Fatalf("orderer %d's tampered envelope %d is in a final block of orderer %d: %s", c.forge.by, k, i, c.forge.summary())
			}
		}
		refused = append(refused, e)
	}
	if err := ordertest.CheckDelivered([][]*cb.Block{chain}, accepted, refused); err != nil {
		t.Fatal(err)
	}
}

// chain returns orderer i's final blocks.
func (c *simCluster) chain(i int) []*cb.Block {
	var out []*cb.Block
	for n := range c.stores[i].Height() {
		out = append(out, decode(c.t, c.stores[i], n))
	}
	return out
}

func decode(t *testing.T, s *order.MemStore, n uint64) *cb.Block {
	t.Helper()
	raw, err := s.Block(n)
	if err != nil {
		t.Fatal(err)
	}
	b := new(cb.Block)
	if err := proto.Unmarshal(raw, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// censor makes orderer 0, the primary of view 0, drop every request that
// orders an envelope of writer 0 (by its creator), whoever sends it.
func censor(c *simCluster) {
	c.censor.seen = map[string]bool{}
	creator := c.writers[0].signer.Creator()
	a := c.net.MakeByzantine(0)
	a.Ignore = func(p simnet.Packet) bool {
		r, ok := p.Msg.(*bft.Request)
		if !ok {
			return false
		}
		censored, ok := c.censor.seen[string(r.Op)]
		if !ok {
			if env, isEnv := bytes.CutPrefix(r.Op, order.EnvelopeOp(nil)); isEnv {
				p, err := envelope.Parse(env, channel)
				censored = err == nil && bytes.Equal(p.SignatureHeader.GetCreator(), creator)
			}
			c.censor.seen[string(r.Op)] = censored
		}
		if censored {
			c.censor.dropped++
		}
		return censored
	}
}

// checkCensored: the censoring primary did drop requests, and no correct
// orderer is still in view 0.
func checkCensored(t *testing.T, c *simCluster) {
	if c.censor.dropped == 0 {
		t.Fatal("the primary dropped no request of the censored writer")
	}
	for _, i := range c.correct() {
		if v := c.net.Replicas[i].Status().View; v == 0 {
			t.Fatalf("orderer %d is still in view 0: the censoring primary was not replaced", i)
		}
	}
}

// miscut is the orderer that cuts differently.
const miscut = 3

// checkMiscut: the miscutting orderer did sign headers of its own, yet
// every block final anywhere is the correct orderers' cut.
func checkMiscut(t *testing.T, c *simCluster) {
	ref := c.stores[c.longest()]
	other := 0
	for _, h := range c.duty[miscut].signed {
		if h.Number < ref.Height() && !proto.Equal(h, decode(t, ref, h.Number).Header) {
			other++
		}
	}
	if other == 0 {
		t.Fatalf("the miscutting orderer signed %d headers, none of a block the correct orderers cut otherwise", len(c.duty[miscut].signed))
	}
	// Not even the miscutting orderer has a block final that the correct
	// orderers cut otherwise: only they sign their headers. (Its
	// signatures may be others: it took those of the ordered ones that
	// were for a block it had cut.)
	for n := range min(c.stores[miscut].Height(), ref.Height()) {
		mine, theirs := decode(t, c.stores[miscut], n), decode(t, ref, n)
		if !proto.Equal(mine.Header, theirs.Header) || !proto.Equal(mine.Data, theirs.Data) {
			t.Fatalf("the miscutting orderer made block %d final, not as the correct orderers cut it", n)
		}
	}
	if c.stores[miscut].Height() > ref.Height() {
		t.Fatalf("the miscutting orderer made %d blocks final, the correct orderers %d", c.stores[miscut].Height(), ref.Height())
	}
	for _, b := range c.chain(c.longest()) {
		if len(b.Data.Data) > 2 {
			t.Fatalf("block %d holds %d envelopes: not the correct orderers' cut", b.Header.Number, len(b.Data.Data))
		}
	}
}

// verifyBlock is what client.Deliverer checks of block number, given
// the header of the block before (nil for block 0), with the exported
// pieces: Fabric's hash rules (block.Check) and 2f+1 valid signatures
// (order.VerifySignatures).
func verifyBlock(b *cb.Block, number uint64, prev *cb.BlockHeader, keys []ed25519.PublicKey) error {
	if h := b.GetHeader(); h == nil || h.Number != number {
		return fmt.Errorf("block %d numbered %d", number, b.GetHeader().GetNumber())
	}
	if err := block.Check(prev, b); err != nil {
		return err
	}
	return order.VerifySignatures(b, keys, 2*simF+1)
}

// simDeliverer reads blocks as client.Deliverer does, in simulated time:
// from one orderer at a time, taking a block only if verifyBlock accepts
// it, and leaving the orderer for the next when it serves one that does
// not verify, or nothing.
type simDeliverer struct {
	c    *simCluster
	self int // the orderer it fetches for, -1 for a client
	next int // the orderer it asks
	// rejected counts the blocks refused.
	rejected int
}

// ask asks orderer d.next once for blocks from want on; take takes each
// verified block (given the header before) and reports whether to go on.
// It returns whether it took a block.
func (d *simDeliverer) ask(want uint64, prev *cb.BlockHeader, take func(b *cb.Block, raw []byte) bool) bool {
	i := d.next
	if i == d.self {
		i = (i + 1) % simN
	}
	took := false
	for _, b := range d.c.serve(i, want) {
		if err := verifyBlock(b, want, prev, d.c.pubs); err != nil {
			d.rejected++
			break
		}
		raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(b)
		if err != nil {
			d.c.t.Fatal(err)
		}
		if !take(b, raw) {
			return true
		}
		took, want, prev = true, want+1, b.Header
	}
	if !took {
		d.next = (i + 1) % simN
	}
	return took
}

// fill closes orderer d.self's gaps (order.Chain.Missing) with blocks
// from the others, as an orderer's catch-up does.
func (d *simDeliverer) fill() {
	chain := d.c.app(d.self).Chain()
	from, to, _ := chain.Missing()
	if from >= to {
		return
	}
	var prev *cb.BlockHeader
	if from > 0 {
		prev = decode(d.c.t, d.c.stores[d.self], from-1).Header
	}
	d.ask(from, prev, func(b *cb.Block, raw []byte) bool {
		n := b.Header.Number
		if n >= to {
			return false
		}
		if err := chain.Fill(n, raw, func(prev *cb.BlockHeader) error { return verifyBlock(b, n, prev, d.c.pubs) }); err != nil {
			d.c.t.Fatalf("orderer %d: filling block %d: %v", d.self, n, err)
		}
		return n+1 < to
	})
}

// serve is what orderer i answers a request for blocks from want on: the
// final blocks it holds, or, from the liar, a lie.
func (c *simCluster) serve(i int, want uint64) []*cb.Block {
	if i == c.liar {
		return c.lieTo(want)
	}
	var out []*cb.Block
	for n := want; n < c.stores[i].Height(); n++ {
		out = append(out, decode(c.t, c.stores[i], n))
	}
	return out
}
