package netns

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestNewRefusesOtherRanges(t *testing.T) {
	for _, a := range []string{"192.0.2.10", "10.0.0.1", "127.0.0.1", "198.51.101.1", "198.51.100.0", "198.51.100.255"} {
		if _, err := New("never", []netip.Addr{netip.MustParseAddr(a)}); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("New with %s: %v, want an address error", a, err)
		}
	}
}

// TestCutAndHeal builds a lab of two hosts, checks that one reaches the
// other over TCP and has no default route, then cuts the other off and
// heals it.
func TestCutAndHeal(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	a, b := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	l, err := New(fmt.Sprintf("rubin-nstest-%d", os.Getpid()), []netip.Addr{a, b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	server := netip.AddrPortFrom(b, 7000)
	srv := helper(l.Host(1), "listen", server.String())
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "listening\n" {
		t.Fatalf("listener: %q, %v", line, err)
	}
	dial := func() error {
		out, err := helper(l.Host(0), "dial", server.String()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
		return nil
	}
	if err := dial(); err != nil {
		t.Fatalf("dial before the cut: %v", err)
	}
	if out, err := l.Host(0).Command("ip", "route").CombinedOutput(); err != nil || strings.Contains(string(out), "default") {
		t.Errorf("host 0 has a default route, or ip route failed: %v: %s", err, out)
	}
	if err := l.Host(1).Cut(); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err == nil {
		t.Fatal("dial through a cut port succeeded")
	}
	if err := l.Host(1).Heal(); err != nil {
		t.Fatal(err)
	}
	if err := dial(); err != nil {
		t.Fatalf("dial after healing: %v", err)
	}
}

// helper returns a command that runs this test binary in h's namespace as
// TestHelperProcess, doing what and addr.
func helper(h *Host, what, addr string) *exec.Cmd {
	cmd := h.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "NETNS_TEST_HELPER="+what, "NETNS_TEST_ADDR="+addr)
	return cmd
}

// TestHelperProcess is not a test: run by helper, it listens on an
// address and answers every connection, or dials it once within a second.
func TestHelperProcess(t *testing.T) {
	addr := os.Getenv("NETNS_TEST_ADDR")
	switch os.Getenv("NETNS_TEST_HELPER") {
	case "listen":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println("listening")
		for {
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.Close()
		os.Exit(0)
	}
}
