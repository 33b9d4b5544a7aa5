// Command orderer runs Hyperledger Fabric's ordering service on the PBFT
// core: orderers that serve Fabric's orderer.AtomicBroadcast API over
// gRPC for one channel, order envelopes through PBFT and deliver blocks
// signed by 2f+1 of them.
//
// Usage:
//
//	orderer keygen -n 4 -base-port 7100 -out cluster.json -channel NAME -writers CA.pem [-readers CA.pem] [-host 127.0.0.1] [-broadcast-port 7050] [-max-message-count 500] [-absolute-max-bytes 524288] [-preferred-max-bytes 524288] [-batch-timeout 2s] [-split DIR] [-addrs HOST:PORT,...] [-broadcast-addrs HOST:PORT,...]
//	orderer replica -id I -cluster replica-I.json [-data-dir DIR] [-listen HOST:PORT] [-metrics-addr ADDR] [-transport tcp|rdma] [-v]
//	orderer demo [-envelopes 400] [-transport tcp|rdma]
//	orderer bench [-quick] [-duration 30s] [-warmup 5s] [-streams 32] [-window 16] [-transport tcp|rdma] [-host 127.0.0.1] [-size 1024] [-verify-samples 5000] [-envelopes N] [-observe 0] [-data-dir DIR] [-cpuprofile FILE]
//
// keygen writes a cluster file as bft keygen does (every orderer's
// replica address and keys, and two client identities per orderer,
// through which it orders), and beside it, in CLUSTER.channel.json, the
// channel: its name, the CA certificates of its Writers and Readers
// policies (-readers defaults to -writers), how blocks are cut, and the
// address each orderer serves AtomicBroadcast on (host:broadcast-port+i).
// The cluster file holds every orderer's secrets; with -split DIR keygen
// also writes DIR/replica-I.json for each orderer I, holding every
// address and public key but only orderer I's secrets (its signing key,
// its MAC keys with the other orderers, each client identity's key with
// it, and the keys of its own identities I and n+I), with the channel
// beside it in DIR/replica-I.channel.json: what orderer I's machine gets.
//
// replica runs orderer I until interrupted, from its own file (or the
// cluster file; another orderer's file is refused): its PBFT replica on
// the cluster file's address and AtomicBroadcast on -listen (default: the
// channel file's address; port 0 picks a free one). Once both listen it
// prints "orderer I listening on ADDR, broadcast on ADDR". With -data-dir
// its replica persists its log and snapshots there, and its blocks in
// the ledger DIR/blocks (package order/ledger), synced before Deliver
// serves them; restarted on its data directory, an orderer serves the
// chain its ledger holds at once, and fetches the blocks it lacks (lost
// in a crash before a sync, or finalized while it was down) from the
// other orderers' AtomicBroadcast addresses
// in the channel file, checking each by its signatures and hashes. With
// -metrics-addr it serves Prometheus metrics at http://ADDR/metrics: the
// ordering service's (rubin_order_*, see package order/server), its
// replica's (rubin_bft_*) and its event loop's.
//
// demo starts four orderers in this process, a writer that broadcasts
// through orderer 1 while orderer 0, the primary, crashes halfway, and a
// reader that takes the chain from orderers 2 and 3 and verifies it: the
// same blocks, Fabric's hash chain, 2f+1 signatures on every block, and
// every envelope exactly once.
//
// bench measures issue 25's target (see docs/order.md): four durable
// orderers in this process over TCP with default batching, 32 Broadcast
// streams of pre-signed envelopes of 1 KiB of data, delivery observed on
// one orderer's Deliver stream. It times Go's ECDSA P-256 verification
// first and prints the bound CPUs / (4 × verify time), then the
// throughput over a steady window, its ratio to the bound, and the
// broadcast-to-delivery p50 and p99. -quick is a run of a few seconds
// for CI.
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

const usageText = `usage:
  orderer keygen -n 4 -base-port 7100 -out cluster.json -channel NAME -writers CA.pem [-readers CA.pem] [-host 127.0.0.1] [-broadcast-port 7050] [-max-message-count 500] [-absolute-max-bytes 524288] [-preferred-max-bytes 524288] [-batch-timeout 2s] [-split DIR] [-addrs HOST:PORT,...] [-broadcast-addrs HOST:PORT,...]
  orderer replica -id I -cluster replica-I.json [-data-dir DIR] [-listen HOST:PORT] [-metrics-addr ADDR] [-transport tcp|rdma] [-v]
  orderer demo [-envelopes 400] [-transport tcp|rdma]
  orderer bench [-quick] [-duration 30s] [-warmup 5s] [-streams 32] [-window 16] [-transport tcp|rdma] [-host 127.0.0.1] [-size 1024] [-verify-samples 5000] [-envelopes N] [-observe 0] [-data-dir DIR] [-cpuprofile FILE]
`

var commands = map[string]cli.Command{
	"keygen":  runKeygen,
	"replica": runReplica,
	"demo":    runDemo,
	"bench":   runBench,
}

// run runs the command with the given arguments (without the program
// name) and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Run(ctx, "orderer", usageText, commands, args, stdout, stderr)
}

// parseFlags parses the flags of subcommand name (see cli.ParseFlags).
func parseFlags(name string, args []string, stderr io.Writer, define func(fs *flag.FlagSet)) error {
	return cli.ParseFlags("orderer", name, usageText, args, stderr, define)
}
