package order

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/envelope"
)

// Config is what every replica's App must agree on, besides Self and
// Chain. A zero field takes its default.
type Config struct {
	// Channel is the one channel the service orders for.
	Channel string
	// Writers is the channel's Writers policy: who may broadcast.
	Writers *envelope.Policy
	// Block is how blocks are cut.
	Block block.Config
	// Orderers are the orderers' public keys, by replica ID: their
	// signatures make a block final.
	Orderers []ed25519.PublicKey
	// F is the number of faulty orderers tolerated; a block is final
	// with 2F+1 signatures.
	F int
	// MaxUnfinal bounds the blocks cut and not yet final (default 64):
	// past it envelopes are refused with SERVICE_UNAVAILABLE until
	// signatures catch up.
	MaxUnfinal int
	// FinalityTimeout is how long, by this replica's clock, the oldest
	// block cut may stay short of its 2f+1 signatures before the
	// replica's Duties report the view stalled (default 10s; see
	// Duties.Stalled).
	FinalityTimeout time.Duration
	// DedupWindow is how many of the latest ordered envelopes the App
	// remembers, by the SHA-256 of their payload (default 65536): one of
	// them ordered again, by a client's retry through another orderer or
	// an orderer's replay, is answered SUCCESS with Info "duplicate" and
	// not put in a block again.
	DedupWindow int

	// OrdererOf names the orderer that orders through a client
	// identity, if one does (default: as ClientIDs assigns them, see
	// the function OrdererOf). Valid trusts the checks of the orderers
	// behind the identities it names.
	OrdererOf func(bft.ClientID) (bft.ReplicaID, bool)

	// Observer, if set, is told of every block cut and made final, for
	// metrics.
	Observer Observer

	// Self is this replica's ID: the Duties sign for it.
	Self uint32
	// Chain receives the final blocks (default: a chain in memory).
	Chain *Chain
}

// Observer is told what the App does. Its methods run on the App's
// goroutine, inside Execute, so they must be quick; a replica replaying
// its log after a restart tells them again.
type Observer interface {
	// Cut: block number was cut holding envelopes envelopes of size
	// bytes in all, wait after its first envelope was ordered (in agreed
	// time).
	Cut(number uint64, envelopes, bytes int, wait time.Duration)
	// Final: block number became final.
	Final(number uint64)
}

// App is the ordering service as a bft.App. It is not safe for concurrent
// use (a replica calls it from one goroutine), except Duties, which it
// shares with another goroutine.
type App struct {
	cfg    Config
	quorum int
	cutter *block.Cutter
	// next is the number of the next block to cut, prevHash the header
	// hash of the last cut (nil before block 0).
	next     uint64
	prevHash []byte
	// unfinal are the blocks cut and not yet final, in number order:
	// unfinal[0] is block final.
	unfinal []*unfinal
	final   uint64
	// seen holds the payload hashes of the latest DedupWindow envelopes
	// ordered, in order, and is their set.
	seen   [][32]byte
	seenAt map[[32]byte]bool
	duties *Duties
}

type unfinal struct {
	block *cb.Block
	sigs  []*cb.MetadataSignature
	by    map[uint32]bool // the orderers in sigs
}

var (
	_ bft.App       = (*App)(nil)
	_ bft.Validator = (*App)(nil)
)

// ClientIDs returns the client identities orderer id of n orders
// through: the envelopes it receives through the first, its duties
// (block signatures and timeout cuts) through the second. The duties
// have a lane of their own so that signatures never wait behind
// envelopes: a block becomes final only once they are ordered, and
// envelopes are refused while MaxUnfinal blocks wait for theirs.
func ClientIDs(n int, id bft.ReplicaID) (envelopes, duties bft.ClientID) {
	return bft.ClientID(id), bft.ClientID(n + int(id))
}

// OrdererOf returns the orderer, of n, that orders through client
// identity c (ClientIDs), if one does.
func OrdererOf(n int, c bft.ClientID) (bft.ReplicaID, bool) {
	if c >= bft.ClientID(2*n) {
		return 0, false
	}
	return bft.ReplicaID(uint64(c) % uint64(n)), true
}

// New returns the App of an empty channel.
func New(cfg Config) (*App, error) {
	if cfg.Writers == nil || cfg.Channel == "" {
		return nil, fmt.Errorf("order: a channel needs a name and a Writers policy")
	}
	if cfg.F < 1 || len(cfg.Orderers) != 3*cfg.F+1 || int(cfg.Self) >= len(cfg.Orderers) {
		return nil, fmt.Errorf("order: %d orderers, f=%d, self %d: want 3f+1 orderers, self one of them", len(cfg.Orderers), cfg.F, cfg.Self)
	}
	if cfg.MaxUnfinal <= 0 {
		cfg.MaxUnfinal = 64
	}
	if cfg.DedupWindow <= 0 {
		cfg.DedupWindow = 1 << 16
	}
	if cfg.FinalityTimeout <= 0 {
		cfg.FinalityTimeout = 10 * time.Second
	}
	if cfg.Chain == nil {
		cfg.Chain = NewChain(new(MemStore))
	}
	if cfg.OrdererOf == nil {
		n := len(cfg.Orderers)
		cfg.OrdererOf = func(c bft.ClientID) (bft.ReplicaID, bool) { return OrdererOf(n, c) }
	}
	a := &App{cfg: cfg, quorum: 2*cfg.F + 1, cutter: block.NewCutter(cfg.Block), seenAt: make(map[[32]byte]bool)}
	a.duties = &Duties{wake: make(chan struct{}, 1), timeout: a.cutter.Config().BatchTimeout, finality: cfg.FinalityTimeout}
	return a, nil
}

// Chain returns the chain the App appends final blocks to.
func (a *App) Chain() *Chain { return a.cfg.Chain }

// Duties returns what this replica must do besides executing: see Duties.
func (a *App) Duties() *Duties { return a.duties }

// Execute runs an op built by EnvelopeOp, CutOp or SignOp and returns its
// encoded Result (ParseResult).
func (a *App) Execute(ctx bft.ExecContext, b []byte) []byte {
	o, err := decodeOp(b)
	if err != nil {
		return Result{Status: cb.Status_BAD_REQUEST, Info: err.Error()}.encode()
	}
	var r Result
	switch o.kind {
	case kindEnvelope:
		r = a.envelope(o.env, ctx.Time)
	case kindCut:
		if o.number == a.next && a.cutter.Due(ctx.Time) {
			since := a.cutter.Since()
			a.cut(a.cutter.Cut(), ctx.Time.Sub(since))
		}
		r.Status = cb.Status_SUCCESS
	case kindSign:
		r = a.sign(o)
	}
	a.duties.pending(a.next, a.cutter.Since(), a.final, len(a.unfinal) > 0, ctx.Time)
	return r.encode()
}

// Valid implements bft.Validator: an envelope op may be ordered only if
// its signature verifies (envelope.Policy.CheckSignature); every other
// op, and an envelope that does not decode, is left to Execute, which
// answers it. With f = 1, an envelope in a pre-prepare is taken unchecked
// when the orderer whose client identity (ClientIDs) carries it is not
// the primary that proposed it: that orderer checked it on receipt, and
// the primary when it arrived, and one of the two is correct. Any other
// is checked here, so with f > 1 every backup checks every envelope.
func (a *App) Valid(ctx bft.ValidContext, op []byte) bool {
	o, err := decodeOp(op)
	if err != nil || o.kind != kindEnvelope {
		return true
	}
	if ctx.Proposed && a.cfg.F == 1 {
		if k, ok := a.cfg.OrdererOf(ctx.Client); ok && k != ctx.Proposer {
			return true
		}
	}
	p, err := envelope.Parse(o.env, a.cfg.Channel)
	if err != nil {
		return true
	}
	return a.cfg.Writers.CheckSignature(p) == nil
}

func (a *App) envelope(env []byte, now time.Time) Result {
	if len(a.unfinal) >= a.cfg.MaxUnfinal {
		return Result{Status: cb.Status_SERVICE_UNAVAILABLE, Info: fmt.Sprintf("%d blocks wait for their signatures", len(a.unfinal))}
	}
	if max := a.cutter.Config().AbsoluteMaxBytes; len(env) > max {
		return Result{Status: cb.Status_BAD_REQUEST, Info: fmt.Sprintf("the envelope's %d bytes exceed AbsoluteMaxBytes %d", len(env), max)}
	}
	p, err := envelope.Parse(env, a.cfg.Channel)
	if err == nil {
		err = envelope.CheckTransaction(p)
	}
	if err == nil {
		// The signature passed Valid at a correct replica before the
		// envelope could be ordered; the creator's certificate is
		// judged here, at the agreed time.
		err = a.cfg.Writers.CheckCreator(p, now)
	}
	if err != nil {
		return Result{Status: envelope.StatusOf(err), Info: err.Error()}
	}
	h := sha256.Sum256(p.Envelope.GetPayload())
	if a.seenAt[h] {
		return Result{Status: cb.Status_SUCCESS, Info: "duplicate: the payload was ordered already"}
	}
	since := a.cutter.Since()
	batches, err := a.cutter.Ordered(append([]byte(nil), env...), now)
	if err != nil {
		return Result{Status: cb.Status_BAD_REQUEST, Info: err.Error()}
	}
	a.remember(h)
	for _, b := range batches {
		// The first batch cut waited since the first envelope pending
		// before this one, if any; a later one holds this envelope.
		wait := time.Duration(0)
		if !since.IsZero() {
			wait = now.Sub(since)
		}
		a.cut(b, wait)
		since = time.Time{}
	}
	return Result{Status: cb.Status_SUCCESS}
}

// remember adds an ordered payload's hash to the window, forgetting the
// oldest past DedupWindow.
func (a *App) remember(h [32]byte) {
	if len(a.seen) >= a.cfg.DedupWindow {
		delete(a.seenAt, a.seen[0])
		a.seen = a.seen[1:]
	}
	a.seen = append(a.seen, h)
	a.seenAt[h] = true
}

// cut makes the next block of batch, whose first envelope waited wait.
func (a *App) cut(batch [][]byte, wait time.Duration) {
	b := block.New(a.next, a.prevHash, batch)
	if a.cfg.Observer != nil {
		size := 0
		for _, e := range batch {
			size += len(e)
		}
		a.cfg.Observer.Cut(b.Header.Number, len(batch), size, wait)
	}
	a.prevHash = block.HeaderHash(b.Header)
	a.next++
	a.unfinal = append(a.unfinal, &unfinal{block: b, by: make(map[uint32]bool)})
	a.duties.toSign(b.Header)
}

func (a *App) sign(o op) Result {
	if o.number < a.final || o.number >= a.final+uint64(len(a.unfinal)) {
		return Result{Status: cb.Status_NOT_FOUND, Info: fmt.Sprintf("block %d is final or not cut", o.number)}
	}
	u := a.unfinal[o.number-a.final]
	if int(o.id) >= len(a.cfg.Orderers) || u.by[o.id] {
		return Result{Status: cb.Status_BAD_REQUEST, Info: fmt.Sprintf("orderer %d is unknown or signed block %d already", o.id, o.number)}
	}
	if !verifyHeader(a.cfg.Orderers[o.id], o.id, u.block.Header, o.sig) {
		return Result{Status: cb.Status_FORBIDDEN, Info: fmt.Sprintf("not orderer %d's signature of block %d", o.id, o.number)}
	}
	u.sigs = append(u.sigs, &cb.MetadataSignature{IdentifierHeader: identifierHeader(o.id), Signature: append([]byte(nil), o.sig...)})
	u.by[o.id] = true
	a.finalize()
	return Result{Status: cb.Status_SUCCESS}
}

// finalize moves the blocks that have their quorum of signatures, in
// order, to the chain.
func (a *App) finalize() {
	for len(a.unfinal) > 0 && len(a.unfinal[0].sigs) >= a.quorum {
		u := a.unfinal[0]
		u.block.Metadata.Metadata[cb.BlockMetadataIndex_SIGNATURES] = mustMarshal(&cb.Metadata{Value: metadataValue, Signatures: u.sigs})
		a.cfg.Chain.put(a.final, mustMarshal(u.block))
		if a.cfg.Observer != nil {
			a.cfg.Observer.Final(a.final)
		}
		a.unfinal[0] = nil
		a.unfinal = a.unfinal[1:]
		a.final++
	}
}

// Duties are what a replica does for the ordering service besides
// executing ops: sign every block its App cuts (a SignOp), and ask for a
// timeout cut (a CutOp) when, by its own clock, BatchTimeout passed since
// the first pending envelope was ordered. The App reports to it as it
// executes; Run, on another goroutine, acts. The App's own goroutine and
// Run may use it at once.
type Duties struct {
	mu      sync.Mutex
	wake    chan struct{} // a token when there is something to sign
	timeout time.Duration
	headers []*cb.BlockHeader // cut, to sign
	next    uint64            // the next block to cut
	since   time.Time         // the agreed time of its first envelope, zero if none
	// oldest is the oldest block not final, since the agreed time
	// oldestAt (zero if every block cut is final); a stall is reported
	// when it stays so for wait, which doubles with each report.
	finality time.Duration
	oldest   uint64
	oldestAt time.Time
	wait     time.Duration
}

func (d *Duties) toSign(h *cb.BlockHeader) {
	d.mu.Lock()
	d.headers = append(d.headers, h)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// pending reports the next block to cut and the agreed time of its
// first envelope (zero if none), and the oldest block not final
// (oldest, if any), at agreed time at.
func (d *Duties) pending(next uint64, since time.Time, oldest uint64, any bool, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next, d.since = next, since
	switch {
	case !any:
		d.oldestAt = time.Time{}
	case d.oldestAt.IsZero() || oldest != d.oldest:
		d.oldest, d.oldestAt, d.wait = oldest, at, d.finality
	}
}

// Stalled reports whether, at now by this replica's clock, the oldest
// block cut has waited FinalityTimeout for its signatures, or twice that
// since the last report, and so on: the view is stalled in a way the
// PBFT core's timers do not see. It happens when a correct orderer is
// left alone in a view of its own, so executes and signs nothing, while
// a Byzantine one withholds its signatures: the others go on ordering
// in their view, and the block never gathers 2f+1. A replica that finds
// the view stalled votes for a view change (node.Replica.Suspect), which
// the other correct orderers' votes make, and which brings the one left
// behind back. An orderer's Run does so; Stalled is for a driver of its
// own.
func (d *Duties) Stalled(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.oldestAt.IsZero() || now.Sub(d.oldestAt) < d.wait {
		return false
	}
	d.oldestAt = now
	d.wait = min(2*d.wait, 16*d.finality)
	return true
}

// reset replaces what is to be signed and pending, after a restore.
func (d *Duties) reset(headers []*cb.BlockHeader, next uint64, since time.Time) {
	d.mu.Lock()
	d.headers, d.next, d.since = headers, next, since
	d.oldestAt = time.Time{} // set again by the next op executed
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}
