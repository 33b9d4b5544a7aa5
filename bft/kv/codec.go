package kv

import (
	"encoding/binary"
	"fmt"
)

// EncodePut encodes Put(key, value).
func EncodePut(key, value []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(key)+len(value))
	b = append(b, OpPut)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return append(b, value...)
}

// EncodeGet encodes Get(key).
func EncodeGet(key []byte) []byte {
	return append(append(make([]byte, 0, 1+len(key)), OpGet), key...)
}

// EncodeDelete encodes Delete(key).
func EncodeDelete(key []byte) []byte {
	return append(append(make([]byte, 0, 1+len(key)), OpDelete), key...)
}

// EncodeAdd encodes Add(key, delta): add delta to the 8-byte big-endian
// integer stored under key.
func EncodeAdd(key []byte, delta int64) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(key)+8)
	b = append(b, OpAdd)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	return binary.BigEndian.AppendUint64(b, uint64(delta))
}

// EncodeCAS encodes a compare-and-swap: set key to value if it currently
// holds old (present true), or if it does not exist (present false; old
// is then ignored).
func EncodeCAS(key []byte, present bool, old, value []byte) []byte {
	if !present {
		old = nil
	}
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(key)+len(old)+len(value))
	b = append(b, OpCAS)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	if present {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(old)))
	b = append(b, old...)
	return append(b, value...)
}

// OpError is an error result: the store rejected the operation. Every
// correct replica returns the same message.
type OpError struct {
	Msg string
}

func (e *OpError) Error() string { return e.Msg }

// DecodeResult decodes a result returned by Execute. An error result
// gives an *OpError; bytes that are not a result give another error. The
// empty result (of the empty operation) gives nil, false, nil. value
// aliases res, and is nil when the result carries none (a Get of an
// empty value gives nil, true).
func DecodeResult(res []byte) (value []byte, found bool, err error) {
	if len(res) == 0 {
		return nil, false, nil
	}
	if len(res) > 1 {
		value = res[1:]
	}
	switch res[0] {
	case StatusNotFound:
		return value, false, nil
	case StatusFound:
		return value, true, nil
	case StatusError:
		return nil, false, &OpError{Msg: string(res[1:])}
	default:
		return nil, false, fmt.Errorf("kv: decode result: unknown status 0x%02x", res[0])
	}
}
