//go:build !linux

package ledger

import "os"

// datasync is fsync where fdatasync is not to be had.
func datasync(f *os.File) error { return f.Sync() }

// lockDir does nothing: off Linux, nothing stops two Opens of one
// directory.
func lockDir(d *os.File) error { return nil }
