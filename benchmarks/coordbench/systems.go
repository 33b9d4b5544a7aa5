package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/rubin-go/rubin/benchmarks/internal/benchkit"
)

// The systems measured; ensemble is the baseline.
const (
	ensemble   = "ensemble"   // Apache ZooKeeper, three servers
	standalone = "standalone" // Apache ZooKeeper, one server
	ours       = "coord"      // four coord replicas and a coord gateway, over TCP
	oursRDMA   = "coord-rdma" // the same, the replicas and the gateway over RDMA
)

// allSystems are the systems -systems may name.
var allSystems = []string{ensemble, standalone, ours, oursRDMA}

// zooKeeper reports whether the named system is Apache ZooKeeper.
func zooKeeper(name string) bool { return name == ensemble || name == standalone }

// zkServerScript runs an Apache ZooKeeper server in the foreground.
const zkServerScript = "/usr/share/zookeeper/bin/zkServer.sh"

// A system is the server processes of one contender, started once for
// the whole run.
type system struct {
	name  string
	addrs []string // where ZooKeeper clients connect
	procs []*benchkit.Server
}

// stop stops every process of s. It may be called more than once.
func (s *system) stop() {
	for _, p := range s.procs {
		p.Stop()
	}
}

// check reports a process of s that has exited, with what it said last.
func (s *system) check() error {
	for i, p := range s.procs {
		if !p.Running() {
			last := p.Stderr.Last()
			if last == "" {
				last = p.Stdout.Last()
			}
			return fmt.Errorf("%s process %d exited: %s", s.name, i, last)
		}
	}
	return nil
}

// startSystem starts the named system with its files in dir, and waits
// until it serves clients.
func startSystem(ctx context.Context, l *benchkit.Launcher, cfg config, name, dir string) (*system, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	s := &system{name: name}
	var err error
	switch name {
	case ensemble:
		err = s.startZooKeeper(ctx, l, dir, 3)
	case standalone:
		err = s.startZooKeeper(ctx, l, dir, 1)
	case ours:
		err = s.startCoord(ctx, l, cfg, dir, "tcp")
	case oursRDMA:
		err = s.startCoord(ctx, l, cfg, dir, "rdma")
	default:
		err = fmt.Errorf("unknown system %q", name)
	}
	if err == nil {
		err = waitServing(ctx, s, 2*time.Minute)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// startZooKeeper starts n Apache ZooKeeper servers on loopback, each with
// its own data directory and ports: one server is standalone, more make
// an ensemble. ZooKeeper keeps its defaults, among them a synced
// transaction log.
func (s *system) startZooKeeper(ctx context.Context, l *benchkit.Launcher, dir string, n int) error {
	if _, err := os.Stat(zkServerScript); err != nil {
		return fmt.Errorf("the Apache ZooKeeper server is not installed (Debian package zookeeper): %w", err)
	}
	ports, err := freePorts(3 * n)
	if err != nil {
		return err
	}
	var peers strings.Builder
	if n > 1 {
		for i := range n {
			fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[3*i+1], ports[3*i+2])
		}
	}
	for i := range n {
		sdir := filepath.Join(dir, fmt.Sprintf("zk%d", i+1))
		data := filepath.Join(sdir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintln(i+1)), 0o644); err != nil {
			return err
		}
		// ZooKeeper's defaults, but for two limits that a standalone
		// server's 64 clients, all from 127.0.0.1 and connecting at once,
		// pass: 60 connections per client address, and a listen backlog
		// of 50, beyond which connects time out.
		conf := fmt.Sprintf("tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\nclientPortListenBacklog=1024\nadmin.enableServer=false\n%s",
			data, ports[3*i], peers.String())
		cfgFile := filepath.Join(sdir, "zoo.cfg")
		if err := os.WriteFile(cfgFile, []byte(conf), 0o644); err != nil {
			return err
		}
		// env and the script exec what they run, so the process is the
		// server's JVM.
		p, _, err := l.StartServer(ctx, "", 0, "env", "ZOO_LOG_DIR="+sdir, "SERVER_JVMFLAGS=-Xmx512m", zkServerScript, "start-foreground", cfgFile)
		if err != nil {
			return fmt.Errorf("ZooKeeper server %d: %w", i+1, err)
		}
		s.procs = append(s.procs, p)
		s.addrs = append(s.addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3*i])))
	}
	return nil
}

// coordClients is how many client identities the gateway gets: one per
// request in flight, so at least the most clients measured.
const coordClients = 128

// startCoord starts four coord replicas on cfg.host, each persisting to
// its own data directory, and one gateway there, all over transport (tcp
// or rdma); clients reach the gateway over TCP.
func (s *system) startCoord(ctx context.Context, l *benchkit.Launcher, cfg config, dir, transport string) error {
	const n = 4
	base, err := freeRun(cfg.host, n)
	if err != nil {
		return err
	}
	file := filepath.Join(dir, "cluster.json")
	keygen := exec.CommandContext(ctx, cfg.coordBin, "keygen", "-n", strconv.Itoa(n), "-host", cfg.host, "-base-port", strconv.Itoa(base),
		"-clients", strconv.Itoa(max(coordClients, slicesMax(cfg.clients))), "-out", file)
	if out, err := keygen.CombinedOutput(); err != nil {
		return fmt.Errorf("coord keygen: %w: %s", err, out)
	}
	for i := range n {
		p, _, err := l.StartServer(ctx, fmt.Sprintf("replica %d listening on ", i), time.Minute, cfg.coordBin,
			"replica", "-id", strconv.Itoa(i), "-cluster", file, "-transport", transport, "-data-dir", filepath.Join(dir, fmt.Sprintf("data%d", i)))
		if err != nil {
			return fmt.Errorf("replica %d: %w", i, err)
		}
		s.procs = append(s.procs, p)
	}
	// All the clients come from one address; the ZooKeeper servers run
	// with maxClientCnxns=0 above, and so does the gateway, with no bound
	// on that address's sessions either.
	p, addr, err := l.StartServer(ctx, "gateway listening on ", time.Minute, cfg.coordBin,
		"gateway", "-cluster", file, "-listen", net.JoinHostPort(cfg.host, "0"), "-transport", transport, "-max-client-cnxns", "0", "-max-client-sessions", "0")
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	s.procs = append(s.procs, p)
	s.addrs = []string{addr}
	return nil
}

func slicesMax(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// freeRun returns the first of n consecutive ports of host that were free
// a moment ago: coord keygen numbers the replicas' ports from a base.
func freeRun(host string, n int) (int, error) {
	for range 50 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		base := ln.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{ln}
		for i := 1; i < n; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(base+i)))
			if err != nil {
				break
			}
			lns = append(lns, l)
		}
		for _, l := range lns {
			l.Close()
		}
		if len(lns) == n {
			return base, nil
		}
	}
	return 0, fmt.Errorf("found no %d consecutive free ports", n)
}

// waitServing waits, for at most d, until every address of s answers a
// ZooKeeper request: an ensemble accepts connections before it has
// elected a leader.
func waitServing(ctx context.Context, s *system, d time.Duration) error {
	deadline := time.Now().Add(d)
	for _, addr := range s.addrs {
		for {
			err := ping(ctx, addr)
			if err == nil {
				break
			}
			if err := s.check(); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s at %s did not serve within %v: %v", s.name, addr, d, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// ping opens a session at addr and asks whether / exists.
func ping(ctx context.Context, addr string) error {
	c, _, err := zk.Connect([]string{addr}, sessionTimeout, zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Exists("/")
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		return errors.New("no answer within 5s")
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
