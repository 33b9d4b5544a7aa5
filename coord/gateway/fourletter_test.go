package gateway_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin/bft"
	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/gateway"
	"github.com/rubin-go/rubin/coord/tree"
)

// ask sends a four-letter word to addr, as `echo word | nc` does, and
// returns everything the gateway answers before it closes the
// connection.
func ask(t *testing.T, addr, word string) string {
	t.Helper()
	b, err := tryAsk(addr, word)
	if err != nil {
		t.Fatalf("%s: %v after %q", word, err, b)
	}
	return b
}

func tryAsk(addr, word string) (string, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(nc, word+"\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(nc)
	return string(b), err
}

// mntr asks mntr and returns its keys and values.
func mntr(t *testing.T, addr string) map[string]string {
	t.Helper()
	out := ask(t, addr, "mntr")
	m := make(map[string]string)
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		k, v, ok := strings.Cut(line, "\t")
		if !ok || !strings.HasPrefix(k, "zk_") {
			t.Fatalf("mntr line %q is not zk_key<TAB>value:\n%s", line, out)
		}
		m[k] = v
	}
	return m
}

// mntrInt returns an integer value of mntr's.
func mntrInt(t *testing.T, m map[string]string, k string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(m[k], 10, 64)
	if err != nil {
		t.Fatalf("mntr %s = %q: %v", k, m[k], err)
	}
	return v
}

// TestFourLetterWords asks a gateway every four-letter word it answers,
// over TCP as monitoring tools do, while a ZooKeeper client holds a
// session with three znodes and a watch, and checks each answer's shape
// and figures.
func TestFourLetterWords(t *testing.T) {
	tc := newTestCluster(t)
	reg := prometheus.NewRegistry()
	gw, addr := tc.serveGateway(gateway.Config{FourLetterWords: "*", Registerer: reg})
	c := tc.session(zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quietLogger{})))

	if got := ask(t, addr, "ruok"); got != "imok" {
		t.Fatalf("ruok: %q", got)
	}
	if got := ask(t, addr, "isro"); got != "rw" {
		t.Fatalf("isro: %q", got)
	}
	for _, p := range []string{"/a", "/b"} {
		if _, err := c.Create(p, []byte("data"), 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Create("/e", []byte("x"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := c.GetW("/a"); err != nil {
		t.Fatal(err)
	}

	// The connections of the words asked before go once their
	// clients close them.
	settle := func() {
		waitFor(t, 10*time.Second, "the session's connection alone", func() bool { return gw.Stats().Conns == 1 })
	}

	// mntr: every key tools read, the tree's figures as the replicas
	// hold them, the gateway's own as it counts them.
	settle()
	m := mntr(t, addr)
	for _, k := range []string{"zk_version", "zk_server_state", "zk_avg_latency", "zk_max_latency", "zk_min_latency",
		"zk_packets_received", "zk_packets_sent", "zk_num_alive_connections", "zk_outstanding_requests", "zk_znode_count",
		"zk_watch_count", "zk_ephemerals_count", "zk_approximate_data_size", "zk_open_file_descriptor_count", "zk_max_file_descriptor_count"} {
		if _, ok := m[k]; !ok {
			t.Errorf("mntr lacks %s: %v", k, m)
		}
	}
	fresh := tree.New(tree.Config{}).Stats()
	wantSize := fresh.DataSize + int64(len("/a/b/e")+len("datadatax"))
	for k, want := range map[string]int64{
		"zk_znode_count": fresh.Nodes + 3, "zk_watch_count": 1, "zk_ephemerals_count": 1, "zk_approximate_data_size": wantSize,
		// The ZooKeeper client's and mntr's own.
		"zk_num_alive_connections": 2, "zk_outstanding_requests": 0, "zk_global_sessions": 1,
	} {
		if got := mntrInt(t, m, k); got != want {
			t.Errorf("mntr %s = %d, want %d", k, got, want)
		}
	}
	if m["zk_server_state"] != "standalone" || !strings.HasPrefix(m["zk_version"], "3.8.0-") {
		t.Errorf("mntr state %q, version %q", m["zk_server_state"], m["zk_version"])
	}
	// connect, 4 requests and pings; the same answered.
	if r, s := mntrInt(t, m, "zk_packets_received"), mntrInt(t, m, "zk_packets_sent"); r < 5 || s < 5 {
		t.Errorf("mntr packets received %d, sent %d", r, s)
	}
	if lmin, lmax := mntrInt(t, m, "zk_min_latency"), mntrInt(t, m, "zk_max_latency"); lmin > lmax {
		t.Errorf("mntr latency min %d > max %d", lmin, lmax)
	}
	if avg, err := strconv.ParseFloat(m["zk_avg_latency"], 64); err != nil || !strings.Contains(m["zk_avg_latency"], ".") {
		t.Errorf("mntr zk_avg_latency %q is not a double (%v)", m["zk_avg_latency"], err)
	} else if avg <= 0 || avg > float64(mntrInt(t, m, "zk_max_latency")+1) {
		t.Errorf("mntr zk_avg_latency %v outside (0, max]", avg)
	}
	if open, most := mntrInt(t, m, "zk_open_file_descriptor_count"), mntrInt(t, m, "zk_max_file_descriptor_count"); open < 5 || open > most {
		t.Errorf("mntr file descriptors %d of %d", open, most)
	}

	// srvr and stat: ZooKeeper's lines, in its order.
	srvr := regexp.MustCompile(`^Zookeeper version: 3\.8\.0-[^\n]*, built on [^\n]*\n` +
		`Latency min/avg/max: \d+/\d+\.\d+(E-?\d+)?/\d+\nReceived: \d+\nSent: \d+\nConnections: 2\nOutstanding: 0\n` +
		`Zxid: 0x([0-9a-f]+)\nMode: standalone\nNode count: ` + strconv.FormatInt(fresh.Nodes+3, 10) + `\n$`)
	settle()
	out := ask(t, addr, "srvr")
	if sm := srvr.FindStringSubmatch(out); sm == nil {
		t.Fatalf("srvr:\n%s", out)
	} else if z, _ := strconv.ParseInt(sm[2], 16, 64); z < 4 {
		t.Fatalf("srvr zxid %#x: four writes at least", z)
	}
	settle()
	out = ask(t, addr, "stat")
	head, rest, ok := strings.Cut(out, "\n\n")
	clients := regexp.MustCompile(`^Zookeeper version: [^\n]*\nClients:\n( /127\.0\.0\.1:\d+\[[01]\]\(queued=\d+,recved=\d+,sent=\d+\)\n){2}$`)
	if !ok || !clients.MatchString(head+"\n") || !srvr.MatchString(head[:strings.Index(head, "\n")+1]+rest) {
		t.Fatalf("stat:\n%s", out)
	}
	if !strings.Contains(head, "[1](queued=0,") || !strings.Contains(head, "[0](queued=0,recved=0,sent=0)") {
		t.Fatalf("stat lists neither the session's connection nor its own:\n%s", out)
	}

	// cons: the session's connection in full.
	out = ask(t, addr, "cons")
	cons := regexp.MustCompile(` /127\.0\.0\.1:\d+\[1\]\(queued=0,recved=\d+,sent=\d+,sid=0x` + strconv.FormatInt(c.SessionID(), 16) +
		`,lop=(GETD|PING),est=\d+,to=\d+,lcxid=0x[0-9a-f]+,lzxid=0x[0-9a-f]+,lresp=\d+,llat=\d+,minlat=\d+,avglat=[0-9.E-]+,maxlat=\d+\)\n`)
	if !cons.MatchString(out) || !strings.HasSuffix(out, ")\n\n") {
		t.Fatalf("cons:\n%s", out)
	}

	if out := ask(t, addr, "wchs"); out != "1 connections watching 1 paths\nTotal watches:1\n" {
		t.Fatalf("wchs: %q", out)
	}
	_, port, _ := net.SplitHostPort(addr)
	if out := ask(t, addr, "conf"); !strings.Contains(out, "clientPort="+port+"\n") || !strings.Contains(out, "maxClientCnxns=60\n") {
		t.Fatalf("conf:\n%s", out)
	}
	if out := ask(t, addr, "envi"); !strings.HasPrefix(out, "Environment:\nzookeeper.version=3.8.0-") || !strings.Contains(out, "\ngo.version=go") {
		t.Fatalf("envi:\n%s", out)
	}

	// srst and crst zero the counters.
	before := mntrInt(t, mntr(t, addr), "zk_packets_received")
	if out := ask(t, addr, "srst"); out != "Server stats reset.\n" {
		t.Fatalf("srst: %q", out)
	}
	if after := mntrInt(t, mntr(t, addr), "zk_packets_received"); after >= before {
		t.Fatalf("packets received %d after srst, %d before", after, before)
	}
	if out := ask(t, addr, "crst"); out != "Connection stats reset.\n" {
		t.Fatalf("crst: %q", out)
	}
	settle()
	if out := ask(t, addr, "stat"); !strings.Contains(out, "[1](queued=0,recved=0,sent=0)") && !strings.Contains(out, "[1](queued=0,recved=1,sent=1)") {
		t.Fatalf("stat after crst (a ping at most since):\n%s", out)
	}

	// The watch fires: the count goes down.
	if _, err := c.Set("/a", []byte("new"), -1); err != nil {
		t.Fatal(err)
	}
	if got := mntrInt(t, mntr(t, addr), "zk_watch_count"); got != 0 {
		t.Fatalf("mntr zk_watch_count %d after the watch fired", got)
	}

	// The metrics.
	if got := metric(t, reg, "rubin_coord_gateway_four_letter_words_total", "word", "mntr"); got != 4 {
		t.Errorf("four_letter_words_total{word=mntr} = %v, want 4", got)
	}
	if got := metric(t, reg, "rubin_coord_gateway_sessions", "", ""); got != 1 || gw.Sessions() != 1 {
		t.Errorf("sessions metric %v", got)
	}
	// All replicas are correct: none replied otherwise than f+1 did.
	for r, n := range tc.client.Mismatches() {
		if n != 0 {
			t.Errorf("%d mismatched replies of replica %d, which is correct", n, r)
		}
	}
	c.Close()
	waitFor(t, 10*time.Second, "the session's connection to go", func() bool { return gw.Stats().Conns == 0 })
	if got := metric(t, reg, "rubin_coord_gateway_sessions", "", ""); got != 0 {
		t.Errorf("sessions metric %v after the client closed", got)
	}
}

// metric returns the value of the metric name (with label=value if label
// is set) that reg gathers, or fails the test.
func metric(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if label != "" {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == label {
						if lp.GetValue() != value {
							continue next
						}
						found = true
					}
				}
				if !found {
					continue
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	t.Fatalf("no metric %s{%s=%q}", name, label, value)
	return 0
}

// TestFourLetterWordsWhitelist: a gateway answers its default words, and
// the others, ZooKeeper's that it does not support included, as
// ZooKeeper answers a word not in its whitelist; a connection whose
// first bytes are no word is a ZooKeeper client's.
func TestFourLetterWordsWhitelist(t *testing.T) {
	tc := newTestCluster(t)
	if got := ask(t, tc.addr, "ruok"); got != "imok" {
		t.Fatalf("ruok: %q", got)
	}
	if got := ask(t, tc.addr, "srvr"); !strings.Contains(got, "\nMode: standalone\n") {
		t.Fatalf("srvr:\n%s", got)
	}
	for _, w := range []string{"stat", "cons", "envi", "conf", "srst", "wchs", "wchc", "dump"} {
		if got, want := ask(t, tc.addr, w), w+" is not executed because it is not in the whitelist.\n"; got != want {
			t.Fatalf("%s: %q, want %q", w, got, want)
		}
	}
	if _, err := gateway.New(gateway.Config{Invoker: tc.client, FourLetterWords: "ruok,wchp"}); err == nil {
		t.Fatal("a gateway started with wchp, which it does not support")
	}
	if _, err := gateway.New(gateway.Config{Invoker: tc.client, FourLetterWords: "ruok,abcd"}); err == nil {
		t.Fatal("a gateway started with abcd")
	}
	_, none := tc.serveGateway(gateway.Config{FourLetterWords: "none"})
	if got := ask(t, none, "ruok"); got != "ruok is not executed because it is not in the whitelist.\n" {
		t.Fatalf("ruok with none: %q", got)
	}
	// A ZooKeeper client still connects after them.
	c := tc.connect(10 * time.Second)
	if _, err := c.Create("/after", nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
}

// TestFourLetterWordsBounded: a connection that asks a four-letter word
// counts against the connection bounds, and one that does not read its
// answer or close is dropped soon after.
func TestFourLetterWordsBounded(t *testing.T) {
	tc := newTestCluster(t)
	gw, addr := tc.serveGateway(gateway.Config{MaxConnsPerHost: 1, FourLetterWords: "*"})
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "connection", func() bool { return gw.Stats().Conns == 1 })
	if got, _ := tryAsk(addr, "ruok"); got != "" {
		t.Fatalf("ruok past MaxConnsPerHost: %q", got)
	}
	if st := gw.Stats(); st.RefusedPerHost != 1 {
		t.Fatalf("stats %+v: one refused", st)
	}
	idle.Close()
	waitFor(t, 10*time.Second, "free slot", func() bool { return gw.Stats().Conns == 0 })

	// A client that asks, then neither reads nor closes, nor sends
	// anything more.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := io.WriteString(slow, "cons"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the slow connection", func() bool { return gw.Stats().Conns == 1 })
	start := time.Now()
	waitFor(t, 10*time.Second, "drop of the slow connection", func() bool { return gw.Stats().Conns == 0 })
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the gateway held the connection %v", d)
	}
	b, _ := io.ReadAll(slow)
	if !strings.HasSuffix(string(b), ")\n\n") {
		t.Fatalf("cons to the slow client: %q", b)
	}
	if got := ask(t, addr, "ruok"); got != "imok" {
		t.Fatalf("ruok after: %q", got)
	}
}

// statsLiar is a Byzantine replica's App that reports ten times the
// tree's counts.
type statsLiar struct{ *coord.App }

func (l statsLiar) Execute(ctx bft.ExecContext, op []byte) []byte {
	return lieStats(op, l.App.Execute(ctx, op))
}

func (l statsLiar) Query(ctx bft.QueryContext, op []byte) []byte {
	return lieStats(op, l.App.Query(ctx, op))
}

func lieStats(op, res []byte) []byte {
	if len(op) < 12 || !bytes.Equal(op, coord.StatsOp(int64(binary.BigEndian.Uint64(op[4:])))) {
		return res
	}
	out := bytes.Clone(res)
	for i := 8; i+8 <= len(out); i += 8 {
		binary.BigEndian.PutUint64(out[i:], 10*binary.BigEndian.Uint64(out[i:]))
	}
	return out
}

// TestFourLetterWordsOutvoteALiar: a replica that lies about the tree's
// counts does not change what mntr reports.
func TestFourLetterWordsOutvoteALiar(t *testing.T) {
	tc := newClusterWith(t, func(i int, app *coord.App) bft.App {
		if i == 0 {
			return statsLiar{app}
		}
		return app
	}, nil)
	c := tc.connect(10 * time.Second)
	if _, err := c.Create("/x", []byte("y"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	fresh := tree.New(tree.Config{}).Stats()
	for i := 0; i < 5; i++ {
		m := mntr(t, tc.addr)
		if n, e := mntrInt(t, m, "zk_znode_count"), mntrInt(t, m, "zk_ephemerals_count"); n != fresh.Nodes+1 || e != 1 {
			t.Fatalf("mntr with a lying replica: %d znodes, %d ephemerals", n, e)
		}
	}
}

// TestFourLetterWordsZooKeeperTools: Apache ZooKeeper's own tools read the
// gateway's answers, where the Debian package zookeeper is installed:
// zkServer.sh status finds its mode in srvr, and FourLetterWordMain,
// which it runs, reads mntr.
func TestFourLetterWordsZooKeeperTools(t *testing.T) {
	const bin = "/usr/share/zookeeper/bin"
	if _, err := os.Stat(bin + "/zkServer.sh"); err != nil {
		t.Skip("Apache ZooKeeper is not installed (Debian package zookeeper)")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java to run ZooKeeper's tools")
	}
	tc := newTestCluster(t)
	host, port, _ := net.SplitHostPort(tc.addr)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "clientPort=%s\nclientPortAddress=%s\ndataDir=%s\n", port, host, dir), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := append(os.Environ(), "ZOO_LOG_DIR="+dir, "CLIENT_JVMFLAGS=-Xmx64m", "JVMFLAGS=-Xmx64m")
	cmd := exec.CommandContext(ctx, bin+"/zkServer.sh", "status", cfg)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Mode: standalone") {
		t.Fatalf("zkServer.sh status: %v\n%s", err, out)
	}
	cmd = exec.CommandContext(ctx, "bash", "-c", `. `+bin+`/zkEnv.sh >/dev/null; exec java -Xmx64m -cp "$CLASSPATH" org.apache.zookeeper.client.FourLetterWordMain "$0" "$1" mntr`, host, port)
	cmd.Env = env
	if out, err = cmd.Output(); err != nil || !strings.Contains(string(out), "zk_server_state\tstandalone\n") || !strings.Contains(string(out), "zk_znode_count\t4\n") {
		t.Fatalf("FourLetterWordMain mntr: %v\n%s", err, out)
	}
}

// TestFourLetterWordsWithoutQuorum: with two replicas of four down, ruok
// is answered, and the words that need the tree's figures get
// ZooKeeper's "not serving" within the handshake timeout; a client's
// request waits, and cons and the metrics show it outstanding.
func TestFourLetterWordsWithoutQuorum(t *testing.T) {
	tc := newTestCluster(t)
	reg := prometheus.NewRegistry()
	gw, addr := tc.serveGateway(gateway.Config{FourLetterWords: "*", HandshakeTimeout: time.Second, Registerer: reg})
	c := tc.session(zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quietLogger{})))
	if got := ask(t, addr, "srvr"); !strings.Contains(got, "\nMode: standalone\n") {
		t.Fatalf("srvr with every replica up:\n%s", got)
	}
	tc.crash(1)
	tc.crash(2)
	go c.Create("/waits", nil, 0, zk.WorldACL(zk.PermAll))
	waitFor(t, 10*time.Second, "an outstanding request", func() bool {
		return metric(t, reg, "rubin_coord_gateway_outstanding_requests", "", "") == 1
	})
	if got := ask(t, addr, "cons"); !strings.Contains(got, "[1](queued=1,") {
		t.Fatalf("cons with a request waiting:\n%s", got)
	}
	if got := ask(t, addr, "ruok"); got != "imok" {
		t.Fatalf("ruok: %q", got)
	}
	for _, w := range []string{"srvr", "stat", "mntr", "wchs"} {
		start := time.Now()
		if got := ask(t, addr, w); got != "This ZooKeeper instance is not currently serving requests\n" {
			t.Fatalf("%s without a quorum: %q", w, got)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("%s without a quorum took %v", w, d)
		}
	}
	waitFor(t, 10*time.Second, "the words' connections to go", func() bool { return gw.Stats().Conns == 1 })
}
