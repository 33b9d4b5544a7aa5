package tcp

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A sysfd is a non-blocking socket shared by the goroutines that use it
// and the one that closes it. Close may come at any time; the descriptor is
// closed only once no operation holds it, so its number is never reused
// under an operation in flight.
//
// Blocking-mode operations wait for readiness as goroutines parked in the
// Go runtime's network poller, on a duplicate of the descriptor registered
// there the first time one waits: no thread sleeps in poll(2), and waking a
// waiter costs what it costs package net.
type sysfd struct {
	fd    int
	state atomic.Int64 // closedBit | number of holders

	mu   sync.Mutex // guards file and raw
	file *os.File   // the duplicate, owned by the runtime poller
	raw  syscall.RawConn
	// Readiness checks handed to raw, bound once so that waiting does not
	// allocate; each is used by one waiter at a time (reads and writes
	// are serialized by their callers).
	readCheck, writeCheck readiness
}

// readiness is a RawConn callback that reports whether a descriptor is
// ready for events; the runtime parks the caller until it is.
type readiness struct {
	fd     int
	events int16
	fn     func(uintptr) bool
}

func (r *readiness) check(uintptr) bool {
	pfd := [1]unix.PollFd{{Fd: int32(r.fd), Events: r.events}}
	n, err := unix.Poll(pfd[:], 0)
	return err != nil && err != unix.EINTR || n > 0
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

// close marks the descriptor closed and wakes the operations waiting for
// it; it reports whether this call was the one that closed it.
func (f *sysfd) close() bool {
	for {
		s := f.state.Load()
		if s&closedBit != 0 {
			return false
		}
		if f.state.CompareAndSwap(s, s|closedBit) {
			f.mu.Lock()
			if f.file != nil {
				f.file.Close() // wakes waiters; they see the closed bit
			}
			f.mu.Unlock()
			if s == 0 {
				unix.Close(f.fd)
			}
			return true
		}
	}
}

func (f *sysfd) closed() bool { return f.state.Load()&closedBit != 0 }

// wait parks until the descriptor is ready for events (POLLIN or POLLOUT),
// has an error or hang-up condition, or is closed. The caller holds the
// descriptor.
func (f *sysfd) wait(events int16) error {
	raw, err := f.rawConn()
	if err != nil {
		return err
	}
	if events == unix.POLLOUT {
		err = raw.Write(f.writeCheck.fn)
	} else {
		err = raw.Read(f.readCheck.fn)
	}
	if err != nil && f.closed() {
		return nil // the caller sees the closed bit
	}
	return err
}

// rawConn registers a duplicate of the descriptor with the runtime poller,
// once.
func (f *sysfd) rawConn() (syscall.RawConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.raw != nil {
		return f.raw, nil
	}
	if f.closed() {
		return nil, net.ErrClosed
	}
	dup, err := unix.FcntlInt(uintptr(f.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	file := os.NewFile(uintptr(dup), "tcp")
	raw, err := file.SyscallConn()
	if err == nil {
		err = file.SetDeadline(time.Time{}) // fails unless the runtime polls it
	}
	if err != nil {
		file.Close()
		return nil, err
	}
	f.readCheck = readiness{fd: f.fd, events: unix.POLLIN}
	f.readCheck.fn = f.readCheck.check
	f.writeCheck = readiness{fd: f.fd, events: unix.POLLOUT}
	f.writeCheck.fn = f.writeCheck.check
	f.file, f.raw = file, raw
	return raw, nil
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
