package rubin_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/rubin-go/rubin"
	"github.com/rubin-go/rubin/internal/rdmatest"
	_ "github.com/rubin-go/rubin/transport/rdma" // the rdma network
)

// TestNetConn runs golang.org/x/net/nettest's net.Conn conformance suite:
// basic I/O, ping-pong, racing reads and writes, futures (deadlines set
// while blocked), close timeouts, concurrent method calls.
func TestNetConn(t *testing.T) {
	for _, network := range []string{"tcp", "rdma"} {
		t.Run(network, func(t *testing.T) {
			address := testAddr(t, network)
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				ln, err := rubin.Listen(network, address)
				if err != nil {
					return nil, nil, nil, err
				}
				defer ln.Close()
				accepted := make(chan net.Conn, 1)
				errc := make(chan error, 1)
				go func() {
					c, err := ln.Accept()
					if err != nil {
						errc <- err
						return
					}
					accepted <- c
				}()
				c1, err = rubin.Dial(network, ln.Addr().String())
				if err != nil {
					return nil, nil, nil, err
				}
				select {
				case c2 = <-accepted:
				case err := <-errc:
					c1.Close()
					return nil, nil, nil, err
				}
				return c1, c2, func() { c1.Close(); c2.Close() }, nil
			})
		})
	}
}

// testAddr returns a local address with port 0 to listen on over network:
// loopback for TCP, the RDMA device's address for RDMA (the test skips
// without one; see package rdmatest).
func testAddr(t *testing.T, network string) string {
	t.Helper()
	if network == "rdma" {
		return net.JoinHostPort(rdmatest.Addr(t), "0")
	}
	return "127.0.0.1:0"
}

// TestHTTP runs an unmodified net/http server and client over the face.
func TestHTTP(t *testing.T) {
	testHTTP(t, "tcp")
}

// TestHTTPRDMA is TestHTTP over RDMA.
func TestHTTPRDMA(t *testing.T) {
	testHTTP(t, "rdma")
}

func testHTTP(t *testing.T, network string) {
	ln, err := rubin.Listen(network, testAddr(t, network))
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{
		Listener: ln,
		Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			io.WriteString(w, "echo:"+r.URL.Path+":"+string(body))
		})},
	}
	srv.Start()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return rubin.DialContext(ctx, network, addr)
		},
	}, Timeout: 10 * time.Second}
	big := strings.Repeat("x", 1<<20)
	for i, body := range []string{"", "hello", big} {
		resp, err := client.Post(srv.URL+"/p", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("request %d: reading body: %v", i, err)
		}
		if want := "echo:/p:" + body; string(got) != want {
			t.Fatalf("request %d: got %d bytes, want %d", i, len(got), len(want))
		}
	}
}
