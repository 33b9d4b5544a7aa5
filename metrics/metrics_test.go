package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/metrics"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/tcp"
)

var _ metrics.Transport = (*tcp.Transport)(nil)

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
	c.AddTransport("tcp", tr, sel)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP rubin_pool_buffers_in_use Buffers owned by callers now.
# TYPE rubin_pool_buffers_in_use gauge
rubin_pool_buffers_in_use{stack="tcp"} 1
# HELP rubin_selector_selects_total Select, SelectTimeout and SelectNow calls.
# TYPE rubin_selector_selects_total counter
rubin_selector_selects_total{poller="0",stack="tcp"} 1
# HELP rubin_transport_messages_received_total Messages received.
# TYPE rubin_transport_messages_received_total counter
rubin_transport_messages_received_total{stack="tcp"} 3
# HELP rubin_transport_sent_bytes_total Payload bytes sent.
# TYPE rubin_transport_sent_bytes_total counter
rubin_transport_sent_bytes_total{stack="tcp"} 30
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"rubin_pool_buffers_in_use", "rubin_selector_selects_total",
		"rubin_transport_messages_received_total", "rubin_transport_sent_bytes_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 24 {
		t.Fatalf("GatherAndCount = %d, %v; want 24 series", n, err)
	}
}

// TestStackLabels exports a net.Conn face stack with two pollers and checks
// that every series carries its stack label, that exactly the selectors'
// series carry a poller label, one per poller, and that the series pass
// Prometheus' naming lint (counters end in _total).
func TestStackLabels(t *testing.T) {
	s, err := rubin.NewStack(rubin.Config{Pollers: 2, MaxMessageSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := metrics.New()
	c.AddStack("face", s)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		perPoller := strings.HasPrefix(f.GetName(), "rubin_selector_")
		pollers := map[string]bool{}
		for _, m := range f.GetMetric() {
			n++
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stack"] != "face" {
				t.Errorf("%s%v lacks stack=\"face\"", f.GetName(), labels)
			}
			want := 1
			if perPoller {
				pollers[labels["poller"]] = true
				want = 2
			}
			if len(labels) != want {
				t.Errorf("%s%v has %d labels, want %d", f.GetName(), labels, len(labels), want)
			}
		}
		if perPoller && (len(pollers) != 2 || !pollers["0"] || !pollers["1"]) {
			t.Errorf("%s has pollers %v, want 0 and 1", f.GetName(), pollers)
		}
	}
	if n != 9*2+7+8 {
		t.Errorf("%d series, want %d: 9 per poller, 7 for the pool, 8 for the transport", n, 9*2+7+8)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
