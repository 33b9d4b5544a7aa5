package node

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/link"
)

// stallPeer takes replica id's place: it accepts the links of the
// replicas below it, completes their handshakes and then never reads, as
// a Byzantine or wedged replica may. It stops when the test ends.
func stallPeer(t *testing.T, tc *testCluster, id int) {
	t.Helper()
	tc.stop(id)
	ln, err := rubin.Listen("tcp", tc.cl.Replicas[id].Addr)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, nc := range conns {
			nc.Close()
		}
	})
	lookup := func(p link.Peer) ([]byte, bool) {
		if p.Client || p.ID >= uint64(id) {
			return nil, false
		}
		k := tc.cl.LinkKey(bft.ReplicaID(p.ID), bft.ReplicaID(id))
		return k, k != nil
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			go func() {
				// The handshake, then nothing: the link is never read.
				_, _ = link.Server(nc, link.Replica(uint64(id)), lookup, link.Options{HandshakeTimeout: 2 * time.Second})
			}()
		}
	}()
}

// sampleMax samples f every millisecond until the function it returns is
// called, which returns the largest value seen.
func sampleMax(f func() int) func() int {
	stop, done := make(chan struct{}), make(chan struct{})
	worst := 0
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			worst = max(worst, f())
		}
	}()
	return func() int {
		close(stop)
		<-done
		return worst
	}
}

// putBacklog has c write 1200 values of 60 KiB to one key (the store holds
// one value, not the backlog) and returns the live heap afterwards.
func putBacklog(t *testing.T, c *Client) int64 {
	t.Helper()
	val := make([]byte, 60<<10)
	for i := range 1200 {
		invoke(t, c, kv.EncodePut([]byte("k"), append(val[:len(val):len(val)], byte(i))))
	}
	return int64(heapInUse())
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestOutboundQueueBytes: replica 3 stops reading its links while a
// client writes 1200 values of 60 KiB. The primary's pre-prepares to it
// pile up (the kernel's socket buffers fill first); the queue of that
// link must stay within OutboundQueueBytes, counted as queue_full drops,
// the heap must not grow by the backlog, and the other three replicas
// keep serving the client. Bounded by frames only (8192 of them), the queue grew by
// every pre-prepare: here about 60 MiB.
func TestOutboundQueueBytes(t *testing.T) {
	warm(t)
	core := testCore()
	// A short window: the log's batches stay few next to the backlog.
	core.CheckpointInterval, core.WatermarkWindow = 4, 8
	const queueBytes = 2 << 20
	tc := newTestClusterTuned(t, 4, 1, core, testTick, nil, func(c *ReplicaConfig) {
		c.OutboundQueueBytes = queueBytes
		c.Link.WriteTimeout = time.Minute // the stalled link stays up
	})
	stallPeer(t, tc, 3)
	c := tc.client(context.Background(), 0)
	invoke(t, c, kv.EncodePut([]byte("warm"), []byte("up")))
	base := heapInUse()
	peak := sampleMax(func() int { return tc.reps[0].queuedTo(link.Replica(3)) })
	grown, worst := putBacklog(t, c)-int64(base), peak()
	drops := counterValue(tc.reps[0].m.dropped.m[reasonQueueFull])
	t.Logf("queue to the stalled replica at most %d bytes; %v frames dropped; heap grew %d KiB", worst, drops, grown>>10)
	if worst > queueBytes {
		t.Errorf("queue to the stalled replica reached %d bytes, bound %d", worst, queueBytes)
	}
	if drops == 0 {
		t.Error("no frame to the stalled replica dropped")
	}
	if grown > 48<<20 {
		t.Errorf("heap grew by %d MiB", grown>>20)
	}
}

// gatedApp blocks every Execute until gate is closed: a core that falls
// behind what arrives.
type gatedApp struct {
	bft.App
	gate chan struct{}
}

func (a gatedApp) Execute(ctx bft.ExecContext, op []byte) []byte {
	<-a.gate
	return a.App.Execute(ctx, op)
}

// TestInboundQueueBytes: replica 1's core stalls (its application blocks)
// while a client writes 1200 values of 60 KiB, which the other three
// replicas commit. Replica 1's event loop stalls with its core, so what
// arrives for it waits in the transport, which pushes back on the
// senders (their queues to it fill and drop); its heap does not grow by
// the backlog, and once its application runs again it catches up as the
// cluster goes on.
func TestInboundQueueBytes(t *testing.T) {
	warm(t)
	const queueBytes = 2 << 20
	gate := make(chan struct{})
	core := testCore()
	core.CheckpointInterval, core.WatermarkWindow = 4, 8
	tc := newTestClusterTuned(t, 4, 1, core, testTick, nil, func(c *ReplicaConfig) {
		// The others' queues to the stalled replica fill too.
		c.OutboundQueueBytes = queueBytes
		if c.ID == 1 {
			c.InboundQueueBytes = queueBytes
			c.App = gatedApp{App: c.App, gate: gate}
		}
	})
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(gate)
		}
	}
	t.Cleanup(open)
	c := tc.client(context.Background(), 0)
	base := heapInUse()
	grown := putBacklog(t, c) - int64(base)
	stalled, ahead := tc.reps[1].Status().LastExecuted, tc.reps[0].Status().LastExecuted
	t.Logf("the stalled replica executed %d batches, the others %d; heap grew %d KiB", stalled, ahead, grown>>10)
	if stalled+core.WatermarkWindow > ahead {
		t.Errorf("the stalled replica executed up to %d, the others %d: it did not stall?", stalled, ahead)
	}
	if grown > 48<<20 {
		t.Errorf("heap grew by %d MiB", grown>>20)
	}
	open()
	// The stalled replica catches up from the checkpoints it hears of,
	// and what the others sent it while it stalled was dropped; a cluster
	// gone idle sends none, so the client goes on until it is past what
	// the others had executed. (The first checkpoints after the stall may
	// be dropped too, behind the backlog still queued to it.)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; tc.reps[1].Status().LastExecuted < ahead; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the stalled replica did not catch up in 30s of writes: %+v", tc.reps[1].Status())
		}
		invoke(t, c, kv.EncodePut([]byte("after"), []byte{byte(i)}))
	}
	tc.waitConverged(all(4), tc.reps[0].Status().LastExecuted, 30*time.Second)
}
