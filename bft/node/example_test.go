package node_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/kv"
	"github.com/rubin-go/rubin/bft/node"
)

// A four-replica cluster (f = 1) in one process, over TCP on loopback,
// replicating the key-value store of package bft/kv; a client puts a key
// and reads it back.
func Example() {
	// Keys for 4 replicas and 1 client; the addresses are set below, from
	// listeners on port 0.
	cl, err := auth.Generate(4, 1, "127.0.0.1", 1, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reps []*node.Replica
	for i := range cl.Replicas {
		ln, err := rubin.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println(err)
			return
		}
		cl.Replicas[i].Addr = ln.Addr().String()
		r, err := node.NewReplica(node.ReplicaConfig{
			Cluster:  cl,
			ID:       bft.ReplicaID(i),
			App:      kv.New(kv.Config{}),
			Listener: ln, // closed by Run
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		reps = append(reps, r)
	}
	errs := make(chan error, len(reps))
	for _, r := range reps {
		go func() { errs <- r.Run(ctx) }()
	}
	defer func() {
		cancel()
		for range reps {
			<-errs
		}
	}()

	c, err := node.NewClient(ctx, node.ClientConfig{Cluster: cl, ID: 0})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ictx, icancel := context.WithTimeout(ctx, 10*time.Second)
	defer icancel()
	if _, err := c.Invoke(ictx, kv.EncodePut([]byte("greeting"), []byte("hello, pbft"))); err != nil {
		fmt.Println(err)
		return
	}
	res, err := c.Invoke(ictx, kv.EncodeGet([]byte("greeting")))
	if err != nil {
		fmt.Println(err)
		return
	}
	v, found, err := kv.DecodeResult(res)
	fmt.Println(string(v), found, err)
	// Output: hello, pbft true <nil>
}
