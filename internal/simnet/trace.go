package simnet

import (
	"fmt"
	"strings"

	"github.com/rubin-go/rubin/bft"
)

// traceLen is how many recent events Net keeps for failure reports.
const traceLen = 48

// Event is one thing that happened in the simulation, for traces.
type Event struct {
	At       uint64
	Kind     string // deliver, exec, codec, note, ...
	From, To bft.Target
	Msg      bft.Message
	Err      error
	Text     string
}

func (n *Net) record(e Event) {
	e.At = n.Now
	n.trace[n.traceN%traceLen] = e
	n.traceN++
}

// Note records a free-form event (a fault starting or stopping) in the
// trace.
func (n *Net) Note(format string, args ...any) {
	n.record(Event{Kind: "note", Text: fmt.Sprintf(format, args...)})
}

// Trace formats the last k events (at most traceLen), oldest first.
func (n *Net) Trace(k int) string {
	if k > traceLen {
		k = traceLen
	}
	if uint64(k) > n.traceN {
		k = int(n.traceN)
	}
	var b strings.Builder
	for j := n.traceN - uint64(k); j < n.traceN; j++ {
		e := n.trace[j%traceLen]
		fmt.Fprintf(&b, "  t=%d %s", e.At, e.Kind)
		switch e.Kind {
		case "note", "VIOLATION":
			fmt.Fprintf(&b, " %s", e.Text)
		case "exec":
			fmt.Fprintf(&b, " %s %s", tname(e.From), e.Text)
		default:
			fmt.Fprintf(&b, " %s->%s %s", tname(e.From), tname(e.To), Describe(e.Msg))
		}
		if e.Err != nil {
			fmt.Fprintf(&b, " err=%v", e.Err)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Report describes the cluster for a failure message: the checker's
// violations, each replica's status and the last events.
func (n *Net) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, tick %d, delivered %d, codec errors %d, step errors %v\n", n.Seed, n.Now, n.Delivered, n.CodecErrors, n.errSummary())
	for _, v := range n.Check.Violations {
		fmt.Fprintf(&b, "VIOLATION: %s\n", v)
	}
	for i, r := range n.Replicas {
		s := r.Status()
		tag := ""
		if n.Faulty[i] {
			tag += " byzantine"
		}
		if n.Crashed[i] {
			tag += " crashed"
		}
		fmt.Fprintf(&b, "replica %d%s: view %d changing=%v exec %d stable %d known %d pending %d vcs %d nvs %d st %d\n",
			i, tag, s.View, s.ViewChanging, s.LastExecuted, s.Stable, s.KnownStable, s.Pending, s.ViewChanges, s.NewViews, s.StateTransfers)
	}
	for i, c := range n.Clients {
		fmt.Fprintf(&b, "client %d: %d results, outstanding %v since tick %d\n", i+1, len(n.Results[i]), c.Outstanding(), n.issued[i])
	}
	b.WriteString("last events:\n")
	b.WriteString(n.Trace(traceLen))
	return b.String()
}

func (n *Net) errSummary() string {
	var parts []string
	for _, s := range sentinels {
		if c := n.Errors[s]; c > 0 {
			parts = append(parts, fmt.Sprintf("%q:%d", strings.TrimPrefix(s.Error(), "bft: "), c))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func tname(t bft.Target) string {
	if t.Client {
		return fmt.Sprintf("c%d", t.ID)
	}
	return fmt.Sprintf("r%d", t.ID)
}

// Describe is a one-line summary of a message.
func Describe(m bft.Message) string {
	switch m := m.(type) {
	case nil:
		return "<nil>"
	case *bft.Request:
		if m.ReadOnly {
			return fmt.Sprintf("Request{c%d ts%d read%d op%dB}", m.Client, m.Timestamp, m.Nonce, len(m.Op))
		}
		return fmt.Sprintf("Request{c%d ts%d op%dB}", m.Client, m.Timestamp, len(m.Op))
	case *bft.Reply:
		if m.ReadOnly {
			return fmt.Sprintf("Reply{v%d c%d ts%d read%d r%d}", m.View, m.Client, m.Timestamp, m.Nonce, m.Replica)
		}
		return fmt.Sprintf("Reply{v%d c%d ts%d r%d}", m.View, m.Client, m.Timestamp, m.Replica)
	case *bft.PrePrepare:
		return fmt.Sprintf("PrePrepare{v%d s%d d%x %dreq}", m.View, m.Seq, m.Digest[:3], len(m.Batch))
	case *bft.Prepare:
		return fmt.Sprintf("Prepare{v%d s%d d%x r%d}", m.View, m.Seq, m.Digest[:3], m.Replica)
	case *bft.Commit:
		return fmt.Sprintf("Commit{v%d s%d d%x r%d}", m.View, m.Seq, m.Digest[:3], m.Replica)
	case *bft.Checkpoint:
		return fmt.Sprintf("Checkpoint{s%d d%x r%d}", m.Seq, m.State[:3], m.Replica)
	case *bft.ViewChange:
		return fmt.Sprintf("ViewChange{v%d stable%d %dP %dQ r%d}", m.View, m.StableSeq, len(m.Prepared), len(m.PrePrepared), m.Replica)
	case *bft.NewView:
		return fmt.Sprintf("NewView{v%d %dvcs %dpps r%d}", m.View, len(m.ViewChanges), len(m.PrePrepares), m.Replica)
	case *bft.FetchState:
		return fmt.Sprintf("FetchState{s%d r%d}", m.Seq, m.Replica)
	case *bft.State:
		return fmt.Sprintf("State{s%d r%d %d bytes}", m.Seq, m.Replica, m.Length)
	case *bft.FetchChunk:
		return fmt.Sprintf("FetchChunk{s%d #%d r%d}", m.Seq, m.Index, m.Replica)
	case *bft.Chunk:
		return fmt.Sprintf("Chunk{s%d #%d r%d %d bytes}", m.Seq, m.Index, m.Replica, len(m.Data))
	case *bft.FetchBatch:
		return fmt.Sprintf("FetchBatch{s%d d%x r%d}", m.Seq, m.Digest[:3], m.Replica)
	case *bft.Batch:
		return fmt.Sprintf("Batch{s%d d%x %dreq r%d}", m.Seq, m.Digest[:3], len(m.Requests), m.Replica)
	}
	return fmt.Sprintf("%T", m)
}
