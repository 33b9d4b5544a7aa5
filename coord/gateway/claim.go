package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rubin-go/rubin/coord"
)

// ErrHeld is wrapped by the error of New, or of Serve, when another
// gateway holds the gateway's ID or one of its identities (see
// Config.Identities).
var ErrHeld = errors.New("held by another gateway")

// claimEvery is how often a gateway renews its claim; the replicas'
// coord.Config.ClaimLease must be several times longer.
const claimEvery = time.Second

// claimRecheck is how long a gateway that waits for a claim to lapse
// waits between two looks.
const claimRecheck = claimEvery / 2

func (s *Server) claimOp() []byte { return coord.ClaimOp(s.cfg.ID, s.holder, s.cfg.Identities) }

// HeldError is the error of New, or of Serve, when another gateway holds
// the gateway's ID or one of its identities. It wraps ErrHeld.
type HeldError struct {
	ID    int64             // the gateway's ID
	Claim coord.ClaimResult // the conflicting claim
}

func (e *HeldError) Error() string {
	r := e.Claim
	if r.Gateway == -1 {
		return fmt.Sprintf("gateway %d: the replicas keep no more claims of gateways' identities: %v", e.ID, ErrHeld)
	}
	what := fmt.Sprintf("gateway ID %d", r.Gateway)
	if r.Gateway != e.ID {
		what = fmt.Sprintf("a client identity it shares with gateway %d", r.Gateway)
	}
	return fmt.Sprintf("gateway %d: %s is %v (holder %#x, renewed at %s agreed time)",
		e.ID, what, ErrHeld, uint64(r.Holder), time.UnixMilli(r.Renewed).UTC().Format(time.RFC3339Nano))
}

func (e *HeldError) Unwrap() error { return ErrHeld }

// claim claims the gateway's ID and identities before it serves, and
// fails with a *HeldError if another gateway's live claim holds them;
// with Config.ClaimWait, it first waits that long for the claim to lapse
// (ordered claims see the agreed time pass).
//
// The claim is an ordered request under one of the identities: if
// another gateway runs with them, that request alone disturbs it (see
// docs/coord.md), which the replicas' answer then reports.
func (s *Server) claim(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ClaimWait+claimTimeout)
	defer cancel()
	wait := time.Now().Add(s.cfg.ClaimWait)
	op := s.claimOp()
	for {
		res, err := s.order(ctx, op)
		if err != nil {
			return fmt.Errorf("gateway %d: claim of its identities: %w", s.cfg.ID, err)
		}
		r, err := coord.ParseClaimResult(res)
		if err != nil {
			return fmt.Errorf("gateway %d: claim of its identities: %w", s.cfg.ID, err)
		}
		switch {
		case r.Status == coord.StatusOK:
			return nil
		case r.Status != coord.StatusHeld:
			return fmt.Errorf("gateway %d: claim of its identities: %v", s.cfg.ID, r.Status)
		case r.Gateway == -1 || time.Now().Add(claimRecheck).After(wait):
			return &HeldError{ID: s.cfg.ID, Claim: r}
		}
		select {
		case <-time.After(claimRecheck):
		case <-ctx.Done():
			return &HeldError{ID: s.cfg.ID, Claim: r}
		}
	}
}

// claimTimeout bounds the claim's wait for the replicas to answer.
const claimTimeout = 30 * time.Second

// claimLapse bounds a renewal: a renewal that takes longer is abandoned,
// and the next one goes on a fresh identity core (node.Client).
const claimLapse = 5 * time.Second

// renewLoop renews the claim every claimEvery; if another gateway took
// it (this one could not renew it for the lease: paused, or cut off), the
// gateway stops, as Close does, and Serve returns the error.
func (s *Server) renewLoop() {
	defer s.wg.Done()
	t := time.NewTicker(claimEvery)
	defer t.Stop()
	op := s.claimOp()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(s.ctx, claimLapse)
		res, err := s.order(ctx, op)
		cancel()
		if err != nil {
			if s.ctx.Err() == nil {
				s.cfg.Logger.Warn("claim renewal failed", "err", err)
			}
			continue
		}
		r, err := coord.ParseClaimResult(res)
		if err != nil {
			s.cfg.Logger.Error("claim result", "err", err)
			continue
		}
		if r.Status == coord.StatusHeld {
			err := &HeldError{ID: s.cfg.ID, Claim: r}
			s.cfg.Logger.Error("another gateway took this gateway's identity: stopping", "err", err)
			s.fail(err)
			return
		}
	}
}

// fail stops the gateway as Close does, without waiting for its
// goroutines (one of them calls it); Serve returns err.
func (s *Server) fail(err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed, s.failed = true, err
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.kill(err)
	}
	s.mu.Unlock()
	s.cancel()
}

// closedErr is what Serve returns once the gateway stopped.
func (s *Server) closedErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failed
	}
	return ErrClosed
}
