package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fullListener returns the address of a loopback socket that listens with
// a backlog of 0 and never accepts, with its accept queue already filled:
// the kernel drops further SYNs, so a connect to it stays pending.
func fullListener(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
	// Fill the queue until a connect no longer completes at once.
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("the kernel completes connects beyond the backlog here")
	return ""
}

// TestClientGivesUpOnPendingConnect runs every client against a server
// whose connect never completes: each must give up after -reply-timeout
// with the same error as when a server stops answering, not with that of
// a dial interrupted.
func TestClientGivesUpOnPendingConnect(t *testing.T) {
	addr := fullListener(t)
	for _, name := range apiNames() {
		t.Run(name, func(t *testing.T) {
			code, stderr, took, _ := runBounded(t, 10*time.Second, "client", "-api", name, "-addr", addr,
				"-reply-timeout", "500ms", "-syscalls=false")
			want := "no reply from " + addr + " in 500ms"
			if code != exitFailure || !strings.Contains(stderr, want) {
				t.Errorf("exit status %d, stderr %q; want %d and %q", code, stderr, exitFailure, want)
			}
			if took > 3*time.Second {
				t.Errorf("the client took %v to give up", took.Round(time.Millisecond))
			}
		})
	}
}
