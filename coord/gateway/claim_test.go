package gateway_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord/gateway"
)

// gate holds its callers while it is paused.
type gate struct {
	mu     sync.Mutex
	paused chan struct{} // closed when resumed; nil: running
}

// wait returns once the gate runs, or with ctx's error if ctx ends first.
func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.paused
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gate) pause() {
	g.mu.Lock()
	if g.paused == nil {
		g.paused = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	if g.paused != nil {
		close(g.paused)
		g.paused = nil
	}
	g.mu.Unlock()
}

// pausable is an Invoker whose calls wait while it is paused.
type pausable struct {
	gateway.Invoker
	gate
}

func (p *pausable) Invoke(ctx context.Context, op []byte) ([]byte, error) {
	if err := p.wait(ctx); err != nil {
		return nil, err
	}
	return p.Invoker.Invoke(ctx, op)
}

func (p *pausable) InvokeRead(ctx context.Context, op []byte) ([]byte, error) {
	if err := p.wait(ctx); err != nil {
		return nil, err
	}
	return p.Invoker.InvokeRead(ctx, op)
}

// TestClaimTakenFromAPausedGateway: a gateway's claim of its ID and
// identities keeps a second one with the same from starting while the
// first renews it; once the first stops renewing (paused longer than the
// lease) the second waits for the claim to lapse and takes it, and the
// first, resumed, finds its claim taken and stops: Serve returns ErrHeld.
func TestClaimTakenFromAPausedGateway(t *testing.T) {
	tc := newTestCluster(t)
	idents := []bft.ClientID{500, 501}
	inv := &pausable{Invoker: tc.client}
	a, err := gateway.New(gateway.Config{Invoker: inv, ID: 500, Identities: idents})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ln) }()

	// Another gateway with an identity in common is refused.
	if _, err := gateway.New(gateway.Config{Invoker: tc.client, ID: 600, Identities: []bft.ClientID{501}}); !errors.Is(err, gateway.ErrHeld) {
		t.Fatalf("a gateway sharing an identity with a running one: %v", err)
	}
	// With ClaimWait, it waits, and is refused while the first renews.
	start := time.Now()
	if _, err := gateway.New(gateway.Config{Invoker: tc.client, ID: 500, Identities: idents, ClaimWait: 2 * time.Second}); !errors.Is(err, gateway.ErrHeld) {
		t.Fatalf("a gateway with the ID of a running one: %v", err)
	} else if time.Since(start) < 1500*time.Millisecond {
		t.Fatalf("refused after %v, before its ClaimWait", time.Since(start))
	} else {
		t.Log(err)
	}

	inv.pause()
	b, err := gateway.New(gateway.Config{Invoker: tc.client, ID: 500, Identities: idents, ClaimWait: 15 * time.Second})
	if err != nil {
		t.Fatalf("the claim of a paused gateway did not lapse: %v", err)
	}
	defer b.Close()
	inv.resume()
	select {
	case err := <-served:
		if !errors.Is(err, gateway.ErrHeld) {
			t.Fatalf("the first gateway's Serve: %v", err)
		}
		t.Log(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first gateway still serves after its claim was taken")
	}
}
