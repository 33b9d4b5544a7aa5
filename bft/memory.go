package bft

// The core accounts in bytes for what a peer or a client can make it
// hold (see Status and docs/bft.md): a message's variable parts plus a
// fixed charge for its structure and the bookkeeping that holds it (map
// entries, slices, pointers). The charges are deliberately generous; the
// bounds are what matter, not the last byte.
const (
	// reqOverhead: a Request's fixed fields and the pending queue's map
	// entries and arrival-order slot for it.
	reqOverhead = 160
	// msgOverhead: a normal-case message's fixed fields and its slot in
	// a buffer.
	msgOverhead = 128
	// orderSlot: one entry of the pending queue's arrival order.
	orderSlot = 16
)

// reqMem is what holding req costs.
func reqMem(req *Request) int { return reqOverhead + len(req.Op) + len(req.Auth) }

// msgMem is what buffering a normal-case message costs.
func msgMem(m Message) int {
	switch m := m.(type) {
	case *PrePrepare:
		n := msgOverhead
		for i := range m.Batch {
			n += reqMem(&m.Batch[i])
		}
		return n
	}
	return msgOverhead
}
