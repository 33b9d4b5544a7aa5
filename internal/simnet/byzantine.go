package simnet

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/wire"
)

// Adversary controls what a Byzantine replica sends. The replica runs the
// correct core; every envelope it emits goes through Behaviors in order
// (each maps one envelope to any number, possibly none), and Injectors
// run every tick to send extra traffic. It signs with the replica's own
// key only: it cannot produce other replicas' signatures or clients'
// authenticators.
type Adversary struct {
	Net       *Net
	ID        bft.ReplicaID
	Rand      *rand.Rand
	Behaviors []Behavior
	Injectors []func(a *Adversary)
	// Ignore, if set, decides which arriving packets the replica never
	// sees (its core does not step them).
	Ignore func(p Packet) bool

	sent          []bft.Envelope // recent envelopes it sent (ring)
	heard         []Packet       // recent packets it received (ring)
	nSent, nHeard int
	// Re-proposal state: requests it proposed before, and the rewritten
	// pre-prepare per (view, seq), so every backup gets the same one.
	oldReqs  []bft.Request
	reissued map[[2]uint64]*bft.PrePrepare
	// Batches its view changes claimed without their having been
	// proposed, by digest, to answer fetches with (ServeFakes).
	fakes map[bft.Digest]*bft.Batch
	// Undecided counts the new views it sent from view changes that do
	// not decide every slot (LieUndecidingNewView).
	undecided int
	// The signatures of those new views, and how many times a correct
	// replica took one (which it must never do).
	undecidedSigs  map[string]bool
	undecidedTaken int
}

// Undecided reports how many new views the adversary sent from view
// changes that do not decide every slot, and how many times a correct
// replica took one of them without an error (never, if the replicas
// check the new-view rule).
func (a *Adversary) Undecided() (sent, taken int) { return a.undecided, a.undecidedTaken }

// noteUndecided remembers nv, which the adversary sends although its view
// changes do not decide every slot.
func (a *Adversary) noteUndecided(nv *bft.NewView) {
	a.undecided++
	if a.undecidedSigs == nil {
		a.undecidedSigs = make(map[string]bool)
	}
	a.undecidedSigs[string(nv.Sig)] = true
}

// tookUndecided counts a correct replica's taking m, if it is one of the
// undecided new views of an adversary.
func (n *Net) tookUndecided(to bft.Target, m bft.Message, err error) {
	nv, ok := m.(*bft.NewView)
	if !ok || err != nil || to.Client || n.Faulty[to.ID] {
		return
	}
	for _, a := range n.adv {
		if a.undecidedSigs[string(nv.Sig)] {
			a.undecidedTaken++
		}
	}
}

// Behavior rewrites one envelope a Byzantine replica is about to send.
type Behavior func(a *Adversary, e bft.Envelope) []bft.Envelope

const advRing = 256

// MakeByzantine marks replica id faulty (outside the checker's correct
// set) and hands its output to an adversary with these behaviors.
func (n *Net) MakeByzantine(id bft.ReplicaID, bs ...Behavior) *Adversary {
	if n.adv == nil {
		n.adv = make(map[bft.ReplicaID]*Adversary)
		n.Byzantine = n.dispatch
		n.OnTick = append(n.OnTick, func() {
			for i := 0; i < n.N; i++ {
				if a := n.adv[bft.ReplicaID(i)]; a != nil && !n.Crashed[i] {
					for _, f := range a.Injectors {
						f(a)
					}
				}
			}
		})
	}
	a := &Adversary{Net: n, ID: id, Rand: rand.New(rand.NewPCG(n.Seed, 0xbad0+uint64(id))), Behaviors: bs}
	n.adv[id] = a
	n.Faulty[id] = true
	n.Note("replica %d is Byzantine", id)
	return a
}

func (n *Net) dispatch(from bft.ReplicaID, e bft.Envelope) []bft.Envelope {
	a := n.adv[from]
	if a == nil {
		return []bft.Envelope{e}
	}
	out := []bft.Envelope{e}
	for _, b := range a.Behaviors {
		var next []bft.Envelope
		for _, e := range out {
			next = append(next, b(a, e)...)
		}
		out = next
	}
	for _, e := range out {
		a.remember(e)
	}
	return out
}

func (a *Adversary) remember(e bft.Envelope) {
	if len(a.sent) < advRing {
		a.sent = append(a.sent, e)
	} else {
		a.sent[a.nSent%advRing] = e
	}
	a.nSent++
}

func (a *Adversary) hear(p Packet) {
	if len(a.heard) < advRing {
		a.heard = append(a.heard, p)
	} else {
		a.heard[a.nHeard%advRing] = p
	}
	a.nHeard++
}

// heardSince calls f for every packet heard since *seen (at most the
// ring's worth: older ones are gone) and moves *seen past them.
func (a *Adversary) heardSince(seen *int, f func(p Packet)) {
	*seen = max(*seen, a.nHeard-advRing)
	for ; *seen < a.nHeard; *seen++ {
		f(a.heard[*seen%advRing])
	}
}

// Send injects an envelope from the adversary's replica (subject to
// network faults, not to its behaviors).
func (a *Adversary) Send(to bft.ReplicaID, m bft.Message) {
	if to == a.ID {
		return
	}
	a.Net.enqueue(bft.ToReplica(a.ID), bft.Envelope{To: bft.ToReplica(to), Msg: m})
}

func (a *Adversary) sign(m bft.Message) []byte { return a.Net.Sign(a.ID, m) }

func (a *Adversary) view() uint64 { return a.Net.Replicas[a.ID].Status().View }

func (a *Adversary) primary() bool {
	return uint64(a.ID) == a.view()%uint64(a.Net.N)
}

func (a *Adversary) randDigest() bft.Digest {
	var d bft.Digest
	for i := range d {
		d[i] = byte(a.Rand.Uint32())
	}
	return d
}

func (a *Adversary) other() bft.ReplicaID {
	for {
		if r := bft.ReplicaID(a.Rand.IntN(a.Net.N)); r != a.ID {
			return r
		}
	}
}

// Equivocate: as primary, send the pre-prepares it proposes in the
// normal case with different batches to different backups for the same
// view and sequence number, split by sequence number (pre-prepares are
// unsigned, so no backup can prove the equivocation to another):
// the real batch to half the backups and another to the rest; another
// batch to all backups but one (which then prepares at 2f backups but
// cannot commit); or a different batch to every backup. The other batch
// is the real one reversed, without its first request, empty, or with a
// request of its own added.
func Equivocate() Behavior {
	return func(a *Adversary, e bft.Envelope) []bft.Envelope {
		pp, ok := e.Msg.(*bft.PrePrepare)
		if !ok || e.To.Client {
			return []bft.Envelope{e}
		}
		to := e.To.ID
		variant := to
		switch pp.Seq % 3 {
		case 0: // half and half
			if (to+pp.Seq)%2 == 0 {
				return []bft.Envelope{e}
			}
		case 1: // all but the lowest backup get another batch
			low := uint64(0)
			if bft.ReplicaID(0) == a.ID {
				low = 1
			}
			if to == low {
				return []bft.Envelope{e}
			}
			variant = 0
		}
		alt := &bft.PrePrepare{View: pp.View, Seq: pp.Seq, Time: pp.Time}
		switch variant % 3 {
		case 0:
			for i := len(pp.Batch) - 1; i >= 0; i-- {
				alt.Batch = append(alt.Batch, pp.Batch[i])
			}
		case 1:
			if len(pp.Batch) > 0 {
				alt.Batch = append(alt.Batch, pp.Batch[1:]...)
			}
		}
		if len(alt.Batch) == 0 {
			alt.Batch = nil
		}
		if bft.BatchDigest(alt.Time, alt.Batch) == pp.Digest {
			// Same batch: add a request of the Byzantine primary's own
			// client identity (validly authenticated: a colluding client).
			r := bft.Request{Client: 1 << 30, Timestamp: pp.Seq<<8 | to, Op: []byte("equivocation")}
			a.Net.SignRequest(&r)
			alt.Batch = append(alt.Batch, r)
		}
		alt.Digest = bft.BatchDigest(alt.Time, alt.Batch)
		return []bft.Envelope{{To: e.To, Msg: alt}}
	}
}

// Repropose: as primary, add requests it proposed before (already
// executed, most likely) to the batches it proposes, the same for every
// backup, so they commit: a request must never execute twice.
func Repropose() Behavior {
	return func(a *Adversary, e bft.Envelope) []bft.Envelope {
		pp, ok := e.Msg.(*bft.PrePrepare)
		if !ok || e.To.Client {
			return []bft.Envelope{e}
		}
		if a.reissued == nil {
			a.reissued = make(map[[2]uint64]*bft.PrePrepare)
		}
		k := [2]uint64{pp.View, pp.Seq}
		if alt := a.reissued[k]; alt != nil {
			return []bft.Envelope{{To: e.To, Msg: alt}}
		}
		alt := pp
		if len(a.oldReqs) > 0 {
			alt = &bft.PrePrepare{View: pp.View, Seq: pp.Seq, Time: pp.Time}
			alt.Batch = append(append(alt.Batch, pp.Batch...), a.oldReqs[a.Rand.IntN(len(a.oldReqs))])
			alt.Digest = bft.BatchDigest(alt.Time, alt.Batch)
		}
		for _, r := range pp.Batch {
			if len(a.oldReqs) < advRing {
				a.oldReqs = append(a.oldReqs, r)
			}
		}
		if len(a.reissued) > 4*advRing {
			clear(a.reissued)
		}
		a.reissued[k] = alt
		return []bft.Envelope{{To: e.To, Msg: alt}}
	}
}

// Starve makes replica id ignore every request of client (from the
// client or forwarded by a replica) while serving everyone else: as
// primary it never proposes that client's requests, yet keeps executing
// the others', so only a timer per request can replace it.
func (n *Net) Starve(id bft.ReplicaID, client bft.ClientID) *Adversary {
	a := n.MakeByzantine(id)
	a.Ignore = func(p Packet) bool {
		r, ok := p.Msg.(*bft.Request)
		return ok && r.Client == client
	}
	return a
}

// Silent drops everything while the replica is primary (or always, if
// always), so it gives no sign of life a view change could not replace.
func Silent(always bool) Behavior {
	return func(a *Adversary, e bft.Envelope) []bft.Envelope {
		if always || a.primary() {
			return nil
		}
		return []bft.Envelope{e}
	}
}

// OnlyToF: while primary, the replica sends to only f replicas (the
// lowest IDs other than itself), so no quorum can form.
func OnlyToF() Behavior {
	return func(a *Adversary, e bft.Envelope) []bft.Envelope {
		if !a.primary() || e.To.Client {
			return []bft.Envelope{e}
		}
		f := (a.Net.N - 1) / 3
		k := 0
		for i := 0; i < a.Net.N && k < f; i++ {
			if bft.ReplicaID(i) == a.ID {
				continue
			}
			if uint64(i) == e.To.ID {
				return []bft.Envelope{e}
			}
			k++
		}
		return nil
	}
}

// Forge sends, besides (or instead of) a fraction p of its messages,
// corrupted variants: wrong results in replies to clients; another
// replica's ID in the Replica field, a stale view, a sequence number
// outside the watermarks, a conflicting digest in its prepares and
// commits (an equivocating backup), a second pre-prepare for the same
// slot, a pre-prepare whose digest does not match its batch, a
// checkpoint with a wrong state digest (validly signed).
func Forge(p float64) Behavior {
	return func(a *Adversary, e bft.Envelope) []bft.Envelope {
		if a.Rand.Float64() >= p {
			return []bft.Envelope{e}
		}
		if rep, ok := e.Msg.(*bft.Reply); ok {
			// A wrong result, as if executed (f+1 matching replies are
			// needed, so it must never be accepted).
			c := *rep
			c.Result = binary.BigEndian.AppendUint64([]byte("lie"), a.Rand.Uint64())
			return []bft.Envelope{{To: e.To, Msg: &c}}
		}
		if e.To.Client {
			return []bft.Envelope{e}
		}
		out := []bft.Envelope{e}
		add := func(m bft.Message) { out = append(out, bft.Envelope{To: e.To, Msg: m}) }
		replace := func(m bft.Message) { out[0] = bft.Envelope{To: e.To, Msg: m} }
		L := a.Net.Configs[a.ID].WatermarkWindow
		if L == 0 {
			L = 256
		}
		switch m := e.Msg.(type) {
		case *bft.Prepare:
			switch a.Rand.IntN(5) {
			case 0: // another replica's name
				c := *m
				c.Replica = a.other()
				add(&c)
			case 1: // a second prepare with another digest, after the real one
				c := *m
				c.Digest = a.randDigest()
				add(&c)
			case 2: // stale or far-future view
				c := *m
				if m.View > 0 && a.Rand.IntN(2) == 0 {
					c.View--
				} else {
					c.View += 1000
				}
				add(&c)
			case 3: // out of the watermarks
				c := *m
				c.Seq += L * (1 + uint64(a.Rand.IntN(3)))
				add(&c)
			case 4: // conflicting prepare, in place of the real one
				c := *m
				c.Digest = a.randDigest()
				replace(&c)
			}
		case *bft.Commit:
			switch a.Rand.IntN(3) {
			case 0:
				c := *m
				c.Replica = a.other()
				add(&c)
			case 1:
				c := *m
				c.Digest = a.randDigest()
				replace(&c)
			case 2:
				c := *m
				c.Seq += L
				add(&c)
			}
		case *bft.Checkpoint:
			c := *m
			c.State = a.randDigest()
			if a.Rand.IntN(2) == 0 {
				c.Seq += uint64(a.Rand.IntN(3)) * a.Net.Configs[a.ID].CheckpointInterval
			}
			c.Sig = a.sign(&c)
			replace(&c) // a bogus checkpoint instead of the real one
		case *bft.PrePrepare:
			c := *m
			switch a.Rand.IntN(3) {
			case 0: // the same slot at another time: equivocation
				c.Time++
				c.Digest = bft.BatchDigest(c.Time, c.Batch)
			case 1:
				c.Seq += L
			case 2:
				c.Digest = a.randDigest() // digest not matching the batch
			}
			add(&c)
		case *bft.ViewChange:
			c := *m
			c.Replica = a.other()
			add(&c)
		case *bft.State:
			c := *m
			c.Chunks = append([]bft.Digest(nil), m.Chunks...)
			c.Chunks[a.Rand.IntN(len(c.Chunks))] = a.randDigest()
			replace(&c)
		case *bft.Chunk:
			c := *m
			c.Data = append([]byte(nil), m.Data...)
			c.Data[a.Rand.IntN(len(c.Data))] ^= 1
			replace(&c)
		}
		return out
	}
}

// Replay: every tick, with probability p, the replica re-sends an old
// message: one it sent before, or one it received from another replica
// (forwarded under its own link, so only a new view may pass).
func Replay(p float64) func(a *Adversary) {
	return func(a *Adversary) {
		if a.Rand.Float64() >= p {
			return
		}
		if a.Rand.IntN(2) == 0 && len(a.sent) > 0 {
			e := a.sent[a.Rand.IntN(len(a.sent))]
			if !e.To.Client {
				a.Send(a.other(), e.Msg)
			}
			return
		}
		if len(a.heard) > 0 {
			p := a.heard[a.Rand.IntN(len(a.heard))]
			if !p.From.Client {
				a.Send(a.other(), p.Msg)
			}
		}
	}
}

// LieInViewChange replaces the replica's view changes, per destination,
// with lies (validly signed by itself): a P claim for a batch it never
// prepared, of the highest view a view change may claim (with a Q claim
// to match, so the lie is consistent); P claims for the batches it only
// accepted, raised to that view; Q claims for batches nobody proposed;
// no claims at all; a stable checkpoint without a valid certificate; a
// view far in the future. As a new primary it sends new views built from
// a different set of view changes for each destination (sent even when
// that set decides some sequence number neither way, which backups must
// refuse), or whose pre-prepares do not follow from their view changes.
func LieInViewChange() Behavior {
	return Lies()
}

// Lie is one of the lies of LieInViewChange.
type Lie int

const (
	// LieFakePrepared: a P claim, with a Q claim to match, of the highest
	// view a view change may name, for a batch nobody proposed (of a
	// colluding client, validly authenticated, which ServeFakes hands
	// out), at the first slot above what it executed or at a slot it
	// prepared. Every adversary makes the same batch for a slot, so
	// several colluding liars support one another's claims.
	LieFakePrepared Lie = iota + 1
	// LieRaisedPrepared: every batch it accepted claimed prepared in the
	// highest view.
	LieRaisedPrepared
	// LieFakeAccepted: Q claims for batches nobody proposed.
	LieFakeAccepted
	// LieNoClaims: no P and no Q claims.
	LieNoClaims
	// LieCheckpoint: a stable checkpoint without a valid certificate.
	LieCheckpoint
	// LieFarView: a view far in the future.
	LieFarView
	// LieBadSignature: a bad signature on an honest view change.
	LieBadSignature
	// LieUndecidingNewView: as new primary, a new view from a quorum of
	// its view changes that leaves a slot undecided (null there), if one
	// does, or else from any other quorum: different provable new views
	// to different backups.
	LieUndecidingNewView
	// LieWrongNewView: as new primary, a new view whose pre-prepares do
	// not follow from its view changes: a batch replaced by the null one
	// (or the null one by a batch nobody proposed), or an extra slot.
	LieWrongNewView
)

// Lies is LieInViewChange restricted to the given lies (all of them if
// none is given), picked at random per message and destination; a view
// change is sent honestly now and then.
func Lies(kinds ...Lie) Behavior {
	var vcLies, nvLies []Lie
	if len(kinds) == 0 {
		kinds = []Lie{LieFakePrepared, LieRaisedPrepared, LieFakeAccepted, LieNoClaims, LieCheckpoint, LieFarView, LieBadSignature, LieUndecidingNewView, LieWrongNewView}
	}
	for _, k := range kinds {
		if k == LieUndecidingNewView || k == LieWrongNewView {
			nvLies = append(nvLies, k)
		} else {
			vcLies = append(vcLies, k)
		}
	}
	return func(a *Adversary, e bft.Envelope) []bft.Envelope {
		switch m := e.Msg.(type) {
		case *bft.ViewChange:
			if len(vcLies) == 0 || a.Rand.IntN(len(vcLies)+1) == 0 {
				return []bft.Envelope{e} // honest, to this destination
			}
			lie := a.lieVC(m, vcLies[a.Rand.IntN(len(vcLies))])
			if lie == nil {
				return []bft.Envelope{e}
			}
			return []bft.Envelope{{To: e.To, Msg: lie}}
		case *bft.NewView:
			if m.Replica != a.ID || len(nvLies) == 0 || a.Rand.IntN(4) == 0 {
				return []bft.Envelope{e}
			}
			q := a.Net.N - (a.Net.N-1)/3
			if nvLies[a.Rand.IntN(len(nvLies))] == LieUndecidingNewView {
				if len(m.ViewChanges) > q && a.Rand.IntN(2) == 0 {
					// A new view built from a different quorum of view
					// changes for each destination: different
					// pre-prepares for one (view, seq), each provable,
					// or a quorum that does not decide a slot.
					return []bft.Envelope{{To: e.To, Msg: a.subsetNewView(m, q)}}
				}
				if nv := a.undecidingNewView(m); nv != nil {
					return []bft.Envelope{{To: e.To, Msg: nv}}
				}
				return []bft.Envelope{e}
			}
			c := *m
			c.PrePrepares = append([]bft.PrePrepare(nil), m.PrePrepares...)
			switch {
			case len(c.PrePrepares) > 0 && a.Rand.IntN(2) == 0:
				// Replace a re-proposed batch by a null one (or a null
				// one by an unauthorized request).
				i := a.Rand.IntN(len(c.PrePrepares))
				pp := c.PrePrepares[i]
				pp.Digest = bft.BatchDigest(0, nil)
				if pp.Digest == c.PrePrepares[i].Digest {
					pp.Digest = bft.BatchDigest(0, a.evil())
				}
				c.PrePrepares[i] = pp
			default:
				// Claim an extra slot with an unauthorized request.
				var seq uint64 = 1
				if k := len(c.PrePrepares); k > 0 {
					seq = c.PrePrepares[k-1].Seq + 1
				} else {
					for _, vc := range c.ViewChanges {
						seq = max(seq, vc.StableSeq+1)
					}
				}
				pp := bft.PrePrepare{View: c.View, Seq: seq}
				pp.Digest = bft.BatchDigest(0, a.evil())
				c.PrePrepares = append(c.PrePrepares, pp)
			}
			c.Sig = a.sign(&c)
			return []bft.Envelope{{To: e.To, Msg: &c}}
		}
		return []bft.Envelope{e}
	}
}

// evil is a batch with a request no client sent (its authenticator is
// zeros): one that must never execute.
func (a *Adversary) evil() []bft.Request {
	return []bft.Request{{Client: 1, Timestamp: 1 << 40, Op: []byte("evil"), Auth: make([]byte, a.Net.N*a.Net.MACSize())}}
}

func (a *Adversary) lieVC(vc *bft.ViewChange, kind Lie) *bft.ViewChange {
	n := a.Net
	K := n.Configs[a.ID].CheckpointInterval
	if K == 0 {
		K = 128
	}
	lie := *vc
	top := vc.View - 1 // the highest view a claim may name
	switch kind {
	case LieFakePrepared:
		// At the first slot no claim covers and this replica has not
		// executed, where it could still bind, or displacing a batch it
		// prepared (which may have committed).
		seq := max(vc.StableSeq, n.Replicas[a.ID].Status().LastExecuted)
		for _, c := range vc.Prepared {
			seq = max(seq, c.Seq)
		}
		seq++
		if a.Rand.IntN(2) == 0 && len(vc.Prepared) > 0 {
			seq = vc.Prepared[a.Rand.IntN(len(vc.Prepared))].Seq
		}
		fake := bft.Claim{View: top, Seq: seq, Digest: a.fakeBatch(seq, top)}
		lie.Prepared = append(without(vc.Prepared, seq), fake)
		lie.PrePrepared = append(append([]bft.Claim(nil), vc.PrePrepared...), fake)
	case LieRaisedPrepared:
		lie.Prepared = nil
		for _, c := range vc.PrePrepared {
			lie.Prepared = append(lie.Prepared, bft.Claim{View: top, Seq: c.Seq, Digest: c.Digest})
		}
		lie.PrePrepared = append([]bft.Claim(nil), vc.PrePrepared...)
		for i := range lie.PrePrepared {
			lie.PrePrepared[i].View = top
		}
	case LieFakeAccepted:
		// In the highest view, at up to 8 slots, crowding out its real
		// ones.
		lie.PrePrepared = nil
		L := n.Configs[a.ID].WatermarkWindow
		for s := vc.StableSeq + 1; s <= vc.StableSeq+min(L, 8); s++ {
			for k := 0; k < bft.MaxPrePrepared; k++ {
				lie.PrePrepared = append(lie.PrePrepared, bft.Claim{View: top, Seq: s, Digest: a.randDigest()})
			}
		}
	case LieNoClaims:
		lie.Prepared, lie.PrePrepared = nil, nil
	case LieCheckpoint:
		// Its own checkpoint and others' names.
		s := vc.StableSeq + K
		d := a.randDigest()
		lie.StableSeq = s
		lie.Stable = nil
		for i := 0; i < n.N && len(lie.Stable) < n.N-(n.N-1)/3; i++ {
			c := bft.Checkpoint{Seq: s, State: d, Replica: bft.ReplicaID(i)}
			c.Sig = a.sign(&c)
			lie.Stable = append(lie.Stable, c)
		}
	case LieFarView:
		lie.View = vc.View + 1000 + uint64(a.Rand.IntN(1<<20))
	case LieBadSignature:
		lie.Sig = append([]byte(nil), vc.Sig...)
		lie.Sig[len(lie.Sig)-1] ^= 0x80
		return &lie
	default:
		return nil
	}
	a.tidyClaims(&lie)
	lie.Sig = a.sign(&lie)
	return &lie
}

// fakeBatch makes the batch LieFakePrepared claims at seq in view v: a
// request of a colluding client, validly authenticated, the same for
// every adversary; it remembers it for ServeFakes and returns its digest.
func (a *Adversary) fakeBatch(seq, v uint64) bft.Digest {
	r := bft.Request{Client: 1<<30 + 1, Timestamp: seq<<20 | v&(1<<20-1), Op: []byte("fake-prepared")}
	a.Net.SignRequest(&r)
	b := &bft.Batch{Seq: seq, Requests: []bft.Request{r}}
	b.Digest = bft.BatchDigest(0, b.Requests)
	if a.fakes == nil {
		a.fakes = make(map[bft.Digest]*bft.Batch)
	}
	if len(a.fakes) > 4*advRing {
		clear(a.fakes)
	}
	a.fakes[b.Digest] = b
	return b.Digest
}

// ServeFakes answers every batch fetch for a batch its view changes
// claimed (LieFakePrepared) with that batch, which matches the digest:
// were a new view ever to re-propose one, replicas would fetch and
// execute it, and the checker would see two correct replicas disagree.
func ServeFakes() func(a *Adversary) {
	seen := 0
	return func(a *Adversary) {
		a.heardSince(&seen, func(p Packet) {
			fb, ok := p.Msg.(*bft.FetchBatch)
			if !ok || p.From.Client {
				return
			}
			if b := a.fakes[fb.Digest]; b != nil && b.Seq == fb.Seq {
				c := *b
				c.Replica = a.ID
				a.Send(bft.ReplicaID(p.From.ID), &c)
			}
		})
	}
}

// without returns the claims not for seq.
func without(cs []bft.Claim, seq uint64) []bft.Claim {
	var out []bft.Claim
	for _, c := range cs {
		if c.Seq != seq {
			out = append(out, c)
		}
	}
	return out
}

// tidyClaims puts a lying view change's claims in the form verifiers
// check (see bft.ViewChange), so that it is the lie that is tested, not
// its form: claims in (StableSeq, StableSeq+L], one P claim per sequence
// number (the last given), Q claims with distinct digests, the
// highest-view MaxPrePrepared of each sequence number, in order.
func (a *Adversary) tidyClaims(vc *bft.ViewChange) {
	L := a.Net.Configs[a.ID].WatermarkWindow
	in := func(c bft.Claim) bool { return c.Seq > vc.StableSeq && c.Seq-vc.StableSeq <= L && c.View < vc.View }
	ps := map[uint64]bft.Claim{}
	for _, c := range vc.Prepared {
		if in(c) {
			ps[c.Seq] = c
		}
	}
	vc.Prepared = nil
	for _, c := range ps {
		vc.Prepared = append(vc.Prepared, c)
	}
	slices.SortFunc(vc.Prepared, func(x, y bft.Claim) int { return cmp.Compare(x.Seq, y.Seq) })
	type key struct {
		seq uint64
		d   bft.Digest
	}
	qs := map[key]bft.Claim{}
	for _, c := range vc.PrePrepared {
		k := key{c.Seq, c.Digest}
		if o, ok := qs[k]; in(c) && (!ok || c.View > o.View) {
			qs[k] = c
		}
	}
	var all []bft.Claim
	for _, c := range qs {
		all = append(all, c)
	}
	slices.SortFunc(all, func(x, y bft.Claim) int {
		if x.Seq != y.Seq {
			return cmp.Compare(x.Seq, y.Seq)
		}
		if x.View != y.View {
			return cmp.Compare(y.View, x.View)
		}
		return bytes.Compare(x.Digest[:], y.Digest[:])
	})
	vc.PrePrepared = nil
	run := 0
	for i, c := range all {
		if i == 0 || c.Seq != all[i-1].Seq {
			run = 0
		}
		if run++; run <= bft.MaxPrePrepared {
			vc.PrePrepared = append(vc.PrePrepared, c)
		}
	}
}

// ClientAttack is a Byzantine client, ID, that every tick (with
// probability Rate) does one of the attacks enabled below. It is not in
// Net.Clients: nobody waits for its results.
type ClientAttack struct {
	ID   bft.ClientID
	Rate float64
	// Garbage: random bytes through wire.Decode; whatever decodes is
	// stepped into a replica, which must reject it. Mutated: a valid
	// encoding with bytes flipped (may decode to a valid request).
	Garbage, Mutated bool
	// BadAuth: well-formed requests with a wrong authenticator.
	BadAuth bool
	// PartialAuth: requests whose authenticator is valid only for the
	// replicas in ValidFor, sent to every replica.
	PartialAuth bool
	ValidFor    []bft.ReplicaID
	// HugeOp: validly authenticated requests with an op above
	// MaxOpSize (the configured one, MaxOpSize+1 bytes).
	HugeOp bool
	// Replay: correct clients' earlier requests, sent again from their
	// (authenticated) link, as a network attacker would.
	Replay bool
	// Flood: every tick (regardless of Rate), this many validly
	// authenticated requests of FloodSize-byte ops, with increasing
	// timestamps, to every replica.
	Flood, FloodSize int

	n    *Net
	rand *rand.Rand
	ts   uint64
	// Accepted counts garbage that a replica did not reject (a
	// violation is recorded too).
	Accepted int
}

// AddClientAttack starts a Byzantine client.
func (n *Net) AddClientAttack(c *ClientAttack) {
	c.n = n
	c.rand = rand.New(rand.NewPCG(n.Seed, 0xc11e+uint64(c.ID)))
	c.ts = 1 << 20
	n.OnTick = append(n.OnTick, c.tick)
	n.Note("client %d is Byzantine", c.ID)
}

func (c *ClientAttack) tick() {
	for k := 0; k < c.Flood; k++ {
		c.toAll(c.request(make([]byte, c.FloodSize)))
	}
	if c.rand.Float64() >= c.Rate {
		return
	}
	var kinds []func()
	if c.Garbage {
		kinds = append(kinds, c.garbage)
	}
	if c.Mutated {
		kinds = append(kinds, c.mutated)
	}
	if c.BadAuth {
		kinds = append(kinds, c.badAuth)
	}
	if c.PartialAuth {
		kinds = append(kinds, c.partial)
	}
	if c.HugeOp {
		kinds = append(kinds, c.huge)
	}
	if c.Replay {
		kinds = append(kinds, c.replay)
	}
	if len(kinds) > 0 {
		kinds[c.rand.IntN(len(kinds))]()
	}
}

func (c *ClientAttack) toAll(m bft.Message) {
	for i := 0; i < c.n.N; i++ {
		c.n.Send(bft.ToClient(c.ID), bft.Envelope{To: bft.ToReplica(bft.ReplicaID(i)), Msg: m})
	}
}

func (c *ClientAttack) request(op []byte) *bft.Request {
	c.ts++
	r := &bft.Request{Client: c.ID, Timestamp: c.ts, Op: op}
	c.n.SignRequest(r)
	r.Client = c.ID
	return r
}

func (c *ClientAttack) target() int {
	for k := 0; k < 8; k++ {
		if i := c.rand.IntN(c.n.N); !c.n.Crashed[i] {
			return i
		}
	}
	return -1
}

func (c *ClientAttack) stepDirect(m bft.Message, mustReject bool) {
	i := c.target()
	if i < 0 {
		return
	}
	err := c.n.Replicas[i].Step(bft.ToClient(c.ID), m)
	c.n.countErr(err)
	c.n.record(Event{Kind: "inject", From: bft.ToClient(c.ID), To: bft.ToReplica(bft.ReplicaID(i)), Msg: m, Err: err})
	if err == nil && mustReject {
		c.Accepted++
		c.n.Check.fail("replica %d accepted garbage from client %d: %s", i, c.ID, Describe(m))
	}
}

func (c *ClientAttack) garbage() {
	b := make([]byte, c.rand.IntN(300))
	for i := range b {
		b[i] = byte(c.rand.Uint32())
	}
	if len(b) > 0 && c.rand.IntN(2) == 0 {
		b[0] = byte(1 + c.rand.IntN(10)) // a valid type byte
	}
	m, err := wire.Decode(b)
	if err != nil {
		if !errors.Is(err, wire.ErrMalformed) {
			c.n.Check.fail("wire.Decode error %v does not wrap ErrMalformed", err)
		}
		return
	}
	c.stepDirect(m, true)
}

func (c *ClientAttack) mutated() {
	b := wire.Append(nil, c.request([]byte(fmt.Sprintf("mut%d", c.ts))))
	for k := 1 + c.rand.IntN(3); k > 0; k-- {
		b[c.rand.IntN(len(b))] ^= byte(1 + c.rand.IntN(255))
	}
	m, err := wire.Decode(b)
	if err != nil {
		return
	}
	c.stepDirect(m, false)
}

func (c *ClientAttack) badAuth() {
	r := c.request([]byte("badauth"))
	r.Auth = bytes.Clone(r.Auth)
	for i := range r.Auth {
		r.Auth[i] ^= byte(c.rand.Uint32() | 1)
	}
	c.toAll(r)
}

func (c *ClientAttack) partial() {
	r := c.request(binary.BigEndian.AppendUint64([]byte("partial"), c.ts))
	r.Auth = bytes.Clone(r.Auth)
	ms := c.n.MACSize()
	for i := 0; i < c.n.N; i++ {
		valid := false
		for _, v := range c.ValidFor {
			if int(v) == i {
				valid = true
			}
		}
		if !valid {
			r.Auth[i*ms] ^= 0xff
		}
	}
	c.toAll(r)
}

func (c *ClientAttack) huge() {
	max := c.n.Configs[0].MaxOpSize
	if max <= 0 {
		max = 64 << 10
	}
	c.toAll(c.request(make([]byte, max+1)))
}

func (c *ClientAttack) replay() {
	n := c.n
	if len(n.Check.issuedReqs) == 0 {
		return
	}
	r := n.Check.issuedReqs[c.rand.IntN(len(n.Check.issuedReqs))]
	to := c.target()
	if to < 0 {
		return
	}
	n.Send(bft.ToClient(r.Client), bft.Envelope{To: bft.ToReplica(bft.ReplicaID(to)), Msg: r})
}

// subsetNewView rebuilds nv from q of its view changes with the
// pre-prepares the new-view rule gives for them (Decide): a quorum that
// leaves some slot undecided if there is one (proposing the null batch
// there, which backups must refuse), or else one chosen at random.
func (a *Adversary) subsetNewView(nv *bft.NewView, q int) *bft.NewView {
	var vcs []bft.ViewChange
	var pps []bft.PrePrepare
	decided := true
	for try := 0; try < 8; try++ {
		sub := append([]bft.ViewChange(nil), nv.ViewChanges...)
		a.Rand.Shuffle(len(sub), func(i, j int) { sub[i], sub[j] = sub[j], sub[i] })
		sub = sub[:q]
		sortVCs(sub)
		got, ok := Decide(nv.View, sub, a.Net.N)
		if vcs == nil || !ok {
			vcs, pps, decided = sub, got, ok
		}
		if !ok {
			break
		}
	}
	c := &bft.NewView{View: nv.View, ViewChanges: vcs, PrePrepares: pps, Replica: nv.Replica}
	c.Sig = a.sign(c)
	if !decided {
		a.noteUndecided(c)
	}
	return c
}

// undecidingNewView rebuilds nv with its own view change replaced by one
// that claims, in the highest view, to have prepared a batch nobody
// proposed at the first slot above the new view's checkpoint: no other
// view change supports it, so it fails A2, and it keeps 2f+1 view changes
// from agreeing that nothing prepared there, so the slot is decided
// neither way if the others do not decide it. The new view proposes the
// null batch there anyway, which backups must refuse.
func (a *Adversary) undecidingNewView(nv *bft.NewView) *bft.NewView {
	vcs := append([]bft.ViewChange(nil), nv.ViewChanges...)
	var minS uint64
	own := -1
	for i := range vcs {
		minS = max(minS, vcs[i].StableSeq)
		if vcs[i].Replica == a.ID {
			own = i
		}
	}
	if own < 0 {
		return nil
	}
	lie := vcs[own]
	seq := max(minS, lie.StableSeq) + 1
	fake := bft.Claim{View: lie.View - 1, Seq: seq, Digest: a.fakeBatch(seq, lie.View-1)}
	lie.Prepared = append(without(lie.Prepared, seq), fake)
	a.tidyClaims(&lie)
	lie.Sig = a.sign(&lie)
	vcs[own] = lie
	pps, ok := Decide(nv.View, vcs, a.Net.N)
	c := &bft.NewView{View: nv.View, ViewChanges: vcs, PrePrepares: pps, Replica: nv.Replica}
	c.Sig = a.sign(c)
	if !ok {
		a.noteUndecided(c)
	}
	return c
}

// Decide is the new-view rule (see docs/bft.md), written here apart from
// the core's, as simply as it can be, trying every view: the
// pre-prepares a new view of view must carry given view changes vcs of a
// cluster of n replicas, and whether vcs decide every sequence number (a
// slot they do not decide gets the null batch).
func Decide(view uint64, vcs []bft.ViewChange, n int) ([]bft.PrePrepare, bool) {
	// f and the quorum from their definitions: the most faults 3f+1 <= n
	// tolerates, and the smallest q any two sets of which share f+1
	// replicas.
	f := (n - 1) / 3
	q := 1
	for 2*q-n < f+1 {
		q++
	}
	var minS uint64
	for i := range vcs {
		minS = max(minS, vcs[i].StableSeq)
	}
	maxS := minS
	for i := range vcs {
		for _, c := range vcs[i].Prepared {
			maxS = max(maxS, c.Seq)
		}
		for _, c := range vcs[i].PrePrepared {
			maxS = max(maxS, c.Seq)
		}
	}
	pOf := func(vc *bft.ViewChange, s uint64) *bft.Claim {
		for i := range vc.Prepared {
			if vc.Prepared[i].Seq == s {
				return &vc.Prepared[i]
			}
		}
		return nil
	}
	var pps []bft.PrePrepare
	decided := true
	for s := minS + 1; s <= maxS; s++ {
		var digests []bft.Digest
		noP := 0
		for i := range vcs {
			if p := pOf(&vcs[i], s); p != nil {
				digests = append(digests, p.Digest)
			} else {
				noP++
			}
			for _, c := range vcs[i].PrePrepared {
				if c.Seq == s {
					digests = append(digests, c.Digest)
				}
			}
		}
		var best *bft.Claim
		for _, d := range digests {
			for v := uint64(0); v < view; v++ {
				a1, a2 := 0, 0
				for i := range vcs {
					p := pOf(&vcs[i], s)
					if p == nil || p.View < v || (p.View == v && p.Digest == d) {
						a1++
					}
					sup := p != nil && p.Digest == d && p.View >= v
					for _, x := range vcs[i].PrePrepared {
						sup = sup || (x.Seq == s && x.Digest == d && x.View >= v)
					}
					if sup {
						a2++
					}
				}
				if a1 < q || a2 < f+1 {
					continue
				}
				if best == nil || v > best.View || (v == best.View && bytes.Compare(d[:], best.Digest[:]) < 0) {
					best = &bft.Claim{View: v, Seq: s, Digest: d}
				}
			}
		}
		pp := bft.PrePrepare{View: view, Seq: s, Digest: bft.BatchDigest(0, nil)}
		if best != nil {
			pp.Digest = best.Digest
		} else if noP < q {
			decided = false
		}
		pps = append(pps, pp)
	}
	return pps, decided
}

func sortVCs(vcs []bft.ViewChange) {
	for i := 1; i < len(vcs); i++ {
		for j := i; j > 0 && vcs[j].Replica < vcs[j-1].Replica; j-- {
			vcs[j], vcs[j-1] = vcs[j-1], vcs[j]
		}
	}
}

// Adversary returns the adversary controlling replica id, or nil if it
// is correct.
func (n *Net) Adversary(id bft.ReplicaID) *Adversary { return n.adv[id] }
