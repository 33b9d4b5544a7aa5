package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/internal/cli"
	"github.com/rubin-go/rubin/order"
	"github.com/rubin-go/rubin/order/block"
	"github.com/rubin-go/rubin/order/envelope"
	"github.com/rubin-go/rubin/order/server"
)

func runKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var n, basePort, broadcastPort int
	var host, out, split, name, writers, readers, addrs, broadcastAddrs string
	var bc block.Config
	err := parseFlags("keygen", args, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&n, "n", 4, "orderers, 3f+1")
		fs.StringVar(&host, "host", "127.0.0.1", "host of every orderer's addresses")
		fs.IntVar(&basePort, "base-port", 7100, "orderer i's replica listens on host:base-port+i")
		fs.IntVar(&broadcastPort, "broadcast-port", 7050, "orderer i serves AtomicBroadcast on host:broadcast-port+i")
		fs.StringVar(&addrs, "addrs", "", "comma-separated HOST:PORT of every orderer's replica, in order (overrides -host, -base-port and -n)")
		fs.StringVar(&broadcastAddrs, "broadcast-addrs", "", "comma-separated HOST:PORT where each orderer serves AtomicBroadcast, in order (overrides -host and -broadcast-port; as many as the orderers)")
		fs.StringVar(&out, "out", "cluster.json", "the cluster file to write: every orderer's secrets, for a cluster on one machine; the channel goes beside it in .channel.json")
		fs.StringVar(&split, "split", "", "also write each orderer's own file into `dir`: replica-I.json for orderer I, holding only its secrets, with the channel beside it in replica-I.channel.json; give each machine its own")
		fs.StringVar(&name, "channel", "", "the channel's name")
		fs.StringVar(&writers, "writers", "", "PEM file of the CA certificates whose identities may broadcast (the Writers policy)")
		fs.StringVar(&readers, "readers", "", "PEM file of the CA certificates whose identities may deliver (the Readers policy; default: -writers)")
		fs.IntVar(&bc.MaxMessageCount, "max-message-count", 500, "most envelopes in a block")
		fs.IntVar(&bc.AbsoluteMaxBytes, "absolute-max-bytes", 512<<10, "largest envelope accepted")
		fs.IntVar(&bc.PreferredMaxBytes, "preferred-max-bytes", 512<<10, "size of a block's envelopes not to pass")
		fs.DurationVar(&bc.BatchTimeout, "batch-timeout", 2*time.Second, "how long after its first envelope a block is cut")
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
	blist, err := cli.Addrs("broadcast-addrs", broadcastAddrs)
	if err != nil {
		return err
	}
	switch {
	case n < 4 || (n-1)%3 != 0:
		return fmt.Errorf("%w: %d orderers is not 3f+1 with f >= 1", cli.ErrUsage, n)
	case blist != nil && len(blist) != n:
		return fmt.Errorf("%w: -broadcast-addrs names %d addresses for %d orderers", cli.ErrUsage, len(blist), n)
	case list == nil && (basePort < 1 || basePort+n-1 > 65535):
		return fmt.Errorf("%w: -base-port %d leaves no room for %d ports", cli.ErrUsage, basePort, n)
	case blist == nil && (broadcastPort < 1 || broadcastPort+n-1 > 65535):
		return fmt.Errorf("%w: -broadcast-port %d leaves no room for %d ports", cli.ErrUsage, broadcastPort, n)
	case name == "" || writers == "" || out == "":
		return fmt.Errorf("%w: -channel, -writers and -out are required", cli.ErrUsage)
	case bc.MaxMessageCount < 1 || bc.AbsoluteMaxBytes < 1 || bc.PreferredMaxBytes < 1 || bc.BatchTimeout <= 0:
		return fmt.Errorf("%w: the block cutting flags must be positive", cli.ErrUsage)
	case bc.AbsoluteMaxBytes > server.MaxOpSize-64:
		return fmt.Errorf("%w: -absolute-max-bytes %d: at most %d", cli.ErrUsage, bc.AbsoluteMaxBytes, server.MaxOpSize-64)
	}
	if readers == "" {
		readers = writers
	}
	ch := channelFile{Channel: name, MaxMessageCount: bc.MaxMessageCount, AbsoluteMaxBytes: bc.AbsoluteMaxBytes, PreferredMaxBytes: bc.PreferredMaxBytes, BatchTimeout: bc.BatchTimeout.String()}
	for _, p := range []struct {
		file string
		dst  *string
	}{{writers, &ch.Writers}, {readers, &ch.Readers}} {
		b, err := os.ReadFile(p.file)
		if err != nil {
			return err
		}
		if _, err := envelope.NewPolicy(b); err != nil {
			return fmt.Errorf("%s: %w", p.file, err)
		}
		*p.dst = string(b)
	}
	ch.Broadcast = blist
	if blist == nil {
		for i := range n {
			ch.Broadcast = append(ch.Broadcast, net.JoinHostPort(host, strconv.Itoa(broadcastPort+i)))
		}
	}
	c, err := auth.Generate(n, 2*n, host, basePort, nil) // two clients an orderer: order.ClientIDs
	if err != nil {
		return err
	}
	for i, a := range list {
		c.Replicas[i].Addr = a
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %w", cli.ErrUsage, err)
	}
	if err := c.Save(out); err != nil {
		return err
	}
	if err := ch.save(channelPath(out)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d orderers (f=%d), replicas from %s\n", out, n, c.F, c.Replicas[0].Addr)
	fmt.Fprintf(stdout, "wrote %s: channel %q, AtomicBroadcast from %s\n", channelPath(out), name, ch.Broadcast[0])
	if split == "" {
		return nil
	}
	if err := saveOrderers(c, &ch, split); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: replica-0.json to replica-%d.json, each with its orderer's secrets and client identities only, and the channel beside each\n", split, n-1)
	return nil
}

// ownClients returns the client identities orderer id of n orders
// through (order.ClientIDs): its file holds their keys besides its
// replica's secrets.
func ownClients(n int, id bft.ReplicaID) []bft.ClientID {
	envelopes, duties := order.ClientIDs(n, id)
	return []bft.ClientID{envelopes, duties}
}

// saveOrderers writes into dir one file per orderer of the dealer's c,
// holding only its secrets: replica-I.json with orderer I's replica
// secrets and its client identities' keys (ForReplica with ownClients),
// and the channel ch beside it. No orderer's file can act as another
// orderer, nor sign or order as one.
func saveOrderers(c *auth.Cluster, ch *channelFile, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := c.SaveReplicas(dir, func(id bft.ReplicaID) []bft.ClientID { return ownClients(c.N(), id) }); err != nil {
		return err
	}
	for i := range c.N() {
		if err := ch.save(channelPath(filepath.Join(dir, fmt.Sprintf("replica-%d.json", i)))); err != nil {
			return err
		}
	}
	return nil
}
