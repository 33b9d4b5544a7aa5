//go:build !linux || !cgo

package rdma

import (
	"context"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selector"
)

// Transport is the RDMA transport; in this build New always fails with
// ErrNotSupported.
type Transport struct{}

// selectableConn and selectableListener give the stand-in types the
// method sets of the real ones.
type selectableConn interface {
	channel.Conn
	selector.Selectable
}

type selectableListener interface {
	channel.Listener
	selector.Selectable
}

// Conn is an RDMA connection; none exists in this build.
type Conn struct{ selectableConn }

func (*Conn) pollDevice() {}

// Listener is an RDMA listener; none exists in this build.
type Listener struct{ selectableListener }

// AcceptRDMA is Accept returning the concrete type.
func (l *Listener) AcceptRDMA() (*Conn, error) { return nil, ErrNotSupported }

// New fails with ErrNotSupported.
func New(Config) (*Transport, error) { return nil, ErrNotSupported }

// Dial fails with ErrNotSupported.
func (t *Transport) Dial(context.Context, string) (*Conn, error) { return nil, ErrNotSupported }

// Connect fails with ErrNotSupported.
func (t *Transport) Connect(context.Context, string) (*Conn, error) { return nil, ErrNotSupported }

// Listen fails with ErrNotSupported.
func (t *Transport) Listen(context.Context, string) (*Listener, error) {
	return nil, ErrNotSupported
}

// Pool returns nil.
func (t *Transport) Pool() *bufpool.Pool { return nil }

// MaxMessageSize returns 0.
func (t *Transport) MaxMessageSize() int { return 0 }

// Devices returns nil.
func (t *Transport) Devices() []string { return nil }

// Stats returns zero counters.
func (t *Transport) Stats() Stats { return Stats{} }

// Close does nothing.
func (t *Transport) Close() error { return nil }
