package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/internal/anytransport"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

func init() {
	registerAPI("channel", api{serve: serveChannel, client: runChannelClient, spin: true, oneway: true})
}

// openTransport opens the transport the -transport value names.
func openTransport(network string) (anytransport.Transport, error) {
	tr, err := anytransport.Open(network, anytransport.Config{})
	if _, unknown := err.(net.UnknownNetworkError); unknown {
		return nil, fmt.Errorf("unknown transport %q (available: %s)", network, strings.Join(anytransport.Networks(), ", "))
	}
	return tr, err
}

// receiveBurst bounds the messages a server takes from one connection per
// select, so that one busy connection cannot starve the others.
const receiveBurst = 64

// serveChannel is the channel api's server: one goroutine, one selector,
// every connection non-blocking. Each received buffer is sent straight
// back: the echo copies no payload byte in user space. Over RDMA the
// connections, accepted from a listener registered with the selector, use
// its completion queue.
func serveChannel(ctx context.Context, cfg serverConfig) error {
	tr, err := openTransport(cfg.network)
	if err != nil {
		return fmt.Errorf("api channel: %w", err)
	}
	defer tr.Close()
	ln, err := tr.Listen(ctx, cfg.addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	sel, err := selector.New(selector.Config{SpinBudget: cfg.spin})
	if err != nil {
		return err
	}
	defer closeAll(sel)
	if err := ln.SetBlocking(false); err != nil {
		return err
	}
	if _, err := sel.Register(ln, selectionkey.OpAccept, nil); err != nil {
		return err
	}
	echoMetrics.AddTransport("channel", tr, sel)
	cfg.ready(ln.LocalAddr())
	stop := context.AfterFunc(ctx, sel.Wakeup)
	defer stop()

	for ctx.Err() == nil {
		if _, err := sel.Select(); err != nil {
			return err
		}
		for _, k := range sel.SelectedKeys() {
			if k.IsAcceptable() {
				if err := acceptAll(ln, sel); err != nil {
					return err
				}
				continue
			}
			c := k.Channel().(anytransport.Conn)
			if err := echoReady(k, c); err != nil {
				if !errors.Is(err, io.EOF) {
					cfg.log.Printf("connection from %v: %v", c.RemoteAddr(), err)
				}
				c.Close()
			}
		}
	}
	return nil
}

// acceptAll accepts every pending connection and registers it for reading.
func acceptAll(ln anytransport.Listener, sel *selector.Selector) error {
	for {
		c, err := ln.AcceptConn()
		if errors.Is(err, channel.ErrWouldBlock) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("accept: %w", err)
		}
		if err := c.SetBlocking(false); err != nil {
			c.Close()
			return err
		}
		if _, err := sel.Register(c, selectionkey.OpRead, nil); err != nil {
			c.Close()
			return err
		}
	}
}

// echoReady echoes what a selected server connection has. A message the
// socket cannot take yet waits as the key's attachment, with reading
// paused until the connection is writable again: a client that does not
// read makes the server stop reading, not queue without bound.
func echoReady(k *selectionkey.Key, c anytransport.Conn) error {
	if k.IsWritable() {
		if sent, err := sendHeld(k, c); err != nil || !sent {
			return err
		}
	}
	if !k.IsReadable() {
		return nil
	}
	for range receiveBurst {
		b, err := c.Receive()
		if errors.Is(err, channel.ErrWouldBlock) {
			return nil
		}
		if err != nil {
			return err
		}
		reply := b
		if ow, ok := k.Attachment().(*onewayCount); ok {
			if reply = nil; ow.take(b) {
				reply = b
				k.Attach(nil)
			}
		} else if bytes.Equal(b.Bytes(), onewayBegin) {
			accept(b)
			k.Attach(&onewayCount{})
		}
		if reply == nil {
			// counted: nothing goes back
		} else if err := c.Send(reply); errors.Is(err, channel.ErrWouldBlock) {
			hold(k, reply)
			return k.SetInterest(selectionkey.OpWrite)
		} else if err != nil {
			return err
		}
		if c.ReadyOps()&selectionkey.OpRead == 0 {
			return nil // nothing staged; epoll says when the socket has more
		}
	}
	return nil
}

// hold keeps reply, which Send could not take, until the connection is
// writable: in the count of a one-way stream, which must go on counting,
// or else as the key's attachment.
func hold(k *selectionkey.Key, reply *bufpool.Buffer) {
	if ow, ok := k.Attachment().(*onewayCount); ok {
		ow.pending = reply
		return
	}
	k.Attach(reply)
}

// sendHeld sends the reply that hold kept, if any, and then has the
// connection read again; it reports false if Send still cannot take it.
func sendHeld(k *selectionkey.Key, c anytransport.Conn) (bool, error) {
	var b *bufpool.Buffer
	ow, counting := k.Attachment().(*onewayCount)
	if counting {
		b = ow.pending
	} else if a, ok := k.Attachment().(*bufpool.Buffer); ok {
		b = a
	}
	if b == nil {
		return true, nil
	}
	if err := c.Send(b); errors.Is(err, channel.ErrWouldBlock) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if counting {
		ow.pending = nil
	} else {
		k.Attach(nil)
	}
	return true, k.SetInterest(selectionkey.OpRead)
}

// closeAll closes every channel registered with sel, then sel.
func closeAll(sel *selector.Selector) {
	for _, k := range sel.Keys() {
		switch a := k.Attachment().(type) {
		case *bufpool.Buffer:
			a.Release()
		case *onewayCount:
			if a.pending != nil {
				a.pending.Release()
			}
		case *clientConn:
			if a.pending != nil {
				a.pending.Release()
			}
		}
		k.Channel().Close()
	}
	sel.Close()
}

// A clientConn is the state of one client connection, kept as its key's
// attachment.
type clientConn struct {
	id       int
	c        anytransport.Conn
	inFlight []inFlight // ring of sent, unechoed messages, oldest at head
	head     int
	count    int
	pending  *bufpool.Buffer // a message Send could not take yet
	done     bool            // the recorder has no more messages for it
	echoed   bool            // an echo has come
	ow       oneway          // with -oneway
}

// runChannelClient is the channel api's client: every connection on one
// selector, driven by one goroutine. Each connection is registered while
// its connect is pending, so that over RDMA it uses the selector's
// completion queue.
func runChannelClient(ctx context.Context, cfg clientConfig, rec *recorder) error {
	tr, err := openTransport(cfg.network)
	if err != nil {
		return fmt.Errorf("api channel: %w", err)
	}
	defer tr.Close()
	if cfg.size > tr.MaxMessageSize() {
		return fmt.Errorf("api channel: %d-byte messages exceed the transport's maximum of %d", cfg.size, tr.MaxMessageSize())
	}
	sel, err := selector.New(selector.Config{SpinBudget: cfg.spin})
	if err != nil {
		return err
	}
	defer closeAll(sel)
	stop := context.AfterFunc(ctx, sel.Wakeup)
	defer stop()

	for i := range cfg.conns {
		c, err := tr.Connect(ctx, cfg.addr)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx) // why the connect was stopped
			}
			return fmt.Errorf("connection %d: %w", i, err)
		}
		cc := &clientConn{id: i, c: c, inFlight: make([]inFlight, cfg.depth)}
		if _, err := sel.Register(c, selectionkey.OpConnect, cc); err != nil {
			c.Close()
			return fmt.Errorf("connection %d: %w", i, err)
		}
	}
	active := cfg.conns
	for active > 0 {
		if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
			return err
		}
		if _, err := sel.Select(); err != nil {
			return err
		}
		for _, k := range sel.SelectedKeys() {
			cc := k.Attachment().(*clientConn)
			finished, err := cc.step(k, cfg, rec)
			if err != nil {
				return fmt.Errorf("connection %d: %w", cc.id, err)
			}
			if finished {
				k.Cancel()
				cc.c.Close()
				active--
			}
		}
	}
	return nil
}

// step advances a selected client connection; it reports true when the
// connection has nothing more to do.
func (cc *clientConn) step(k *selectionkey.Key, cfg clientConfig, rec *recorder) (bool, error) {
	if k.IsConnectable() {
		ok, err := cc.c.FinishConnect()
		if err != nil {
			return false, err
		}
		if !ok {
			return false, nil
		}
		if err := k.SetInterest(selectionkey.OpRead); err != nil {
			return false, err
		}
		if cfg.oneway {
			return false, cc.stream(k, cfg, rec)
		}
		return cc.fill(k, cfg, rec)
	}
	if k.IsWritable() && cc.pending != nil {
		if err := cc.send(k, cc.pending); err != nil {
			return false, err
		}
	}
	if cfg.oneway {
		// Read whatever came, in every phase: a message left unread
		// would have the next select return at once, and the next.
		if k.IsReadable() {
			if done, err := cc.receive(cfg, rec); done || err != nil {
				return done, err
			}
		}
		return false, cc.stream(k, cfg, rec)
	}
	if k.IsReadable() {
		for cc.count > 0 {
			b, err := cc.c.Receive()
			if errors.Is(err, channel.ErrWouldBlock) {
				break
			}
			if err != nil {
				return false, fmt.Errorf("receive echo: %w", echoError(err, cc.echoed))
			}
			cc.echoed = true
			m := cc.inFlight[cc.head]
			rtt := time.Since(m.start)
			if b.Len() != cfg.size {
				b.Release()
				return false, fmt.Errorf("message %d: echo of %d bytes, want %d", m.seq, b.Len(), cfg.size)
			}
			err = checkPayload(b.Bytes(), m.seq)
			b.Release()
			if err != nil {
				return false, err
			}
			rec.Record(m.seq, rtt)
			cc.head = (cc.head + 1) % len(cc.inFlight)
			cc.count--
			if _, err := cc.fill(k, cfg, rec); err != nil {
				return false, err
			}
			if cc.c.ReadyOps()&selectionkey.OpRead == 0 {
				break
			}
		}
	}
	return cc.done && cc.count == 0, nil
}

// fill sends messages until depth are in flight or the recorder runs out.
func (cc *clientConn) fill(k *selectionkey.Key, cfg clientConfig, rec *recorder) (bool, error) {
	for !cc.done && cc.pending == nil && cc.count < len(cc.inFlight) {
		seq, ok := rec.Next()
		if !ok {
			cc.done = true
			break
		}
		b, err := cc.message(cfg, seq)
		if err != nil {
			return false, err
		}
		cc.inFlight[(cc.head+cc.count)%len(cc.inFlight)] = inFlight{seq: seq, start: time.Now()}
		cc.count++
		if err := cc.send(k, b); err != nil {
			return false, fmt.Errorf("message %d: %w", seq, err)
		}
	}
	return cc.done && cc.count == 0, nil
}

// message returns a pool buffer holding message seq.
func (cc *clientConn) message(cfg clientConfig, seq uint64) (*bufpool.Buffer, error) {
	b, err := cc.c.Pool().TryGet()
	if err != nil {
		return nil, fmt.Errorf("message %d: %w", seq, err)
	}
	fillPayload(b.Full()[:cfg.size], seq)
	b.SetLen(cfg.size)
	return b, nil
}

// send sends b, or keeps it pending until the connection is writable.
func (cc *clientConn) send(k *selectionkey.Key, b *bufpool.Buffer) error {
	err := cc.c.Send(b)
	if errors.Is(err, channel.ErrWouldBlock) {
		cc.pending = b
		return k.AddInterest(selectionkey.OpWrite)
	}
	cc.pending = nil
	if err != nil {
		return err
	}
	return k.RemoveInterest(selectionkey.OpWrite)
}
