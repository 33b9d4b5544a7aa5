package ledger

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2): f's data and the metadata needed to read it
// back (its size), not its timestamps. It uses f's descriptor without
// holding it open: the caller keeps f from being closed meanwhile (the
// Ledger's writer lock, which Close takes too).
func datasync(f *os.File) error {
	for {
		if err := unix.Fdatasync(int(f.Fd())); err != unix.EINTR {
			return err
		}
	}
}

// lockDir takes an exclusive flock(2) on the open directory d, or fails
// at once if another open file (of this process or another) holds it.
func lockDir(d *os.File) error {
	err := unix.Flock(int(d.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("%w: %s", ErrInUse, d.Name())
	}
	return err
}
