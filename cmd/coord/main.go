// Command coord runs the coordination service: replicas of a
// ZooKeeper-compatible tree replicated by PBFT, and gateways that
// unmodified ZooKeeper clients connect to.
//
// Usage:
//
//	coord keygen -n 4 -base-port 7100 -out cluster.json [-clients 64] [-gateways 1] [-host 127.0.0.1 | -addrs H:P,...] [-split DIR]
//	coord replica -id I -cluster cluster.json [-data-dir DIR] [-metrics-addr ADDR] [-transport tcp|rdma] [-v] [-cpuprofile FILE]
//	coord gateway -cluster cluster.json -listen HOST:PORT [-gateway I | -ids FIRST-LAST] [-claim-wait D] [-max-client-cnxns 60] [-max-client-sessions 120] [-max-conns 1024] [-four-letter-words ruok,isro,srvr,mntr] [-metrics-addr ADDR] [-transport tcp|rdma] [-v] [-cpuprofile FILE]
//	coord demo [-transport tcp|rdma] [-clients C] [-rounds R]
//
// keygen writes a cluster file as bft keygen does: every replica's
// address and keys, and the keys of the client identities gateways use.
// Beside it, in CLUSTER.gateways.json, it shares the identities out among
// -gateways gateways, each its own range. With -split DIR it also writes
// one file per party holding only its secrets, for a cluster across
// machines: DIR/replica-I.json for replica I and DIR/gateway-G.json for
// gateway G, which runs from it without -gateway.
//
// replica runs replica I of the cluster until interrupted; once it listens
// it prints "replica I listening on ADDR". With -data-dir it persists its
// log and snapshots there and recovers from them when restarted.
//
// gateway serves ZooKeeper's client protocol on -listen (TCP, whatever
// -transport is: that is how ZooKeeper clients connect) and reaches the
// replicas over -transport. It prints "gateway listening on ADDR" once it
// accepts. Each request in flight takes one client identity: those of
// -gateway I in the cluster's gateways file, or -ids, or by default every
// client of the cluster file (refused if the gateways file shares them
// out among several gateways). Gateways running at once must have
// identities that do not overlap: a gateway whose identities another
// running gateway holds (a claim the replicas keep and the gateway renews
// every second) refuses to start and says so; one whose identities a
// gateway that stopped still holds (its own previous run) waits for that
// claim to lapse, at most -claim-wait (default 10s), and starts. It holds at most -max-client-cnxns
// connections from one client address (ZooKeeper's maxClientCnxns,
// default 60) and -max-conns in all (default 1024); 0 lifts either bound.
// A connection past them is closed at once, and the gateway logs it (at
// most once a second). So is a connect for a new session from an address
// that holds -max-client-sessions (default 120), counting sessions whose
// connection ended until they may have expired.
//
// On its client port a gateway answers ZooKeeper's four-letter words
// (`echo mntr | nc HOST PORT`) that -four-letter-words lists, as
// ZooKeeper's 4lw.commands.whitelist: by default ruok, isro, srvr and
// mntr; * for every one it supports (conf, cons, crst, envi, isro, mntr,
// ruok, srst, srvr, stat, wchs), none for none. With -metrics-addr it
// serves Prometheus metrics at http://ADDR/metrics (sessions,
// connections, outstanding requests, four-letter words, and its bft
// client's) and prints "gateway metrics on URL".
//
// demo starts four replicas and a gateway in this process, and C
// ZooKeeper clients (go-zookeeper/zk) that each take a lock R times to
// increment a counter and meanwhile elect leaders, with a progress line;
// it crashes the primary halfway and shows the view change and the
// clients carrying on, then checks the counter and that the surviving
// replicas hold identical states.
//
// Every command that joins a cluster takes rubin.Config's flags:
// -transport, -spin, -max-message-size and -pollers. replica and gateway
// also take -cpuprofile FILE: they write a CPU profile of their whole run
// to FILE (go tool pprof reads it) when they stop.
//
// Exit status: 2 for bad arguments, 1 for a failure at run time.
package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rubin-go/rubin/internal/cli"
	_ "github.com/rubin-go/rubin/transport/rdma" // the rdma network
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK      = cli.ExitOK
	exitFailure = cli.ExitFailure
	exitUsage   = cli.ExitUsage
)

const usageText = `usage:
  coord keygen -n 4 -base-port 7100 -out cluster.json [-clients 64] [-gateways 1] [-host 127.0.0.1 | -addrs H:P,...] [-split DIR]
  coord replica -id I -cluster cluster.json [-data-dir DIR] [-metrics-addr ADDR] [-transport tcp|rdma] [-v] [-cpuprofile FILE]
  coord gateway -cluster cluster.json -listen HOST:PORT [-gateway I | -ids FIRST-LAST] [-claim-wait D] [-max-client-cnxns 60] [-max-client-sessions 120] [-max-conns 1024] [-four-letter-words ruok,isro,srvr,mntr] [-metrics-addr ADDR] [-transport tcp|rdma] [-v] [-cpuprofile FILE]
  coord demo [-transport tcp|rdma] [-clients C] [-rounds R]
`

// errUsage marks an error in the command line.
var errUsage = cli.ErrUsage

var commands = map[string]cli.Command{
	"keygen":  runKeygen,
	"replica": runReplica,
	"gateway": runGateway,
	"demo":    runDemo,
}

// run runs the command with the given arguments (without the program
// name) and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Run(ctx, "coord", usageText, commands, args, stdout, stderr)
}

// parseFlags parses the flags of subcommand name (see cli.ParseFlags).
func parseFlags(name string, args []string, stderr io.Writer, define func(fs *flag.FlagSet)) error {
	return cli.ParseFlags("coord", name, usageText, args, stderr, define)
}
