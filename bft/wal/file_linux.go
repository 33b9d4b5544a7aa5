package wal

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// osFile is the Log's File: an *os.File with fdatasync, and space
// allocated as written zeros.
type osFile struct{ *os.File }

// zeros is what Allocate writes where the file system cannot write
// zeros itself.
var zeros [64 << 10]byte

func (f osFile) Datasync() error {
	return f.control(func(fd int) error { return unix.Fdatasync(fd) })
}

// Allocate makes [off, off+n) blocks of zeros that are written, not
// merely reserved: fallocate(2) mode 0 leaves unwritten extents, and the
// first write into each block then changes the file's metadata, which
// every fdatasync after it commits too (about twice the CPU and latency
// of a 4 KiB sync on ext4). It asks the file system to write the zeros
// (FALLOC_FL_WRITE_ZEROES, Linux 6.17 on, where the device can), and
// where it cannot, reserves the blocks with fallocate first and writes
// the zeros over them: reserved blocks read as zeros until their data is
// on disk, so a crash before the Log's fsync never shows in the file
// what a deleted file left in those blocks, as blocks allocated by the
// write alone could on a file system that does not order data before
// metadata.
func (f osFile) Allocate(off, n int64) error {
	err := f.control(func(fd int) error { return unix.Fallocate(fd, unix.FALLOC_FL_WRITE_ZEROES, off, n) })
	if !unsupported(err) {
		return err
	}
	if err := f.control(func(fd int) error { return unix.Fallocate(fd, 0, off, n) }); !unsupported(err) && err != nil {
		return err
	}
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:k], off); err != nil {
			return err
		}
		off += k
		n -= k
	}
	return nil
}

// unsupported reports whether err is fallocate's answer to a mode the
// file system or kernel lacks.
func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)
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
