package metrics

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// shutdownTimeout bounds how long Serve's server waits, once its context is
// done, for scrapes in flight.
const shutdownTimeout = time.Second

// Serve listens on the TCP address addr and serves g's metrics at
// GET /metrics until ctx is done; then it stops listening and shuts the
// server down, letting scrapes in flight finish for up to a second. It
// returns the address it listens on (useful when addr's port is 0) once it
// listens, or the error that kept it from listening. Errors after that,
// of the server or of gathering, go to errLog; a nil errLog discards them.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer, errLog *log.Logger) (net.Addr, error) {
	if errLog == nil {
		errLog = log.New(io.Discard, "", 0)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: errLog}))
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          errLog,
	}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errLog.Print(err)
		}
	}()
	context.AfterFunc(ctx, func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			errLog.Print(err)
		}
	})
	return ln.Addr(), nil
}
