package wal

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// osFile is the Log's File: an *os.File with fdatasync and fallocate.
type osFile struct{ *os.File }

func (f osFile) Datasync() error {
	return f.control(func(fd int) error { return unix.Fdatasync(fd) })
}

func (f osFile) Allocate(off, n int64) error {
	err := f.control(func(fd int) error { return unix.Fallocate(fd, 0, off, n) })
	if errors.Is(err, unix.EOPNOTSUPP) {
		return errors.ErrUnsupported
	}
	return err
}

// control runs op on the file's descriptor, again while it is
// interrupted.
func (f osFile) control(op func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if opErr = op(int(fd)); opErr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return opErr
}
