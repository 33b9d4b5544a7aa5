package simnet

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/rubin-go/rubin/bft"
)

// App is a trivial deterministic application: it counts operations and
// chains their bytes into a running hash, so two replicas agree on its
// state only if they executed the same operations in the same order. The
// result of an operation is the count after it, 8 bytes big-endian.
type App struct {
	Count uint64
	Hash  [32]byte
	Ops   [][]byte // every op executed since the last Restore (for tests)
	// Contexts holds the context of every op in Ops.
	Contexts []bft.ExecContext
	// Queries counts the read-only requests answered.
	Queries int
	// Pad makes the snapshot Pad bytes longer, for tests of large states:
	// the count and hash repeated, so the filler changes with the state.
	Pad int
}

// An op "note C P" also emits notification P for client C (a decimal
// ClientID) through ctx.Notify.
func (a *App) Execute(ctx bft.ExecContext, op []byte) []byte {
	a.Contexts = append(a.Contexts, ctx)
	if rest, ok := bytes.CutPrefix(op, []byte("note ")); ok {
		if c, p, ok := bytes.Cut(rest, []byte(" ")); ok {
			if id, err := strconv.ParseUint(string(c), 10, 64); err == nil {
				ctx.Notify(bft.ClientID(id), p)
			}
		}
	}
	a.Count++
	h := sha256.New()
	h.Write(a.Hash[:])
	h.Write(op)
	h.Sum(a.Hash[:0])
	a.Ops = append(a.Ops, append([]byte(nil), op...))
	return binary.BigEndian.AppendUint64(nil, a.Count)
}

// Query answers a read-only request with the count, as Execute's result
// would be without the op; it counts the queries in Queries.
func (a *App) Query(_ bft.QueryContext, _ []byte) []byte {
	a.Queries++
	return binary.BigEndian.AppendUint64(nil, a.Count)
}

func (a *App) Snapshot() []byte {
	b := make([]byte, 40, 40+a.Pad)
	binary.BigEndian.PutUint64(b, a.Count)
	copy(b[8:], a.Hash[:])
	for len(b) < 40+a.Pad {
		b = append(b, b[:min(len(b), 40+a.Pad-len(b))]...)
	}
	return b
}

func (a *App) Restore(s []byte) error {
	if len(s) != 40+a.Pad {
		return errors.New("simnet: bad snapshot")
	}
	a.Count = binary.BigEndian.Uint64(s)
	copy(a.Hash[:], s[8:])
	a.Ops, a.Contexts = nil, nil
	return nil
}
