package rubin_test

import (
	"fmt"
	"io"

	"github.com/rubin-go/rubin"
)

// Listen and Dial are package net's, over rubin's TCP transport; with
// transport/rdma imported, "rdma" works the same way.
func Example() {
	ln, err := rubin.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() { // an echo server
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()

	conn, err := rubin.Dial("tcp", ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("hello, rubin")); err != nil {
		fmt.Println(err)
		return
	}
	reply := make([]byte, len("hello, rubin"))
	if _, err := io.ReadFull(conn, reply); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s (over %s)\n", reply, conn.RemoteAddr().Network())
	// Output: hello, rubin (over tcp)
}
