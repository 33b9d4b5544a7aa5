//go:build !linux

package wal

import (
	"errors"
	"os"
)

// osFile is the Log's File: an *os.File, where fdatasync is fsync and
// nothing is pre-allocated.
type osFile struct{ *os.File }

func (f osFile) Datasync() error { return f.Sync() }

func (f osFile) Allocate(off, n int64) error { return errors.ErrUnsupported }
