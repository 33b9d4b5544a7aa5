package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/node"
)

func runPut(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runKV(ctx, "put", args, 2, stdout, stderr, func(a []string) []byte {
		return kv.EncodePut([]byte(a[0]), []byte(a[1]))
	})
}

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runKV(ctx, "get", args, 1, stdout, stderr, func(a []string) []byte {
		return kv.EncodeGet([]byte(a[0]))
	})
}

// runKV runs one key-value operation, made by encode from the positional
// arguments, as a client of the cluster, and prints its result.
func runKV(ctx context.Context, name string, args []string, nargs int, stdout, stderr io.Writer, encode func([]string) []byte) error {
	fs := newFlagSet(name, stderr)
	var cf clusterFlags
	cf.register(fs)
	client := fs.Uint64("client", 0, "the client identity to use, from the cluster file")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	if err := parseFlags(fs, args, nargs); err != nil {
		return err
	}
	c, err := cf.load()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cl, err := node.NewClient(ctx, node.ClientConfig{Cluster: c, ID: bft.ClientID(*client), Transport: &cf.transport})
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := cl.Invoke(ctx, encode(fs.Args()))
	if err != nil {
		return err
	}
	value, found, err := kv.DecodeResult(res)
	switch {
	case err != nil:
		return err
	case name == "put":
		fmt.Fprintln(stdout, "ok")
	case !found:
		return fmt.Errorf("%q: not found", fs.Arg(0))
	default:
		fmt.Fprintf(stdout, "%s\n", value)
	}
	return nil
}
