package gateway_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/bft/node"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/gateway"
)

// Four replicas of the coordination service (f = 1) and a gateway in one
// process, over TCP on loopback; an unmodified ZooKeeper client creates a
// node through the gateway and reads it back.
func Example() {
	// Keys for 4 replicas and 8 client identities, the gateway's pool.
	cl, err := auth.Generate(4, 8, "127.0.0.1", 1, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, len(cl.Replicas))
	running := 0
	defer func() {
		cancel()
		for range running {
			<-errs
		}
	}()
	lns := make([]net.Listener, len(cl.Replicas))
	for i := range lns {
		if lns[i], err = rubin.Listen("tcp", "127.0.0.1:0"); err != nil {
			fmt.Println(err)
			return
		}
		cl.Replicas[i].Addr = lns[i].Addr().String()
	}
	for i := range lns {
		r, err := node.NewReplica(node.ReplicaConfig{
			Cluster:  cl,
			ID:       bft.ReplicaID(i),
			App:      coord.New(coord.Config{}),
			Core:     bft.Config{MaxOpSize: coord.MaxOpSize, MaxBatchBytes: 2 * coord.MaxOpSize},
			Listener: lns[i], // closed by Run
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		running++
		go func() { errs <- r.Run(ctx) }()
	}

	client, err := node.NewClient(ctx, node.ClientConfig{Cluster: cl, IDs: []bft.ClientID{0, 1, 2, 3, 4, 5, 6, 7}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	gw, err := gateway.New(gateway.Config{Invoker: client})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer gw.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go gw.Serve(ln)

	// Any ZooKeeper client, pointed at the gateway.
	zc, _, err := zk.Connect([]string{ln.Addr().String()}, 10*time.Second, zk.WithLogger(quietLogger{}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer zc.Close()
	path, err := zc.Create("/greeting", []byte("hello, zookeeper"), 0, zk.WorldACL(zk.PermAll))
	if err != nil {
		fmt.Println(err)
		return
	}
	data, stat, err := zc.Get(path)
	fmt.Println(path, string(data), stat.Version, err)
	// Output: /greeting hello, zookeeper 0 <nil>
}
