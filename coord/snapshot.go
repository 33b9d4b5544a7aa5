package coord

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/rubin-go/rubin/coord/proto"
	"github.com/rubin-go/rubin/coord/tree"
)

// snapshotVersion starts every snapshot. Version 1 lacked the agreed
// time of the last op, versions 1 and 2 the gateways' claims, and
// versions 1 to 3 the sessions' connection numbers; Restore still reads
// them.
const snapshotVersion int32 = 4

// ErrSnapshot is wrapped by the errors of Restore.
var ErrSnapshot = errors.New("coord: bad snapshot")

// Snapshot encodes the App's state canonically: the agreed times of the
// next expiry look and sweep and of the last op, every session's gateway and queued events in
// id order, the tree's own snapshot, then the gateways' claims in
// gateway order.
func (a *App) Snapshot() []byte {
	e := proto.NewEncoder(nil)
	e.Int32(snapshotVersion)
	e.Int64(a.nextExpire)
	e.Int64(a.nextSweep)
	e.Int64(a.last)
	ids := slices.Sorted(maps.Keys(a.sessions))
	e.Int32(int32(len(ids)))
	for _, id := range ids {
		s := a.sessions[id]
		e.Int64(id)
		e.Int64(s.gateway)
		e.Int32(s.conn)
		e.Bool(s.lost)
		e.Buffer(s.events)
	}
	e.Buffer(a.tree.Snapshot())
	gws := slices.Sorted(maps.Keys(a.claims))
	e.Int32(int32(len(gws)))
	for _, gw := range gws {
		c := a.claims[gw]
		e.Int64(gw)
		e.Int64(c.holder)
		e.Int64(c.renewed)
		e.Int32(int32(len(c.ranges)))
		for _, r := range c.ranges {
			e.Int32(int32(r[0]))
			e.Int32(int32(r[1]))
		}
	}
	return e.Bytes()
}

// Restore replaces the state with a snapshot taken by Snapshot. It checks
// that the sessions are the tree's and their queues within
// Config.MaxQueuedBytes and MaxQueuedTotal; on an error the state is
// unchanged.
func (a *App) Restore(b []byte) error {
	d := proto.NewDecoder(b)
	v := d.Int32()
	if (v < 1 || v > snapshotVersion) && d.Err() == nil {
		return fmt.Errorf("%w: version %d", ErrSnapshot, v)
	}
	nextExpire, nextSweep, lastOp := d.Int64(), d.Int64(), int64(0)
	if v >= 2 {
		lastOp = d.Int64()
	}
	n := d.Int32()
	if n < 0 || int(n)*21 > d.Len() {
		return fmt.Errorf("%w: %d sessions in %d bytes", ErrSnapshot, n, len(b))
	}
	sessions := make(map[int64]*session, n)
	last, queued := int64(0), 0
	for i := range n {
		id := d.Int64()
		s := &session{id: id, gateway: d.Int64()}
		if v >= 4 {
			s.conn = d.Int32()
		}
		s.lost, s.events = d.Bool(), d.Buffer()
		if d.Err() != nil {
			break
		}
		if i > 0 && id <= last || len(s.events) > a.cfg.MaxQueuedBytes {
			return fmt.Errorf("%w: session %#x out of order or with too many events", ErrSnapshot, id)
		}
		if len(s.events) == 0 {
			s.events = nil
		}
		if queued += len(s.events); queued > a.cfg.MaxQueuedTotal {
			return fmt.Errorf("%w: more than %d bytes of events", ErrSnapshot, a.cfg.MaxQueuedTotal)
		}
		last = id
		sessions[id] = s
	}
	ts := d.Buffer()
	claims := make(map[int64]*claim)
	if v >= 3 {
		n := d.Int32()
		if n < 0 || n > maxClaims || int(n)*28 > d.Len() {
			return fmt.Errorf("%w: %d claims in %d bytes", ErrSnapshot, n, len(b))
		}
		for i := range n {
			gw := d.Int64()
			c := &claim{holder: d.Int64(), renewed: d.Int64()}
			c.ranges = decodeRanges(d)
			if d.Err() != nil {
				break
			}
			if i > 0 && gw <= last {
				return fmt.Errorf("%w: claim of gateway %d out of order", ErrSnapshot, gw)
			}
			last = gw
			claims[gw] = c
		}
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	if d.Len() != 0 {
		return fmt.Errorf("%w: %d bytes too many", ErrSnapshot, d.Len())
	}
	t, err := tree.Restore(a.cfg.Tree, ts)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	if !slices.Equal(t.Sessions(), slices.Sorted(maps.Keys(sessions))) {
		return fmt.Errorf("%w: sessions differ from the tree's", ErrSnapshot)
	}
	a.tree, a.sessions, a.queued, a.nextExpire, a.nextSweep, a.last, a.claims = t, sessions, queued, nextExpire, nextSweep, lastOp, claims
	return nil
}
