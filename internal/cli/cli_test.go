package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	var n int
	define := func(fs *flag.FlagSet) { fs.IntVar(&n, "n", 1, "a number") }
	var stderr bytes.Buffer
	if err := ParseFlags("prog", "sub", "usage: prog sub\n", []string{"-n", "4"}, &stderr, define); err != nil || n != 4 {
		t.Fatalf("ParseFlags = %v, n = %d", err, n)
	}
	if err := ParseFlags("prog", "sub", "usage: prog sub\n", []string{"-h"}, &stderr, define); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(stderr.String(), "flags of prog sub:") {
		t.Fatalf("the usage printed: %q", stderr.String())
	}
	if err := ParseFlags("prog", "sub", "", []string{"-nosuch"}, &stderr, define); !errors.Is(err, ErrReported) {
		t.Fatalf("an unknown flag: %v", err)
	}
	if err := ParseFlags("prog", "sub", "", []string{"extra"}, &stderr, define); !errors.Is(err, ErrUsage) || errors.Is(err, ErrReported) {
		t.Fatalf("a positional argument: %v", err)
	}
}

func TestAddrs(t *testing.T) {
	if list, err := Addrs("addrs", ""); list != nil || err != nil {
		t.Fatalf("empty: %v %v", list, err)
	}
	if list, err := Addrs("addrs", "a:1,[::1]:2"); err != nil || len(list) != 2 || list[1] != "[::1]:2" {
		t.Fatalf("two: %v %v", list, err)
	}
	for _, bad := range []string{"a", "a:1,", "a:1,a:1"} {
		if _, err := Addrs("addrs", bad); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "-addrs") {
			t.Errorf("%q: %v, want a usage error naming -addrs", bad, err)
		}
	}
}
