package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rubin-go/rubin/metrics"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/tcp"
)

// TestCollector checks that real traffic shows in the exported values.
func TestCollector(t *testing.T) {
	tr, err := tcp.New(tcp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	sel, err := selector.New(selector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Close()
	ctx := context.Background()
	ln, err := tr.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := tr.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	for range 3 {
		b, err := tr.Pool().TryGet()
		if err != nil {
			t.Fatal(err)
		}
		b.SetLen(10)
		if err := client.Send(b); err != nil {
			t.Fatal(err)
		}
		got, err := server.Receive()
		if err != nil {
			t.Fatal(err)
		}
		got.Release()
	}
	if _, err := sel.SelectNow(); err != nil {
		t.Fatal(err)
	}
	held, err := tr.Pool().TryGet()
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()

	c := metrics.New()
	c.AddSelector("s0", sel)
	c.AddPool("p0", tr.Pool())
	c.AddTransport("tcp", tr.Stats)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP rubin_pool_buffers_in_use Buffers owned by callers now.
# TYPE rubin_pool_buffers_in_use gauge
rubin_pool_buffers_in_use{pool="p0"} 1
# HELP rubin_selector_selects_total Select, SelectTimeout and SelectNow calls.
# TYPE rubin_selector_selects_total counter
rubin_selector_selects_total{selector="s0"} 1
# HELP rubin_transport_messages_received_total Messages received.
# TYPE rubin_transport_messages_received_total counter
rubin_transport_messages_received_total{transport="tcp"} 3
# HELP rubin_transport_sent_bytes_total Payload bytes sent.
# TYPE rubin_transport_sent_bytes_total counter
rubin_transport_sent_bytes_total{transport="tcp"} 30
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"rubin_pool_buffers_in_use", "rubin_selector_selects_total",
		"rubin_transport_messages_received_total", "rubin_transport_sent_bytes_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 21 {
		t.Fatalf("GatherAndCount = %d, %v; want 21 series", n, err)
	}
}
