package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
	ab "github.com/hyperledger/fabric-protos-go-apiv2/orderer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/rubin-go/rubin/internal/cli"
	"github.com/rubin-go/rubin/internal/proctest"
	"github.com/rubin-go/rubin/order/ordertest"
)

// TestMain lets the test binary stand in for the orderer command: with
// RUBIN_ORDERER_EXEC=1 it runs main with its arguments, so tests can run
// orderers as processes and kill them.
func TestMain(m *testing.M) {
	if os.Getenv("RUBIN_ORDERER_EXEC") == "1" {
		main()
	}
	os.Exit(m.Run())
}

var announcement = regexp.MustCompile(`^orderer \d+ listening on \S+, broadcast on (\S+)$`)

// startOrderer runs orderer replica id as a process of this test binary,
// waits until it listens and returns the process and its AtomicBroadcast
// address; the test's cleanup kills it.
func startOrderer(t *testing.T, file, dataDir string, id int, args ...string) (*exec.Cmd, string, *proctest.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"replica", "-id", strconv.Itoa(id), "-cluster", file, "-data-dir", dataDir, "-transport", "tcp"}, args...)...)
	cmd.Env = append(os.Environ(), "RUBIN_ORDERER_EXEC=1")
	m, stderr := proctest.Start(t, cmd, announcement, 30*time.Second)
	return cmd, m[1], stderr
}

// scrape returns the metrics an orderer started with -metrics-addr
// serves, from the address its log gives.
func scrape(t *testing.T, stderr *proctest.Buffer) string {
	t.Helper()
	m := regexp.MustCompile(`url=(http://\S+/metrics)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no metrics address in the log: %s", stderr.String())
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// freeBroadcastPorts gives the orderers of the channel file beside each
// cluster file the same loopback ports for AtomicBroadcast, free a
// moment ago.
func freeBroadcastPorts(t *testing.T, files ...string) {
	t.Helper()
	var addrs []string
	for _, file := range files {
		ch, err := loadChannel(channelPath(file))
		if err != nil {
			t.Fatal(err)
		}
		for len(addrs) < len(ch.file.Broadcast) {
			addrs = append(addrs, proctest.FreeAddr(t))
		}
		copy(ch.file.Broadcast, addrs)
		if err := ch.file.save(channelPath(file)); err != nil {
			t.Fatal(err)
		}
	}
}

// dialOrderer returns an AtomicBroadcast client of the orderer at addr;
// the test's cleanup closes its connection.
func dialOrderer(t *testing.T, addr string) ab.AtomicBroadcastClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return ab.NewAtomicBroadcastClient(conn)
}

// signedEnvelopes returns n envelopes of channel mychannel signed by s,
// their data tag and their index.
func signedEnvelopes(t *testing.T, s *ordertest.Signer, tag string, n int) []*cb.Envelope {
	t.Helper()
	var out []*cb.Envelope
	for i := range n {
		e, err := s.Envelope(cb.HeaderType_ENDORSER_TRANSACTION, "mychannel", fmt.Appendf(nil, "%s %d", tag, i))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// sender broadcasts envelopes, from several goroutines at once, and
// keeps those accepted.
type sender struct {
	t        *testing.T
	ctx      context.Context
	mu       sync.Mutex
	accepted []*cb.Envelope
}

// send broadcasts envs through c, calling after as ordertest.Broadcast
// does, and keeps those accepted; any other answer fails the test.
func (s *sender) send(c ab.AtomicBroadcastClient, envs []*cb.Envelope, after func(int)) {
	sts, err := ordertest.Broadcast(s.ctx, c, envs, after)
	if err != nil {
		s.t.Errorf("broadcast: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range sts {
		if r.Status != cb.Status_SUCCESS {
			s.t.Errorf("envelope %q: %v", envs[i].Payload[len(envs[i].Payload)-8:], r)
			continue
		}
		s.accepted = append(s.accepted, envs[i])
	}
}

// chain delivers blocks from orderer c from block 0 until they hold n
// envelopes, checked by Fabric's hash rules and the orderers' signatures.
func chain(t *testing.T, c ab.AtomicBroadcastClient, reader *ordertest.Signer, keys [][]byte, n int) []*cb.Block {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	blocks, err := ordertest.DeliverChain(ctx, c, reader, "mychannel", keys, 3, n)
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// TestProcesses runs four orderer processes over TCP and a Fabric client
// with its own CA: signed envelopes are accepted, forged ones refused;
// the primary is killed with SIGKILL while a writer broadcasts, and more
// envelopes go through the others; two orderers then deliver the same
// chain, valid by Fabric's hash rules and signed by 2f+1 orderers, with
// every accepted envelope exactly once and no refused one. The killed
// orderer, restarted on its data directory, delivers the same chain, and
// orders and signs again with another orderer killed; killed again and
// restarted with all the others down, it serves the chain from its
// ledger.
func TestProcesses(t *testing.T) {
	dir := t.TempDir()
	writersCA, writersFile := writeCA(t, dir, "writers")
	readersCA, readersFile := writeCA(t, dir, "readers")
	evilCA, _ := writeCA(t, dir, "evil")
	file := filepath.Join(dir, "cluster.json")
	if code, _, stderr := runCmd(t, "keygen", "-out", file, "-channel", "mychannel", "-writers", writersFile, "-readers", readersFile, "-max-message-count", "10", "-batch-timeout", "100ms"); code != cli.ExitOK {
		t.Fatalf("keygen: %d\n%s", code, stderr)
	}
	cl := proctest.FreePorts(t, file)
	freeBroadcastPorts(t, file)
	var keys [][]byte
	for _, r := range cl.Replicas {
		keys = append(keys, r.PublicKey)
	}
	procs := make([]*exec.Cmd, 4)
	clients := make([]ab.AtomicBroadcastClient, 4)
	var stderr3 *proctest.Buffer
	for i := range procs {
		var args []string
		if i == 3 {
			args = []string{"-metrics-addr", "127.0.0.1:0"}
		}
		var addr string
		var stderr *proctest.Buffer
		procs[i], addr, stderr = startOrderer(t, file, filepath.Join(dir, strconv.Itoa(i)), i, args...)
		if i == 3 {
			stderr3 = stderr
		}
		clients[i] = dialOrderer(t, addr)
	}
	writer, err := writersCA.Issue("writer", "Org1MSP")
	if err != nil {
		t.Fatal(err)
	}
	reader, _ := readersCA.Issue("reader", "Org2MSP")
	forger, _ := evilCA.Issue("forger", "Org1MSP")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := &sender{t: t, ctx: ctx}

	// Signed envelopes through two orderers at once; forged ones refused.
	var wg sync.WaitGroup
	wg.Go(func() { s.send(clients[0], signedEnvelopes(t, writer, "first", 25), nil) })
	wg.Go(func() { s.send(clients[1], signedEnvelopes(t, writer, "second", 25), nil) })
	forged := signedEnvelopes(t, forger, "forged", 3)
	tampered := proto.Clone(signedEnvelopes(t, writer, "tampered", 1)[0]).(*cb.Envelope)
	tampered.Payload[len(tampered.Payload)-1] ^= 1
	forged = append(forged, tampered, signedEnvelopes(t, reader, "reader", 1)[0])
	sts, err := ordertest.Broadcast(ctx, clients[2], forged, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range sts {
		if r.Status != cb.Status_FORBIDDEN || r.Info == "" {
			t.Errorf("forged envelope %d: %v, want FORBIDDEN with a reason", i, r)
		}
	}
	wg.Wait()

	// The primary of view 0, orderer 0, is killed while orderer 1 takes a
	// stream of envelopes; then more go through orderer 2.
	start := time.Now()
	wg.Go(func() {
		s.send(clients[1], signedEnvelopes(t, writer, "during", 40), func(i int) {
			if i == 9 {
				procs[0].Process.Kill()
			}
		})
	})
	wg.Wait()
	during := time.Since(start)
	procs[0].Wait()
	if ws, ok := procs[0].ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("orderer 0 was not killed by SIGKILL: %v", procs[0].ProcessState)
	}
	s.send(clients[2], signedEnvelopes(t, writer, "after", 20), nil)
	if t.Failed() {
		return
	}

	a := chain(t, clients[2], reader, keys, len(s.accepted))
	b := chain(t, clients[3], reader, keys, len(s.accepted))
	if err := ordertest.CheckDelivered([][]*cb.Block{a, b}, s.accepted, forged); err != nil {
		t.Fatal(err)
	}
	if len(s.accepted) != 110 {
		t.Fatalf("%d envelopes accepted of 110", len(s.accepted))
	}
	// Orderer 0, restarted on its data directory, takes part again (with
	// orderer 1 killed, the cluster needs it) and delivers the same chain.
	procs[0], _, _ = startOrderer(t, file, filepath.Join(dir, "0"), 0)
	procs[1].Process.Kill()
	procs[1].Wait()
	s.send(clients[0], signedEnvelopes(t, writer, "restarted", 10), nil)
	if t.Failed() {
		return
	}
	final := [][]*cb.Block{chain(t, clients[0], reader, keys, len(s.accepted)), chain(t, clients[3], reader, keys, len(s.accepted))}
	if err := ordertest.CheckDelivered(final, s.accepted, forged); err != nil {
		t.Fatal(err)
	}
	metrics := scrape(t, stderr3)
	for _, want := range []string{fmt.Sprintf(`rubin_order_blocks_final_total{orderer="3"} %d`, len(final[0])), `rubin_bft_view{replica="3"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("orderer 3's metrics lack %q", want)
		}
	}
	// Orderer 0 killed again and restarted with every other orderer
	// down serves from its ledger the chain it delivered.
	for _, i := range []int{0, 2, 3} {
		procs[i].Process.Kill()
		procs[i].Wait()
	}
	procs[0], _, _ = startOrderer(t, file, filepath.Join(dir, "0"), 0)
	if err := ordertest.CheckDelivered([][]*cb.Block{final[0], chain(t, clients[0], reader, keys, len(s.accepted))}, s.accepted, forged); err != nil {
		t.Fatalf("restarted alone: %v", err)
	}
	t.Logf("%d envelopes in %d blocks; 40 envelopes across the primary's crash in %v", len(s.accepted), len(final[0]), during)
}
