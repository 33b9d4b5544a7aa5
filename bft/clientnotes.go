package bft

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
)

// Note is a notification the client delivers (see Notify): the payload
// that f+1 replicas sent for its number. A Note with Lost set stands for
// notifications Number to Number+Lost-1 that the client will not get: f+1
// replicas no longer keep them (Config.NoteRetain); its Payload is nil.
type Note struct {
	Number  uint64
	Payload []byte
	Lost    uint64
}

// noteQueue is a client's side of notifications: the copies replicas sent
// for the next NoteWindow numbers, at most one per replica per number and
// NoteBuffer payload bytes per replica, delivered in number order once
// f+1 copies agree. What a Byzantine replica sends costs the client at
// most its own share of the window and the buffer.
type noteQueue struct {
	c      *Client
	next   uint64                 // the number to deliver next
	copies map[uint64]*noteCopies // numbers in [next, next+NoteWindow)
	bytes  []int                  // payload bytes buffered, per replica
	oldest []uint64               // the highest Oldest each replica reported
	seen   []uint64               // the highest number each replica sent
	known  uint64                 // the highest Reply.Notes of an accepted result
	timer  int                    // ticks the client knew of undelivered notes
	ready  []Note
}

// noteCopies holds one number's copies, per replica (nil: none).
type noteCopies struct {
	got     []bool
	payload [][]byte
}

func (q *noteQueue) init(c *Client) {
	q.c = c
	q.next = c.cfg.FirstNote
	q.copies = make(map[uint64]*noteCopies)
	q.bytes = make([]int, c.cfg.N)
	q.oldest = make([]uint64, c.cfg.N)
	q.seen = make([]uint64, c.cfg.N)
}

// StepNotify takes a notification from replica from (as the authenticated
// link says). Delivered notifications come in a later Ready's Notes.
func (c *Client) StepNotify(from ReplicaID, m *Notify) error {
	q := &c.notes
	switch {
	case m == nil:
		return fmt.Errorf("%w: nil notification", ErrInvalid)
	case uint64(from) >= uint64(c.cfg.N):
		return fmt.Errorf("%w: notification from %d, not a replica", ErrInvalid, from)
	case m.Replica != from:
		return fmt.Errorf("%w: notification claims replica %d, sent by %d", ErrForged, m.Replica, from)
	case m.Client != c.cfg.ID:
		return fmt.Errorf("%w: notification for client %d", ErrInvalid, m.Client)
	case m.Number == 0 || m.Oldest == 0 || m.Oldest > m.Number:
		return fmt.Errorf("%w: notification %d, oldest kept %d", ErrInvalid, m.Number, m.Oldest)
	}
	q.oldest[from] = max(q.oldest[from], m.Oldest)
	q.seen[from] = max(q.seen[from], m.Number)
	q.skipLost()
	if m.Number < q.next {
		return fmt.Errorf("%w: notification %d, delivered up to %d", ErrStale, m.Number, q.next-1)
	}
	if m.Number-q.next >= uint64(c.cfg.NoteWindow) {
		return fmt.Errorf("%w: notification %d beyond the window from %d", ErrWatermark, m.Number, q.next)
	}
	cp := q.copies[m.Number]
	if cp == nil {
		cp = &noteCopies{got: make([]bool, c.cfg.N), payload: make([][]byte, c.cfg.N)}
		q.copies[m.Number] = cp
	}
	if cp.got[from] {
		return fmt.Errorf("%w: notification %d from replica %d", ErrDuplicate, m.Number, from)
	}
	if q.bytes[from]+len(m.Payload) > c.cfg.NoteBuffer {
		return fmt.Errorf("%w: %d notification bytes buffered from replica %d", ErrFull, q.bytes[from], from)
	}
	cp.got[from], cp.payload[from] = true, m.Payload
	q.bytes[from] += len(m.Payload)
	q.deliver()
	return nil
}

// deliver delivers the next numbers while f+1 copies agree.
func (q *noteQueue) deliver() {
	for {
		cp := q.copies[q.next]
		if cp == nil {
			return
		}
		var agreed []byte
		found := false
		for i, p := range cp.payload {
			if !cp.got[i] {
				continue
			}
			k := 0
			for j := range cp.payload {
				if cp.got[j] && bytes.Equal(p, cp.payload[j]) {
					k++
				}
			}
			if k >= q.c.f+1 {
				agreed, found = p, true
				break
			}
		}
		if !found {
			return
		}
		q.ready = append(q.ready, Note{Number: q.next, Payload: agreed})
		q.drop(q.next)
		q.next++
		q.timer = 0
	}
}

// drop forgets number n's copies.
func (q *noteQueue) drop(n uint64) {
	if cp := q.copies[n]; cp != nil {
		for i, p := range cp.payload {
			q.bytes[i] -= len(p)
		}
		delete(q.copies, n)
	}
}

// skipLost reports as lost the numbers below the (f+1)-th highest Oldest
// the replicas reported: at least one correct replica no longer keeps
// them, so they were dropped from the replicated state.
func (q *noteQueue) skipLost() {
	gone := fPlusOneth(q.oldest, q.c.f)
	if gone <= q.next {
		return
	}
	for n := range q.copies {
		if n < gone {
			q.drop(n)
		}
	}
	q.ready = append(q.ready, Note{Number: q.next, Lost: gone - q.next})
	q.next = gone
	q.timer = 0
	q.deliver()
}

// fPlusOneth returns the (f+1)-th highest of vs: a value that at least
// one correct replica reached.
func fPlusOneth(vs []uint64, f int) uint64 {
	s := slices.Clone(vs)
	slices.SortFunc(s, func(a, b uint64) int { return cmp.Compare(b, a) })
	return s[f]
}

// tick asks the replicas for the notifications the client knows it
// lacks, every RetransmitTicks while it lacks them: it knows of those
// below the count an accepted result carried, and of those f+1 replicas
// sent.
func (q *noteQueue) tick() {
	if max(q.known, fPlusOneth(q.seen, q.c.f)) < q.next {
		q.timer = 0
		return
	}
	q.timer++
	if q.timer < q.c.cfg.RetransmitTicks {
		return
	}
	q.timer = 0
	q.c.toAll(&FetchNotes{Client: q.c.cfg.ID, From: q.next})
}

// NextNote is the number of the next notification the client delivers.
func (c *Client) NextNote() uint64 { return c.notes.next }
