package ledger

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2): f's data and the metadata needed to read it
// back (its size), not its timestamps.
func datasync(f *os.File) error {
	for {
		if err := unix.Fdatasync(int(f.Fd())); err != unix.EINTR {
			return err
		}
	}
}
