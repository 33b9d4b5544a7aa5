//go:build linux

package channel_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/transport/tcp"
)

// echo sends every message it receives back, the same buffer, until the
// peer ends its side of the stream. It knows only the channel contract, so
// it runs over any transport.
func echo(c channel.Conn) error {
	defer c.Close()
	for {
		msg, err := c.Receive() // a pool buffer, now ours
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := c.Send(msg); err != nil { // Send takes the buffer
			return err
		}
	}
}

// An echo over the TCP transport, with both channels in blocking mode (as
// they start): every Send arrives as exactly one Receive.
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
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		served <- echo(c)
	}()

	c, err := tr.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	for _, s := range []string{"hello", "world"} {
		b, err := c.Pool().Get(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		b.Write([]byte(s))
		if err := c.Send(b); err != nil {
			fmt.Println(err)
			return
		}
		reply, err := c.Receive()
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(string(reply.Bytes()))
		reply.Release()
	}
	// End our side; the server sees io.EOF, returns, and closes its side.
	if err := c.CloseWrite(); err != nil {
		fmt.Println(err)
		return
	}
	_, err = c.Receive()
	fmt.Println(errors.Is(err, io.EOF), <-served)
	// Output:
	// hello
	// world
	// true <nil>
}
