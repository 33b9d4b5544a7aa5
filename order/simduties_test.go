package order

import (
	"time"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
)

// Take empties the headers d holds to sign and returns them, with the
// next block to cut, the agreed time its first pending envelope was
// ordered (zero if none) and BatchTimeout: what Run acts on, for a test
// that does a replica's duties at its own pace, in simulated time.
func (d *Duties) Take() (headers []*cb.BlockHeader, next uint64, since time.Time, timeout time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	headers, d.headers = d.headers, nil
	return headers, d.next, d.since, d.timeout
}
