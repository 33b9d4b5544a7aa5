//go:build linux

package selector_test

import (
	"bytes"
	"runtime/trace"
	"testing"
	"time"

	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

// TestSleepTraced: while an execution trace is taken, a select that goes
// to sleep after its spin logs it, with its budget, so that a trace viewer
// can tell the selector's sleeps from its spins.
func TestSleepTraced(t *testing.T) {
	src := newPollSource(t)
	s := newSelector(t, selector.Config{SpinBudget: 200 * time.Microsecond})
	register(t, s, &polledChan{fdChan: fdChan{t: t, fd: -1}, src: src}, selectionkey.OpRead)
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skipf("cannot take a trace: %v", err)
	}
	n, err := s.SelectTimeout(20 * time.Millisecond)
	trace.Stop()
	if n != 0 || err != nil {
		t.Fatalf("SelectTimeout with nothing ready = %d, %v", n, err)
	}
	if st := s.Stats(); st.Sleeps != 1 {
		t.Fatalf("%d sleeps; want 1", st.Sleeps)
	}
	for _, want := range []string{"selector sleep", "budget_us=200.0 waited_us="} {
		if !bytes.Contains(buf.Bytes(), []byte(want)) {
			t.Errorf("the trace has no %q", want)
		}
	}
}
