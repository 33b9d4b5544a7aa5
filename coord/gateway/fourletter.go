package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/proto"
)

// The four-letter words a gateway answers, as a ZooKeeper server does on
// its client port: a connection whose first four bytes are one of them,
// where a length would be, gets the answer and is closed.
var fourLetterWords = []string{"conf", "cons", "crst", "envi", "isro", "mntr", "ruok", "srst", "srvr", "stat", "wchs"}

// unsupportedWords are ZooKeeper's four-letter words a gateway does not
// answer (docs/coord.md says why); asked, they get the answer of a word
// not in the whitelist.
var unsupportedWords = []string{"dirs", "dump", "gtmk", "hash", "stmk", "wchc", "wchp"}

// DefaultFourLetterWords are the words a gateway answers unless
// Config.FourLetterWords says otherwise: the health checks (ruok, isro)
// and the figures monitoring tools read (srvr, mntr). The others list
// the clients' addresses and sessions (stat, cons), the gateway's host
// and settings (envi, conf), or reset its counters for everyone (srst,
// crst): ZooKeeper leaves all but srvr off by default for such reasons.
const DefaultFourLetterWords = "ruok,isro,srvr,mntr"

// serverVersion is the version a gateway reports in srvr, stat, mntr
// and envi: the ZooKeeper whose client protocol it speaks, and this
// build.
var serverVersion = zooKeeperVersion()

func zooKeeperVersion() string {
	rev, when := "rubin", "1970-01-01 00:00 UTC"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = "rubin-" + s.Value[:min(len(s.Value), 12)]
			case "vcs.time":
				if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
					when = t.UTC().Format("2006-01-02 15:04 UTC")
				}
			}
		}
	}
	return "3.8.0-" + rev + ", built on " + when
}

// serverMode is what a gateway reports as its mode (srvr's Mode,
// mntr's zk_server_state): to its clients it is one server, with no
// leader or followers of its own to report.
const serverMode = "standalone"

// CheckFourLetterWords returns an error if spec is not a valid
// Config.FourLetterWords: a word that is not one, or that the gateway
// does not answer.
func CheckFourLetterWords(spec string) error {
	_, err := parseFourLetterWords(spec)
	return err
}

// parseFourLetterWords parses Config.FourLetterWords: "" is the default,
// "*" every word the gateway answers, "none" none.
func parseFourLetterWords(spec string) (map[string]bool, error) {
	switch spec {
	case "":
		spec = DefaultFourLetterWords
	case "none":
		return map[string]bool{}, nil
	case "*":
		spec = strings.Join(fourLetterWords, ",")
	}
	on := make(map[string]bool)
	for _, w := range strings.Split(spec, ",") {
		w = strings.TrimSpace(w)
		switch {
		case slices.Contains(fourLetterWords, w):
			on[w] = true
		case slices.Contains(unsupportedWords, w):
			return nil, fmt.Errorf("gateway: four-letter word %q is not supported (supported: %s)", w, strings.Join(fourLetterWords, ","))
		default:
			return nil, fmt.Errorf("gateway: %q is not a four-letter word (supported: %s)", w, strings.Join(fourLetterWords, ","))
		}
	}
	return on, nil
}

// isFourLetterWord reports whether the first four bytes of a connection
// are a word ZooKeeper knows. None is a frame's length a client could
// send: each is above a gigabyte.
func isFourLetterWord(w string) bool {
	return slices.Contains(fourLetterWords, w) || slices.Contains(unsupportedWords, w)
}

// errFourLetter ends a connection that asked a four-letter word once it
// has its answer.
var errFourLetter = errors.New("four-letter word answered")

// fourLetterLinger bounds how long a connection that asked a four-letter
// word is read from, and how much, after its answer: a client such as
// `echo ruok | nc` sends a newline after the word, and closing with it
// unread would reset the connection and could lose the answer.
const (
	fourLetterLinger     = time.Second
	fourLetterLingerSize = 4 << 10
)

// fourLetter answers a four-letter word and closes the connection: the
// answer is at most a line per connection of the gateway (stat, cons),
// written within Config.WriteTimeout.
func (c *conn) fourLetter(w string) error {
	s := c.srv
	s.metrics.fourLetter(w)
	var answer string
	if s.words[w] {
		answer = s.answer(w)
	} else {
		answer = w + " is not executed because it is not in the whitelist.\n"
	}
	c.nc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	if _, err := io.WriteString(c.nc, answer); err != nil {
		return err
	}
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok && tc.CloseWrite() == nil {
		c.nc.SetReadDeadline(time.Now().Add(fourLetterLinger))
		io.Copy(io.Discard, io.LimitReader(c.nc, fourLetterLingerSize))
	}
	return errFourLetter
}

// notServing is ZooKeeper's answer when it cannot give the figures asked
// for: here, when the replicas did not answer.
const notServing = "This ZooKeeper instance is not currently serving requests\n"

// answer returns the answer to w, a word the gateway answers.
func (s *Server) answer(w string) string {
	switch w {
	case "ruok":
		return "imok"
	case "isro":
		// A gateway serves no read-only mode: without a quorum of
		// replicas it serves nothing.
		return "rw"
	case "srst":
		s.counters.reset()
		return "Server stats reset.\n"
	case "crst":
		s.mu.Lock()
		for c := range s.conns {
			c.counters.reset()
		}
		s.mu.Unlock()
		return "Connection stats reset.\n"
	case "conf":
		return s.conf()
	case "envi":
		return envi()
	case "cons":
		var b strings.Builder
		s.dumpConns(&b, false)
		b.WriteString("\n")
		return b.String()
	}
	// The rest report the replicated tree's figures.
	st, err := s.treeStats()
	if err != nil {
		return notServing
	}
	var b strings.Builder
	switch w {
	case "srvr", "stat":
		fmt.Fprintf(&b, "Zookeeper version: %s\n", serverVersion)
		if w == "stat" {
			b.WriteString("Clients:\n")
			s.dumpConns(&b, true)
			b.WriteString("\n")
		}
		lmin, lavg, lmax := s.counters.latency()
		fmt.Fprintf(&b, "Latency min/avg/max: %d/%s/%d\n", lmin, javaDouble(lavg), lmax)
		fmt.Fprintf(&b, "Received: %d\n", s.counters.received.Load())
		fmt.Fprintf(&b, "Sent: %d\n", s.counters.sent.Load())
		fmt.Fprintf(&b, "Connections: %d\n", s.Stats().Conns)
		fmt.Fprintf(&b, "Outstanding: %d\n", s.outstanding())
		fmt.Fprintf(&b, "Zxid: 0x%x\n", st.Zxid)
		fmt.Fprintf(&b, "Mode: %s\n", serverMode)
		fmt.Fprintf(&b, "Node count: %d\n", st.Nodes)
	case "mntr":
		lmin, lavg, lmax := s.counters.latency()
		kv := func(k string, v any) { fmt.Fprintf(&b, "zk_%s\t%v\n", k, v) }
		kv("version", serverVersion)
		kv("server_state", serverMode)
		kv("avg_latency", javaDouble(lavg))
		kv("max_latency", lmax)
		kv("min_latency", lmin)
		kv("packets_received", s.counters.received.Load())
		kv("packets_sent", s.counters.sent.Load())
		kv("num_alive_connections", s.Stats().Conns)
		kv("outstanding_requests", s.outstanding())
		kv("znode_count", st.Nodes)
		kv("watch_count", st.Watches)
		kv("ephemerals_count", st.Ephemerals)
		kv("approximate_data_size", st.DataSize)
		if open, maxFDs, ok := fileDescriptors(); ok {
			kv("open_file_descriptor_count", open)
			kv("max_file_descriptor_count", maxFDs)
		}
		kv("uptime", time.Since(s.started).Milliseconds())
		kv("global_sessions", st.Sessions)
	case "wchs":
		fmt.Fprintf(&b, "%d connections watching %d paths\nTotal watches:%d\n", st.WatchingSessions, st.WatchedPaths, st.Watches)
	}
	return b.String()
}

// treeStats asks the replicas for the tree's counts: a read-only request
// that 2f+1 replicas answer alike, or, if they do not, an ordered one
// that f+1 do, so that no replica alone makes the gateway report a
// figure. It waits at most Config.HandshakeTimeout.
func (s *Server) treeStats() (coord.StatsResult, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.HandshakeTimeout)
	defer cancel()
	res, err := s.cfg.Invoker.InvokeRead(ctx, coord.StatsOp(s.cfg.ID))
	if err != nil {
		return coord.StatsResult{}, err
	}
	r, err := coord.ParseStatsResult(res)
	if err != nil {
		// f+1 replicas agreed on it: they run another version.
		s.cfg.Logger.Error("stats result", "err", err)
	}
	return r, err
}

// javaDouble formats v as Java prints a double, which ZooKeeper's
// average latency is: 0.0, 1.5.
func javaDouble(v float64) string {
	f := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(f, ".") {
		f += ".0"
	}
	return f
}

// dumpConns writes a line for each connection, as ZooKeeper's stat
// (brief) and cons do.
func (s *Server) dumpConns(b *strings.Builder, brief bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A connection's session and timeout may be read once it is bound:
	// bind, under s.mu, follows their setting.
	bound := make(map[*conn]int64, len(s.sessions))
	for id, c := range s.sessions {
		bound[c] = id
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	slices.SortFunc(conns, func(a, b *conn) int { return a.established.Compare(b.established) })
	for _, c := range conns {
		k := &c.counters
		interest := 1 // reading, as ZooKeeper's OP_READ
		if _, ok := bound[c]; !ok {
			interest = 0
		}
		fmt.Fprintf(b, " /%s[%d](queued=%d,recved=%d,sent=%d", c.nc.RemoteAddr(), interest, c.outstanding.Load(), k.received.Load(), k.sent.Load())
		if id, ok := bound[c]; ok && !brief {
			lmin, lavg, lmax := k.latency()
			fmt.Fprintf(b, ",sid=0x%x,lop=%s,est=%d,to=%d,lcxid=0x%x,lzxid=0x%x,lresp=%d,llat=%d,minlat=%d,avglat=%s,maxlat=%d",
				id, opAbbrev(proto.OpCode(c.lastOp.Load())), c.established.UnixMilli(), c.timeout.Milliseconds(), c.lastCxid.Load(), c.lastZxid.Load(),
				c.lastResp.Load()/int64(time.Millisecond), k.lastLatency(), lmin, javaDouble(lavg), lmax)
		}
		b.WriteString(")\n")
	}
}

// opAbbrevs are ZooKeeper's four-letter names of ops, as cons shows
// the last one; any other is NA.
var opAbbrevs = map[proto.OpCode]string{
	proto.OpCreate: "CREA", proto.OpCreate2: "CREA", proto.OpCreateContainer: "CREA", proto.OpCreateTTL: "CREA",
	proto.OpDelete: "DELE", proto.OpExists: "EXIS", proto.OpGetData: "GETD", proto.OpSetData: "SETD",
	proto.OpGetACL: "GACL", proto.OpSetACL: "SACL", proto.OpGetChildren: "GETC", proto.OpGetChildren2: "GETC",
	proto.OpSync: "SYNC", proto.OpPing: "PING", proto.OpCheck: "CHEC", proto.OpMulti: "MULT", proto.OpMultiRead: "MLTR",
	proto.OpAuth: "AUTH", proto.OpSetWatches: "SETW", proto.OpSetWatches2: "SETW", proto.OpCloseSession: "CLOS",
}

func opAbbrev(op proto.OpCode) string {
	if a, ok := opAbbrevs[op]; ok {
		return a
	}
	return "NA"
}

// conf lists the gateway's settings as ZooKeeper's conf lists a server's,
// key=value, with ZooKeeper's names where there is one.
func (s *Server) conf() string {
	var b strings.Builder
	s.mu.Lock()
	ports := make([]string, 0, len(s.listeners))
	for ln := range s.listeners {
		if _, p, err := net.SplitHostPort(ln.Addr().String()); err == nil {
			ports = append(ports, p)
		}
	}
	s.mu.Unlock()
	slices.Sort(ports)
	cfg := &s.cfg
	fmt.Fprintf(&b, "clientPort=%s\n", strings.Join(ports, ","))
	fmt.Fprintf(&b, "maxClientCnxns=%d\n", max(cfg.MaxConnsPerHost, 0))
	fmt.Fprintf(&b, "maxCnxns=%d\n", max(cfg.MaxConns, 0))
	fmt.Fprintf(&b, "maxClientSessions=%d\n", max(cfg.MaxSessionsPerHost, 0))
	fmt.Fprintf(&b, "gatewayId=%d\n", cfg.ID)
	words := make([]string, 0, len(s.words))
	for w := range s.words {
		words = append(words, w)
	}
	slices.Sort(words)
	fmt.Fprintf(&b, "4lw.commands.whitelist=%s\n", strings.Join(words, ","))
	return b.String()
}

// envi describes the gateway's process as ZooKeeper's envi does a
// server's, with Go's figures where ZooKeeper gives Java's.
func envi() string {
	var b strings.Builder
	b.WriteString("Environment:\n")
	kv := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, v) }
	kv("zookeeper.version", serverVersion)
	host, _ := os.Hostname()
	kv("host.name", host)
	kv("go.version", runtime.Version())
	kv("os.name", runtime.GOOS)
	kv("os.arch", runtime.GOARCH)
	if u, err := user.Current(); err == nil {
		kv("user.name", u.Username)
		kv("user.home", u.HomeDir)
	}
	wd, _ := os.Getwd()
	kv("user.dir", wd)
	kv("process.id", strconv.Itoa(os.Getpid()))
	kv("os.procs", strconv.Itoa(runtime.NumCPU()))
	return b.String()
}

// counters are what a gateway, or one connection, counts of the packets
// it received and sent and of its requests' latency, which srst (crst)
// resets.
type counters struct {
	received, sent atomic.Uint64
	mu             sync.Mutex
	min, max, sum  time.Duration
	n              int64
	last           time.Duration
}

// record counts a request answered after d.
func (k *counters) record(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n == 0 || d < k.min {
		k.min = d
	}
	k.max = max(k.max, d)
	k.sum += d
	k.n++
	k.last = d
}

// latency returns the requests' least, mean and greatest latency in
// milliseconds, as ZooKeeper reports them.
func (k *counters) latency() (lmin int64, avg float64, lmax int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.n == 0 {
		return 0, 0, 0
	}
	return k.min.Milliseconds(), float64(k.sum) / float64(k.n) / float64(time.Millisecond), k.max.Milliseconds()
}

func (k *counters) lastLatency() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last.Milliseconds()
}

func (k *counters) reset() {
	k.mu.Lock()
	k.min, k.max, k.sum, k.n, k.last = 0, 0, 0, 0, 0
	k.mu.Unlock()
	k.received.Store(0)
	k.sent.Store(0)
}
