package rdma

import (
	"context"

	"github.com/rubin-go/rubin/internal/anytransport"
)

// Importing this package makes the network "rdma" available to package
// rubin's Dial and Listen (and to every command that opens transports by
// name), as importing a database/sql driver makes it available to Open.
// Where RDMA is not built in (not Linux, or no cgo), opening it fails with
// ErrNotSupported.
func init() {
	anytransport.Register("rdma", func(cfg anytransport.Config) (anytransport.Transport, error) {
		tr, err := New(Config{MaxMessageSize: cfg.MaxMessageSize, SpinBudget: cfg.SpinBudget})
		if err != nil {
			return nil, err
		}
		return anyTransport{tr}, nil
	})
}

// anyTransport gives the transport anytransport's shape.
type anyTransport struct{ *Transport }

func (t anyTransport) Connect(ctx context.Context, address string) (anytransport.Conn, error) {
	c, err := t.Transport.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	return anyConn{c}, nil
}

func (t anyTransport) Listen(ctx context.Context, address string) (anytransport.Listener, error) {
	ln, err := t.Transport.Listen(ctx, address)
	if err != nil {
		return nil, err
	}
	return anyListener{ln}, nil
}

// AcceptsOnListenerSelector: a connection accepted from a listener on a
// selector is bound to that selector's completion queue.
func (anyTransport) AcceptsOnListenerSelector() bool { return true }

type anyListener struct{ *Listener }

func (l anyListener) AcceptConn() (anytransport.Conn, error) {
	c, err := l.AcceptRDMA()
	if err != nil {
		return nil, err
	}
	return anyConn{c}, nil
}

// anyConn lets a caller that waits for the connection poll its
// completion queue itself (anytransport.DevicePoller).
type anyConn struct{ *Conn }

func (c anyConn) PollDevice() { c.pollDevice() }
