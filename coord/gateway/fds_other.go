//go:build !linux

package gateway

// fileDescriptors is only known on Linux; elsewhere mntr leaves out the
// file descriptor counts, as ZooKeeper does where it cannot read them.
func fileDescriptors() (open, most uint64, ok bool) { return 0, 0, false }
