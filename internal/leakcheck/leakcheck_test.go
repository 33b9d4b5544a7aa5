package leakcheck

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestDetectsDescriptorLeak(t *testing.T) {
	base := Take()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	msg := Wait(base, 20*time.Millisecond)
	if !strings.Contains(msg, "leaked 1 file descriptors") || !strings.Contains(msg, os.DevNull) {
		t.Errorf("Wait with an open %s = %q, want a report naming it", os.DevNull, msg)
	}
	f.Close()
	if msg := Wait(base, time.Second); msg != "" {
		t.Errorf("Wait after closing = %q, want no report", msg)
	}
}

func TestDetectsGoroutineLeak(t *testing.T) {
	base := Take()
	// Several, so that a goroutine of an earlier test still on its way
	// out when base was taken cannot hide the leak.
	stop := make(chan struct{})
	for range 5 {
		go func() { <-stop }()
	}
	msg := Wait(base, 20*time.Millisecond)
	if !strings.Contains(msg, "goroutines (") || !strings.Contains(msg, "TestDetectsGoroutineLeak") {
		t.Errorf("Wait with a running goroutine = %q, want a report with its stack", msg)
	}
	close(stop)
	if msg := Wait(base, 5*time.Second); msg != "" {
		t.Errorf("Wait after stopping it = %q, want no report", msg)
	}
}
