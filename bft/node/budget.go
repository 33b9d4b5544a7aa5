package node

import "sync"

// A byteBudget bounds the bytes of the decoded messages waiting for a
// core: a link's reader takes a delivery's frame bytes from it before it
// delivers, and blocks while they are not free (back-pressure on the
// sender through the transport's flow control); the core gives them back
// once it stepped the delivery. Safe for concurrent use.
type byteBudget struct {
	mu      sync.Mutex
	max     int
	avail   int
	waiters int
	freed   chan struct{} // closed (and replaced) when bytes come back to waiters
}

func newByteBudget(max int) *byteBudget {
	return &byteBudget{max: max, avail: max, freed: make(chan struct{})}
}

// take takes n bytes, or the whole budget if n exceeds it (a delivery
// larger than the budget waits until nothing else is held), blocking until
// they are free or done is closed. It returns how many it took; ok is false
// if done was closed first, and then it took nothing.
func (b *byteBudget) take(n int, done <-chan struct{}) (took int, ok bool) {
	n = min(n, b.max)
	b.mu.Lock()
	for b.avail < n {
		b.waiters++
		ch := b.freed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			b.mu.Lock()
			b.waiters--
			b.mu.Unlock()
			return 0, false
		}
		b.mu.Lock()
		b.waiters--
	}
	b.avail -= n
	b.mu.Unlock()
	return n, true
}

// give returns n bytes taken before.
func (b *byteBudget) give(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.avail += n
	if b.waiters > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
	b.mu.Unlock()
}
