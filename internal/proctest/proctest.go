// Package proctest runs a command's replicas as processes in tests: a
// buffer a process writes while the test reads it, loopback ports for a
// cluster file, and a process started and waited for until it announces
// itself on its standard output.
package proctest

import (
	"bufio"
	"bytes"
	"net"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bft/auth"
)

// Buffer is a bytes.Buffer safe for a writer and readers at once.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// FreePorts gives the replicas of the cluster file loopback ports that
// were free a moment ago, saves it and returns it.
func FreePorts(t testing.TB, file string) *auth.Cluster {
	t.Helper()
	c, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Replicas {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.Replicas[i].Addr = ln.Addr().String()
		ln.Close()
	}
	if err := c.Save(file); err != nil {
		t.Fatal(err)
	}
	return c
}

// Start starts cmd, whose Stdout and Stderr must be unset, and waits, at
// most timeout, for a line of its standard output that announce matches;
// it returns the submatches of that line and the process's standard
// error. The test's cleanup kills the process and waits for it.
func Start(t testing.TB, cmd *exec.Cmd, announce *regexp.Regexp, timeout time.Duration) ([]string, *Buffer) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	found := make(chan []string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		var m []string
		for s.Scan() {
			if m == nil {
				if m = announce.FindStringSubmatch(s.Text()); m != nil {
					found <- m
				}
			}
		}
		if m == nil {
			found <- nil
		}
	}()
	select {
	case m := <-found:
		if m == nil {
			t.Fatalf("%s exited before announcing itself: %s", cmd.Args, stderr.String())
		}
		return m, stderr
	case <-time.After(timeout):
		t.Fatalf("%s did not announce itself within %v: %s", cmd.Args, timeout, stderr.String())
	}
	return nil, nil
}
