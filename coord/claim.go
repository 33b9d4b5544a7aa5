package coord

import (
	"fmt"
	"maps"
	"slices"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord/proto"
)

// Claims. A gateway acts under a gateway ID and a pool of the cluster's
// client identities; two gateways running with the same ID, or sharing
// an identity, break each other (each bft identity's requests must come
// from one client core, and sessions and notifications follow the ID).
// So a gateway claims its ID and identities when it starts, and renews
// the claim while it runs: the replicas keep, for each gateway ID, the
// holder (a number the gateway drew when it started), the identities and
// the agreed time of the last renewal. A claim not renewed for
// Config.ClaimLease lapses. A ClaimOp that conflicts with a live claim
// of another holder (the same ID, or an identity in common) is refused
// with StatusHeld and changes nothing; a gateway told so at start
// refuses to start, and one told so later stops.

// StatusHeld: the answer to a ClaimOp that conflicts with another
// gateway's live claim.
const StatusHeld Status = 5

// maxClaims bounds the live claims the replicas keep, and
// maxClaimRanges the ranges of identities of one claim.
const (
	maxClaims      = 1024
	maxClaimRanges = 1024
)

// claim is a gateway's claim of its ID and identities.
type claim struct {
	holder  int64
	ranges  [][2]uint32 // identities, as sorted disjoint ranges [first, last]
	renewed int64       // agreed ms of the last renewal
}

// ClaimOp is the op that claims, or renews the claim of, the gateway ID
// gateway and the client identities ids for holder, a number the gateway
// drew at random when it started. Holder 0 only asks: the answer is the
// same, and nothing is recorded.
func ClaimOp(gateway, holder int64, ids []bft.ClientID) []byte {
	rs := toRanges(ids)
	e := proto.NewEncoder(make([]byte, 0, 24+8*len(rs)))
	e.Int32(kindClaim)
	e.Int64(gateway)
	e.Int64(holder)
	e.Int32(int32(len(rs)))
	for _, r := range rs {
		e.Int32(int32(r[0]))
		e.Int32(int32(r[1]))
	}
	return e.Bytes()
}

// toRanges turns identities into sorted disjoint ranges.
func toRanges(ids []bft.ClientID) [][2]uint32 {
	s := slices.Sorted(slices.Values(ids))
	s = slices.Compact(s)
	var rs [][2]uint32
	for _, id := range s {
		if n := len(rs); n > 0 && uint64(rs[n-1][1])+1 == uint64(id) {
			rs[n-1][1] = uint32(id)
			continue
		}
		rs = append(rs, [2]uint32{uint32(id), uint32(id)})
	}
	return rs
}

// decodeRanges reads what ClaimOp wrote after the holder, checking that
// the ranges are sorted and disjoint.
func decodeRanges(d *proto.Decoder) [][2]uint32 {
	n := d.Int32()
	if n < 0 || n > maxClaimRanges || int(n)*8 > d.Len() {
		d.Fail(fmt.Errorf("claim of %d ranges", n))
		return nil
	}
	rs := make([][2]uint32, n)
	for i := range rs {
		rs[i] = [2]uint32{uint32(d.Int32()), uint32(d.Int32())}
		if rs[i][0] > rs[i][1] || i > 0 && rs[i][0] <= rs[i-1][1] {
			d.Fail(fmt.Errorf("claim ranges out of order"))
			return nil
		}
	}
	return rs
}

// ClaimResult is the answer to a ClaimOp.
type ClaimResult struct {
	// Status is StatusOK if the claim is the gateway's (now, or already:
	// a read-only ClaimOp records nothing), StatusHeld if another
	// gateway's live claim conflicts.
	Status Status
	// Gateway and Holder are the conflicting claim's ID and holder, and
	// Renewed the agreed time of its last renewal (Unix ms). With
	// StatusHeld and Gateway -1, the replicas keep as many claims as
	// they take.
	Gateway, Holder, Renewed int64
}

// ParseClaimResult decodes the result of a ClaimOp.
func ParseClaimResult(b []byte) (ClaimResult, error) {
	d := proto.NewDecoder(b)
	r := ClaimResult{Status: Status(d.Int32()), Gateway: d.Int64(), Holder: d.Int64(), Renewed: d.Int64()}
	return r, finish(d, "claim")
}

func appendClaimResult(b []byte, r ClaimResult) []byte {
	e := proto.NewEncoder(b)
	e.Int32(int32(r.Status))
	e.Int64(r.Gateway)
	e.Int64(r.Holder)
	e.Int64(r.Renewed)
	return e.Bytes()
}

// checkClaim answers a ClaimOp at agreed time now without recording it.
// With lapse false every claim counts, lapsed or not: the read-only
// answer, which must not depend on a replica's clock.
func (a *App) checkClaim(o op, now int64, lapse bool) ClaimResult {
	live := func(c *claim) bool { return !lapse || now-c.renewed < a.cfg.ClaimLease }
	if c := a.claims[o.gateway]; c != nil && c.holder != o.holder && live(c) {
		return ClaimResult{Status: StatusHeld, Gateway: o.gateway, Holder: c.holder, Renewed: c.renewed}
	}
	for _, gw := range slices.Sorted(maps.Keys(a.claims)) {
		c := a.claims[gw]
		if c.holder != o.holder && live(c) && overlap(c.ranges, o.ranges) {
			return ClaimResult{Status: StatusHeld, Gateway: gw, Holder: c.holder, Renewed: c.renewed}
		}
	}
	if a.claims[o.gateway] == nil && len(a.claims) >= maxClaims {
		return ClaimResult{Status: StatusHeld, Gateway: -1}
	}
	return ClaimResult{Status: StatusOK}
}

// claim runs a ClaimOp: it drops the lapsed claims, then records the
// claim unless another live one conflicts or its holder is 0.
func (a *App) claim(o op, now int64) ClaimResult {
	for gw, c := range a.claims {
		if now-c.renewed >= a.cfg.ClaimLease {
			delete(a.claims, gw)
		}
	}
	r := a.checkClaim(o, now, true)
	if r.Status == StatusOK && o.holder != 0 {
		a.claims[o.gateway] = &claim{holder: o.holder, ranges: o.ranges, renewed: now}
	}
	return r
}

// overlap reports whether two sorted lists of disjoint ranges share a
// value.
func overlap(a, b [][2]uint32) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i][1] < b[j][0]:
			i++
		case b[j][1] < a[i][0]:
			j++
		default:
			return true
		}
	}
	return false
}
