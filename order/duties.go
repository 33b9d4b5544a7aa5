package order

import (
	"context"
	"crypto/ed25519"
	"sync"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
)

// Invoker orders an op through the cluster and returns its result, and
// may be called concurrently; *node.Client is one.
type Invoker interface {
	Invoke(ctx context.Context, op []byte) ([]byte, error)
}

// Run does the duties of orderer id, whose signing key is key, ordering
// its ops through inv, until ctx ends; it returns ctx's error. It checks
// for a due timeout every quarter of BatchTimeout, and asks again for the
// same cut only after another BatchTimeout (the first may have reached
// the replicas before the agreed time passed the timeout).
//
// If suspect is not nil, Run calls it when it finds the view stalled
// (Stalled): an orderer passes its replica's Suspect.
func (d *Duties) Run(ctx context.Context, inv Invoker, key ed25519.PrivateKey, id uint32, suspect func()) error {
	tick := time.NewTicker(max(d.timeout/4, 5*time.Millisecond))
	defer tick.Stop()
	asked, askedAt := ^uint64(0), time.Time{}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.wake:
		case <-tick.C:
		}
		d.mu.Lock()
		headers, next, since := d.headers, d.next, d.since
		d.headers = nil
		d.mu.Unlock()
		// The signatures are ordered at once, so that a burst of blocks
		// cut together becomes final together.
		failed := make([]bool, len(headers))
		var wg sync.WaitGroup
		for i, h := range headers {
			wg.Go(func() {
				_, err := inv.Invoke(ctx, SignOp(id, h.Number, SignHeader(key, id, h)))
				failed[i] = err != nil
			})
		}
		wg.Wait()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var again []*cb.BlockHeader
		for i, h := range headers {
			if failed[i] {
				again = append(again, h)
			}
		}
		if len(again) > 0 {
			d.requeue(again)
		}
		now := time.Now()
		if suspect != nil && d.Stalled(now) {
			suspect()
		}
		if !since.IsZero() && now.Sub(since) >= d.timeout && (asked != next || now.Sub(askedAt) >= d.timeout) {
			asked, askedAt = next, now
			if _, err := inv.Invoke(ctx, CutOp(next)); err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
}

// requeue puts back headers whose signature could not be ordered, before
// any cut since.
func (d *Duties) requeue(headers []*cb.BlockHeader) {
	d.mu.Lock()
	d.headers = append(append([]*cb.BlockHeader{}, headers...), d.headers...)
	d.mu.Unlock()
}
