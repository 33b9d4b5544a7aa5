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
