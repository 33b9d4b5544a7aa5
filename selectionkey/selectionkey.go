// Package selectionkey defines the token that stands for one channel's
// registration with a selector: its interest set (the operations the
// selector watches for), its ready set (the operations found ready by the
// last select), an attachment, and its validity.
//
// Keys are plain Go and build wherever the module does; what fills their
// ready sets, package selector, runs on Linux only.
package selectionkey

import (
	"strings"
	"sync/atomic"

	"github.com/rubin-go/rubin/channel"
)

// Ops is a set of operations.
type Ops uint32

// The operations a key can be interested in, as in java.nio.
const (
	OpRead    Ops = 1 << 0 // a message can be received
	OpWrite   Ops = 1 << 2 // nothing is queued to send: a Send goes out at once
	OpConnect Ops = 1 << 3 // a pending connect can be finished
	OpAccept  Ops = 1 << 4 // a connection can be accepted
)

// AllOps is the union of all valid operations.
const AllOps = OpRead | OpWrite | OpConnect | OpAccept

func (o Ops) String() string {
	if o == 0 {
		return "none"
	}
	var names []string
	for _, op := range []struct {
		op   Ops
		name string
	}{{OpRead, "read"}, {OpWrite, "write"}, {OpConnect, "connect"}, {OpAccept, "accept"}} {
		if o&op.op != 0 {
			names = append(names, op.name)
		}
	}
	if o&^AllOps != 0 {
		names = append(names, "invalid")
	}
	return strings.Join(names, "|")
}

// A Watcher is told about changes to a key. The selector that made the key
// implements it; its methods may be called from any goroutine.
type Watcher interface {
	InterestChanged(k *Key)
	Canceled(k *Key)
}

// A Key is a channel's registration with a selector. Its methods are safe
// for concurrent use.
type Key struct {
	ch       channel.Channel
	w        Watcher
	valid    Ops
	canceled atomic.Bool
	interest ops
	ready    ops
	attached atomic.Pointer[any]
}

// ops is an atomic Ops.
type ops struct{ v atomic.Uint32 }

func (o *ops) load() Ops   { return Ops(o.v.Load()) }
func (o *ops) store(x Ops) { o.v.Store(uint32(x)) }

// New returns a valid key for ch. It is for selector implementations;
// applications get keys from Selector.Register. validOps is the set of
// operations ch supports; w is told of interest changes and cancellation.
func New(ch channel.Channel, validOps, interest Ops, w Watcher) *Key {
	k := &Key{ch: ch, w: w, valid: validOps}
	k.interest.store(interest)
	return k
}

// Channel returns the channel the key was made for, also after cancellation.
func (k *Key) Channel() channel.Channel { return k.ch }

// ValidOps returns the operations the key's channel supports.
func (k *Key) ValidOps() Ops { return k.valid }

// Interest returns the interest set.
func (k *Key) Interest() Ops { return k.interest.load() }

// SetInterest replaces the interest set. It takes effect at once, also for
// a select in progress. It fails with ErrCanceled on a canceled key and
// with an *InvalidOpsError for operations the channel does not support.
func (k *Key) SetInterest(o Ops) error {
	if err := k.check(o); err != nil {
		return err
	}
	if k.interest.v.Swap(uint32(o)) != uint32(o) {
		k.w.InterestChanged(k)
	}
	return nil
}

// AddInterest adds operations to the interest set, like SetInterest.
func (k *Key) AddInterest(o Ops) error {
	if err := k.check(o); err != nil {
		return err
	}
	if old := Ops(k.interest.v.Or(uint32(o))); old|o != old {
		k.w.InterestChanged(k)
	}
	return nil
}

// RemoveInterest removes operations from the interest set, like SetInterest.
func (k *Key) RemoveInterest(o Ops) error {
	if err := k.check(o); err != nil {
		return err
	}
	if old := Ops(k.interest.v.And(^uint32(o))); old&o != 0 {
		k.w.InterestChanged(k)
	}
	return nil
}

func (k *Key) check(o Ops) error {
	if !k.Valid() {
		return ErrCanceled
	}
	if o&^k.ValidOps() != 0 {
		return &InvalidOpsError{Ops: o &^ k.ValidOps(), Valid: k.ValidOps()}
	}
	return nil
}

// Ready returns the ready set found by the last select that selected the
// key. It is a subset of the interest set at that time.
func (k *Key) Ready() Ops { return k.ready.load() }

// SetReady is for selector implementations.
func (k *Key) SetReady(o Ops) { k.ready.store(o) }

// IsReadable reports whether OpRead is in the ready set.
func (k *Key) IsReadable() bool { return k.Ready()&OpRead != 0 }

// IsWritable reports whether OpWrite is in the ready set.
func (k *Key) IsWritable() bool { return k.Ready()&OpWrite != 0 }

// IsConnectable reports whether OpConnect is in the ready set.
func (k *Key) IsConnectable() bool { return k.Ready()&OpConnect != 0 }

// IsAcceptable reports whether OpAccept is in the ready set.
func (k *Key) IsAcceptable() bool { return k.Ready()&OpAccept != 0 }

// Attach sets the attachment, returning the previous one.
func (k *Key) Attach(x any) any {
	if old := k.attached.Swap(&x); old != nil {
		return *old
	}
	return nil
}

// Attachment returns the attachment.
func (k *Key) Attachment() any {
	if p := k.attached.Load(); p != nil {
		return *p
	}
	return nil
}

// Cancel ends the registration: the key becomes invalid and its channel is
// detached from the selector. Cancel is idempotent; it does not close the
// channel.
func (k *Key) Cancel() {
	if !k.canceled.Swap(true) {
		k.w.Canceled(k)
	}
}

// Valid reports whether the key has not been canceled (by Cancel, by
// closing its channel, or by closing its selector).
func (k *Key) Valid() bool { return !k.canceled.Load() }
