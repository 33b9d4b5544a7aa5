package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// baselineAPI names the api built on Go's own net package, the baseline the
// others are measured against.
const baselineAPI = "gonet"

func init() {
	a := netConnAPI(goNetListen, goNetDial)
	a.check = goNetCheck
	registerAPI(baselineAPI, a)
}

// goNetCheck rejects RDMA, which Go's net package does not have.
func goNetCheck(network string) error {
	if network == "rdma" {
		return fmt.Errorf("api %s is Go's net package, which has no RDMA transport: use -api conn or -api channel with -transport rdma", baselineAPI)
	}
	return nil
}

// A listenFunc opens a listener, as net.Listen does.
type listenFunc func(ctx context.Context, network, address string) (net.Listener, error)

// A dialFunc opens a connection, as net.Dialer.DialContext does.
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

func goNetListen(ctx context.Context, network, address string) (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(ctx, network, address)
}

func goNetDial(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// netConnAPI returns the api that runs the echo protocol over the
// net.Listener and net.Conn values that listen and dial return. Neither
// function has a busy-poll setting, so the api ignores -spin.
func netConnAPI(listen listenFunc, dial dialFunc) api {
	return api{
		serve: func(ctx context.Context, cfg serverConfig) error {
			return serveNetConn(ctx, cfg, listen)
		},
		client: func(ctx context.Context, cfg clientConfig, rec *recorder) error {
			return runNetConnClient(ctx, cfg, rec, dial)
		},
	}
}

// echoBufferSize is the size of the buffer each server connection reads
// into; a longer message is echoed in pieces.
const echoBufferSize = 64 << 10

// serveNetConn is the serve function of a netConnAPI: a goroutine per
// connection reads into a buffer and writes back what it read.
func serveNetConn(ctx context.Context, cfg serverConfig, listen listenFunc) error {
	ln, err := listen(ctx, cfg.network, cfg.addr)
	if err != nil {
		return err
	}
	cfg.ready(ln.Addr())

	conns := newConnSet()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer conns.closeAll()
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		conns.closeAll()
	})
	defer stop()

	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		if !conns.add(c) {
			// ctx is done and closeAll has run: c is too late to serve.
			c.Close()
			return nil
		}
		wg.Go(func() {
			defer conns.remove(c)
			if err := echo(c); err != nil && ctx.Err() == nil {
				cfg.log.Printf("connection from %v: %v", c.RemoteAddr(), err)
			}
		})
	}
}

// echo writes back everything it reads from c until c reaches EOF, which
// makes it return nil, or fails.
func echo(c net.Conn) error {
	buf := make([]byte, echoBufferSize)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// A connSet tracks a server's open connections so that they can all be
// closed at shutdown. Its methods may be called from any goroutine.
type connSet struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func newConnSet() *connSet {
	return &connSet{conns: make(map[net.Conn]struct{})}
}

// add adds c, unless closeAll has run, in which case it reports false.
func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// remove closes c and forgets it.
func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// closeAll closes every connection in the set and makes later adds fail.
func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
}

// inlineMaxSize is the largest message a connection with one message in
// flight writes and then reads back from one goroutine. Up to this size the
// socket buffers on both sides hold the whole message, so the server's echo
// cannot stall waiting for the client to read while the client is still
// writing; larger messages are read back by a second goroutine.
const inlineMaxSize = 128 << 10

// runNetConnClient is the client function of a netConnAPI.
func runNetConnClient(ctx context.Context, cfg clientConfig, rec *recorder, dial dialFunc) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	conns := make([]net.Conn, 0, cfg.conns)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range cfg.conns {
		c, err := dial(ctx, cfg.network, cfg.addr)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx) // why the dial was stopped
			}
			return fmt.Errorf("connection %d: dial: %w", i, err)
		}
		conns = append(conns, c)
	}
	// Closing the connections is what interrupts a read or write in
	// progress when the run is canceled or another connection fails.
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.Close()
		}
	})
	defer stop()

	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			var err error
			if cfg.depth == 1 && cfg.size <= inlineMaxSize {
				err = pingPong(c, cfg.size, rec)
			} else {
				err = pipeline(ctx, c, cfg.size, cfg.depth, rec)
			}
			if err != nil {
				cancel(fmt.Errorf("connection %d: %w", i, err))
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// pingPong runs messages over c one at a time from a single goroutine,
// reusing one buffer for the payload and its echo.
func pingPong(c net.Conn, size int, rec *recorder) error {
	buf := make([]byte, size)
	echoed := false
	for {
		seq, ok := rec.Next()
		if !ok {
			return nil
		}
		fillPayload(buf, seq)
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("message %d: write: %w", seq, err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return fmt.Errorf("message %d: read echo: %w", seq, echoError(err, echoed))
		}
		echoed = true
		rtt := time.Since(start)
		if err := checkPayload(buf, seq); err != nil {
			return err
		}
		rec.Record(seq, rtt)
	}
}

// echoError returns err, the failure to read an echo, saying what a
// connection that ends before its first echo most likely means: the
// server does not speak the client's protocol (gonet's bytes are not the
// messages of conn and channel), and hung up on it.
func echoError(err error, echoed bool) error {
	if echoed || !(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
		return err
	}
	return fmt.Errorf("the server hung up before its first echo (is it running with the same -api/-oneway?): %w", err)
}

// inFlight describes a message that has been sent and not yet echoed.
type inFlight struct {
	seq   uint64
	start time.Time
}

// pipeline runs messages over c with up to depth in flight: a writer
// goroutine sends, and the calling goroutine reads the echoes in order.
func pipeline(ctx context.Context, c net.Conn, size, depth int, rec *recorder) error {
	slots := make(chan struct{}, depth) // a token per message in flight
	sent := make(chan inFlight, depth)  // the messages in flight, oldest first

	// The first failure, of either goroutine, closes c, which makes the
	// other one fail or finish too.
	var (
		failOnce sync.Once
		failure  error
	)
	fail := func(err error) {
		failOnce.Do(func() {
			failure = err
			c.Close()
		})
	}

	var writer sync.WaitGroup
	writer.Go(func() {
		defer close(sent)
		buf := make([]byte, size)
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			seq, ok := rec.Next()
			if !ok {
				return
			}
			fillPayload(buf, seq)
			start := time.Now()
			sent <- inFlight{seq: seq, start: start}
			if _, err := c.Write(buf); err != nil {
				fail(fmt.Errorf("message %d: write: %w", seq, err))
				return
			}
		}
	})

	buf := make([]byte, size)
	failed, echoed := false, false
	for m := range sent {
		if !failed {
			if _, err := io.ReadFull(c, buf); err != nil {
				fail(fmt.Errorf("message %d: read echo: %w", m.seq, echoError(err, echoed)))
				failed = true
			} else {
				echoed = true
				rtt := time.Since(m.start)
				if err := checkPayload(buf, m.seq); err != nil {
					fail(err)
					failed = true
				} else {
					rec.Record(m.seq, rtt)
				}
			}
		}
		<-slots
	}
	writer.Wait()
	return failure
}
