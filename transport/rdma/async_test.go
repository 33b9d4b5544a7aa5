//go:build linux && cgo

package rdma

import (
	"errors"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// TestPortDownBreaksConnections: when a device's port goes down, the
// transport reads the device's asynchronous port error and breaks the
// connections on it at once, instead of leaving them to wait for
// completions that may never come. The test makes a Soft-RoCE device of
// its own on a veth pair, so it runs only in the throw-away VM of
// scripts/rdmavm.sh. It brings the port back up at the end but leaves the
// device: librdmacm keeps every device it has used open until the process
// exits, so deleting it would wait for this test binary to end.
func TestPortDownBreaksConnections(t *testing.T) {
	if os.Getenv("RDMAVM") != "1" {
		t.Skip("adds an RDMA device and takes its port down: only in the throw-away VM of scripts/rdmavm.sh")
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	const ip = "198.51.100.1"
	if err := exec.Command("rdma", "link", "show", "rxet/1").Run(); err != nil {
		run("ip", "link", "add", "rxet0", "type", "veth", "peer", "name", "rxet1")
		run("ip", "addr", "add", ip+"/24", "dev", "rxet0")
		run("ip", "link", "set", "rxet1", "up")
		run("ip", "link", "set", "rxet0", "up")
		run("rdma", "link", "add", "rxet", "type", "rxe", "netdev", "rxet0")
	}
	defer run("ip", "link", "set", "rxet0", "up")

	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		closed := make(chan error, 1)
		go func() { closed <- tr.Close() }()
		select {
		case err := <-closed:
			t.Logf("Close: %v", err)
		case <-time.After(20 * time.Second):
			pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			t.Fatal("Close hangs")
		}
	}()
	client, _ := pair(t, tr, ip)
	failed := make(chan error, 1)
	go func() {
		_, err := client.Receive()
		failed <- err
	}()
	run("ip", "link", "set", "rxet0", "down")
	select {
	case err := <-failed:
		if err == nil || !strings.Contains(err.Error(), "asynchronous event") {
			t.Fatalf("Receive = %v; want the port error", err)
		}
		t.Logf("with the port down: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the connection is still up 10 s after its port went down")
	}
}

// TestQueuePairErrorBreaksOnlyItsConn: what an asynchronous error of one
// queue pair does: its connection fails with the event named, another on
// the same device carries on.
func TestQueuePairErrorBreaksOnlyItsConn(t *testing.T) {
	tr, addr := newTransport(t, Config{})
	bad, badServer := pair(t, tr, addr)
	good, goodServer := pair(t, tr, addr)
	why := errors.New("rdma: device rxe0: asynchronous event: local work queue catastrophic error")
	tr.failConns(bad.eng.dev, func(qpn uint32) bool { return qpn == bad.qpn }, why)
	if _, err := bad.Receive(); err == nil || !strings.Contains(err.Error(), "catastrophic") {
		t.Fatalf("Receive on the failed conn = %v; want the event's error", err)
	}
	peer := make(chan error, 1)
	go func() {
		_, err := badServer.Receive()
		peer <- err
	}()
	select {
	case err := <-peer:
		if err == nil {
			t.Fatal("the failed conn's peer still receives")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the failed conn's peer still waits 10s later\n%s", tr.dumpState())
	}
	if err := send(t, good, []byte("fine")); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, goodServer); string(got) != "fine" {
		t.Fatalf("got %q", got)
	}
}
