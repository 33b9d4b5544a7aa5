//go:build linux && cgo

package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/tcp"
)

// TestOneSelectorRDMAAndTCP: one selector, driven by one goroutine, serves
// an RDMA listener and a TCP listener and every connection they accept at
// once (the hybrid event queue: completion channels and sockets in one
// epoll set), while RDMA and TCP clients echo messages of several sizes
// through it concurrently.
func TestOneSelectorRDMAAndTCP(t *testing.T) {
	rdmaServer, addr := newTransport(t, Config{})
	rdmaClient, _ := newTransport(t, Config{})
	tcpTransport, err := tcp.New(tcp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tcpTransport.Close()
	ctx := context.Background()
	rl, err := rdmaServer.Listen(ctx, net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	tl, err := tcpTransport.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sel, err := selector.New(selector.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []interface {
		channel.Listener
		selector.Selectable
	}{rl, tl} {
		l.SetBlocking(false)
		if _, err := sel.Register(l, selectionkey.OpAccept, nil); err != nil {
			t.Fatal(err)
		}
	}
	var echoed [2]atomic.Int64 // messages echoed on RDMA, on TCP
	stop := make(chan struct{})
	served := make(chan error, 1)
	go func() { served <- hybridEcho(sel, stop, &echoed) }()

	const perKind, msgs = 4, 50
	sizes := []int{64, 1 << 10, 16 << 10}
	dial := map[string]func() (channel.Conn, error){
		"rdma": func() (channel.Conn, error) { return rdmaClient.Dial(ctx, rl.Addr().String()) },
		"tcp":  func() (channel.Conn, error) { return tcpTransport.Dial(ctx, tl.Addr().String()) },
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*perKind)
	for kind, d := range dial {
		for i := range perKind {
			wg.Go(func() {
				c, err := d()
				if err != nil {
					errs <- fmt.Errorf("%s conn %d: dial: %w", kind, i, err)
					return
				}
				defer c.Close()
				if err := echoMessages(c, msgs, sizes); err != nil {
					errs <- fmt.Errorf("%s conn %d: %w", kind, i, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	close(stop)
	sel.Wakeup()
	if err := <-served; err != nil {
		t.Error(err)
	}
	for _, k := range sel.Keys() {
		k.Channel().Close()
	}
	sel.Close()
	for i, kind := range []string{"RDMA", "TCP"} {
		if got, want := echoed[i].Load(), int64(perKind*msgs); got != want {
			t.Errorf("the selector echoed %d messages on %s connections, want %d", got, kind, want)
		}
	}
}

// echoMessages sends n messages of the given sizes in turn on c, in
// blocking mode, and checks each echo.
func echoMessages(c channel.Conn, n int, sizes []int) error {
	for j := range n {
		payload := bytes.Repeat([]byte{byte(j)}, sizes[j%len(sizes)])
		b, err := c.(interface{ Pool() *bufpool.Pool }).Pool().Get(context.Background())
		if err != nil {
			return err
		}
		b.Write(payload)
		if err := c.Send(b); err != nil {
			return fmt.Errorf("send %d: %w", j, err)
		}
		got, err := c.Receive()
		if err != nil {
			return fmt.Errorf("receive %d: %w", j, err)
		}
		same := bytes.Equal(got.Bytes(), payload)
		got.Release()
		if !same {
			return fmt.Errorf("message %d of %d bytes came back different", j, len(payload))
		}
	}
	return nil
}

// hybridEcho echoes every message on every connection its listeners
// accept, RDMA or TCP, from one selector, until stop is closed; echoed
// counts the messages per kind (0 RDMA, 1 TCP).
func hybridEcho(sel *selector.Selector, stop chan struct{}, echoed *[2]atomic.Int64) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if _, err := sel.SelectTimeout(100 * time.Millisecond); err != nil {
			return err
		}
		for _, k := range sel.SelectedKeys() {
			if k.IsAcceptable() {
				l := k.Channel().(channel.Listener)
				for {
					c, err := l.Accept()
					if err != nil {
						break
					}
					c.SetBlocking(false)
					if _, err := sel.Register(c.(selector.Selectable), selectionkey.OpRead, nil); err != nil {
						return err
					}
				}
				continue
			}
			kind := 1
			if _, ok := k.Channel().(*Conn); ok {
				kind = 0
			}
			c := k.Channel().(channel.Conn)
			for {
				b, err := c.Receive()
				if errors.Is(err, channel.ErrWouldBlock) {
					break
				}
				if err != nil {
					c.Close()
					break
				}
				if err := c.Send(b); err != nil {
					if errors.Is(err, channel.ErrWouldBlock) {
						b.Release()
					}
					c.Close()
					break
				}
				echoed[kind].Add(1)
			}
		}
	}
}
