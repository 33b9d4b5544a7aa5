// Package proctest runs a command's replicas as processes in tests: a
// buffer a process writes while the test reads it, loopback ports for a
// cluster file, and a process started and waited for until it announces
// itself on its standard output.
package proctest

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
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

// FreePorts gives the replicas of a cluster file loopback ports that
// were free a moment ago, saves it and returns it. The files of more,
// each party's own of the same cluster, get the same ports.
func FreePorts(t testing.TB, file string, more ...string) *auth.Cluster {
	t.Helper()
	var first *auth.Cluster
	var addrs []string
	for _, f := range append([]string{file}, more...) {
		c, err := auth.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for len(addrs) < c.N() {
			addrs = append(addrs, FreeAddr(t))
		}
		for i := range c.Replicas {
			c.Replicas[i].Addr = addrs[i]
		}
		if err := c.Save(f); err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = c
		}
	}
	return first
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

// FreeAddr returns an address on 127.0.0.1 that is free now, for a
// process the test starts to listen on. Its port is below the kernel's
// range of ephemeral ports (net.ipv4.ip_local_port_range, 32768 and up
// by default), where a port the test picked with :0 and closed again
// could meanwhile become the local port of a connection another test
// makes, and the process would find it taken.
func FreeAddr(t testing.TB) string {
	t.Helper()
	const lo, hi = 20000, 32768
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		return addr
	}
	t.Fatalf("no free port in [%d, %d) on 127.0.0.1", lo, hi)
	return ""
}
