package metrics_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rubin-go/rubin/internal/leakcheck"
	"github.com/rubin-go/rubin/metrics"
)

// syncBuffer is a bytes.Buffer that a server goroutine may write while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// failing is a collector whose every scrape fails.
type failing struct{ desc *prometheus.Desc }

func (f failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }
func (f failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(f.desc, errors.New("the part is gone"))
}

// fetch sends one request without keeping the connection, and returns the
// status and body.
func fetch(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestServe serves a registry on a real listener, scrapes it, and checks
// that the server stops listening and leaves nothing behind once its
// context is done.
func TestServe(t *testing.T) {
	leakcheck.Check(t)
	reg := prometheus.NewPedanticRegistry()
	requests := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_requests_total", Help: "Requests."})
	reg.MustRegister(requests)
	requests.Add(3)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := metrics.Serve(ctx, "127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr.String()

	code, body := fetch(t, http.MethodGet, base+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "\ntest_requests_total 3\n") {
		t.Errorf("GET /metrics: %d\n%s\nwant 200 with test_requests_total 3", code, body)
	}
	if code, _ := fetch(t, http.MethodPost, base+"/metrics"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want %d", code, http.StatusMethodNotAllowed)
	}
	if code, _ := fetch(t, http.MethodGet, base+"/"); code != http.StatusNotFound {
		t.Errorf("GET /: %d, want %d", code, http.StatusNotFound)
	}

	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr.String())
		if errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
		if err == nil {
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v still accepts connections (%v) after its context is done", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeErrors checks that Serve reports an address it cannot listen on,
// and that a failed scrape reaches errLog.
func TestServeErrors(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if _, err := metrics.Serve(context.Background(), taken.Addr().String(), prometheus.NewRegistry(), nil); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("Serve on an address in use: %v, want EADDRINUSE", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(failing{prometheus.NewDesc("test_broken", "A part that cannot be read.", nil, nil)})
	var logged syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := metrics.Serve(ctx, "127.0.0.1:0", reg, log.New(&logged, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := fetch(t, http.MethodGet, "http://"+addr.String()+"/metrics"); code != http.StatusInternalServerError {
		t.Errorf("GET /metrics of a failing collector: %d, want %d", code, http.StatusInternalServerError)
	}
	if !strings.Contains(logged.String(), "the part is gone") {
		t.Errorf("errLog has %q, want the collector's error", logged.String())
	}
}
