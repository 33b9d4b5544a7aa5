//go:build linux

package tcp

import "golang.org/x/sys/unix"

// socket opens a non-blocking, close-on-exec TCP socket.
func socket(family int) (int, error) {
	return unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
}

// accept accepts a connection on a non-blocking, close-on-exec socket.
func accept(fd int) (int, unix.Sockaddr, error) {
	return unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
}

// supported reports why the transport cannot run here: it can.
func supported() error { return nil }
