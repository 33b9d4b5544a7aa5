package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/rubin-go/rubin/bft/auth"
)

func runKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("keygen", stderr)
	n := fs.Int("n", 4, "replicas, 3f+1")
	clients := fs.Int("clients", 128, "client identities")
	host := fs.String("host", "127.0.0.1", "host of every replica's address")
	basePort := fs.Int("base-port", 7100, "replica i listens on host:base-port+i")
	out := fs.String("out", "cluster.json", "the cluster file to write")
	addrs := fs.String("addrs", "", "comma-separated HOST:PORT of every replica, in order (overrides -host, -base-port and -n)")
	split := fs.String("split", "", "also write one file per party, holding only its secrets, into `dir`")
	if err := parseFlags(fs, args, 0); err != nil {
		return err
	}
	var list []string
	if *addrs != "" {
		list = strings.Split(*addrs, ",")
		for _, a := range list {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return fmt.Errorf("%w: -addrs: %w", errUsage, err)
			}
		}
		*n = len(list)
	}
	switch {
	case *n < 4 || (*n-1)%3 != 0:
		return fmt.Errorf("%w: -n %d is not 3f+1 with f >= 1", errUsage, *n)
	case *clients < 1:
		return fmt.Errorf("%w: -clients %d is not positive", errUsage, *clients)
	case list == nil && (*basePort < 1 || *basePort+*n-1 > 65535):
		return fmt.Errorf("%w: -base-port %d leaves no room for %d ports", errUsage, *basePort, *n)
	case *out == "":
		return fmt.Errorf("%w: -out is empty", errUsage)
	}
	c, err := auth.Generate(*n, *clients, *host, *basePort, nil)
	if err != nil {
		return err
	}
	for i, a := range list {
		c.Replicas[i].Addr = a
	}
	if err := c.Save(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d replicas (f=%d) from %s, %d clients\n", *out, *n, c.F, c.Replicas[0].Addr, *clients)
	if *split != "" {
		if err := os.MkdirAll(*split, 0o700); err != nil {
			return err
		}
		if err := c.SaveEach(*split); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote one file per replica and client into %s\n", *split)
	}
	return nil
}
