package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/wal"
)

// TestDurableRestartAll stops every replica of a cluster with data
// directories and starts them again: each recovers at least what it had
// executed, the state is back (the keys read), and the cluster goes on.
// A replica may have been one of the f left behind when it stopped, so
// its own count is the bar, not the cluster's.
func TestDurableRestartAll(t *testing.T) {
	warm(t)
	root := t.TempDir()
	tc := newTestClusterDirs(t, 4, 1, testCore(), testTick, func(i int) string { return filepath.Join(root, fmt.Sprint(i)) })
	ctx := context.Background()
	c := tc.client(ctx, 0)
	for i := range 40 { // beyond two checkpoints of 16: snapshots and a truncated log
		invoke(t, c, kv.EncodePut(fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)))
	}
	// Every put is at least one sync (its commit's) on 2f+1 replicas.
	checkMetrics(t, tc.reg, map[string]float64{
		"rubin_bft_storage_syncs_total":      3 * 40,
		"rubin_bft_storage_sync_seconds":     3 * 40,
		"rubin_bft_storage_readies_per_sync": 3 * 40,
	})
	tc.stopAll()
	var executed [4]uint64
	for i := range 4 {
		executed[i] = tc.reps[i].Status().LastExecuted
	}
	for i := range 4 {
		tc.start(i, nil)
		if got := tc.reps[i].Status().LastExecuted; got < executed[i] {
			t.Errorf("replica %d: recovered to %d, had executed %d", i, got, executed[i])
		}
	}
	if ahead := max(executed[0], executed[1], executed[2], executed[3]); ahead < 40 {
		t.Errorf("no replica executed all 40 puts before the stop: the most is %d", ahead)
	}
	for _, i := range []int{0, 17, 39} {
		v, found, err := kv.DecodeResult(invoke(t, c, kv.EncodeGet(fmt.Appendf(nil, "k%d", i))))
		if err != nil || !found || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("k%d after restarting all: %q %v %v", i, v, found, err)
		}
	}
}

// TestDurableCorruptLog: damage before the log's tail stops the replica
// at start with ErrCorrupt rather than recovering a wrong state.
func TestDurableCorruptLog(t *testing.T) {
	warm(t)
	root := t.TempDir()
	dir := func(i int) string { return filepath.Join(root, fmt.Sprint(i)) }
	tc := newTestClusterDirs(t, 4, 1, testCore(), testTick, dir)
	c := tc.client(context.Background(), 0)
	for i := range 5 {
		invoke(t, c, kv.EncodePut(fmt.Appendf(nil, "k%d", i), []byte("v")))
	}
	tc.stop(1)
	name := filepath.Join(dir(1), "wal-0")
	b, err := os.ReadFile(name)
	if err != nil || len(b) < 100 {
		t.Fatalf("log of replica 1: %d bytes, %v", len(b), err)
	}
	b[20] ^= 1 // inside the first frame; later frames are intact
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = NewReplica(ReplicaConfig{Cluster: tc.cl, ID: 1, App: kv.New(kv.Config{}), Core: tc.core, DataDir: dir(1)})
	if !errors.Is(err, wal.ErrCorrupt) {
		t.Fatalf("NewReplica on a corrupt log: %v, want ErrCorrupt", err)
	}
}

// TestDurableFullDisk: a replica whose data directory fills up (a real
// 128 KiB tmpfs) stops with an error naming ENOSPC instead of sending
// votes it could not persist; the other three go on. Needs root for the
// mount.
func TestDurableFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	warm(t)
	root := t.TempDir()
	small := filepath.Join(root, "small")
	os.Mkdir(small, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	defer exec.Command("umount", small).Run()
	core := testCore()
	core.CheckpointInterval, core.WatermarkWindow = 1024, 2048 // no snapshot frees the log
	tc := newTestClusterDirs(t, 4, 1, core, testTick, func(i int) string {
		if i == 3 {
			return filepath.Join(small, "3")
		}
		return filepath.Join(root, fmt.Sprint(i))
	})
	c := tc.client(context.Background(), 0)
	val := make([]byte, 4096)
	var runErr error
	for i := 0; runErr == nil && i < 200; i++ {
		invoke(t, c, kv.EncodePut(fmt.Appendf(nil, "k%d", i), val))
		select {
		case runErr = <-tc.errs[3]:
		default:
		}
	}
	if runErr == nil {
		select {
		case runErr = <-tc.errs[3]:
		case <-time.After(5 * time.Second):
		}
	}
	tc.cancels[3] = nil
	if !errors.Is(runErr, syscall.ENOSPC) {
		t.Fatalf("replica 3 on a full disk: Run returned %v, want an error wrapping ENOSPC", runErr)
	}
	before := tc.reps[0].Status().LastExecuted
	invoke(t, c, kv.EncodePut([]byte("after"), []byte("x")))
	// The client has its result from f+1 replicas, which need not
	// include replica 0 yet.
	deadline := time.Now().Add(5 * time.Second)
	for tc.reps[0].Status().LastExecuted <= before {
		if time.Now().After(deadline) {
			t.Fatalf("the other replicas did not go on: executed %d then %d", before, tc.reps[0].Status().LastExecuted)
		}
		time.Sleep(time.Millisecond)
	}
}

// FuzzStorageDecode: decoding a data directory's records and snapshots
// never panics, whatever the bytes.
func FuzzStorageDecode(f *testing.F) {
	s := &storage{lim: storageLimits(4)}
	recs := []bft.Record{
		{Kind: bft.RecPrepare, Msg: &bft.Prepare{View: 1, Seq: 17, Replica: 2}},
		{Kind: bft.RecCommitted, Msg: &bft.Commit{View: 1, Seq: 17, Replica: 2}},
	}
	f.Add(s.encodeSnapshot(&bft.Snapshot{Seq: 16, Stable: []bft.Checkpoint{{Seq: 16, Replica: 1}}, State: []byte("\x01\x01\x02\x01rapp"), Records: recs}))
	f.Add(appendRecord(nil, recs[0]))
	f.Fuzz(func(t *testing.T, b []byte) {
		if sn, err := s.decodeSnapshot(b); err == nil && len(sn.Stable) > 0 && sn.State == nil {
			t.Fatal("snapshot with a certificate and no state decoded")
		}
		s.decodeRecord(b)
	})
}

// settle, for tests, waits until every job submitted so far is durable or the
// storage failed, and returns the failure.
func (s *storage) settle() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for (len(s.queue) > 0 || s.writing) && s.err == nil {
		s.cond.Wait()
	}
	return s.err
}

// TestStorageDefersCommitted: a Ready whose records are all Deferred
// (the committed slots, sent with the replies) writes nothing, so it
// waits for no sync and a crash right after it loses them; the next
// Ready with Persist records writes them first in its frame, its own
// Deferred after its Persist; Close writes what is left.
func TestStorageDefersCommitted(t *testing.T) {
	dir := t.TempDir()
	s, _, _, _, err := openStorage(dir, 4, wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prep := func(seq uint64) bft.Record {
		return bft.Record{Kind: bft.RecPrepare, Msg: &bft.Prepare{View: 1, Seq: seq, Replica: 2}}
	}
	committed := func(seq uint64) bft.Record {
		return bft.Record{Kind: bft.RecCommitted, Msg: &bft.Commit{View: 1, Seq: seq, Replica: 2}}
	}
	// recovered opens dir as a restarted replica would and lists the
	// kinds and sequence numbers of its records.
	recovered := func() string {
		t.Helper()
		s2, _, recs, _, err := openStorage(dir, 4, wal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s2.log.Close()
		var out string
		for _, r := range recs {
			switch m := r.Msg.(type) {
			case *bft.Prepare:
				out += fmt.Sprintf("prepare %d ", m.Seq)
			case *bft.Commit:
				out += fmt.Sprintf("committed %d ", m.Seq)
			}
		}
		return out
	}
	steps := []struct {
		rd   bft.Ready
		want string
	}{
		{bft.Ready{Persist: []bft.Record{prep(1)}}, "prepare 1 "},
		{bft.Ready{Deferred: []bft.Record{committed(1)}}, "prepare 1 "},
		{bft.Ready{Persist: []bft.Record{prep(2)}, Deferred: []bft.Record{committed(2)}}, "prepare 1 committed 1 prepare 2 committed 2 "},
		{bft.Ready{Deferred: []bft.Record{committed(3)}}, "prepare 1 committed 1 prepare 2 committed 2 "},
	}
	for i, st := range steps {
		if _, err := s.submit(&st.rd); err != nil {
			t.Fatal(err)
		}
		if err := s.settle(); err != nil {
			t.Fatal(err)
		}
		if got := recovered(); got != st.want {
			t.Fatalf("after Ready %d a crash recovers %q, want %q", i, got, st.want)
		}
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if got, want := recovered(), "prepare 1 committed 1 prepare 2 committed 2 committed 3 "; got != want {
		t.Fatalf("after Close: %q, want %q", got, want)
	}
}

// gatedFile holds every sync of a wal file until the test opens the gate,
// and fails it if the test says so.
type gatedFile struct {
	wal.File
	g *gate
}

type gate struct {
	open  chan struct{} // a sync waits for a value
	syncs chan struct{} // a sync reports it started
	fail  error
}

func (f gatedFile) wait() error {
	f.g.syncs <- struct{}{}
	<-f.g.open
	return f.g.fail
}

func (f gatedFile) Sync() error {
	if err := f.wait(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f gatedFile) Datasync() error {
	if err := f.wait(); err != nil {
		return err
	}
	return f.File.Datasync()
}

// TestStoragePipelines: while the writer syncs one Ready's records, the
// core goroutine submits more; no message comes back before the sync of
// its records (and of every record submitted before it) returned, a Ready
// with nothing to write waits behind those ahead of it, messages come
// back in submission order, and the Readies queued during a sync share
// the next one (group commit).
func TestStoragePipelines(t *testing.T) {
	g := &gate{open: make(chan struct{}), syncs: make(chan struct{}, 16)}
	s, _, _, _, err := openStorage(t.TempDir(), 4, wal.Options{Wrap: func(f wal.File) wal.File { return gatedFile{f, g} }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(g.open)
		s.close()
	}()
	woken := make(chan struct{}, 16)
	syncs := 0
	s.start(func() { woken <- struct{}{} }, storageMetrics{syncs: func() { syncs++ }, syncTime: func(time.Duration) {}, readies: func(int) {}})
	msg := func(seq uint64) []bft.Envelope {
		return []bft.Envelope{{To: bft.ToReplica(1), Msg: &bft.Commit{View: 1, Seq: seq, Replica: 2}}}
	}
	prep := func(seq uint64) []bft.Record {
		return []bft.Record{{Kind: bft.RecPrepare, Msg: &bft.Prepare{View: 1, Seq: seq, Replica: 2}}}
	}
	submit := func(rd bft.Ready) {
		t.Helper()
		now, err := s.submit(&rd)
		if err != nil || now {
			t.Fatalf("submit: now %v, err %v; want the writer to hold it", now, err)
		}
	}
	// The writer's first sync (the log file's first chunk: an fsync).
	submit(bft.Ready{Persist: prep(1), Messages: msg(1)})
	<-g.syncs
	submit(bft.Ready{Persist: prep(2), Messages: msg(2)})
	submit(bft.Ready{Messages: msg(3)}) // nothing to write: still behind 1 and 2
	submit(bft.Ready{Persist: prep(4), Messages: msg(4)})
	if jobs, err := s.takeDurable(); len(jobs) != 0 || err != nil {
		t.Fatalf("before the first sync returned: %d jobs durable, err %v", len(jobs), err)
	}
	g.open <- struct{}{}
	<-woken
	var got []uint64
	take := func() {
		jobs, err := s.takeDurable()
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			for _, e := range j.msgs {
				got = append(got, e.Msg.(*bft.Commit).Seq)
			}
		}
	}
	take()
	if fmt.Sprint(got) != "[1]" {
		t.Fatalf("after the first sync, messages %v are out; want [1]", got)
	}
	// 2, 3 and 4 were queued during the first sync: one frame, one sync.
	<-g.syncs
	if jobs, _ := s.takeDurable(); len(jobs) != 0 {
		t.Fatalf("%d jobs durable before their sync returned", len(jobs))
	}
	g.open <- struct{}{}
	<-woken
	take()
	if fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("messages out %v, want [1 2 3 4]", got)
	}
	if syncs != 2 {
		t.Fatalf("%d syncs for two rounds of the writer, want 2", syncs)
	}
	// With nothing ahead, a Ready with nothing to write is the caller's
	// to route at once.
	if now, err := s.submit(&bft.Ready{Messages: msg(5)}); !now || err != nil {
		t.Fatalf("an idle storage held a Ready with nothing to write (now %v, err %v)", now, err)
	}
}

// TestStorageFailureSendsNothing: a sync that fails breaks the storage:
// the messages of its Readies, and of any queued behind them, never come
// back, and every later submit returns the failure.
func TestStorageFailureSendsNothing(t *testing.T) {
	g := &gate{open: make(chan struct{}), syncs: make(chan struct{}, 16), fail: syscall.EIO}
	s, _, _, _, err := openStorage(t.TempDir(), 4, wal.Options{Wrap: func(f wal.File) wal.File { return gatedFile{f, g} }})
	if err != nil {
		t.Fatal(err)
	}
	close(g.open)
	defer s.close()
	woken := make(chan struct{}, 16)
	s.start(func() { woken <- struct{}{} }, storageMetrics{})
	rd := bft.Ready{
		Persist:  []bft.Record{{Kind: bft.RecPrepare, Msg: &bft.Prepare{View: 1, Seq: 1, Replica: 2}}},
		Messages: []bft.Envelope{{To: bft.ToReplica(1), Msg: &bft.Prepare{View: 1, Seq: 1, Replica: 2}}},
	}
	if _, err := s.submit(&rd); err != nil {
		t.Fatal(err)
	}
	<-woken
	jobs, err := s.takeDurable()
	if len(jobs) != 0 || !errors.Is(err, syscall.EIO) {
		t.Fatalf("after a failed sync: %d jobs to send, err %v; want none and EIO", len(jobs), err)
	}
	if _, err := s.submit(&rd); !errors.Is(err, syscall.EIO) {
		t.Fatalf("submit after a failed sync: %v, want EIO", err)
	}
}
