package bft

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
)

// Notifications. While it executes a request the application may emit
// notifications for any client (ExecContext.Notify). Each replica numbers
// a client's notifications from 1 in the order they are emitted, which is
// the execution order, so every correct replica gives a notification the
// same number; it sends each one to its client at once, and keeps the
// last Config.NoteRetain of them per client (at most NoteRetainBytes of
// payload, but always the latest) as replicated state, part of every
// checkpoint, to send again on FetchNotes. The client delivers number k
// once f+1 replicas sent it identically (Client.StepNotify). A reply
// carries the number of its client's last notification at the time it
// executed, so a client learns of notifications it missed, and of the
// ones that precede a result.

// keptNote is a notification kept for its client.
type keptNote struct {
	num     uint64
	payload []byte
}

// noteLog is one client's notification state.
type noteLog struct {
	next  uint64 // the number the next notification gets
	kept  []keptNote
	bytes int // payload bytes kept
}

// Notify emits a notification with payload for client to, numbered after
// to's previous ones; the replicas send it to the client, which delivers
// it once f+1 of them sent it identically (see Client.StepNotify). It may
// be called only during the Execute that ctx was given to, and copies
// payload. It reports false, and emits nothing, if payload is longer than
// Config.MaxNoteBytes, or outside Execute (a context the core did not
// make, or one kept after Execute returned).
func (c ExecContext) Notify(to ClientID, payload []byte) bool {
	if c.r == nil || !c.r.executing || len(payload) > c.r.cfg.MaxNoteBytes {
		return false
	}
	c.r.emitNote(to, payload)
	return true
}

func (r *Replica) emitNote(to ClientID, payload []byte) {
	l := r.notes[to]
	if l == nil {
		l = &noteLog{next: 1}
		r.notes[to] = l
	}
	p := bytes.Clone(payload)
	if len(p) == 0 {
		p = nil
	}
	n := l.next
	l.next++
	l.kept = append(l.kept, keptNote{num: n, payload: p})
	l.bytes += len(p)
	drop := 0
	for len(l.kept)-drop > r.cfg.NoteRetain || (l.bytes > r.cfg.NoteRetainBytes && len(l.kept)-drop > 1) {
		l.bytes -= len(l.kept[drop].payload)
		drop++
	}
	if drop > 0 {
		l.kept = slices.Delete(l.kept, 0, drop)
	}
	r.out = append(r.out, Envelope{To: ToClient(to), Msg: &Notify{Client: to, Number: n, Oldest: l.kept[0].num, Replica: r.id, Payload: p}})
}

// lastNote is the number of client's last notification, 0 if none.
func (r *Replica) lastNote(c ClientID) uint64 {
	if l := r.notes[c]; l != nil {
		return l.next - 1
	}
	return 0
}

// onFetchNotes sends the client on link from the notifications it keeps
// for it from m.From on, at most once a tick per client.
func (r *Replica) onFetchNotes(from ClientID, m *FetchNotes) error {
	if m.Client != from {
		return fmt.Errorf("%w: notifications of client %d fetched on the link of client %d", ErrForged, m.Client, from)
	}
	if r.noteServeTick != r.now {
		r.noteServeTick = r.now
		clear(r.noteServed)
	}
	if r.noteServed[from] {
		return fmt.Errorf("%w: second notification fetch of client %d in one tick", ErrDuplicate, from)
	}
	if len(r.noteServed) >= r.cfg.MaxPending {
		return fmt.Errorf("%w: %d notification fetches this tick", ErrFull, len(r.noteServed))
	}
	r.noteServed[from] = true
	l := r.notes[from]
	if l == nil || m.From >= l.next {
		return fmt.Errorf("%w: no notification of client %d from %d on", ErrStale, from, m.From)
	}
	oldest := l.kept[0].num
	for _, k := range l.kept {
		if k.num >= m.From {
			r.out = append(r.out, Envelope{To: ToClient(from), Msg: &Notify{Client: from, Number: k.num, Oldest: oldest, Replica: r.id, Payload: k.payload}})
		}
	}
	return nil
}

// noteState lists the notification state for a checkpoint, by client.
func (r *Replica) noteState() []clientNotes {
	out := make([]clientNotes, 0, len(r.notes))
	for c, l := range r.notes {
		out = append(out, clientNotes{client: c, next: l.next, kept: l.kept})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].client < out[j].client })
	return out
}

// installNotes replaces the notification state with a checkpoint's.
func (r *Replica) installNotes(ns []clientNotes) {
	clear(r.notes)
	for _, cn := range ns {
		l := &noteLog{next: cn.next, kept: slices.Clone(cn.kept)}
		for _, k := range l.kept {
			l.bytes += len(k.payload)
		}
		r.notes[cn.client] = l
	}
}
