package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rubin-go/rubin/coord"
	"github.com/rubin-go/rubin/coord/proto"
)

// conn is one client connection and its session. Three goroutines serve
// it: serve reads the client's frames, work runs its requests one at a
// time, writeLoop writes what the others queue.
type conn struct {
	srv  *Server
	nc   net.Conn
	host string // the client's address, which MaxConnsPerHost counts

	// For the four-letter words: when the connection was accepted, its
	// packets and latency, its requests not yet answered, and its last
	// op, xid and reply (UnixNano).
	established time.Time
	counters    counters
	outstanding atomic.Int64
	lastOp      atomic.Int32
	lastCxid    atomic.Int32
	lastResp    atomic.Int64

	// Set by the handshake, before the session is bound; read-only after.
	session     int64
	sessionConn int32 // the connection's number among the session's (coord.ConnectResult.Conn)
	timeout     time.Duration
	// counted says the connection counts in Server.hostSessions; under
	// Server.mu.
	counted bool
	// ended says the session ended (closed, or expired): it does not
	// linger once the connection ends.
	ended atomic.Bool

	// turn is held while an op of the session is in flight, a request's
	// or a poll's, so the session's results come in the replicas' order.
	turn     chan struct{}
	watching atomic.Bool  // the session may hold watches: poll it often
	noted    atomic.Bool  // the replicas said events wait for it
	touched  atomic.Int64 // when a result last renewed it (UnixNano)
	lastZxid atomic.Int64 // the highest zxid of a reply, for pings

	done     chan struct{} // closed by kill
	killOnce sync.Once
	wake     chan struct{} // the writer has something to do

	mu           sync.Mutex
	cond         sync.Cond // on mu: pending changed, or dead
	dead         bool
	pending      []request // requests waiting for their turn
	pendingBytes int
	out          [][]byte // frames waiting to be written
	outBytes     int      // their bytes, and those being written
	closeAfter   bool     // close once out is written
}

// request is a client's request waiting for its turn.
type request struct {
	hdr      proto.RequestHeader
	frame    []byte // header and body, as the client sent them
	readOnly bool   // coord.ReadOnly: it may go as a read-only request
	arrived  time.Time
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{srv: s, nc: nc, host: remoteHost(nc), established: time.Now(), turn: make(chan struct{}, 1), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	c.cond.L = &c.mu
	return c
}

// kill closes the connection; the goroutines serving it stop.
func (c *conn) kill(why error) {
	c.killOnce.Do(func() {
		c.mu.Lock()
		c.dead = true
		c.cond.Broadcast()
		c.mu.Unlock()
		close(c.done)
		c.nc.Close()
		if why != nil {
			c.srv.cfg.Logger.Debug("connection closed", "remote", c.nc.RemoteAddr(), "why", why)
		}
	})
}

func (c *conn) serve() {
	defer c.srv.wg.Done()
	defer c.srv.forget(c)
	if err := c.handshake(); err != nil {
		c.kill(err)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.writeLoop() }()
	go func() { defer wg.Done(); c.work() }()
	c.kill(c.readLoop())
	wg.Wait()
}

// handshake reads the client's connect request, opens or resumes its
// session on the replicas and answers. A four-letter word in place of
// the request's length is answered, and ends the connection.
func (c *conn) handshake() error {
	cfg := &c.srv.cfg
	c.nc.SetReadDeadline(time.Now().Add(cfg.HandshakeTimeout))
	var head [4]byte
	if _, err := io.ReadFull(c.nc, head[:]); err != nil {
		return err
	}
	if w := string(head[:]); isFourLetterWord(w) {
		return c.fourLetter(w)
	}
	frame, err := proto.ReadFrameLimit(io.MultiReader(bytes.NewReader(head[:]), c.nc), nil, maxConnectFrame)
	if err != nil {
		return err
	}
	c.countReceived()
	var req proto.ConnectRequest
	if err := proto.Unmarshal(frame, &req); err != nil {
		return err
	}
	passwd := req.Passwd
	if req.SessionID == 0 {
		if why := c.srv.admitSession(c); why != "" {
			c.srv.refuseSession(why)
			return errors.New(why)
		}
		passwd = make([]byte, 16)
		if _, err := rand.Read(passwd); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(c.srv.ctx, cfg.HandshakeTimeout)
	// The session's deadline runs from the op's agreed time, which is
	// after start: the renewals are timed from start.
	start := time.Now()
	res, err := c.srv.order(ctx, coord.ConnectOp(cfg.ID, req.SessionID, passwd, req.TimeOut))
	cancel()
	if err != nil {
		return err
	}
	r, err := coord.ParseConnectResult(res)
	if err != nil {
		return err
	}
	if r.Status != coord.StatusOK && r.Status != coord.StatusExpired {
		// The replicas could open no session: their session table is
		// full. An answer without a session would tell the client that
		// its session expired; as ZooKeeper closes a connection it
		// cannot take, the gateway closes it unanswered, and the client
		// tries again.
		why := fmt.Sprintf("the replicas opened no session (%v): their session table is full", r.Status)
		c.srv.refuseSession(why)
		return errors.New(why)
	}
	resp := proto.ConnectResponse{TimeOut: r.Timeout, SessionID: r.Session, Passwd: passwd, OmitReadOnly: req.OmitReadOnly}
	if r.Status != coord.StatusOK {
		// Session id 0 tells the client its session is gone.
		resp = proto.ConnectResponse{Passwd: make([]byte, 16), OmitReadOnly: req.OmitReadOnly}
	}
	c.nc.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
	if err := proto.WriteFrame(c.nc, &resp); err != nil {
		return err
	}
	c.countSent(1)
	if r.Status != coord.StatusOK {
		return fmt.Errorf("connect to session %#x: %v", req.SessionID, r.Status)
	}
	c.session, c.sessionConn, c.timeout = r.Session, r.Conn, time.Duration(r.Timeout)*time.Millisecond
	c.touched.Store(start.UnixNano())
	if !c.srv.bind(c) {
		return ErrClosed
	}
	return nil
}

// readLoop reads the client's requests until the connection fails; it
// answers pings itself and queues the rest for work.
func (c *conn) readLoop() error {
	for {
		// A ZooKeeper server drops a client silent for its timeout.
		c.nc.SetReadDeadline(time.Now().Add(c.timeout))
		frame, err := proto.ReadFrame(c.nc, nil)
		if err != nil {
			return err
		}
		arrived := time.Now()
		c.countReceived()
		hdr, body, err := proto.SplitRequest(frame)
		if err != nil {
			return err
		}
		if hdr.Type == proto.OpPing {
			b, _ := proto.AppendReply(nil, proto.ReplyHeader{Xid: hdr.Xid, Zxid: c.lastZxid.Load()}, proto.OpPing, nil)
			c.send(b)
			c.answered(hdr, arrived)
			continue
		}
		req, err := proto.DecodeRequest(hdr.Type, body)
		if err != nil && !errors.Is(err, proto.ErrUnknownOp) {
			return err // the replicas answer an unknown op
		}
		if setsWatch(req) {
			c.watching.Store(true)
		}
		if a, ok := req.(*proto.AuthPacket); ok {
			// The replicas get the digest of a password, never the
			// password, and take an ip identity as vouched for: the
			// address the client connects from, whatever it claims.
			coord.SealAuth(a, remoteHost(c.nc))
			frame = proto.Marshal(proto.Marshal(nil, &hdr), a)
		}
		if !c.push(request{hdr: hdr, frame: frame, readOnly: err == nil && coord.ReadOnly(hdr.Type, req), arrived: arrived}) {
			return nil
		}
	}
}

// remoteHost is the address of the client's host.
func remoteHost(nc net.Conn) string {
	addr := nc.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// setsWatch reports whether a request may leave a watch.
func setsWatch(req proto.Record) bool {
	switch r := req.(type) {
	case *proto.ExistsRequest:
		return r.Watch
	case *proto.GetDataRequest:
		return r.Watch
	case *proto.GetChildrenRequest:
		return r.Watch
	case *proto.GetChildren2Request:
		return r.Watch
	case *proto.SetWatches, *proto.SetWatches2, *proto.AddWatchRequest:
		return true
	}
	return false
}

// push queues a request, waiting while MaxPending bytes wait. It returns
// false once the connection is dead.
func (c *conn) push(r request) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.pendingBytes >= c.srv.cfg.MaxPending && !c.dead {
		c.cond.Wait()
	}
	if c.dead {
		return false
	}
	c.pending = append(c.pending, r)
	c.pendingBytes += len(r.frame)
	c.outstanding.Add(1)
	c.cond.Broadcast()
	return true
}

// pop takes the next request, waiting for one; false once the connection
// is dead.
func (c *conn) pop() (request, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.pending) == 0 && !c.dead {
		c.cond.Wait()
	}
	if c.dead {
		return request{}, false
	}
	r := c.pending[0]
	c.pending[0] = request{}
	c.pending = c.pending[1:]
	c.pendingBytes -= len(r.frame)
	c.cond.Broadcast()
	return r, true
}

// work runs the session's requests one at a time, in order.
func (c *conn) work() {
	for {
		req, ok := c.pop()
		if !ok {
			return
		}
		select {
		case c.turn <- struct{}{}:
		case <-c.done:
			return
		}
		r, err := c.run(req)
		<-c.turn
		if err == nil && req.hdr.Type == proto.OpCloseSession {
			c.ended.Store(true)
		}
		if c.noted.Load() {
			c.srv.signalPoll()
		}
		if err != nil {
			c.outstanding.Add(-1)
			c.kill(err)
			return
		}
		c.deliver(r.Status, r.Frames)
		c.outstanding.Add(-1)
		c.answered(req.hdr, req.arrived)
	}
}

// run runs one request on the replicas: a read-only one as such first,
// ordered if the replicas ask for it. A request in flight when the
// connection dies is still awaited: its result, not the client's absence,
// says what happened.
func (c *conn) run(req request) (coord.SessionResult, error) {
	cfg := &c.srv.cfg
	if len(req.frame) > coord.MaxRequestFrame {
		// Too long for an op, if not for ZooKeeper: nearly a megabyte of
		// data, more than a znode holds here. Answered in its turn.
		b, err := proto.AppendReply(nil, proto.ReplyHeader{Xid: req.hdr.Xid, Zxid: c.lastZxid.Load(), Err: proto.CodeMarshallingError}, req.hdr.Type, nil)
		return coord.SessionResult{Status: coord.StatusOK, Frames: b}, err
	}
	op := coord.RequestOp(cfg.ID, c.session, c.sessionConn, req.frame)
	if req.readOnly {
		res, err := cfg.Invoker.InvokeRead(c.srv.ctx, op)
		if err != nil {
			return coord.SessionResult{}, err
		}
		r, err := coord.ParseRequestResult(res)
		if err != nil || r.Status != coord.StatusOrder {
			// A read-only answer does not renew the session; the polls do.
			return r, err
		}
	}
	start := time.Now()
	res, err := c.srv.order(c.srv.ctx, op)
	if err != nil {
		return coord.SessionResult{}, err
	}
	c.touched.Store(start.UnixNano())
	return coord.ParseRequestResult(res)
}

// deliver writes the frames of a result and acts on its status.
func (c *conn) deliver(st coord.Status, frames []byte) {
	if z := maxZxid(frames); z > c.lastZxid.Load() {
		c.lastZxid.Store(z)
	}
	if st == coord.StatusExpired {
		c.ended.Store(true)
	}
	switch st {
	case coord.StatusOK:
		c.send(frames)
	case coord.StatusClose, coord.StatusExpired:
		c.mu.Lock()
		if !c.dead {
			if len(frames) > 0 {
				c.out = append(c.out, frames)
				c.outBytes += len(frames)
				c.countSent(countFrames(frames))
			}
			c.closeAfter = true
		}
		c.mu.Unlock()
		c.signal()
	default:
		c.kill(fmt.Errorf("request: %v", st))
	}
}

// maxZxid returns the highest zxid in the reply headers of frames (events
// carry none).
func maxZxid(frames []byte) int64 {
	var z int64
	for len(frames) >= 16 {
		n := int(binary.BigEndian.Uint32(frames))
		if n < 12 || n > len(frames)-4 {
			break
		}
		if xid := int32(binary.BigEndian.Uint32(frames[4:])); xid != proto.XidWatchEvent {
			z = max(z, int64(binary.BigEndian.Uint64(frames[8:])))
		}
		frames = frames[4+n:]
	}
	return z
}

// send queues frames for the writer; a client that lets more than
// MaxOutput bytes pile up is too slow and is dropped.
func (c *conn) send(b []byte) {
	if len(b) == 0 {
		return
	}
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	if c.outBytes+len(b) > c.srv.cfg.MaxOutput {
		c.mu.Unlock()
		c.kill(errors.New("client too slow: output queue full"))
		return
	}
	c.out = append(c.out, b)
	c.outBytes += len(b)
	c.mu.Unlock()
	c.countSent(countFrames(b))
	c.signal()
}

// countReceived counts a packet from the client, for the four-letter
// words.
func (c *conn) countReceived() {
	c.counters.received.Add(1)
	c.srv.counters.received.Add(1)
}

// countSent counts n packets queued for the client.
func (c *conn) countSent(n int) {
	c.counters.sent.Add(uint64(n))
	c.srv.counters.sent.Add(uint64(n))
}

// answered records a request whose reply was queued: its latency since
// it arrived, and what cons shows of the connection's last op.
func (c *conn) answered(hdr proto.RequestHeader, arrived time.Time) {
	now := time.Now()
	d := now.Sub(arrived)
	c.counters.record(d)
	c.srv.counters.record(d)
	c.srv.metrics.observe(d)
	c.lastOp.Store(int32(hdr.Type))
	if hdr.Type != proto.OpPing {
		c.lastCxid.Store(hdr.Xid)
	}
	c.lastResp.Store(now.UnixNano())
}

// countFrames returns the number of whole frames in b.
func countFrames(b []byte) int {
	n := 0
	for len(b) >= 4 {
		m := int(binary.BigEndian.Uint32(b))
		if m < 0 || m > len(b)-4 {
			break
		}
		b = b[4+m:]
		n++
	}
	return n
}

func (c *conn) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeLoop writes the queued frames, a burst at a time.
func (c *conn) writeLoop() {
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		bufs, closeAfter := net.Buffers(c.out), c.closeAfter
		c.out = nil
		c.mu.Unlock()
		if len(bufs) > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(c.srv.cfg.WriteTimeout))
			n, err := bufs.WriteTo(c.nc)
			if err != nil {
				c.kill(err)
				return
			}
			c.mu.Lock()
			c.outBytes -= int(n)
			c.mu.Unlock()
		}
		if closeAfter {
			c.kill(nil)
			return
		}
	}
}
