package proctest_test

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/internal/proctest"
)

func TestStart(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo starting; echo 'ready on 127.0.0.1:99'; echo oops >&2; exec sleep 60")
	m, stderr := proctest.Start(t, cmd, regexp.MustCompile(`^ready on (\S+)$`), 10*time.Second)
	if m[1] != "127.0.0.1:99" {
		t.Fatalf("submatches %q", m)
	}
	for deadline := time.Now().Add(5 * time.Second); stderr.String() != "oops\n"; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stderr %q", stderr.String())
		}
	}
}

func TestFreePorts(t *testing.T) {
	c, err := auth.Generate(4, 1, "127.0.0.1", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.json")
	if err := c.Save(file); err != nil {
		t.Fatal(err)
	}
	// Replica 2's own file gets the same ports.
	own := filepath.Join(dir, "replica-2.json")
	r2, _ := c.ForReplica(2)
	if err := r2.Save(own); err != nil {
		t.Fatal(err)
	}
	got := proctest.FreePorts(t, file, own)
	seen := map[string]bool{}
	for _, f := range []string{file, own} {
		saved, err := auth.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range saved.Replicas {
			if r.Addr != got.Replicas[i].Addr || r.Addr == c.Replicas[i].Addr || f == file && seen[r.Addr] {
				t.Fatalf("%s: replica %d: %s", f, i, r.Addr)
			}
			seen[r.Addr] = true
		}
	}
	if saved, _ := auth.Load(own); saved.Holder == nil || saved.Holder.ID != 2 {
		t.Errorf("replica 2's file lost its holder: %+v", saved.Holder)
	}
}
