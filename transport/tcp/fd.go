package tcp

import (
	"net"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A sysfd is a non-blocking socket shared by the goroutines that use it
// and the one that closes it. Close may come at any time; the descriptor is
// closed only once no operation holds it, so its number is never reused
// under an operation in flight.
type sysfd struct {
	fd    int
	state atomic.Int64 // closedBit | number of holders
}

const closedBit = 1 << 62

// acquire holds the descriptor for one operation; false after close.
func (f *sysfd) acquire() bool {
	for {
		s := f.state.Load()
		if s&closedBit != 0 {
			return false
		}
		if f.state.CompareAndSwap(s, s+1) {
			return true
		}
	}
}

// release ends an operation started by acquire.
func (f *sysfd) release() {
	if f.state.Add(-1) == closedBit {
		unix.Close(f.fd)
	}
}

// close marks the descriptor closed and wakes operations blocked in poll;
// it reports whether this call was the one that closed it.
func (f *sysfd) close() bool {
	for {
		s := f.state.Load()
		if s&closedBit != 0 {
			return false
		}
		if f.state.CompareAndSwap(s, s|closedBit) {
			if s == 0 {
				unix.Close(f.fd)
			} else {
				// Wake holders sleeping in poll; they see the closed bit.
				_ = unix.Shutdown(f.fd, unix.SHUT_RDWR)
			}
			return true
		}
	}
}

func (f *sysfd) closed() bool { return f.state.Load()&closedBit != 0 }

// wait sleeps until the descriptor is ready for events (POLLIN, POLLOUT)
// or has an error or hang-up condition. The caller holds the descriptor.
func (f *sysfd) wait(events int16) error {
	pfd := []unix.PollFd{{Fd: int32(f.fd), Events: events}}
	for {
		_, err := unix.Poll(pfd, -1)
		if err != unix.EINTR {
			return err
		}
	}
}

// writev writes iov with one system call, without allocating.
func writev(fd int, iov []unix.Iovec) (int, error) {
	n, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// sockaddr converts a TCP address to a socket address and its family.
func sockaddr(a *net.TCPAddr) (unix.Sockaddr, int) {
	if ip4 := a.IP.To4(); ip4 != nil || a.IP == nil {
		sa := &unix.SockaddrInet4{Port: a.Port}
		if ip4 != nil {
			copy(sa.Addr[:], ip4)
		}
		return sa, unix.AF_INET
	}
	sa := &unix.SockaddrInet6{Port: a.Port}
	copy(sa.Addr[:], a.IP.To16())
	if a.Zone != "" {
		if ifi, err := net.InterfaceByName(a.Zone); err == nil {
			sa.ZoneId = uint32(ifi.Index)
		}
	}
	return sa, unix.AF_INET6
}

// tcpAddr converts a socket address to a TCP address.
func tcpAddr(sa unix.Sockaddr) *net.TCPAddr {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(append([]byte(nil), sa.Addr[:]...)), Port: sa.Port}
	case *unix.SockaddrInet6:
		a := &net.TCPAddr{IP: net.IP(append([]byte(nil), sa.Addr[:]...)), Port: sa.Port}
		if sa.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(sa.ZoneId)); err == nil {
				a.Zone = ifi.Name
			}
		}
		return a
	}
	return nil
}

// localAddr returns the bound address of fd, or nil.
func localAddr(fd int) *net.TCPAddr {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil
	}
	return tcpAddr(sa)
}
