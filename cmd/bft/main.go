// Command bft runs a PBFT-replicated key-value store over rubin's
// transports, and measures it.
//
// Usage:
//
//	bft keygen -n 4 -base-port 7100 -out cluster.json [-clients 128] [-host 127.0.0.1 | -addrs H:P,...] [-split DIR]
//	bft replica -id I -cluster cluster.json [-transport tcp|rdma] [-spin D] [-metrics-addr ADDR] [-v]
//	bft put -cluster cluster.json [-client ID] [-transport tcp|rdma] KEY VALUE
//	bft get -cluster cluster.json [-client ID] [-transport tcp|rdma] KEY
//	bft bench -cluster cluster.json [-transport tcp|rdma] [-spin D] -clients C -n OPS -size BYTES
//	bft demo [-transport tcp|rdma] [-n OPS] [-clients C]
//
// keygen writes a cluster file: every replica's address, keys and every
// client's keys (see package bft/auth). With -split it also writes one file
// per replica and per client that holds only that party's secrets, which is
// what each machine of a real cluster should get.
//
// replica runs replica I of the cluster until interrupted; once it listens
// it prints "replica I listening on ADDR".
//
// put and get run one operation as a client and print the result.
//
// Every command that joins a cluster takes rubin.Config's flags:
// -transport, -spin (how long the event loop busy-polls before it
// sleeps) and -max-message-size. It refuses -pollers, which sizes the
// net.Conn face's pollers: a replica or client runs one event loop.
//
// bench runs C closed-loop clients against a running cluster until OPS
// operations have completed (C client identities, each with one operation
// outstanding, multiplexed by one client over one link per replica), and
// prints one summary line:
//
//	replicas=4 f=1 transport=tcp clients=16 size=0 ops=100000 ops_per_s=41234 p50_us=321.0 p99_us=1234.0
//
// A 0-byte operation is the store's no-op; a larger one puts a value of
// that many bytes. Latencies are per operation, from the request to the
// f+1st matching reply. Further fields may be added at the end of the
// line, never before.
//
// demo starts four replicas in this process on 127.0.0.1, runs a workload
// with a progress line, crashes the primary halfway, and shows the view
// change and the workload finishing.
//
// Exit status: 2 for bad arguments, 1 for a failure at run time.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
  bft keygen -n 4 -base-port 7100 -out cluster.json [-clients 128] [-host 127.0.0.1 | -addrs H:P,...] [-split DIR]
  bft replica -id I -cluster cluster.json [-transport tcp|rdma] [-spin D] [-metrics-addr ADDR] [-v]
  bft put -cluster cluster.json [-client ID] [-transport tcp|rdma] KEY VALUE
  bft get -cluster cluster.json [-client ID] [-transport tcp|rdma] KEY
  bft bench -cluster cluster.json [-transport tcp|rdma] [-spin D] -clients C -n OPS -size BYTES
  bft demo [-transport tcp|rdma] [-n OPS] [-clients C]
`

// errUsage marks an error in the command line.
var errUsage = cli.ErrUsage

// errReported marks a usage error that the flag package has already
// printed, which run does not print again.
var errReported = cli.ErrReported

// commands maps each subcommand to its function.
var commands = map[string]cli.Command{
	"keygen":  runKeygen,
	"replica": runReplica,
	"put":     runPut,
	"get":     runGet,
	"bench":   runBench,
	"demo":    runDemo,
}

// run runs the command with the given arguments (without the program
// name) and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Run(ctx, "bft", usageText, commands, args, stdout, stderr)
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText, "\nflags of bft "+name+":\n")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs and checks that exactly nargs positional
// arguments follow the flags.
func parseFlags(fs *flag.FlagSet, args []string, nargs int) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errReported, err)
	}
	if fs.NArg() != nargs {
		return fmt.Errorf("%w: bft %s takes %d argument(s) after its flags, got %d", errUsage, fs.Name(), nargs, fs.NArg())
	}
	return nil
}
