package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire format. A message is one two-sided send with immediate data:
// the payload is the message, byte for byte, and the 32-bit immediate
// carries flow control:
//
//	bits  0-15  data credits granted to the receiver, since the last message
//	bits 16-19  control credits restored to the receiver, since the last message
//	bits 20-27  zero
//	bit  28     more: the sender spent its last data credit on this
//	            message and has more waiting, or had to wait the last
//	            time its credits ran out (data messages only)
//	bit  29     paid: a control message sent on a data credit (with bit 31)
//	bit  30     FIN: the sender closes for writing; only credit updates
//	            follow (with bit 31)
//	bit  31     control: a credit update without payload, not delivered
//
// A receiver starts each peer on a small window of credits and widens it
// when the peer says, with "more", that credits held it back, so memory
// per connection follows the traffic it carries.
//
// A control message normally spends the sender's control credit, which the
// receiver restores on its next message. When that credit is out, it may
// spend a data credit instead and say so; the receiver then returns that
// credit with its next message, without ever sending a message just for it.
//
// A peer that sets a reserved bit, sends a control message with payload,
// or sends beyond the credits it was given is closed with a protocol error.
const (
	immCreditsMask = 0xffff
	immCtrlShift   = 16
	immCtrlMask    = 0xf
	immReserved    = 0xff << 20
	immMore        = 1 << 28
	immPaid        = 1 << 29
	immFIN         = 1 << 30
	immControl     = 1 << 31

	maxGrant     = immCreditsMask
	maxCtrlGrant = immCtrlMask
)

// ctrlCredits is how many credit updates each side may have in flight; one
// is enough (docs/rdma.md explains why no update then waits forever).
const ctrlCredits = 1

// imm describes one message's immediate data.
type imm struct {
	credits int  // data credits granted
	ctrl    int  // control credits restored
	control bool // a credit update, not a message
	paid    bool // a control message spent a data credit
	fin     bool // the sender closes for writing
	more    bool // credits held back more messages
}

func (m imm) encode() uint32 {
	v := uint32(m.credits) | uint32(m.ctrl)<<immCtrlShift
	if m.control {
		v |= immControl
	}
	if m.fin {
		v |= immFIN
	}
	if m.paid {
		v |= immPaid
	}
	if m.more {
		v |= immMore
	}
	return v
}

var errBadImm = errors.New("malformed immediate data")

// decodeImm parses immediate data; length is the payload's.
func decodeImm(v uint32, length int) (imm, error) {
	m := imm{
		credits: int(v & immCreditsMask),
		ctrl:    int(v >> immCtrlShift & immCtrlMask),
		control: v&immControl != 0,
		fin:     v&immFIN != 0,
		paid:    v&immPaid != 0,
		more:    v&immMore != 0,
	}
	switch {
	case v&immReserved != 0:
		return imm{}, fmt.Errorf("%w %#08x: reserved bits set", errBadImm, v)
	case (m.fin || m.paid) && !m.control, m.more && m.control:
		return imm{}, fmt.Errorf("%w %#08x: control flags on a data message", errBadImm, v)
	case m.control && length != 0:
		return imm{}, fmt.Errorf("%w %#08x: control message with %d bytes of payload", errBadImm, v, length)
	}
	return m, nil
}

// hello is what each side tells the other in the connection manager's
// private data when it connects or accepts:
//
//	0   4  magic "RBN" and version 2
//	4   4  largest message it receives (big endian)
//	8   2  data credits it grants at the start
//	10  1  control credits it grants
//	11  1  zero
//	12  2  most data credits it will ever grant (big endian)
type hello struct {
	maxMessage  int
	credits     int
	ctrlCredits int
	maxCredits  int
}

const helloLen = 14

var helloMagic = [4]byte{'R', 'B', 'N', 2}

func (h hello) encode() []byte {
	b := make([]byte, helloLen)
	copy(b, helloMagic[:])
	binary.BigEndian.PutUint32(b[4:], uint32(h.maxMessage))
	binary.BigEndian.PutUint16(b[8:], uint16(h.credits))
	b[10] = byte(h.ctrlCredits)
	binary.BigEndian.PutUint16(b[12:], uint16(h.maxCredits))
	return b
}

var errBadHello = errors.New("rdma: peer is not a rubin RDMA endpoint of this version")

// decodeHello parses a peer's hello. Private data may carry padding after
// it, which is ignored.
func decodeHello(b []byte) (hello, error) {
	if len(b) < helloLen {
		return hello{}, fmt.Errorf("%w: %d bytes of private data", errBadHello, len(b))
	}
	if [4]byte(b[:4]) != helloMagic {
		return hello{}, fmt.Errorf("%w: magic %q", errBadHello, b[:4])
	}
	h := hello{
		maxMessage:  int(binary.BigEndian.Uint32(b[4:])),
		credits:     int(binary.BigEndian.Uint16(b[8:])),
		ctrlCredits: int(b[10]),
		maxCredits:  int(binary.BigEndian.Uint16(b[12:])),
	}
	switch {
	case b[11] != 0:
		return hello{}, fmt.Errorf("%w: reserved byte %#x", errBadHello, b[11])
	case h.maxMessage < minMessage || h.maxMessage > 1<<30:
		return hello{}, fmt.Errorf("%w: largest message %d", errBadHello, h.maxMessage)
	case h.credits < 1 || h.maxCredits < h.credits:
		return hello{}, fmt.Errorf("%w: %d data credits, at most %d", errBadHello, h.credits, h.maxCredits)
	case h.ctrlCredits < 1 || h.ctrlCredits > maxCtrlGrant:
		return hello{}, fmt.Errorf("%w: %d control credits", errBadHello, h.ctrlCredits)
	}
	return h, nil
}

// minMessage is the smallest largest-message a side may announce.
const minMessage = 64
