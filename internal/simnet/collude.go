package simnet

import "github.com/rubin-go/rubin/bft"

// OmitCertificates sends the replica's view changes without any of its P
// claims (validly signed by itself): a lie about a view change nobody can
// detect, since a replica may have prepared nothing. A new view must
// still keep every committed request, from the correct replicas' view
// changes.
func OmitCertificates() Behavior {
	return omitClaims(false)
}

// OmitClaims sends the replica's view changes without any claim, P or Q
// (validly signed by itself): it claims to have accepted nothing either,
// so it supports no batch a new view could re-propose.
func OmitClaims() Behavior {
	return omitClaims(true)
}

func omitClaims(q bool) Behavior {
	return func(a *Adversary, e bft.Envelope) []bft.Envelope {
		vc, ok := e.Msg.(*bft.ViewChange)
		if !ok || (len(vc.Prepared) == 0 && (!q || len(vc.PrePrepared) == 0)) {
			return []bft.Envelope{e}
		}
		lie := *vc
		lie.Prepared = nil
		if q {
			lie.PrePrepared = nil
		}
		lie.Sig = a.sign(&lie)
		return []bft.Envelope{{To: e.To, Msg: &lie}}
	}
}

// Accomplice makes the replica prepare and commit every
// pre-prepare it hears, in the normal case or in a new view, whatever its
// own log holds: the most a single Byzantine vote can do to help a
// conflicting batch commit.
func Accomplice() func(a *Adversary) {
	seen := 0
	return func(a *Adversary) {
		a.heardSince(&seen, func(p Packet) {
			if p.From.Client {
				return
			}
			switch m := p.Msg.(type) {
			case *bft.PrePrepare:
				a.voteFor(m)
			case *bft.NewView:
				for i := range m.PrePrepares {
					a.voteFor(&m.PrePrepares[i])
				}
			}
		})
	}
}

func (a *Adversary) voteFor(pp *bft.PrePrepare) {
	if uint64(a.ID) == pp.View%uint64(a.Net.N) {
		return // the primary sends no prepare
	}
	p := &bft.Prepare{View: pp.View, Seq: pp.Seq, Digest: pp.Digest, Replica: a.ID}
	c := &bft.Commit{View: pp.View, Seq: pp.Seq, Digest: pp.Digest, Replica: a.ID}
	for i := 0; i < a.Net.N; i++ {
		a.Send(bft.ReplicaID(i), p)
		a.Send(bft.ReplicaID(i), c)
	}
}

// ForgeBatches answers every batch fetch with requests that do not match
// the digest it claims: the fetching replica must reject the answer and
// ask another replica that vouched for the batch.
func ForgeBatches() Behavior {
	return func(a *Adversary, e bft.Envelope) []bft.Envelope {
		b, ok := e.Msg.(*bft.Batch)
		if !ok {
			return []bft.Envelope{e}
		}
		lie := *b
		lie.Requests = append([]bft.Request(nil), b.Requests...)
		lie.Requests[0].Op = []byte("evil") // as many requests, another digest
		return []bft.Envelope{{To: e.To, Msg: &lie}}
	}
}
