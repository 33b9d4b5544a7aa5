//go:build !linux

package selector

import "time"

// epoll stands for the event source, which exists on Linux only: open
// fails with ErrNotSupported, so no selector exists to call the rest.
type epoll struct{}

func openEpoll(int) (*epoll, error) { return nil, ErrNotSupported }

func (*epoll) add(int32, uint32, uint32) error                 { return ErrNotSupported }
func (*epoll) modify(int32, uint32, uint32) error              { return ErrNotSupported }
func (*epoll) remove(int32) error                              { return ErrNotSupported }
func (*epoll) wait(int) (int, error)                           { return 0, ErrNotSupported }
func (*epoll) park(time.Time) (int, error)                     { return 0, ErrNotSupported }
func (*epoll) event(int) (fd int32, ev, gen uint32, wake bool) { return 0, 0, 0, false }
func (*epoll) signal()                                         {}
func (*epoll) clearSignal()                                    {}
func (*epoll) close() error                                    { return nil }

func yieldThread() {}
