//go:build linux

package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
)

// fuzzMax is the maximum message size of the fuzzed Conns: small, so that
// the fuzzer reaches it.
const fuzzMax = 100

// FuzzFrames feeds arbitrary bytes to a Conn as the stream from its peer
// and receives until an error. The Conn must not panic or hang; it must
// deliver exactly the messages a naive decoder finds, each at most the
// maximum size and together re-encoding to a prefix of the input; it must
// end with the right error; and it must give every buffer back.
func FuzzFrames(f *testing.F) {
	for _, seed := range [][]byte{
		nil,
		frames(nil),
		frames([]byte("hello")),
		frames([]byte("one"), nil, []byte("three")),
		{0, 0},                   // cut in the header
		{0, 0, 0, 5, 'a', 'b'},   // cut in the payload
		{0xff, 0xff, 0xff, 0xff}, // far too large
		header(fuzzMax + 1),
		frames(bytes.Repeat([]byte{'m'}, fuzzMax)),
		append(frames(bytes.Repeat([]byte{'m'}, fuzzMax)), header(fuzzMax+1)...),
		append(frames([]byte("ok")), 0xde, 0xad, 0xbe, 0xef, 1, 2, 3),
		bytes.Repeat([]byte{0}, 64), // sixteen empty messages
		frames(bytes.Repeat([]byte{'x'}, 40), bytes.Repeat([]byte{'y'}, 90), bytes.Repeat([]byte{'z'}, 7)),
	} {
		f.Add(seed)
	}
	// Two staging buffers: the smallest, so that messages span reads and
	// are read straight into their pool buffers, and a roomy one.
	pool, err := bufpool.New(bufpool.Config{BufferSize: fuzzMax, SlabSize: 64 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { pool.Close() })
	var trs []*Transport
	for _, rb := range []int{1, 4 << 10} {
		tr, err := New(Config{Pool: pool, MaxMessageSize: fuzzMax, ReadBuffer: rb})
		if err != nil {
			f.Fatal(err)
		}
		trs = append(trs, tr)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return // keep iterations fast; length adds nothing beyond this
		}
		wantMsgs, wantEnd := decodeFrames(data, fuzzMax)
		for i := range 2 * len(trs) {
			tr, blocking := trs[i/2], i%2 == 0
			msgs, end := receiveStream(t, tr, data, blocking)
			for i, m := range msgs {
				if len(m) > fuzzMax {
					t.Fatalf("message %d has %d bytes, above the maximum %d", i, len(m), fuzzMax)
				}
			}
			if re := frames(msgs...); !bytes.HasPrefix(data, re) {
				t.Fatalf("the %d messages received re-encode to %d bytes that are not a prefix of the input", len(msgs), len(re))
			}
			if len(msgs) != len(wantMsgs) {
				t.Fatalf("received %d messages; want %d", len(msgs), len(wantMsgs))
			}
			for i := range msgs {
				if !bytes.Equal(msgs[i], wantMsgs[i]) {
					t.Fatalf("message %d = %x; want %x", i, msgs[i], wantMsgs[i])
				}
			}
			switch {
			case wantEnd == io.EOF:
				if end != io.EOF {
					t.Fatalf("stream of whole frames ended with %v; want io.EOF", end)
				}
			case !errors.Is(end, wantEnd) || end == io.EOF:
				t.Fatalf("stream ended with %v; want an error wrapping %v", end, wantEnd)
			}
			if n := pool.Stats().InUse; n != 0 {
				t.Fatalf("%d pool buffers in use after the Conn closed", n)
			}
		}
	})
}

// decodeFrames is the naive decoder: the messages of stream, and how the
// stream ends.
func decodeFrames(stream []byte, max int) ([][]byte, error) {
	var msgs [][]byte
	for {
		if len(stream) == 0 {
			return msgs, io.EOF
		}
		if len(stream) < headerLen {
			return msgs, io.ErrUnexpectedEOF
		}
		n := uint64(binary.BigEndian.Uint32(stream))
		if n > uint64(max) {
			return msgs, channel.ErrMessageTooLarge
		}
		if uint64(len(stream)-headerLen) < n {
			return msgs, io.ErrUnexpectedEOF
		}
		msgs = append(msgs, stream[headerLen:headerLen+n])
		stream = stream[headerLen+n:]
	}
}

// receiveStream writes data into one end of a socket pair, closes it, and
// receives from a Conn on the other end until an error; in non-blocking
// mode it polls the descriptor when the Conn would block.
func receiveStream(t *testing.T, tr *Transport, data []byte, blocking bool) ([][]byte, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := tr.newConn(fds[0], nil)
	c.connected()
	c.blocking.Store(blocking)
	defer c.Close()
	written := make(chan struct{})
	go func() {
		defer close(written)
		defer unix.Close(fds[1])
		for p := data; len(p) > 0; {
			n, err := unix.Write(fds[1], p)
			if err == unix.EAGAIN {
				pfd := []unix.PollFd{{Fd: int32(fds[1]), Events: unix.POLLOUT}}
				unix.Poll(pfd, -1)
				continue
			}
			if err != nil {
				return // the Conn closed on a protocol error
			}
			p = p[n:]
		}
	}()
	var msgs [][]byte
	var end error
	for {
		b, err := c.Receive()
		if errors.Is(err, channel.ErrWouldBlock) && !blocking {
			pfd := []unix.PollFd{{Fd: int32(fds[0]), Events: unix.POLLIN}}
			unix.Poll(pfd, -1)
			continue
		}
		if err != nil {
			end = err
			break
		}
		msgs = append(msgs, bytes.Clone(b.Bytes()))
		b.Release()
	}
	c.Close() // lets a writer blocked on a full socket go
	<-written
	return msgs, end
}
