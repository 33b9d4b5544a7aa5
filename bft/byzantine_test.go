package bft_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/wire"
	"github.com/rubin-go/rubin/internal/simnet"
)

// TestByzantine: randomized schedules with Byzantine replicas (at most f:
// one at n=4, two at n=7) and Byzantine clients, combined with network
// faults. Every schedule asserts safety throughout (the simnet Checker:
// agreement of correct replicas on batches and results, integrity of
// committed requests, clients accept only committed results) and, after
// the network heals with the Byzantine nodes still active, that every
// correct client's requests complete within liveBound ticks. See
// sim_test.go for the seeds and how to reproduce a schedule.
func TestByzantine(t *testing.T) {
	noEvil := func(t *testing.T, n *simnet.Net) {
		t.Helper()
		for i, ex := range n.Executed {
			if n.Faulty[i] {
				continue
			}
			for _, c := range ex {
				for _, r := range c.Batch {
					if string(r.Op) == "evil" {
						t.Fatalf("replica %d executed a forged request at seq %d", i, c.Seq)
					}
				}
			}
		}
	}
	// A batch a liar claimed without its being proposed (see
	// simnet.LieFakePrepared) has at most f claims behind it, so no new
	// view may re-propose it, let alone execute it.
	noFake := func(t *testing.T, n *simnet.Net) {
		t.Helper()
		noEvil(t, n)
		for i, ex := range n.Executed {
			if n.Faulty[i] {
				continue
			}
			for _, c := range ex {
				for _, r := range c.Batch {
					if string(r.Op) == "fake-prepared" {
						t.Fatalf("replica %d executed a batch only liars claimed, at seq %d", i, c.Seq)
					}
				}
			}
		}
	}
	forged := func(t *testing.T, n *simnet.Net) {
		t.Helper()
		noEvil(t, n)
		if n.Errors[bft.ErrForged] == 0 {
			t.Fatalf("no forgery detected: %v", n.Errors)
		}
	}
	runFamilies(t, "TestByzantine", []family{
		// The primary of view 0 (and of every 4th view) sends different
		// batches to different backups for one (view, seq); the backups
		// must never commit both, and the view change replaces it.
		// Pre-prepares are unsigned, so no backup can prove the
		// equivocation to another; none needs to.
		{name: "EquivocatingPrimary", seeds: seedRange(1100, 8), net: allNet,
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(0, simnet.Equivocate()) }},
		// The primary adds requests it proposed before to its new
		// batches (consistently, so they commit): the replicas must skip
		// them, never execute a request twice.
		// 287779409302, a fresh seed once, found replicas resending cached
		// replies under the name of the replica whose state they had
		// fetched, so a client never got f+1 valid replies.
		{name: "ReproposingPrimary", seeds: append(seedRange(1200, 8), 287779409302), net: allNet,
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(0, simnet.Repropose()) }},
		// The same two primaries with clients that keep 4 requests in
		// flight: every client's requests still execute in its order,
		// once.
		{name: "PipelinedEquivocating", window: 4, seeds: seedRange(1250, 6), net: allNet,
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(0, simnet.Equivocate()) },
			check: func(t *testing.T, n *simnet.Net) { checkExecOrder(t, n) }},
		{name: "PipelinedReproposing", window: 4, seeds: seedRange(1260, 6), net: allNet,
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(0, simnet.Repropose()) },
			check: func(t *testing.T, n *simnet.Net) { checkExecOrder(t, n) }},
		// The primary sends nothing while it is primary (a backup
		// otherwise): clients' retransmissions to the backups start the
		// view change.
		{name: "SilentPrimary", seeds: seedRange(1300, 8), net: allNet,
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(0, simnet.Silent(false)) }},
		// The primary ignores one correct client's requests and serves
		// the others: the backups' per-request timers replace it.
		{name: "StarvingPrimary", seeds: seedRange(2300, 8), net: allNet,
			setup: func(n *simnet.Net, _ *rand.Rand) { n.Starve(0, bft.ClientID(len(n.Clients))) }},
		// The primary sends only to f backups: nothing can prepare.
		{name: "PrimaryToFBackups", seeds: seedRange(1400, 8), net: allNet,
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(0, simnet.OnlyToF()) }},
		// A random replica forges (another replica's ID, bad signatures),
		// sends stale-view and out-of-watermark messages, conflicting
		// prepares and commits, bogus checkpoints, and replays old
		// messages, its own and others'.
		{name: "Forger", seeds: seedRange(1500, 8), net: allNet,
			setup: func(n *simnet.Net, rng *rand.Rand) {
				a := n.MakeByzantine(bft.ReplicaID(rng.IntN(n.N)), simnet.Forge(0.4))
				a.Injectors = append(a.Injectors, simnet.Replay(0.5))
			},
			check: forged},
		// Replica 1, the primary of view 1, tells every lie of
		// simnet.Lie in its view changes (unsupported and raised P
		// claims, fake Q claims, none, an uncertified stable
		// checkpoint, far-future views, bad signatures), as new primary
		// in its new views, and in the batches it answers fetches with. Replica 0 is partitioned for
		// a while to force view changes.
		{name: "ViewChangeLiar", seeds: seedRange(1600, 8), net: with(allNet, func(c *chaos) { c.partitionVictim = 0 }),
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(1, simnet.LieInViewChange(), simnet.ForgeBatches()) },
			check: noEvil},
		// Lies about the claims of view changes, one family per lie (see
		// simnet.Lie), each with replica 1, the primary of view 1, lying
		// and replica 0 partitioned for a while to force view changes.
		// A P claim (and a matching Q claim) of the highest view for a
		// batch of a colluding client that nobody proposed, which the
		// liar serves to whoever fetches it: no new view may choose it
		// (A2: f+1 view changes must claim to have accepted it).
		{name: "FakePrepared", seeds: seedRange(2400, 8), net: with(allNet, func(c *chaos) { c.partitionVictim = 0 }),
			setup: func(n *simnet.Net, _ *rand.Rand) {
				a := n.MakeByzantine(1, simnet.Lies(simnet.LieFakePrepared))
				a.Injectors = append(a.Injectors, simnet.ServeFakes())
			},
			check: noFake},
		// Every batch the liar accepted claimed prepared in the highest
		// view: real batches, so they may be chosen, and that is safe.
		{name: "RaisedPrepared", seeds: seedRange(2410, 8), net: with(allNet, func(c *chaos) { c.partitionVictim = 0 }),
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(1, simnet.Lies(simnet.LieRaisedPrepared)) },
			check: noEvil},
		// Q claims for batches nobody proposed, crowding out the liar's
		// real ones.
		{name: "FakeAccepted", seeds: seedRange(2420, 8), net: with(allNet, func(c *chaos) { c.partitionVictim = 0 }),
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(1, simnet.Lies(simnet.LieFakeAccepted)) },
			check: noEvil},
		// No claims at all, P or Q, from a laggard's companion that votes
		// for whatever it hears: the correct replicas' claims alone keep
		// what committed (as LaggardAndLiar, which omits only P claims).
		{name: "OmittedClaims", seeds: seedRange(2430, 8), net: with(allNet, func(c *chaos) { c.lag = true }),
			setup: func(n *simnet.Net, rng *rand.Rand) {
				a := n.MakeByzantine(bft.ReplicaID(rng.IntN(n.N)), simnet.OmitClaims(), simnet.Silent(false), simnet.ForgeBatches())
				a.Injectors = append(a.Injectors, simnet.Accomplice())
			},
			check: noEvil},
		// As new primary, new views whose view changes do not decide a
		// slot (its own view change rewritten with an unsupported P
		// claim, or a quorum of the others that leaves a slot open), the
		// null batch proposed there anyway: no correct replica takes one
		// (see also TestNewViewNotDecidingRefused).
		{name: "UndecidingNewView", seeds: seedRange(2440, 8), net: with(allNet, func(c *chaos) { c.partitionVictim = 0 }),
			setup: func(n *simnet.Net, _ *rand.Rand) {
				a := n.MakeByzantine(1, simnet.Lies(simnet.LieUndecidingNewView))
				a.Injectors = append(a.Injectors, simnet.ServeFakes())
			},
			check: func(t *testing.T, n *simnet.Net) {
				noFake(t, n)
				if sent, taken := n.Adversary(1).Undecided(); taken > 0 {
					t.Fatalf("correct replicas took %d of the %d new views sent that leave a slot undecided", taken, sent)
				}
			}},
		// As new primary, new views whose pre-prepares do not follow from
		// their view changes.
		{name: "WrongNewView", seeds: seedRange(2450, 8), net: with(allNet, func(c *chaos) { c.partitionVictim = 0 }),
			setup: func(n *simnet.Net, _ *rand.Rand) { n.MakeByzantine(1, simnet.Lies(simnet.LieWrongNewView)) },
			check: noEvil},
		// n=7, f=2: two colluding liars claim the same batch nobody
		// proposed at the same slots, prepared in the highest view, and
		// raise what they accepted: two claims are still fewer than f+1.
		{name: "N7CollidingClaims", n: 7, seeds: seedRange(2460, 6), net: with(allNet, func(c *chaos) { c.partitionVictim = 0 }),
			setup: func(n *simnet.Net, _ *rand.Rand) {
				for _, id := range []bft.ReplicaID{1, 2} {
					a := n.MakeByzantine(id, simnet.Lies(simnet.LieFakePrepared, simnet.LieRaisedPrepared, simnet.LieUndecidingNewView))
					a.Injectors = append(a.Injectors, simnet.ServeFakes())
				}
			},
			check: func(t *testing.T, n *simnet.Net) {
				noFake(t, n)
				for _, id := range []bft.ReplicaID{1, 2} {
					if sent, taken := n.Adversary(id).Undecided(); taken > 0 {
						t.Fatalf("correct replicas took %d of the %d new views replica %d sent that leave a slot undecided", taken, sent, id)
					}
				}
			}},
		// A correct replica lags (see chaos.lag): it knows certified
		// checkpoints above its state and votes above them. The
		// Byzantine replica omits every certificate from its view
		// changes, prepares and commits whatever it hears, answers batch
		// fetches with lies and is silent while primary, so view changes happen while the laggard's
		// votes matter: its view changes must report what prepared
		// there (see TestViewChangeReportsCertificatesAboveKnownCheckpoint).
		// Seeds 2309, 2312, 2318 and 747853061667 (a fresh one) broke
		// agreement while view changes reported certificates only above
		// the checkpoint whose state the replica held. Fresh seeds
		// 215944477212 and 396621278727 lost liveness: the only correct
		// replica besides the laggard's view change had missed the slots
		// where the clients' requests before their outstanding ones ran,
		// so it held those out of order, timed nothing, and never joined
		// (see TestOutOfOrderRequestFetchesMissedSlots). Fresh seeds
		// 846450373653 and 345963351014 lost liveness the same way, with
		// the fetch answered but of no use: in the first the replica
		// refused the primary's resent pre-prepares for their old times,
		// and now times its waiting requests when it does; in the second
		// it had executed up to the others' stable checkpoint without
		// learning it was stable, so its watermarks refused the next
		// slots, and now a fetch at that checkpoint brings the
		// certificate.
		{name: "LaggardAndLiar", seeds: append(seedRange(2305, 8), 2318, 747853061667, 215944477212, 396621278727, 846450373653, 345963351014), net: with(allNet, func(c *chaos) { c.lag = true }),
			setup: func(n *simnet.Net, rng *rand.Rand) {
				a := n.MakeByzantine(bft.ReplicaID(rng.IntN(n.N)), simnet.OmitCertificates(), simnet.Silent(false), simnet.ForgeBatches())
				a.Injectors = append(a.Injectors, simnet.Accomplice())
			},
			check: noEvil},
		// Byzantine clients: random bytes through wire.Decode (whatever
		// decodes must be rejected), mutated encodings, bad
		// authenticators, ops above MaxOpSize, correct clients'
		// requests replayed; and a client whose authenticators are valid
		// only at the primary of view 0 and one backup. The correct
		// clients must still complete (see TestPartialAuthenticator for
		// what the partial authenticators cost).
		{name: "ByzantineClients", seeds: seedRange(1700, 8), net: allNet,
			setup: func(n *simnet.Net, _ *rand.Rand) {
				n.AddClientAttack(&simnet.ClientAttack{ID: bft.ClientID(len(n.Clients) + 1), Rate: 0.5,
					Garbage: true, Mutated: true, BadAuth: true, HugeOp: true, Replay: true})
				n.AddClientAttack(&simnet.ClientAttack{ID: bft.ClientID(len(n.Clients) + 2), Rate: 0.1,
					PartialAuth: true, ValidFor: []bft.ReplicaID{0, 1}})
			},
			check: func(t *testing.T, n *simnet.Net) {
				if n.Errors[bft.ErrForged] == 0 || n.Errors[bft.ErrInvalid] == 0 {
					t.Fatalf("attacks not rejected: %v", n.Errors)
				}
			}},
		// Every kind of Byzantine replica at once, one at a time, with a
		// Byzantine client: the worst mix at n=4.
		{name: "Mixed", seeds: seedRange(1800, 8), net: allNet,
			setup: func(n *simnet.Net, rng *rand.Rand) {
				a := n.MakeByzantine(bft.ReplicaID(rng.IntN(n.N)), simnet.Equivocate(), simnet.LieInViewChange(), simnet.Forge(0.2))
				a.Injectors = append(a.Injectors, simnet.Replay(0.2))
				n.AddClientAttack(&simnet.ClientAttack{ID: bft.ClientID(len(n.Clients) + 1), Rate: 0.3, Garbage: true, BadAuth: true, Replay: true})
			},
			check: noEvil},
		// n=7, f=2: an equivocating, forging primary and a replica lying
		// in view changes (and silent while primary), so views 0 and 1
		// are both Byzantine.
		{name: "N7TwoByzantine", n: 7, seeds: seedRange(2100, 8), net: allNet,
			setup: func(n *simnet.Net, _ *rand.Rand) {
				n.MakeByzantine(0, simnet.Equivocate(), simnet.Forge(0.2))
				a := n.MakeByzantine(1, simnet.LieInViewChange(), simnet.Silent(false))
				a.Injectors = append(a.Injectors, simnet.Replay(0.3))
			},
			check: noEvil},
		// n=7, f=2: one Byzantine replica and one correct replica that
		// crashes and restarts empty.
		{name: "N7ByzantinePlusCrash", n: 7, seeds: seedRange(2200, 8), net: with(allNet, func(c *chaos) { c.crash = true }),
			setup: func(n *simnet.Net, rng *rand.Rand) {
				a := n.MakeByzantine(bft.ReplicaID(rng.IntN(n.N)), simnet.Equivocate(), simnet.LieInViewChange(), simnet.Forge(0.3))
				a.Injectors = append(a.Injectors, simnet.Replay(0.3))
			},
			check: noEvil},
		// The real bft/auth authenticator (Ed25519 signatures, truncated
		// HMAC request authenticators) with the mixed Byzantine replica:
		// slower, so few seeds.
		{name: "RealAuth", seeds: seedRange(1901, 2), fresh: 1, realAuth: true, net: allNet,
			setup: func(n *simnet.Net, rng *rand.Rand) {
				a := n.MakeByzantine(bft.ReplicaID(rng.IntN(n.N)), simnet.Equivocate(), simnet.LieInViewChange(), simnet.Forge(0.3))
				a.Injectors = append(a.Injectors, simnet.Replay(0.3))
				n.AddClientAttack(&simnet.ClientAttack{ID: bft.ClientID(len(n.Clients) + 1), Rate: 0.3, Garbage: true, BadAuth: true, HugeOp: true, Replay: true})
			},
			check: forged},
	})
}

// Random bytes never make wire.Decode panic, its errors wrap
// ErrMalformed, and whatever does decode is rejected by a replica when a
// client sends it.
func TestGarbageRejected(t *testing.T) {
	n := newNet(t, simnet.Options{Seed: 40, Config: simCfg})
	rng := rand.New(rand.NewPCG(40, 1))
	decoded := 0
	for k := 0; k < 20000; k++ {
		b := make([]byte, rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if len(b) > 0 {
			b[0] = byte(rng.IntN(12))
		}
		m, err := wire.Decode(b)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("%x: error %v does not wrap ErrMalformed", b, err)
			}
			continue
		}
		decoded++
		if err := n.Replicas[k%n.N].Step(bft.ToClient(9), m); err == nil {
			t.Fatalf("%x decoded to %s, accepted from a client", b, simnet.Describe(m))
		}
	}
	t.Logf("%d of 20000 random inputs decoded; all rejected", decoded)
	for i, r := range n.Replicas {
		if s := r.Status(); s.Pending != 0 || s.LogEntries != 0 {
			t.Fatalf("replica %d changed state: %+v", i, s)
		}
	}
}

// A client whose requests carry authenticators valid only at some
// replicas. Documented behaviour: a replica that cannot verify a request
// in a pre-prepare rejects the whole pre-prepare (ErrForged). If the
// request's MACs hold at the primary and at least 2f backups, the batch
// still commits; otherwise the batch stalls and the view change replaces
// the primary, and each later primary that can verify the request (and so
// holds it) proposes it again and is replaced in turn. Liveness of the
// correct clients suffers (view changes, latency) while such a client is
// active, but they still complete; safety is unaffected. This test runs
// the worst case (valid at the primary and one backup only) on a
// reliable network and checks the correct clients finish, and reports the
// view changes it cost.
func TestPartialAuthenticator(t *testing.T) {
	for _, valid := range [][]bft.ReplicaID{{0, 1, 2}, {0, 1}, {0}} {
		n := newNet(t, simnet.Options{Clients: 3, Seed: 41, Config: simCfg, Codec: true})
		bad := &simnet.ClientAttack{ID: 4, Rate: 0.05, PartialAuth: true, ValidFor: valid}
		n.AddClientAttack(bad)
		lat, err := n.LoadLive(20, liveBound, op)
		if err != nil {
			t.Fatalf("valid for %v: %v\n%s", valid, err, n.Report())
		}
		if err := n.CheckAgreement(); err != nil {
			t.Fatal(err)
		}
		t.Logf("MACs valid for %v: correct clients done by tick %d, worst latency %d, view %d, forged %d",
			valid, n.Now, lat, n.Replicas[2].Status().View, n.Errors[bft.ErrForged])
	}
}
