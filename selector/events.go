package selector

import (
	"errors"
	"runtime"
)

// ErrNotSupported is returned by New where the selector has no event
// source: everywhere but Linux, whose epoll it is built on.
var ErrNotSupported = errors.New("selector: not supported on " + runtime.GOOS + " (the selector needs Linux's epoll)")

// The event bits of AddSource, ModifySource and Source.Handle: epoll's,
// under names that build on every system.
const (
	EventIn    uint32 = 0x1        // readable (EPOLLIN)
	EventOut   uint32 = 0x4        // writable (EPOLLOUT)
	EventErr   uint32 = 0x8        // an error condition (EPOLLERR)
	EventHup   uint32 = 0x10       // hung up (EPOLLHUP)
	EventRdHup uint32 = 0x2000     // the peer shut down writing (EPOLLRDHUP)
	EventEdge  uint32 = 0x80000000 // edge-triggered (EPOLLET)
)
