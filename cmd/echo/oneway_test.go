package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/internal/rdmatest"
	"github.com/rubin-go/rubin/selectionkey"
)

// runOneway streams one way to addr and checks the summary line: every
// message counted by the server (the client fails otherwise), the rate
// reported, the line marked oneway=1.
func runOneway(t *testing.T, transport, addr string, size, n, conns int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args := []string{"client", "-transport", transport, "-api", "channel", "-addr", addr, "-oneway",
		"-size", strconv.Itoa(size), "-n", strconv.Itoa(n), "-conns", strconv.Itoa(conns)}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("%q: client exited with status %d; stderr:\n%s", args, code, &stderr)
	}
	m := parseSummary(t, strings.TrimSuffix(stdout.String(), "\n"))
	t.Logf("%s", strings.TrimSuffix(stdout.String(), "\n"))
	checkCosts(t, m, stderr.String(), true)
	if m["msgs"] != strconv.Itoa(n) || m["oneway"] != "1" {
		t.Errorf("%q: msgs=%s oneway=%s, want msgs=%d oneway=1", args, m["msgs"], m["oneway"], n)
	}
	if rate, _ := strconv.ParseFloat(m["msgs_per_s"], 64); rate <= 0 {
		t.Errorf("%q: msgs_per_s=%s", args, m["msgs_per_s"])
	}
}

func TestOneway(t *testing.T) {
	addr, _ := startServer(t, "-api", "channel", "-addr", "127.0.0.1:0")
	for _, c := range []struct{ size, n, conns int }{
		{64, 5000, 1},
		{4 << 10, 2000, 3},
		{64 << 10, 200, 2},
	} {
		runOneway(t, "tcp", addr, c.size, c.n, c.conns)
	}
	// The server echoes again once a stream has ended.
	var stdout, stderr bytes.Buffer
	args := []string{"client", "-api", "channel", "-addr", addr, "-n", "100"}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
		t.Fatalf("%q after one-way streams: exit status %d; stderr:\n%s", args, code, &stderr)
	}
}

func TestOnewayNeedsChannelAPI(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"client", "-api", "gonet", "-addr", "127.0.0.1:1", "-oneway"}
	if code := run(context.Background(), args, &stdout, &stderr); code != exitUsage {
		t.Errorf("%q: exit status %d, want %d", args, code, exitUsage)
	}
	if !strings.Contains(stderr.String(), "no one-way mode") {
		t.Errorf("%q: stderr %q does not say that gonet has no one-way mode", args, &stderr)
	}
}

// TestRDMAOneway streams one way over RDMA; it needs an RDMA device (see
// package rdmatest).
func TestRDMAOneway(t *testing.T) {
	ip := rdmatest.Addr(t)
	addr, _ := startServer(t, "-transport", "rdma", "-api", "channel", "-addr", net.JoinHostPort(ip, "0"))
	runOneway(t, "rdma", addr, 4<<10, 2000, 1)
	runOneway(t, "rdma", addr, 64<<10, 200, 2)
}

// queueConn is a channel whose received messages the test queues and
// whose Send refuses while blocked; only the methods echoReady calls are
// there.
type queueConn struct {
	anytransport.Conn // nil: any other method would panic
	pool              *bufpool.Pool
	in                []*bufpool.Buffer
	sent              [][]byte
	blocked           bool
}

func (c *queueConn) queue(t *testing.T, p []byte) {
	b, err := c.pool.TryGet()
	if err != nil {
		t.Fatal(err)
	}
	b.Write(p)
	c.in = append(c.in, b)
}

func (c *queueConn) Receive() (*bufpool.Buffer, error) {
	if len(c.in) == 0 {
		return nil, channel.ErrWouldBlock
	}
	b := c.in[0]
	c.in = c.in[1:]
	return b, nil
}

func (c *queueConn) Send(b *bufpool.Buffer) error {
	if c.blocked {
		return channel.ErrWouldBlock
	}
	c.sent = append(c.sent, bytes.Clone(b.Bytes()))
	b.Release()
	return nil
}

func (c *queueConn) ReadyOps() selectionkey.Ops {
	if len(c.in) > 0 {
		return selectionkey.OpRead
	}
	return 0
}

type nopWatcher struct{}

func (nopWatcher) InterestChanged(*selectionkey.Key) {}
func (nopWatcher) Canceled(*selectionkey.Key)        {}

// TestServerCountsAfterHeldAcceptance has the server's acceptance of a
// one-way stream wait for room to be sent: the connection must still
// count the stream, not echo it, once the acceptance has gone.
func TestServerCountsAfterHeldAcceptance(t *testing.T) {
	tr, err := openTransport("tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := &queueConn{pool: tr.Pool(), blocked: true}
	k := selectionkey.New(c, selectionkey.OpRead|selectionkey.OpWrite, selectionkey.OpRead, nopWatcher{})
	step := func(ready selectionkey.Ops) {
		t.Helper()
		k.SetReady(ready)
		if err := echoReady(k, c); err != nil {
			t.Fatal(err)
		}
	}

	c.queue(t, onewayBegin)
	step(selectionkey.OpRead)
	if k.Interest() != selectionkey.OpWrite || len(c.sent) != 0 {
		t.Fatalf("acceptance refused by Send: interest %v, sent %q; want OpWrite and nothing", k.Interest(), c.sent)
	}
	c.blocked = false
	step(selectionkey.OpWrite)
	if k.Interest() != selectionkey.OpRead || len(c.sent) != 1 || !bytes.Equal(c.sent[0], onewayAccept) {
		t.Fatalf("once writable: interest %v, sent %q; want OpRead and the acceptance", k.Interest(), c.sent)
	}
	c.queue(t, []byte("first"))
	c.queue(t, []byte("second"))
	c.queue(t, onewayEnd)
	step(selectionkey.OpRead)
	if len(c.sent) != 2 || len(c.sent[1]) != onewayTotalLen {
		t.Fatalf("sent %q; want the acceptance and a total, and no echo", c.sent)
	}
	if msgs, n := binary.LittleEndian.Uint64(c.sent[1]), binary.LittleEndian.Uint64(c.sent[1][8:]); msgs != 2 || n != 11 {
		t.Errorf("total: %d messages of %d bytes, want 2 of 11", msgs, n)
	}
}
