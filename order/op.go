package order

import (
	"encoding/binary"
	"errors"
	"fmt"

	cb "github.com/hyperledger/fabric-protos-go-apiv2/common"
)

// Operation kinds, the first byte of an op.
const (
	kindEnvelope byte = 1
	kindCut      byte = 2
	kindSign     byte = 3
)

// EnvelopeOp is the op that orders an encoded envelope.
func EnvelopeOp(env []byte) []byte {
	return append([]byte{kindEnvelope}, env...)
}

// CutOp is the op that cuts block number by timeout, if it is due.
func CutOp(number uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{kindCut}, number)
}

// SignOp is the op that adds orderer id's signature over block number's
// header.
func SignOp(id uint32, number uint64, sig []byte) []byte {
	b := []byte{kindSign}
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint64(b, number)
	return append(b, sig...)
}

var errOp = errors.New("order: malformed op")

type op struct {
	kind   byte
	env    []byte // kindEnvelope
	number uint64 // kindCut, kindSign
	id     uint32 // kindSign
	sig    []byte // kindSign
}

func decodeOp(b []byte) (op, error) {
	if len(b) == 0 {
		return op{}, errOp
	}
	o := op{kind: b[0]}
	b = b[1:]
	switch o.kind {
	case kindEnvelope:
		o.env = b
	case kindCut:
		if len(b) != 8 {
			return op{}, errOp
		}
		o.number = binary.BigEndian.Uint64(b)
	case kindSign:
		if len(b) < 12 {
			return op{}, errOp
		}
		o.id, o.number, o.sig = binary.BigEndian.Uint32(b), binary.BigEndian.Uint64(b[4:]), b[12:]
	default:
		return op{}, errOp
	}
	return o, nil
}

// Result is what executing an op gives its client: a Fabric status and,
// for a refusal, the reason.
type Result struct {
	Status cb.Status
	Info   string
}

func (r Result) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(r.Status))
	return append(b, r.Info...)
}

// ParseResult decodes the result of an op.
func ParseResult(b []byte) (Result, error) {
	if len(b) < 4 {
		return Result{}, fmt.Errorf("order: a result of %d bytes", len(b))
	}
	return Result{Status: cb.Status(binary.BigEndian.Uint32(b)), Info: string(b[4:])}, nil
}
