package rubin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

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

// A Stack of one's own tunes the transport and releases everything it
// made on Close: its listeners, its connections and its pollers.
func ExampleStack() {
	s, err := rubin.NewStack(rubin.Config{Transport: "tcp", Pollers: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ctx := context.Background()
	ln, err := s.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return // the Stack is closed
			}
			go io.Copy(c, c)
		}
	}()

	conn, err := s.Dial(ctx, ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Fprint(conn, "hello, stack")
	reply := make([]byte, len("hello, stack"))
	if _, err := io.ReadFull(conn, reply); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s\n", reply)

	s.Close() // closes ln and both ends of conn
	_, err = conn.Read(reply)
	fmt.Println("read after Close:", errors.Is(err, net.ErrClosed))
	// Output:
	// hello, stack
	// read after Close: true
}

// A Dialer and a ListenConfig carry a Stack into net/http, which then
// runs over rubin's transport (RDMA, for an "rdma" Stack) unchanged.
func ExampleDialer() {
	s, err := rubin.NewStack(rubin.Config{Pollers: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ln, err := (&rubin.ListenConfig{Stack: s}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello, %s", r.URL.Path[1:])
	})}
	go srv.Serve(ln)
	defer srv.Close()

	d := &rubin.Dialer{Stack: s}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	resp, err := client.Get("http://" + ln.Addr().String() + "/http")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %s\n", resp.Status, body)
	// Output: 200 OK hello, http
}
