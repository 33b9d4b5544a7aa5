package selectionkey

import (
	"errors"
	"fmt"
)

// ErrCanceled is returned by operations on a canceled key.
var ErrCanceled = errors.New("selection key canceled")

// InvalidOpsError reports operations that a key's channel does not support,
// such as OpAccept on a connection.
type InvalidOpsError struct {
	Ops   Ops // the unsupported operations
	Valid Ops // what the channel supports
}

func (e *InvalidOpsError) Error() string {
	return fmt.Sprintf("operations %v not supported by this channel (valid: %v)", e.Ops, e.Valid)
}
