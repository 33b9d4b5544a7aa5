package selectionkey_test

import (
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rubin-go/rubin/selectionkey"
)

// watcher counts what a key tells it.
type watcher struct {
	changed, canceled atomic.Int32
	last              atomic.Pointer[selectionkey.Key]
}

func (w *watcher) InterestChanged(k *selectionkey.Key) { w.changed.Add(1); w.last.Store(k) }
func (w *watcher) Canceled(k *selectionkey.Key)        { w.canceled.Add(1); w.last.Store(k) }

// stubChannel is a channel.Channel that does nothing.
type stubChannel struct{}

func (stubChannel) Close() error           { return nil }
func (stubChannel) LocalAddr() net.Addr    { return nil }
func (stubChannel) SetBlocking(bool) error { return nil }
func (stubChannel) IsBlocking() bool       { return false }

const connOps = selectionkey.OpRead | selectionkey.OpWrite | selectionkey.OpConnect

func newKey(interest selectionkey.Ops) (*selectionkey.Key, *watcher) {
	w := new(watcher)
	return selectionkey.New(stubChannel{}, connOps, interest, w), w
}

func TestOpsString(t *testing.T) {
	for _, tc := range []struct {
		ops  selectionkey.Ops
		want string
	}{
		{0, "none"},
		{selectionkey.OpRead, "read"},
		{selectionkey.OpWrite, "write"},
		{selectionkey.OpConnect, "connect"},
		{selectionkey.OpAccept, "accept"},
		{selectionkey.OpRead | selectionkey.OpWrite, "read|write"},
		{selectionkey.AllOps, "read|write|connect|accept"},
		{1 << 1, "invalid"},
		{selectionkey.OpAccept | 1<<7, "accept|invalid"},
	} {
		if got := tc.ops.String(); got != tc.want {
			t.Errorf("Ops(%#x).String() = %q; want %q", uint32(tc.ops), got, tc.want)
		}
	}
}

func TestNewKey(t *testing.T) {
	k, w := newKey(selectionkey.OpRead)
	if k.Channel() != (stubChannel{}) || k.ValidOps() != connOps || k.Interest() != selectionkey.OpRead || !k.Valid() {
		t.Errorf("new key: channel %v, valid ops %v, interest %v, valid %v", k.Channel(), k.ValidOps(), k.Interest(), k.Valid())
	}
	if k.Ready() != 0 || k.Attachment() != nil {
		t.Errorf("new key: ready %v, attachment %v; want none", k.Ready(), k.Attachment())
	}
	if w.changed.Load() != 0 || w.canceled.Load() != 0 {
		t.Errorf("New told the watcher something")
	}
}

func TestInterest(t *testing.T) {
	k, w := newKey(selectionkey.OpRead)
	steps := []struct {
		name    string
		op      func() error
		want    selectionkey.Ops
		changed bool
	}{
		{"AddInterest(write)", func() error { return k.AddInterest(selectionkey.OpWrite) }, selectionkey.OpRead | selectionkey.OpWrite, true},
		{"AddInterest(write) again", func() error { return k.AddInterest(selectionkey.OpWrite) }, selectionkey.OpRead | selectionkey.OpWrite, false},
		{"AddInterest(none)", func() error { return k.AddInterest(0) }, selectionkey.OpRead | selectionkey.OpWrite, false},
		{"RemoveInterest(read)", func() error { return k.RemoveInterest(selectionkey.OpRead) }, selectionkey.OpWrite, true},
		{"RemoveInterest(read) again", func() error { return k.RemoveInterest(selectionkey.OpRead) }, selectionkey.OpWrite, false},
		{"RemoveInterest(read|write)", func() error { return k.RemoveInterest(selectionkey.OpRead | selectionkey.OpWrite) }, 0, true},
		{"SetInterest(connect)", func() error { return k.SetInterest(selectionkey.OpConnect) }, selectionkey.OpConnect, true},
		{"SetInterest(connect) again", func() error { return k.SetInterest(selectionkey.OpConnect) }, selectionkey.OpConnect, false},
		{"SetInterest(none)", func() error { return k.SetInterest(0) }, 0, true},
	}
	for _, s := range steps {
		before := w.changed.Load()
		if err := s.op(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := k.Interest(); got != s.want {
			t.Errorf("%s: interest %v; want %v", s.name, got, s.want)
		}
		if told := w.changed.Load() - before; told != map[bool]int32{true: 1, false: 0}[s.changed] {
			t.Errorf("%s: InterestChanged called %d times; want %v", s.name, told, s.changed)
		}
		if s.changed && w.last.Load() != k {
			t.Errorf("%s: watcher told about another key", s.name)
		}
	}
}

func TestInvalidOps(t *testing.T) {
	k, w := newKey(selectionkey.OpRead)
	for name, op := range map[string]func(selectionkey.Ops) error{
		"SetInterest":    k.SetInterest,
		"AddInterest":    k.AddInterest,
		"RemoveInterest": k.RemoveInterest,
	} {
		for _, bad := range []selectionkey.Ops{selectionkey.OpAccept, selectionkey.OpRead | selectionkey.OpAccept, 1 << 9} {
			err := op(bad)
			var inv *selectionkey.InvalidOpsError
			if !errors.As(err, &inv) {
				t.Errorf("%s(%v) = %v; want an *InvalidOpsError", name, bad, err)
				continue
			}
			if inv.Ops != bad&^connOps || inv.Valid != connOps {
				t.Errorf("%s(%v): error reports ops %v valid %v; want %v and %v", name, bad, inv.Ops, inv.Valid, bad&^connOps, connOps)
			}
			if !strings.Contains(err.Error(), "not supported") {
				t.Errorf("%s(%v): error text %q", name, bad, err)
			}
		}
	}
	if k.Interest() != selectionkey.OpRead || w.changed.Load() != 0 {
		t.Errorf("refused changes changed the interest to %v, or told the watcher (%d)", k.Interest(), w.changed.Load())
	}
}

func TestReady(t *testing.T) {
	k, _ := newKey(connOps)
	for _, tc := range []struct {
		ops                      selectionkey.Ops
		read, write, conn, accep bool
	}{
		{0, false, false, false, false},
		{selectionkey.OpRead, true, false, false, false},
		{selectionkey.OpWrite | selectionkey.OpConnect, false, true, true, false},
		{selectionkey.OpAccept, false, false, false, true},
	} {
		k.SetReady(tc.ops)
		if k.Ready() != tc.ops || k.IsReadable() != tc.read || k.IsWritable() != tc.write || k.IsConnectable() != tc.conn || k.IsAcceptable() != tc.accep {
			t.Errorf("after SetReady(%v): Ready %v, readable %v, writable %v, connectable %v, acceptable %v",
				tc.ops, k.Ready(), k.IsReadable(), k.IsWritable(), k.IsConnectable(), k.IsAcceptable())
		}
	}
}

func TestAttachment(t *testing.T) {
	k, _ := newKey(0)
	if old := k.Attach("first"); old != nil {
		t.Errorf("first Attach returned %v; want nil", old)
	}
	if old := k.Attach(42); old != "first" {
		t.Errorf("Attach returned %v; want the previous attachment", old)
	}
	if got := k.Attachment(); got != 42 {
		t.Errorf("Attachment() = %v; want 42", got)
	}
	if old := k.Attach(nil); old != 42 {
		t.Errorf("Attach(nil) returned %v; want 42", old)
	}
	if got := k.Attachment(); got != nil {
		t.Errorf("Attachment() after Attach(nil) = %v", got)
	}
}

func TestCancel(t *testing.T) {
	k, w := newKey(selectionkey.OpRead)
	k.Attach("kept")
	k.Cancel()
	if k.Valid() {
		t.Error("Valid() after Cancel")
	}
	k.Cancel()
	if got := w.canceled.Load(); got != 1 || w.last.Load() != k {
		t.Errorf("Canceled called %d times; want once, with the key", got)
	}
	for name, op := range map[string]func(selectionkey.Ops) error{
		"SetInterest": k.SetInterest, "AddInterest": k.AddInterest, "RemoveInterest": k.RemoveInterest,
	} {
		if err := op(selectionkey.OpWrite); !errors.Is(err, selectionkey.ErrCanceled) {
			t.Errorf("%s on a canceled key = %v; want ErrCanceled", name, err)
		}
	}
	if k.Interest() != selectionkey.OpRead || w.changed.Load() != 0 {
		t.Errorf("canceled key's interest became %v", k.Interest())
	}
	if k.Channel() != (stubChannel{}) || k.Attachment() != "kept" {
		t.Error("a canceled key lost its channel or attachment")
	}
}

// Under -race: concurrent interest changes end in the union of what was
// added minus what was removed, and concurrent Cancels tell the watcher
// once.
func TestConcurrentUse(t *testing.T) {
	k, w := newKey(0)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			op := []selectionkey.Ops{selectionkey.OpRead, selectionkey.OpWrite}[i%2]
			for range 1000 {
				k.AddInterest(op)
				k.RemoveInterest(op)
				k.Attach(i)
				k.Attachment()
				k.SetReady(op)
				k.Ready()
			}
			k.AddInterest(op)
		}()
	}
	wg.Wait()
	if got := k.Interest(); got != selectionkey.OpRead|selectionkey.OpWrite {
		t.Errorf("interest after concurrent changes = %v; want read|write", got)
	}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.Cancel()
		}()
	}
	wg.Wait()
	if got := w.canceled.Load(); got != 1 {
		t.Errorf("concurrent Cancels told the watcher %d times; want once", got)
	}
}
