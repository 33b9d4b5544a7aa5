package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/kv"
)

// BenchmarkCluster runs 4 replicas in-process over TCP on loopback with C
// closed-loop clients (C client identities), each with one request
// outstanding, and reports throughput (ops/s) and latency percentiles.
// Ops are empty (a kv no-op) or a kv Put of a 1 KiB value. With
// link=shared the C identities are multiplexed by one Client (one link
// per replica); with link=own each has a Client and links of its own.
func BenchmarkCluster(b *testing.B) {
	for _, size := range []int{0, 1024} {
		for _, clients := range []int{1, 16, 64} {
			for _, shared := range []bool{true, false} {
				if clients == 1 && !shared {
					continue // the same thing
				}
				name := fmt.Sprintf("op=%dB/clients=%d/link=shared", size, clients)
				if !shared {
					name = fmt.Sprintf("op=%dB/clients=%d/link=own", size, clients)
				}
				b.Run(name, func(b *testing.B) {
					benchCluster(b, size, clients, shared, bft.Config{})
				})
			}
		}
	}
}

// BenchmarkMaxInFlight compares bft.Config.MaxInFlight settings with
// multiplexed clients.
func BenchmarkMaxInFlight(b *testing.B) {
	for _, inflight := range []int{1, 2, 4} {
		for _, size := range []int{0, 1024} {
			for _, clients := range []int{1, 64} {
				b.Run(fmt.Sprintf("inflight=%d/op=%dB/clients=%d", inflight, size, clients), func(b *testing.B) {
					benchCluster(b, size, clients, true, bft.Config{MaxInFlight: inflight})
				})
			}
		}
	}
}

func benchCluster(b *testing.B, size, nclients int, shared bool, core bft.Config) {
	warm(b)
	tc := newTestCluster(b, 4, nclients, core, DefaultTick)
	cs := make([]*Client, nclients)
	if shared {
		ids := make([]bft.ClientID, nclients)
		for i := range ids {
			ids[i] = bft.ClientID(i)
		}
		c, err := NewClient(context.Background(), ClientConfig{Cluster: tc.cl, IDs: ids, Network: "tcp",
			RedialMin: 5 * time.Millisecond, RedialMax: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		for i := range cs {
			cs[i] = c
		}
	} else {
		for i := range cs {
			cs[i] = tc.client(context.Background(), i)
		}
	}
	ops := make([][]byte, nclients)
	for i := range ops {
		if size > 0 {
			ops[i] = kv.EncodePut(fmt.Appendf(nil, "key%d", i), make([]byte, size))
		}
	}
	// Warm up: every client's links are up and one request went through.
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			invoke(b, c, ops[i])
		}()
	}
	wg.Wait()

	var next atomic.Int64
	lat := make([][]time.Duration, nclients)
	b.ResetTimer()
	start := time.Now()
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := c.Invoke(ctx, ops[i])
				cancel()
				if err != nil {
					b.Error(err)
					return
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	}
	var maxBatch int64
	for _, r := range tc.reps {
		maxBatch = max(maxBatch, r.m.maxBatch.Load())
	}
	b.ReportMetric(float64(maxBatch), "max-batch")
	if nb := testutil.ToFloat64(tc.reps[0].m.committedBatches); nb > 0 {
		b.ReportMetric(testutil.ToFloat64(tc.reps[0].m.committedRequests)/nb, "avg-batch")
	}
	for _, c := range cs {
		c.Close()
	}
	tc.stopAll()
}
