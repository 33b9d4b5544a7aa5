//go:build linux && cgo

package rdma

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// TestLateRegistrationBindsToSelector: a connection registered with a
// selector only after its route has been resolved still makes its queue
// pair on that selector's completion queue, not on the transport's own.
// A queue pair on the transport's own poller is served through an extra
// goroutine hop and that poller's sleeps, whatever the selector's spin.
func TestLateRegistrationBindsToSelector(t *testing.T) {
	tr, addr := newTransport(t, Config{})
	l, err := tr.Listen(context.Background(), net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	echoServer(t, l)

	c, err := tr.Connect(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Give the route time to resolve before registering, as a program
	// that connects many channels first and registers them later does.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		state := c.state
		c.mu.Unlock()
		if state != stateAddr || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)

	sel, err := selector.New(selector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	k, err := sel.Register(c, selectionkey.OpConnect, nil)
	if err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		if time.Now().After(deadline) {
			t.Fatalf("connect did not finish\n%s", tr.dumpState())
		}
		if _, err := sel.SelectTimeout(100 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if done, err = c.FinishConnect(); err != nil {
			t.Fatal(err)
		}
	}
	k.Cancel()
	tr.mu.Lock()
	onSel, home := c.eng.sel.Load() == sel, c.eng.home.Load()
	tr.mu.Unlock()
	if !onSel || home {
		t.Errorf("queue pair of a connection registered after its route resolved: on the selector's queue %v, on the transport's own %v; want the selector's", onSel, home)
	}
}
