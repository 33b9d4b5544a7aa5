//go:build linux

package selector

import (
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// countSource is an eventfd that counts the events it is handed.
type countSource struct {
	fd      int
	handled atomic.Int32
}

func (c *countSource) FD() int              { return c.fd }
func (c *countSource) Handle(uint32, *Sink) { c.handled.Add(1) }

// TestClosedSelectorLeavesReusedDescriptorAlone closes a selector that
// still has a source, opens another that gets the same epoll descriptor
// number, and removes the source from the closed one: the new selector
// must keep its own registration of that descriptor.
func TestClosedSelectorLeavesReusedDescriptorAlone(t *testing.T) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	src := &countSource{fd: fd}
	old, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.AddSource(src, unix.EPOLLIN); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ep.fd != old.ep.fd {
		t.Skipf("epoll descriptor %d not reused (got %d)", old.ep.fd, s.ep.fd)
	}
	if err := s.AddSource(src, unix.EPOLLIN); err != nil {
		t.Fatal(err)
	}
	if err := old.RemoveSource(src); err != nil {
		t.Errorf("RemoveSource on a closed selector = %v; want nil", err)
	}
	if err := old.ModifySource(src, unix.EPOLLOUT); err == nil {
		t.Errorf("ModifySource on a closed selector succeeded")
	}
	if st := old.Stats(); st.Sources != 0 {
		t.Errorf("closed selector still counts %d sources", st.Sources)
	}
	var one = [8]byte{1}
	unix.Write(fd, one[:])
	if _, err := s.SelectNow(); err != nil {
		t.Fatal(err)
	}
	if src.handled.Load() == 0 {
		t.Error("the new selector lost its source to RemoveSource on the closed one")
	}
}
