package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/internal/cli"
)

func runKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var n, clients, gateways, basePort int
	var host, out, split, addrs string
	err := parseFlags("keygen", args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&n, "n", 4, "replicas, 3f+1")
		fs.IntVar(&clients, "clients", 64, "client identities, for the gateways to share out")
		fs.IntVar(&gateways, "gateways", 1, "gateways to share the client identities out to, each its own range (written to the cluster file's .gateways.json)")
		fs.StringVar(&host, "host", "127.0.0.1", "host of every replica's address")
		fs.IntVar(&basePort, "base-port", 7100, "replica i listens on host:base-port+i")
		fs.StringVar(&addrs, "addrs", "", "comma-separated HOST:PORT of every replica, in order (overrides -host, -base-port and -n)")
		fs.StringVar(&out, "out", "cluster.json", "the cluster file to write: every party's secrets, for a cluster on one machine")
		fs.StringVar(&split, "split", "", "also write one file per party into `dir`, holding only its secrets: replica-I.json for replica I, gateway-G.json for gateway G (its identities); give each machine its own")
	})
	if err != nil {
		return err
	}
	list, err := cli.Addrs("addrs", addrs)
	if err != nil {
		return err
	}
	if list != nil {
		n = len(list)
	}
	switch {
	case n < 4 || (n-1)%3 != 0:
		return fmt.Errorf("%w: -n %d is not 3f+1 with f >= 1", errUsage, n)
	case clients < 1:
		return fmt.Errorf("%w: -clients %d is not positive", errUsage, clients)
	case gateways < 1 || gateways > clients:
		return fmt.Errorf("%w: -gateways %d: want 1 to -clients (%d)", errUsage, gateways, clients)
	case list == nil && (basePort < 1 || basePort+n-1 > 65535):
		return fmt.Errorf("%w: -base-port %d leaves no room for %d ports", errUsage, basePort, n)
	case out == "":
		return fmt.Errorf("%w: -out is empty", errUsage)
	}
	c, err := auth.Generate(n, clients, host, basePort, nil)
	if err != nil {
		return err
	}
	for i, a := range list {
		c.Replicas[i].Addr = a
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
	if split == "" {
		return nil
	}
	if err := saveParties(c, share, split); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: replica-0.json to replica-%d.json and gateway-0.json to gateway-%d.json, each with its party's secrets only\n", split, n-1, gateways-1)
	return nil
}

// saveParties writes into dir one file per party of the dealer's c: each
// replica's (ForReplica) and each gateway's, holding the identities share
// gives it (ForClients). A replica's file cannot act as a gateway or as
// another replica, and a gateway's cannot act as a replica or use another
// gateway's identities.
func saveParties(c *auth.Cluster, share gatewaysFile, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := c.SaveReplicas(dir, nil); err != nil {
		return err
	}
	for _, g := range share.Gateways {
		ids, err := identities(c, g.IDs)
		if err != nil {
			return err
		}
		s, err := c.ForClients(ids)
		if err != nil {
			return err
		}
		if err := s.Save(filepath.Join(dir, fmt.Sprintf("gateway-%d.json", g.Gateway))); err != nil {
			return err
		}
	}
	return nil
}
