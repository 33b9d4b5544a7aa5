package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/kv"
)

// BenchmarkCluster runs 4 replicas in-process over TCP on loopback with C
// closed-loop clients, each with one request outstanding, and reports
// throughput (ops/s) and latency percentiles. Ops are empty (a kv no-op)
// or a kv Put of a 1 KiB value.
func BenchmarkCluster(b *testing.B) {
	for _, size := range []int{0, 1024} {
		for _, clients := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("op=%dB/clients=%d", size, clients), func(b *testing.B) {
				benchCluster(b, size, clients)
			})
		}
	}
}

func benchCluster(b *testing.B, size, nclients int) {
	warm(b)
	tc := newTestCluster(b, 4, nclients, bft.Config{}, DefaultTick)
	cs := make([]*Client, nclients)
	for i := range cs {
		cs[i] = tc.client(context.Background(), i)
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
	for _, c := range cs {
		c.Close()
	}
	tc.stopAll()
}
