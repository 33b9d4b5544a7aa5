//go:build linux && cgo

package rdma

// Credits and the receive window: how many receives the peer may fill,
// when they widen, and what each message or credit update returns.

// initialWindow is how many data credits a connection without a shared
// receive queue grants at first.
const initialWindow = 1

// widenLocked doubles the receive window, up to RecvDepth, after the peer
// said that credits held it back, if the pool has more than half of its
// buffers to spare: what is left stays for other connections' first
// windows and for messages. The new receives' credits go out with the
// next message or credit update. The caller holds c.mu.
func (c *Conn) widenLocked() {
	c.starved = false
	cfg := &c.t.cfg
	if c.eng == nil || c.eng.srq != nil || c.window >= cfg.RecvDepth || c.torn || c.draining {
		return
	}
	add := min(c.window, cfg.RecvDepth-c.window)
	if st := c.t.pool.Stats(); st.MaxBuffers-st.InUse-add < st.MaxBuffers/2 {
		return
	}
	for i := range add {
		c.empty = append(c.empty, c.window+ctrlCredits+i)
	}
	c.window += add
	c.widened += add
	c.t.widenings.Add(1)
	c.postReceives()
}

// refillLocked posts fresh receives into the empty slots and sends the
// credits that waited for them. The caller holds c.mu.
func (c *Conn) refillLocked() {
	c.postReceives()
	c.pump()
}

// spendControl takes the credit a control message needs: the control
// credit, or else a data credit (paid). False if there is neither, or no
// room in the send queue.
func (c *Conn) spendControl() (paid, ok bool) {
	switch {
	case !c.sqRoom():
		return false, false
	case c.ctrl > 0:
		c.ctrl--
		return false, true
	case c.credits > 0:
		c.credits--
		return true, true
	}
	return false, false
}

// updateDue reports whether the peer should get its credits back in a
// credit update, since no message is going to carry them: half the window
// is waiting, or the peer has none left.
//
// Credits that the peer's paid control messages took normally wait for
// the next message. After our FIN only credit updates follow, so they are
// owed like the others: a peer whose last paid update spent its last
// credit would otherwise wait for them forever.
func (c *Conn) updateDue() bool {
	owed := c.toReturn + c.widened
	if c.finSent {
		owed += c.quiet
	}
	room := c.room()
	if g := min(owed, room); g > 0 && (g >= max(1, c.window/2) || c.granted == 0) {
		return true
	}
	// A credit a paid update took may have been the peer's last (a window
	// of one), and we may have nothing more to send: it goes back at
	// once, but only on our control credit. Such an update is not paid,
	// so it asks for no answer, and updates never answer each other.
	return c.quiet > 0 && c.ctrl > 0 && room > 0 && c.queue.len() == 0
}

// room is how many posted receives the peer holds no credit for: what
// may be granted now. Credits never run ahead of posted receives, so a
// receive that waits for a buffer (or for the end of a batch of
// completions) holds its credit back. A shared receive queue keeps its
// own account.
func (c *Conn) room() int {
	if c.eng.srq != nil {
		return maxGrant
	}
	return max(0, c.posted-c.granted-(ctrlCredits-c.ctrlOwed))
}

// takeGrants collects the credits to return with the next message. With
// a shared receive queue, a peer that uses its credits gets more while the
// queue has some to spare, up to PeerCredits.
func (c *Conn) takeGrants(control bool) imm {
	room := c.room()
	m := imm{control: control, ctrl: min(c.ctrlOwed, maxCtrlGrant, room)}
	c.ctrlOwed -= m.ctrl
	room -= m.ctrl
	var g int
	if c.eng.srq != nil {
		// The returned receives went back to the queue when the
		// application took the messages; take them, and maybe one more.
		want := c.toReturn + c.quiet
		c.toReturn, c.quiet = 0, 0
		if c.granted+want < c.peerCredits && c.eng.srq.spare() {
			want++
		}
		want = min(want, c.peerCredits-c.granted, maxGrant)
		g = c.eng.srq.grant(want)
		if g == 0 && c.granted == 0 {
			// Every peer keeps one credit: take it back from the
			// queue's reserve for newcomers.
			g = c.eng.srq.grant(1)
		}
	} else {
		g = min(c.toReturn+c.quiet+c.widened, room, maxGrant)
		left := g
		for _, v := range []*int{&c.toReturn, &c.quiet, &c.widened} {
			d := min(*v, left)
			*v -= d
			left -= d
		}
	}
	c.granted += g
	m.credits = g
	return m
}

// deferUpdateLocked leaves a due credit update to the next poll or arm of
// the connection's completion queue. A Receive defers its update so that
// the answer an application sends next carries the credit instead: an
// update of its own is one more send, a system call under Soft-RoCE and
// a doorbell on hardware. The next poll comes when the application
// selects again, or at once from the poller that serves a blocking
// connection (Nudge wakes it if it sleeps), so a peer waits for its
// credits no longer than the application takes to select again. The
// caller holds c.mu.
func (c *Conn) deferUpdateLocked() {
	if !c.updateDeferred {
		c.updateDeferred = true
		c.eng.deferUpdate(c)
	}
}
