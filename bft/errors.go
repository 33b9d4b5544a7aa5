package bft

import "errors"

// Step returns an error, wrapping one of these, for every message it drops
// or cannot use. None of them is fatal to the replica: the driver may log
// them, count them, or (for ErrForged) suspect the link's peer; it need not
// do anything. The replica's state is unchanged by a dropped message except
// for bookkeeping of what the sender has shown (its view).
var (
	// ErrInvalid: malformed message or one no correct replica sends
	// (wrong type from a client, out-of-range replica, oversized batch).
	ErrInvalid = errors.New("bft: invalid message")
	// ErrForged: the claimed sender differs from the link's sender, or a
	// signature, request authenticator, digest or certificate does not
	// verify. Only a Byzantine peer (or a bug) causes it.
	ErrForged = errors.New("bft: forged message")
	// ErrStale: for a past view, an executed or stable sequence number, or
	// an old client timestamp. Normal under asynchrony.
	ErrStale = errors.New("bft: stale message")
	// ErrWatermark: sequence number outside the watermark window, or a view
	// beyond the horizon this replica buffers. Normal for a lagging replica,
	// which catches up by state transfer.
	ErrWatermark = errors.New("bft: outside watermarks")
	// ErrDuplicate: a vote or message already counted. Normal with
	// retransmission and duplicating links.
	ErrDuplicate = errors.New("bft: duplicate message")
	// ErrEquivocation: a primary's second, different pre-prepare for one
	// view and sequence number. Evidence of a Byzantine primary.
	ErrEquivocation = errors.New("bft: equivocating pre-prepare")
	// ErrFull: a bounded queue (pending requests, buffered future-view
	// messages) is full; the message is dropped and the sender retransmits.
	ErrFull = errors.New("bft: queue full")
	// ErrTooLarge: a certified state exceeds Config.MaxStateBytes, so this
	// replica does not fetch it; it cannot catch up by state transfer
	// until the bound is raised.
	ErrTooLarge = errors.New("bft: state too large")
	// ErrTime: a pre-prepare's proposed time is before the previous
	// slot's or further than Config.MaxClockSkew from this replica's
	// clock. A primary with a wrong clock or a Byzantine one; the
	// replica does not prepare, and the primary is replaced.
	ErrTime = errors.New("bft: pre-prepare time out of bounds")
	// ErrBusy: Client.Propose while a request is outstanding.
	ErrBusy = errors.New("bft: request outstanding")
)
