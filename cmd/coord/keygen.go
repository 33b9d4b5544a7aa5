package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/rubin-go/rubin/bft/auth"
)

func runKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var n, clients, gateways, basePort int
	var host, out string
	err := parseFlags("keygen", args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&n, "n", 4, "replicas, 3f+1")
		fs.IntVar(&clients, "clients", 64, "client identities, for the gateways to share out")
		fs.IntVar(&gateways, "gateways", 1, "gateways to share the client identities out to, each its own range (written to the cluster file's .gateways.json)")
		fs.StringVar(&host, "host", "127.0.0.1", "host of every replica's address")
		fs.IntVar(&basePort, "base-port", 7100, "replica i listens on host:base-port+i")
		fs.StringVar(&out, "out", "cluster.json", "the cluster file to write")
	})
	if err != nil {
		return err
	}
	switch {
	case n < 4 || (n-1)%3 != 0:
		return fmt.Errorf("%w: -n %d is not 3f+1 with f >= 1", errUsage, n)
	case clients < 1:
		return fmt.Errorf("%w: -clients %d is not positive", errUsage, clients)
	case gateways < 1 || gateways > clients:
		return fmt.Errorf("%w: -gateways %d: want 1 to -clients (%d)", errUsage, gateways, clients)
	case basePort < 1 || basePort+n-1 > 65535:
		return fmt.Errorf("%w: -base-port %d leaves no room for %d ports", errUsage, basePort, n)
	case out == "":
		return fmt.Errorf("%w: -out is empty", errUsage)
	}
	c, err := auth.Generate(n, clients, host, basePort, nil)
	if err != nil {
		return err
	}
	if err := c.Save(out); err != nil {
		return err
	}
	share := shareOut(gateways, clients)
	if err := share.save(gatewaysPath(out)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d replicas (f=%d) from %s, %d client identities\n", out, n, c.F, c.Replicas[0].Addr, clients)
	fmt.Fprintf(stdout, "wrote %s: the identities of %d gateways (coord gateway -gateway I)\n", gatewaysPath(out), gateways)
	return nil
}
