package simnet

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
)

type reqKey struct {
	client bft.ClientID
	ts     uint64
}

type seqRecord struct {
	replica int
	digest  bft.Digest
	time    time.Time
}

type resultRecord struct {
	replica int
	result  []byte
}

// Checker watches a run for safety violations; Net feeds it everything
// the correct replicas (those not marked Faulty) execute and reply, and
// every result a client accepts. It checks:
//
//   - agreement: no two correct replicas execute different batches
//     (digests) at one sequence number, nor report different results for
//     one request (client, timestamp); a replica that executed a request
//     twice would report two results;
//   - integrity: a committed request that names a correct client is one
//     that client issued, with the same operation;
//   - client safety: every result a correct client accepts equals the
//     result correct replicas executed for that request, and the request
//     is in a batch some correct replica executed (so it committed).
//
// Liveness is checked by Net.LoadLive.
type Checker struct {
	net        *Net
	seqs       map[uint64]seqRecord
	results    map[reqKey]resultRecord
	notes      map[reqKey]resultRecord // (client, number) -> payload
	committedR map[reqKey]uint64       // request -> seq of a correct replica's executed batch
	issued     map[reqKey][]byte       // requests correct clients proposed -> op
	issuedReqs []*bft.Request          // recent requests correct clients sent, for replay attacks
	Violations []string
	// Accepted counts results correct clients accepted.
	Accepted int
}

func newChecker(n *Net) *Checker {
	return &Checker{
		net:        n,
		seqs:       make(map[uint64]seqRecord),
		results:    make(map[reqKey]resultRecord),
		notes:      make(map[reqKey]resultRecord),
		committedR: make(map[reqKey]uint64),
		issued:     make(map[reqKey][]byte),
	}
}

func (c *Checker) fail(format string, args ...any) {
	msg := fmt.Sprintf("t=%d: ", c.net.Now) + fmt.Sprintf(format, args...)
	if len(c.Violations) < 20 {
		c.Violations = append(c.Violations, msg)
	}
	c.net.record(Event{Kind: "VIOLATION", Text: msg})
}

// Err returns the violations so far, nil if none.
func (c *Checker) Err() error {
	if len(c.Violations) == 0 {
		return nil
	}
	return errors.New("simnet: " + strings.Join(c.Violations, "; "))
}

func (c *Checker) correctClient(id bft.ClientID) bool {
	return id >= 1 && int(id) <= len(c.net.Clients)
}

func (c *Checker) committed(replica int, b bft.Committed) {
	if rec, ok := c.seqs[b.Seq]; ok {
		if rec.digest != b.Digest {
			c.fail("replica %d executed batch %x at seq %d, replica %d executed %x", replica, b.Digest[:4], b.Seq, rec.replica, rec.digest[:4])
		} else if !rec.time.Equal(b.Time) {
			c.fail("replica %d executed seq %d at %v, replica %d at %v", replica, b.Seq, b.Time, rec.replica, rec.time)
		}
	} else {
		c.seqs[b.Seq] = seqRecord{replica, b.Digest, b.Time}
	}
	if bft.BatchDigest(b.Proposed, b.Batch) != b.Digest {
		c.fail("replica %d executed a batch at seq %d whose digest is not %x", replica, b.Seq, b.Digest[:4])
	}
	for i := range b.Batch {
		r := &b.Batch[i]
		k := reqKey{r.Client, r.Timestamp}
		if _, ok := c.committedR[k]; !ok {
			c.committedR[k] = b.Seq
		}
		if c.correctClient(r.Client) {
			op, ok := c.issued[k]
			if !ok {
				c.fail("replica %d committed request (client %d, ts %d) at seq %d that the client never issued", replica, r.Client, r.Timestamp, b.Seq)
			} else if !bytes.Equal(op, r.Op) {
				c.fail("replica %d committed request (client %d, ts %d) at seq %d with op %q, the client issued %q", replica, r.Client, r.Timestamp, b.Seq, r.Op, op)
			}
		}
	}
}

func (c *Checker) reply(replica int, rep *bft.Reply) {
	c.agree(c.results, reqKey{rep.Client, rep.Timestamp}, replica, rep.Result, "result")
}

// notify records a notification a correct replica sent: correct replicas
// must agree on every (client, number).
func (c *Checker) notify(replica int, m *bft.Notify) {
	c.agree(c.notes, reqKey{m.Client, m.Number}, replica, m.Payload, "notification")
}

// agree records what correct replica replica sent for k, or checks it
// against what another sent.
func (c *Checker) agree(m map[reqKey]resultRecord, k reqKey, replica int, b []byte, what string) {
	if rec, ok := m[k]; ok {
		if !bytes.Equal(rec.result, b) {
			c.fail("replica %d %s %x for (client %d, %d), replica %d's was %x", replica, what, b, k.client, k.ts, rec.replica, rec.result)
		}
		return
	}
	m[k] = resultRecord{replica, bytes.Clone(b)}
}

// delivered checks a notification a correct client delivered against
// what correct replicas sent.
func (c *Checker) delivered(client int, nt bft.Note) {
	if nt.Lost != 0 {
		return
	}
	rec, ok := c.notes[reqKey{bft.ClientID(client), nt.Number}]
	switch {
	case !ok:
		c.fail("client %d delivered notification %d %q that no correct replica sent", client, nt.Number, nt.Payload)
	case !bytes.Equal(rec.result, nt.Payload):
		c.fail("client %d delivered notification %d %q, correct replicas sent %q", client, nt.Number, nt.Payload, rec.result)
	}
}

func (c *Checker) accepted(client int, d bft.Result) {
	c.Accepted++
	if d.ReadOnly {
		return // a state, not an execution: tests check what they read
	}
	k := reqKey{bft.ClientID(client), d.Timestamp}
	rec, ok := c.results[k]
	switch {
	case !ok:
		c.fail("client %d accepted result %x for ts %d that no correct replica executed", client, d.Result, d.Timestamp)
	case !bytes.Equal(rec.result, d.Result):
		c.fail("client %d accepted result %x for ts %d, correct replicas executed %x", client, d.Result, d.Timestamp, rec.result)
	}
	if _, ok := c.committedR[k]; !ok {
		c.fail("client %d accepted a result for ts %d, a request no correct replica executed in a committed batch", client, d.Timestamp)
	}
}

// propose has correct client i (index into Clients) propose op, noting
// the tick for the liveness bound. (The checker learns of the request
// when the client sends it.)
func (n *Net) propose(i int, op []byte) {
	idle := !n.Clients[i].Outstanding()
	if _, err := n.Clients[i].Propose(op); err != nil {
		panic(err)
	}
	if idle {
		n.issued[i] = n.Now
	}
}

// fill has client i propose op(i, k) for its next requests while it has
// fewer than its window (ClientConfig.Window) in flight and fewer than
// total issued.
func (n *Net) fill(i, total int, op func(c, k int) []byte) {
	c := n.Clients[i]
	for k := len(n.Results[i]) + c.InFlight(); k < total && c.InFlight() < n.window[i]; k++ {
		n.propose(i, op(i, k))
	}
}

// LoadLive is Load with a liveness bound, for after the network healed:
// each correct client completes more further requests, and every request
// must complete within bound ticks of when it was issued, or of the call
// for one issued before. It returns an error describing the first request
// that did not, or any safety violation.
func (n *Net) LoadLive(more, bound int, op func(c, k int) []byte) (maxLatency uint64, err error) {
	start := n.Now
	target := make([]int, len(n.Clients))
	for i := range n.Clients {
		target[i] = len(n.Results[i]) + more
	}
	counted := make([]int, len(n.Clients))
	for i := range n.Clients {
		counted[i] = len(n.Results[i])
	}
	for {
		done := true
		for i, c := range n.Clients {
			since := max(n.issued[i], start)
			if len(n.Results[i]) > counted[i] {
				// Completed since last tick: the latency of that request.
				if l := n.Now - since; l > maxLatency {
					maxLatency = l
				}
				counted[i] = len(n.Results[i])
				if c.Outstanding() {
					// A pipelined one: the next is timed from now.
					n.issued[i], since = n.Now, n.Now
				}
			}
			if len(n.Results[i]) >= target[i] {
				continue
			}
			done = false
			if !c.Outstanding() {
				n.fill(i, target[i], op)
				continue
			}
			n.fill(i, target[i], op)
			if n.Now-since > uint64(bound) {
				return maxLatency, fmt.Errorf("simnet: liveness: client %d's request (issued tick %d) not done after %d ticks of a healed network", i+1, n.issued[i], bound)
			}
		}
		if err := n.Check.Err(); err != nil {
			return maxLatency, err
		}
		if done {
			return maxLatency, nil
		}
		n.Tick()
	}
}

// Heal stops every network fault: no loss, duplication, delay,
// reordering or partition. Byzantine replicas and clients stay.
func (n *Net) Heal() {
	n.DropRate, n.DupRate, n.MaxDelay, n.Reorder, n.Block, n.Drop = 0, 0, 0, false, nil, nil
	n.Note("network healed")
}

// isFaulty reports whether a sender is outside the correct set: a
// Byzantine replica, or a client that is not one of Clients.
func (n *Net) isFaulty(t bft.Target) bool {
	if t.Client {
		return t.ID < 1 || t.ID > uint64(len(n.Clients))
	}
	return t.ID < uint64(n.N) && n.Faulty[t.ID]
}

// Sign returns replica id's signature over m, with whichever
// authenticator the net uses: what a Byzantine replica can sign.
func (n *Net) Sign(id bft.ReplicaID, m bft.Message) []byte { return n.Configs[id].Auth.Sign(m) }

// SignRequest fills r.Auth with a valid authenticator for r.Client (any
// client ID with the HMAC stand-ins; with RealAuth, a provisioned one,
// else random bytes of the right size).
func (n *Net) SignRequest(r *bft.Request) {
	if n.cluster == nil {
		n.Keys.SignRequest(r)
		return
	}
	a := n.clientAuth[r.Client]
	if a == nil {
		var err error
		if a, err = auth.NewClientAuth(n.cluster, r.Client); err != nil {
			r.Auth = make([]byte, n.N*auth.MACSize) // unknown client: never valid
			return
		}
		n.clientAuth[r.Client] = a
	}
	a.Sign(r)
}

// MACSize is the size of one replica's entry in a request authenticator.
func (n *Net) MACSize() int {
	if n.cluster != nil {
		return auth.MACSize
	}
	return 32
}
