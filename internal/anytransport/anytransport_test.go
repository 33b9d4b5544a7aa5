package anytransport

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// TestRDMANeedsItsImport: this package's test binary does not import the
// RDMA transport, so opening "rdma" must fail with an error that names the
// import enabling it, and an unknown name with net.UnknownNetworkError.
func TestRDMANeedsItsImport(t *testing.T) {
	_, err := Open("rdma", Config{})
	var unknown net.UnknownNetworkError
	if !errors.As(err, &unknown) || !strings.Contains(err.Error(), `import _ "github.com/rubin-go/rubin/transport/rdma"`) {
		t.Errorf("Open(rdma) without the import: %v; want an UnknownNetworkError naming the import", err)
	}
	if _, err := Open("udp", Config{}); !errors.As(err, &unknown) {
		t.Errorf("Open(udp): %v, want net.UnknownNetworkError", err)
	}
	if got := strings.Join(Networks(), ","); got != "tcp" {
		t.Errorf("Networks() = %s, want tcp alone", got)
	}
	tr, err := Open("tcp", Config{})
	if err != nil {
		t.Fatalf("Open(tcp): %v", err)
	}
	tr.Close()
}
