//go:build linux

package selector

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The event bits are epoll's.
const (
	_ = uint32(EventIn - unix.EPOLLIN)
	_ = uint32(EventOut - unix.EPOLLOUT)
	_ = uint32(EventErr - unix.EPOLLERR)
	_ = uint32(EventHup - unix.EPOLLHUP)
	_ = uint32(EventRdHup - unix.EPOLLRDHUP)
	_ = uint32(EventEdge - unix.EPOLLET)
	_ = uint32(unix.EPOLLIN - EventIn)
	_ = uint32(unix.EPOLLOUT - EventOut)
	_ = uint32(unix.EPOLLERR - EventErr)
	_ = uint32(unix.EPOLLHUP - EventHup)
	_ = uint32(unix.EPOLLRDHUP - EventRdHup)
	_ = uint32(unix.EPOLLET - EventEdge)
)

// epoll is the selector's event source on Linux: an epoll instance, an
// eventfd that wakes it, and the events of the last wait. Each added
// descriptor carries a generation in the event's padding, so an event
// for a descriptor removed (and its number reused) since the wait is
// recognized as stale.
type epoll struct {
	fd     int
	file   *os.File        // owns fd
	raw    syscall.RawConn // file's, for parking in the runtime poller
	wakefd int
	events []unix.EpollEvent

	poll     func(fd uintptr) bool // e.pollOnce, bound once
	parkN    int                   // events found by poll
	parkErr  error
	parkedBy time.Time // the read deadline set on file
}

func openEpoll(maxEvents int) (*epoll, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("selector: epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("selector: eventfd: %w", err)
	}
	// The wake-up descriptor is entry 0 with generation 0; sources start at 1.
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(wakefd)
		unix.Close(epfd)
		return nil, fmt.Errorf("selector: adding the wake-up eventfd: %w", err)
	}
	// The epoll descriptor is itself pollable: registered with the Go
	// runtime's network poller, a select sleeps as a parked goroutine, and
	// waking it costs no thread switch, as with package net.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(wakefd)
		unix.Close(epfd)
		return nil, fmt.Errorf("selector: making epoll non-blocking: %w", err)
	}
	file := os.NewFile(uintptr(epfd), "selector-epoll")
	raw, err := file.SyscallConn()
	if err == nil {
		// Fails with os.ErrNoDeadline unless the runtime polls file.
		err = file.SetReadDeadline(time.Time{})
	}
	if err != nil {
		unix.Close(wakefd)
		file.Close()
		return nil, fmt.Errorf("selector: registering epoll with the runtime poller: %w", err)
	}
	e := &epoll{fd: epfd, file: file, raw: raw, wakefd: wakefd, events: make([]unix.EpollEvent, maxEvents)}
	e.poll = e.pollOnce
	return e, nil
}

func (e *epoll) add(fd int32, events, gen uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: fd, Pad: int32(gen)}
	return unix.EpollCtl(e.fd, unix.EPOLL_CTL_ADD, int(fd), &ev)
}

func (e *epoll) modify(fd int32, events, gen uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: fd, Pad: int32(gen)}
	return unix.EpollCtl(e.fd, unix.EPOLL_CTL_MOD, int(fd), &ev)
}

func (e *epoll) remove(fd int32) error {
	return unix.EpollCtl(e.fd, unix.EPOLL_CTL_DEL, int(fd), nil)
}

// wait waits up to ms milliseconds (-1: without limit, 0: not at all)
// and returns how many events it found; an interrupted wait found none.
func (e *epoll) wait(ms int) (int, error) {
	n, err := unix.EpollWait(e.fd, e.events, ms)
	if err == unix.EINTR {
		return 0, nil
	}
	return n, err
}

// park waits as a goroutine parked in the runtime's poller until epoll
// has events or the deadline (zero: none) passes, and returns how many
// events it found.
func (e *epoll) park(deadline time.Time) (int, error) {
	if !deadline.Equal(e.parkedBy) {
		if err := e.file.SetReadDeadline(deadline); err != nil {
			return 0, err
		}
		e.parkedBy = deadline
	}
	e.parkN, e.parkErr = 0, nil
	err := e.raw.Read(e.poll)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, err
	}
	return e.parkN, e.parkErr
}

// pollOnce is the parked wait's poll: it reports whether there is
// something to collect, or an error, and false to keep waiting.
func (e *epoll) pollOnce(fd uintptr) bool {
	n, err := unix.EpollWait(int(fd), e.events, 0)
	switch {
	case err == unix.EINTR:
		return false
	case err != nil:
		e.parkErr = err
		return true
	}
	e.parkN = n
	return n > 0
}

// event returns the i-th event of the last wait: the descriptor, its
// events and generation, and whether it is the wake-up descriptor's.
func (e *epoll) event(i int) (fd int32, events, gen uint32, wake bool) {
	ev := &e.events[i]
	return ev.Fd, ev.Events, uint32(ev.Pad), int(ev.Fd) == e.wakefd && ev.Pad == 0
}

// signal makes the wake-up descriptor readable.
func (e *epoll) signal() {
	var one = [8]byte{1}
	_, _ = unix.Write(e.wakefd, one[:]) // EAGAIN only if already signaled
}

// clearSignal drains the wake-up descriptor.
func (e *epoll) clearSignal() {
	var buf [8]byte
	_, _ = unix.Read(e.wakefd, buf[:])
}

func (e *epoll) close() error {
	return errors.Join(e.file.Close(), unix.Close(e.wakefd))
}

// yieldThread lets threads of other processes that share this CPU run.
func yieldThread() {
	_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
