package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/bft/auth"
	"github.com/rubin-go/rubin/internal/cli"
	"github.com/rubin-go/rubin/internal/proctest"
	"github.com/rubin-go/rubin/order/ordertest"
	"github.com/rubin-go/rubin/order/server"
)

// TestSplitSecrets deploys the ordering service as docs/order.md does:
// keygen -split gives each orderer a file of its own. Each file holds
// its orderer's secrets and no other's: no other orderer's signing key,
// no MAC key of a pair of other orderers, no key of another orderer's
// client identities but the one each shares with it. Orderer 1's file
// is refused as orderer 2's, and so is a replica's file without its
// orderer's client identities. Four orderer processes, each from its own
// file, order envelopes broadcast to two of them and deliver one chain,
// each block signed by 2f+1 of them.
func TestSplitSecrets(t *testing.T) {
	dir := t.TempDir()
	writersCA, writersFile := writeCA(t, dir, "writers")
	cluster := filepath.Join(dir, "cluster.json")
	parties := filepath.Join(dir, "parties")
	code, stdout, stderr := runCmd(t, "keygen", "-out", cluster, "-channel", "mychannel", "-writers", writersFile, "-max-message-count", "10", "-batch-timeout", "100ms", "-split", parties)
	if code != cli.ExitOK || !strings.Contains(stdout, "replica-3.json") {
		t.Fatalf("keygen: %d\n%s%s", code, stdout, stderr)
	}
	dealer, err := auth.Load(cluster)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for i := range dealer.N() {
		files = append(files, filepath.Join(parties, fmt.Sprintf("replica-%d.json", i)))
		checkOwnSecrets(t, dealer, files[i], bft.ReplicaID(i))
	}
	if t.Failed() {
		return
	}
	proctest.FreePorts(t, files[0], files[1:]...)
	freeBroadcastPorts(t, files...)

	// A replica's file without its orderer's client identities, as a
	// deployment of the PBFT core alone would give it.
	plain := filepath.Join(dir, "plain-1.json")
	c1, err := auth.Load(files[1])
	if err != nil {
		t.Fatal(err)
	}
	if c1, err = c1.ForReplica(1); err != nil {
		t.Fatal(err)
	}
	if err := c1.Save(plain); err != nil {
		t.Fatal(err)
	}
	ch, _ := os.ReadFile(channelPath(files[1]))
	if err := os.WriteFile(channelPath(plain), ch, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file string
		id   string
		want string
	}{
		{files[1], "2", files[1] + " is replica 1 with clients 1 and 5's file, not orderer 2's"},
		{plain, "1", plain + " lacks the keys of client 1, through which orderer 1 orders"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], "replica", "-id", tc.id, "-cluster", tc.file, "-transport", "tcp")
		cmd.Env = append(os.Environ(), "RUBIN_ORDERER_EXEC=1")
		out, err := cmd.CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != cli.ExitUsage || !strings.Contains(string(out), tc.want) {
			t.Errorf("orderer replica -id %s -cluster %s: %v, want exit status %d saying %q\n%s", tc.id, tc.file, err, cli.ExitUsage, tc.want, out)
		}
	}

	clients := make([]ab.AtomicBroadcastClient, len(files))
	for i, f := range files {
		_, addr, _ := startOrderer(t, f, filepath.Join(dir, fmt.Sprint(i)), i)
		clients[i] = dialOrderer(t, addr)
	}
	writer, err := writersCA.Issue("writer", "Org1MSP")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := &sender{t: t, ctx: ctx}
	var wg sync.WaitGroup
	for _, i := range []int{1, 3} {
		envs := signedEnvelopes(t, writer, fmt.Sprint("through ", i), 15)
		wg.Go(func() { s.send(clients[i], envs, nil) })
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var keys [][]byte
	for _, r := range dealer.Replicas {
		keys = append(keys, r.PublicKey)
	}
	reader, _ := writersCA.Issue("reader", "Org1MSP")
	delivered := [][]*cb.Block{chain(t, clients[0], reader, keys, len(s.accepted)), chain(t, clients[2], reader, keys, len(s.accepted))}
	if err := ordertest.CheckDelivered(delivered, s.accepted, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d envelopes in %d blocks", len(s.accepted), len(delivered[0]))
}

// checkOwnSecrets checks that the JSON of file, orderer id's own, holds
// exactly the secrets of the dealer's c that are orderer id's: its
// private key, its MAC keys with the others, each client identity's key
// with it, and every key of its own identities (ownClients).
func checkOwnSecrets(t *testing.T, c *auth.Cluster, file string, id bft.ReplicaID) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	data := string(b)
	holds := func(key []byte) bool { return strings.Contains(data, base64.StdEncoding.EncodeToString(key)) }
	if n := strings.Count(data, `"private_key"`); n != 1 {
		t.Errorf("%s: %d private keys, want 1", file, n)
	}
	for i, r := range c.Replicas {
		if got, want := holds(r.PrivateKey), i == int(id); got != want {
			t.Errorf("%s: holds orderer %d's private key: %v, want %v", file, i, got, want)
		}
		for j, k := range r.MACKeys {
			if got, want := holds(k), i == int(id) || j == int(id); len(k) > 0 && got != want {
				t.Errorf("%s: holds the MAC key of orderers %d and %d: %v, want %v", file, i, j, got, want)
			}
		}
	}
	own := ownClients(c.N(), id)
	for _, cl := range c.Clients {
		for r, k := range cl.Keys {
			if got, want := holds(k), r == int(id) || cl.ID == own[0] || cl.ID == own[1]; got != want {
				t.Errorf("%s: holds client %d's key for orderer %d: %v, want %v", file, cl.ID, r, got, want)
			}
		}
	}
}

// TestNewOrdererNeedsOwnSecrets: server.NewOrderer, given a stripped
// file, refuses one that lacks the orderer's client identities or its
// replica's secrets, before anything runs; startDemoCluster runs
// orderers from their own files (TestDemo).
func TestNewOrdererNeedsOwnSecrets(t *testing.T) {
	c, err := auth.Generate(4, 8, "127.0.0.1", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		replica bft.ReplicaID
		clients []bft.ClientID
		want    string
	}{
		{"replica 1 without its clients", 1, nil, "holds no keys of client 1 for orderer 1"},
		{"replica 1 with orderer 2's clients", 1, ownClients(4, 2), "holds no keys of client 1 for orderer 1"},
		{"replica 2 with orderer 1's clients", 2, ownClients(4, 1), "holds no key of orderer 1"},
	} {
		own, err := c.ForReplica(tc.replica, tc.clients...)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, err = server.NewOrderer(server.OrdererConfig{Cluster: own, ID: 1, Channel: "mychannel", Listener: ln})
		ln.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s as orderer 1: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
