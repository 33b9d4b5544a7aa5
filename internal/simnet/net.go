// Package simnet is a deterministic in-memory network for testing the BFT
// core (package bft) and the applications replicated on it: replicas and
// clients as bft state machines, an append-style App (or any bft.App,
// Options.NewApp), HMAC stand-ins for signatures and request
// authenticators, and faults (drop, delay, duplicate, reorder, partition,
// crash and restart, Byzantine rewriting of a replica's output). Every run
// is a function of the seed.
//
// Checking: a Checker (Net.Check) watches every run for safety
// violations (see Checker); Net.LoadLive drives the clients after the
// network healed and fails on a request that takes too long. Byzantine
// replicas are Adversary behaviours (MakeByzantine: equivocation,
// silence, forgery, replay, lies in view changes and new views, ...)
// that rewrite what a replica running the correct core sends; Byzantine
// clients are ClientAttack. With Options.Codec every message goes
// through the real codec (bft/wire), with Options.RealAuth replicas and
// clients use the real authenticator (bft/auth). Failure reports
// (Net.Report) give the seed, the replicas' status and the last events.
//
// Time: every replica's Config.Clock (unless Options.Config sets one)
// reads Epoch (or Options.Epoch) plus TickDuration per tick plus the replica's ClockSkew, so
// agreed times are a function of the seed too. One Net.Tick first delivers every packet due, repeatedly, until no
// node has anything more to send at this tick (so with MaxDelay 0 a whole
// request round trip fits in one tick), then ticks every node once.
package simnet

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/wire"
)

// Packet is a message in flight.
type Packet struct {
	From, To bft.Target
	Msg      bft.Message
	At       uint64 // the tick it is delivered in
}

// Options configures New.
type Options struct {
	N       int    // replicas (default 4)
	Clients int    // clients, IDs 1..Clients (default 1)
	Seed    uint64 // randomness of faults and key derivation
	// Config adjusts every replica's configuration (ID, N, App and Auth
	// are set by the net).
	Config func(*bft.Config)
	// ClientConfig adjusts every client's configuration.
	ClientConfig func(*bft.ClientConfig)
	// Codec passes every message sent through wire.Append and
	// wire.Decode, so receivers get what the real codec reconstructs.
	Codec bool
	// RealAuth uses package bft/auth (Ed25519 signatures, truncated
	// HMAC request authenticators) with keys from a seeded dealer
	// instead of the HMAC stand-ins. Net.Keys still exists but its MACs
	// do not verify; use Net.Sign and Net.SignRequest.
	RealAuth bool
	// ExtraClients: identities beyond the correct clients (IDs
	// Clients+1 ...) that RealAuth provisions keys for, for Byzantine
	// clients.
	ExtraClients int
	// AppPad makes every replica's application snapshot this many bytes
	// longer (see App.Pad).
	AppPad int
	// NewApp, if set, makes replica i's application, at New and at every
	// Restart (and Recover), in place of an App; Net.App returns it, and
	// Net.Apps holds nil. It must return a fresh, empty application each
	// time.
	NewApp func(i int) bft.App
	// Epoch, if not zero, is the clock's reading at tick 0 in place of
	// the package's Epoch: for applications that check times against
	// the real world's, such as certificates' validity.
	Epoch time.Time
}

// Net is a simulated cluster. Fields in the fault section may be changed
// between ticks.
type Net struct {
	N        int
	Keys     *Keys
	Replicas []*bft.Replica
	Apps     []*App // nil entries with Options.NewApp
	Configs  []bft.Config
	Clients  []*bft.Client // client i has ID i+1
	Results  [][]bft.Result
	// Notes holds the notifications each client delivered.
	Notes [][]bft.Note
	// Executed is what each replica reported executing since it started
	// (or restarted).
	Executed [][]bft.Committed
	// Disks holds what each replica persisted (Config.Persist), for
	// Recover.
	Disks []Disk
	// LoseCommitted makes Recover drop every record no sync covered
	// (Ready's Deferred since the last Persist: committed slots, votes)
	// of the disk, as a crash may.
	LoseCommitted bool
	Now           uint64
	Rand          *rand.Rand

	// Faults.
	DropRate float64 // probability a packet is lost
	DupRate  float64 // probability a packet is delivered twice
	MaxDelay int     // packets take 0..MaxDelay ticks
	// Bandwidth bounds the encoded bytes each replica takes in per tick
	// (0: unlimited): what arrives beyond it waits its turn, as on a
	// machine whose CPU or network is slower than the load, so the
	// delay grows with the traffic.
	Bandwidth int
	Reorder   bool   // deliver packets due together in random order
	Crashed   []bool // a crashed replica sends, receives and ticks nothing
	Block     func(from, to bft.Target) bool
	// Drop loses the packets it returns true for: a partition that lets
	// some kinds of messages through.
	Drop      func(from, to bft.Target, m bft.Message) bool
	Byzantine func(from bft.ReplicaID, e bft.Envelope) []bft.Envelope
	// OnTick runs at the start of every Tick, before deliveries: for
	// injecting traffic (Byzantine clients, replays).
	OnTick []func()
	// Faulty marks the replicas outside the correct set (Byzantine):
	// the Checker ignores what they execute. MakeByzantine sets it.
	Faulty []bool
	// ClockSkew is added to each replica's clock.
	ClockSkew []time.Duration

	// Observations.
	Errors     map[error]int // Step errors by sentinel
	LastErrors []error       // the most recent Step errors, for debugging
	Divergence error         // set when two replicas execute different batches at one seq
	Delivered  uint64
	// CodecErrors counts messages that failed the codec round trip (only
	// with Options.Codec); those from correct nodes are violations.
	CodecErrors int
	// CodecRoundTrips counts messages that went through the codec.
	CodecRoundTrips int
	// Check is the safety checker, always on; see Checker.
	Check *Checker

	Seed       uint64
	codec      bool
	appPad     int
	newApp     func(i int) bft.App
	apps       []bft.App // each replica's application
	epoch      time.Time
	cluster    *auth.Cluster
	clientAuth map[bft.ClientID]*auth.ClientAuth
	adv        map[bft.ReplicaID]*Adversary
	issued     []uint64 // tick each client's outstanding request was proposed
	window     []int    // each client's ClientConfig.Window
	trace      [traceLen]Event
	traceN     uint64

	queue   []Packet
	digests map[uint64]bft.Digest
	rxFree  map[bft.Target]float64 // tick each replica's input is busy until (Bandwidth)
}

// Epoch is the simulated clock's reading at tick 0 (unless Options.Epoch
// sets another), and TickDuration how far it moves per tick.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const TickDuration = 10 * time.Millisecond

// Clock is replica i's clock reading now.
func (n *Net) Clock(i int) time.Time {
	return n.epoch.Add(time.Duration(n.Now)*TickDuration + n.ClockSkew[i])
}

// Sentinels counted in Net.Errors.
var sentinels = []error{bft.ErrInvalid, bft.ErrForged, bft.ErrStale, bft.ErrWatermark, bft.ErrDuplicate, bft.ErrEquivocation, bft.ErrFull, bft.ErrBusy, bft.ErrTooLarge, bft.ErrTime}

// New builds a cluster; replicas and clients start empty in view 0.
func New(o Options) (*Net, error) {
	if o.N == 0 {
		o.N = 4
	}
	if o.Clients == 0 {
		o.Clients = 1
	}
	n := &Net{
		N:       o.N,
		Keys:    NewKeys(o.N, o.Seed),
		Rand:    rand.New(rand.NewPCG(o.Seed, 0x5151)),
		Crashed: make([]bool, o.N),
		Faulty:  make([]bool, o.N),

		ClockSkew: make([]time.Duration, o.N),
		Errors:    make(map[error]int),
		digests:   make(map[uint64]bft.Digest),
		rxFree:    make(map[bft.Target]float64),
		Seed:      o.Seed,
		codec:     o.Codec,
		appPad:    o.AppPad,
		newApp:    o.NewApp,
		epoch:     Epoch,
	}
	if !o.Epoch.IsZero() {
		n.epoch = o.Epoch
	}
	n.Check = newChecker(n)
	if o.RealAuth {
		var seed [32]byte
		copy(seed[:], fmt.Sprintf("simnet-%d", o.Seed))
		c, err := auth.Generate(o.N, o.Clients+o.ExtraClients+1, "127.0.0.1", 20000, rand.NewChaCha8(seed))
		if err != nil {
			return nil, err
		}
		n.cluster = c
		n.clientAuth = make(map[bft.ClientID]*auth.ClientAuth)
	}
	for i := 0; i < o.N; i++ {
		cfg := bft.Config{}
		if o.Config != nil {
			o.Config(&cfg)
		}
		cfg.ID, cfg.N = bft.ReplicaID(i), o.N
		if cfg.Clock == nil {
			cfg.Clock = func() time.Time { return n.Clock(i) }
		}
		cfg.Auth = n.Keys.Auth(bft.ReplicaID(i))
		if n.cluster != nil {
			a, err := auth.NewReplicaAuth(n.cluster, bft.ReplicaID(i))
			if err != nil {
				return nil, err
			}
			cfg.Auth = a
		}
		n.Configs = append(n.Configs, cfg)
		n.Replicas = append(n.Replicas, nil)
		n.Apps = append(n.Apps, nil)
		n.apps = append(n.apps, nil)
		n.Executed = append(n.Executed, nil)
		if err := n.Restart(i); err != nil {
			return nil, err
		}
	}
	for i := 0; i < o.Clients; i++ {
		cc := bft.ClientConfig{ID: bft.ClientID(i + 1), N: o.N, Sign: n.SignRequest}
		if o.ClientConfig != nil {
			o.ClientConfig(&cc)
		}
		c, err := bft.NewClient(cc)
		if err != nil {
			return nil, err
		}
		n.Clients = append(n.Clients, c)
		n.window = append(n.window, max(cc.Window, 1))
		n.Results = append(n.Results, nil)
		n.Notes = append(n.Notes, nil)
		n.issued = append(n.issued, 0)
	}
	return n, nil
}

// Restart replaces replica i by a fresh one with an empty App (or what
// Options.NewApp makes), as after a crash that lost everything; it is no
// longer crashed.
func (n *Net) Restart(i int) error {
	cfg := n.Configs[i]
	var app *App
	if n.newApp != nil {
		cfg.App = n.newApp(i)
	} else {
		app = &App{Pad: n.appPad}
		cfg.App = app
	}
	r, err := bft.NewReplica(cfg)
	if err != nil {
		return err
	}
	n.Replicas[i], n.Apps[i], n.apps[i], n.Executed[i] = r, app, cfg.App, nil
	n.Crashed[i] = false
	if n.Check != nil && n.Now > 0 {
		n.Note("replica %d restarted empty", i)
	}
	return nil
}

// Send puts a packet on the network as if from sent it (subject to
// faults), for tests that inject messages.
func (n *Net) Send(from bft.Target, e bft.Envelope) { n.enqueue(from, e) }

func (n *Net) enqueue(from bft.Target, e bft.Envelope) {
	if r, ok := e.Msg.(*bft.Request); ok && from.Client && !n.isFaulty(from) && r.Client == bft.ClientID(from.ID) && !r.ReadOnly {
		if _, ok := n.Check.issued[reqKey{r.Client, r.Timestamp}]; !ok {
			n.Check.issued[reqKey{r.Client, r.Timestamp}] = r.Op
		}
	}
	if n.Block != nil && n.Block(from, e.To) {
		return
	}
	if n.Drop != nil && n.Drop(from, e.To, e.Msg) {
		return
	}
	if n.DropRate > 0 && n.Rand.Float64() < n.DropRate {
		return
	}
	size := 0
	if (n.codec || n.Bandwidth > 0) && e.Msg != nil {
		b := wire.Append(nil, e.Msg)
		size = len(b)
		if n.codec {
			m, err := wire.Decode(b)
			if err != nil {
				n.CodecErrors++
				n.record(Event{Kind: "codec", From: from, To: e.To, Msg: e.Msg, Err: err})
				if !n.isFaulty(from) {
					n.Check.fail("codec: %s from %s to %s: %v", Describe(e.Msg), tname(from), tname(e.To), err)
				}
				return
			}
			e.Msg = m
			n.CodecRoundTrips++
		}
	}
	copies := 1
	if n.DupRate > 0 && n.Rand.Float64() < n.DupRate {
		copies = 2
	}
	for ; copies > 0; copies-- {
		d := 0
		if n.MaxDelay > 0 {
			d = n.Rand.IntN(n.MaxDelay + 1)
		}
		at := n.Now + uint64(d)
		if n.Bandwidth > 0 && !e.To.Client {
			free := max(float64(at), n.rxFree[e.To]) + float64(size)/float64(n.Bandwidth)
			n.rxFree[e.To] = free
			at = uint64(free)
		}
		n.queue = append(n.queue, Packet{From: from, To: e.To, Msg: e.Msg, At: at})
	}
}

// collect drains every node's Ready onto the network.
func (n *Net) collect() {
	for i, r := range n.Replicas {
		if n.Crashed[i] || !r.HasReady() {
			continue
		}
		rd := r.Ready()
		n.store(i, &rd)
		for _, c := range rd.Committed {
			n.Executed[i] = append(n.Executed[i], c)
			if n.Faulty[i] {
				continue
			}
			if d, ok := n.digests[c.Seq]; ok && d != c.Digest && n.Divergence == nil {
				n.Divergence = fmt.Errorf("simnet: replica %d executed digest %x at seq %d, another %x", i, c.Digest[:4], c.Seq, d[:4])
			}
			n.digests[c.Seq] = c.Digest
			n.record(Event{Kind: "exec", From: bft.ToReplica(bft.ReplicaID(i)), Text: fmt.Sprintf("view %d seq %d digest %x, %d requests", c.View, c.Seq, c.Digest[:4], len(c.Batch))})
			n.Check.committed(i, c)
		}
		from := bft.ToReplica(bft.ReplicaID(i))
		for _, e := range rd.Messages {
			if rep, ok := e.Msg.(*bft.Reply); ok && !n.Faulty[i] && !rep.ReadOnly {
				n.Check.reply(i, rep)
			}
			if nt, ok := e.Msg.(*bft.Notify); ok && !n.Faulty[i] {
				n.Check.notify(i, nt)
			}
			if n.Byzantine != nil {
				for _, b := range n.Byzantine(bft.ReplicaID(i), e) {
					n.enqueue(from, b)
				}
				continue
			}
			n.enqueue(from, e)
		}
	}
	for i, c := range n.Clients {
		rd := c.Ready()
		for _, d := range rd.Done {
			n.Check.accepted(i+1, d)
		}
		n.Results[i] = append(n.Results[i], rd.Done...)
		for _, nt := range rd.Notes {
			n.Check.delivered(i+1, nt)
		}
		n.Notes[i] = append(n.Notes[i], rd.Notes...)
		for _, e := range rd.Messages {
			if r, ok := e.Msg.(*bft.Request); ok {
				if len(n.Check.issuedReqs) < 256 {
					n.Check.issuedReqs = append(n.Check.issuedReqs, r)
				} else {
					n.Check.issuedReqs[n.Rand.IntN(256)] = r
				}
			}
			n.enqueue(bft.ToClient(bft.ClientID(i+1)), e)
		}
	}
}

func (n *Net) deliver(p Packet) {
	n.Delivered++
	var err error
	defer func() { n.record(Event{Kind: "deliver", From: p.From, To: p.To, Msg: p.Msg, Err: err}) }()
	if p.To.Client {
		i := int(p.To.ID) - 1
		if i < 0 || i >= len(n.Clients) || p.From.Client {
			return
		}
		switch m := p.Msg.(type) {
		case *bft.Reply:
			err = n.Clients[i].Step(bft.ReplicaID(p.From.ID), m)
		case *bft.Notify:
			err = n.Clients[i].StepNotify(bft.ReplicaID(p.From.ID), m)
		}
	} else {
		i := int(p.To.ID)
		if i >= n.N || n.Crashed[i] {
			return
		}
		if a := n.adv[bft.ReplicaID(i)]; a != nil {
			if a.Ignore != nil && a.Ignore(p) {
				return
			}
			a.hear(p)
		}
		err = n.Replicas[i].Step(p.From, p.Msg)
		n.tookUndecided(p.To, p.Msg, err)
	}
	n.countErr(err)
}

// countErr counts a Step error by sentinel.
func (n *Net) countErr(err error) {
	if err != nil {
		for _, s := range sentinels {
			if errors.Is(err, s) {
				n.Errors[s]++
			}
		}
		if len(n.LastErrors) >= 32 {
			n.LastErrors = n.LastErrors[1:]
		}
		n.LastErrors = append(n.LastErrors, err)
	}
}

// Tick delivers everything due now (until the cluster is quiet at this
// tick), then ticks every live node.
func (n *Net) Tick() {
	for _, f := range n.OnTick {
		f()
	}
	for round := 0; round < 10000; round++ {
		n.collect()
		var due []Packet
		k := 0
		for _, p := range n.queue {
			if p.At <= n.Now {
				due = append(due, p)
			} else {
				n.queue[k] = p
				k++
			}
		}
		clear(n.queue[k:])
		n.queue = n.queue[:k]
		if len(due) == 0 {
			break
		}
		if n.Reorder {
			n.Rand.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
		}
		for _, p := range due {
			n.deliver(p)
		}
	}
	for i, r := range n.Replicas {
		if !n.Crashed[i] {
			r.Tick()
		}
	}
	for _, c := range n.Clients {
		c.Tick()
	}
	n.collect()
	n.Now++
}

// Run ticks until cond holds (checked before each tick) or maxTicks
// passed; it reports whether cond held.
func (n *Net) Run(maxTicks int, cond func() bool) bool {
	for t := 0; t < maxTicks; t++ {
		if cond() {
			return true
		}
		n.Tick()
	}
	return cond()
}

// Load keeps every client busy (closed loop) until each has total
// results; op(c, k) is client c's k-th operation. It reports whether all
// finished within maxTicks.
func (n *Net) Load(total, maxTicks int, op func(c, k int) []byte) bool {
	return n.Run(maxTicks, func() bool {
		done := true
		for i, c := range n.Clients {
			if len(n.Results[i]) >= total {
				continue
			}
			done = false
			if c.InFlight() < n.window[i] {
				n.fill(i, total, op)
			}
		}
		return done
	})
}

// App returns replica i's application: its App, or what Options.NewApp
// made for it.
func (n *Net) App(i int) bft.App { return n.apps[i] }

// CheckAgreement reports divergence: two replicas that executed different
// batches at one seq, or that executed up to the same seq but hold
// different application state (by the hash of its snapshot, for an
// application of Options.NewApp).
func (n *Net) CheckAgreement() error {
	if n.Divergence != nil {
		return n.Divergence
	}
	if err := n.Check.Err(); err != nil {
		return err
	}
	hash := map[uint64][32]byte{}
	for i, r := range n.Replicas {
		if n.Crashed[i] || n.Faulty[i] {
			continue
		}
		le := r.Status().LastExecuted
		var state [32]byte
		if a := n.Apps[i]; a != nil {
			state = a.Hash
		} else {
			state = sha256.Sum256(n.apps[i].Snapshot())
		}
		if h, ok := hash[le]; ok && h != state {
			return fmt.Errorf("simnet: replica %d at seq %d holds different state", i, le)
		}
		hash[le] = state
	}
	return nil
}
