package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestStartProfile: both files are written in their formats, and a
// trace that cannot start leaves no CPU profile running behind it.
func TestStartProfile(t *testing.T) {
	dir := t.TempDir()
	cpu, exec := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "exec.trace")
	stop, err := StartProfile(cpu, exec)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct{ path, magic string }{{cpu, "\x1f\x8b"}, {exec, "go 1."}} {
		b, err := os.ReadFile(f.path)
		if err != nil || !bytes.HasPrefix(b, []byte(f.magic)) {
			t.Fatalf("%s: %d bytes beginning %q (%v), want %q first", f.path, len(b), b[:min(len(b), 8)], err, f.magic)
		}
	}

	if _, err := StartProfile(cpu, filepath.Join(dir, "missing", "exec.trace")); err == nil {
		t.Fatal("a trace in a missing directory started")
	}
	stop, err = StartProfile(cpu, "")
	if err != nil {
		t.Fatalf("a CPU profile after a failed start: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestProfiledWithoutPath(t *testing.T) {
	ran := false
	if err := Profiled("", func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("ran %v, err %v", ran, err)
	}
}
