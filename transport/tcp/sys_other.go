//go:build !linux

package tcp

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rubin-go/rubin/selector"
)

// supported reports why the transport cannot run here: it is built and
// tested with the selector, which needs Linux.
func supported() error { return fmt.Errorf("tcp: %w", selector.ErrNotSupported) }

// socket opens a non-blocking, close-on-exec TCP socket. New fails here,
// so nothing calls it; it keeps the package building everywhere.
func socket(family int) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM, unix.IPPROTO_TCP)
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// accept accepts a connection on a non-blocking, close-on-exec socket.
func accept(fd int) (int, unix.Sockaddr, error) {
	nfd, sa, err := unix.Accept(fd)
	if err != nil {
		return -1, nil, err
	}
	unix.CloseOnExec(nfd)
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return -1, nil, err
	}
	return nfd, sa, nil
}
