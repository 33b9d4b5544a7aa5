//go:build linux

package selector_test

import (
	"context"
	"fmt"

	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
	"github.com/rubin-go/rubin/transport/tcp"
)

// An echo server in the style of java.nio: one goroutine, one selector, a
// listener and its connections in non-blocking mode, and the received
// buffer sent back as it is (no copy). This one stops after one echo.
func Example() {
	tr, err := tcp.New(tcp.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	ln, err := tr.Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	sel, err := selector.New(selector.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sel.Close()
	ln.SetBlocking(false)
	if _, err := sel.Register(ln, selectionkey.OpAccept, nil); err != nil {
		fmt.Println(err)
		return
	}

	// A client, in blocking mode, on another goroutine.
	done := make(chan string, 1)
	go func() {
		c, err := tr.Dial(context.Background(), ln.Addr().String())
		if err != nil {
			done <- err.Error()
			return
		}
		defer c.Close()
		b, err := c.Pool().Get(context.Background())
		if err != nil {
			done <- err.Error()
			return
		}
		b.Write([]byte("ping"))
		if err := c.Send(b); err != nil {
			done <- err.Error()
			return
		}
		reply, err := c.Receive()
		if err != nil {
			done <- err.Error()
			return
		}
		done <- "echoed: " + string(reply.Bytes())
		reply.Release()
	}()

	for echoed := false; !echoed; {
		if _, err := sel.Select(); err != nil {
			fmt.Println(err)
			return
		}
		for _, k := range sel.SelectedKeys() {
			switch {
			case k.IsAcceptable():
				c, err := ln.AcceptTCP()
				if err != nil {
					continue // another select took it, or none waits
				}
				c.SetBlocking(false)
				if _, err := sel.Register(c, selectionkey.OpRead, nil); err != nil {
					fmt.Println(err)
					return
				}
				defer c.Close()
			case k.IsReadable():
				c := k.Channel().(*tcp.Conn)
				msg, err := c.Receive() // a pool buffer, now ours
				if err != nil {
					continue // ErrWouldBlock: nothing complete yet
				}
				if err := c.Send(msg); err != nil { // the same buffer goes back out
					msg.Release()
					fmt.Println(err)
					return
				}
				echoed = true
			}
		}
	}
	fmt.Println(<-done)
	// Output: echoed: ping
}
