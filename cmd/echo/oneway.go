package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/rubin-go/rubin/bufpool"
	"github.com/rubin-go/rubin/channel"
	"github.com/rubin-go/rubin/selectionkey"
)

// A one-way stream (echo client -oneway, channel api) measures throughput
// the way ib_send_bw does: the client sends its messages without waiting
// for echoes, and the server only counts them. A stream is framed by two
// marker messages: onewayBegin asks the server to switch the connection
// from echoing to counting, which it confirms with onewayAccept before
// the client sends any data; onewayEnd asks for the total, which the
// server sends back as one onewayTotalLen-byte message: the messages
// counted and their payload bytes, two little-endian 64-bit words.
// Markers are never counted; a data message equal to a marker is not
// possible, since every data message carries its sequence number's
// pattern (payload.go).
//
// The confirmation is how client and server agree on the mode: a server
// of an api without a one-way mode echoes onewayBegin back, and the client
// refuses to stream into it (errOnewayEchoed) instead of waiting for a
// total that never comes. Nothing else may arrive during a stream: the
// client takes whatever does and fails, so that a readable connection
// never stays selected without being read.
var (
	onewayBegin  = []byte("rubin echo: a one-way stream begins")
	onewayAccept = []byte("rubin echo: counting the one-way stream")
	onewayEnd    = []byte("rubin echo: the one-way stream ends")
)

// errOnewayEchoed is a one-way client's error when the server echoed its
// request to stream back: it serves an api that only echoes.
var errOnewayEchoed = errors.New("the server echoed the request for a one-way stream back instead of accepting it: " +
	"it runs an api without a one-way mode (conn or gonet); -oneway needs a server started with -api channel")

const onewayTotalLen = 16

// onewayCount is a server connection's count while it streams one way;
// it is the connection's key attachment.
type onewayCount struct {
	msgs, bytes uint64
	pending     *bufpool.Buffer // the acceptance, while Send cannot take it
}

// accept turns b, the begin marker, into the acceptance to send back.
func accept(b *bufpool.Buffer) {
	b.SetLen(copy(b.Full(), onewayAccept))
}

// take counts b and releases it, unless b is the end marker: then it
// writes the total into b and reports true; b is the reply to send.
func (ow *onewayCount) take(b *bufpool.Buffer) bool {
	if bytes.Equal(b.Bytes(), onewayEnd) {
		total := b.Full()[:onewayTotalLen]
		binary.LittleEndian.PutUint64(total, ow.msgs)
		binary.LittleEndian.PutUint64(total[8:], ow.bytes)
		b.SetLen(onewayTotalLen)
		return true
	}
	ow.msgs++
	ow.bytes += uint64(b.Len())
	b.Release()
	return false
}

// The phases of a client connection's one-way stream.
const (
	streamBegin     = iota // the begin marker is still to be sent
	streamAccepting        // waiting for the server to accept the stream
	streamData             // sending data messages
	streamEnd              // the end marker is still to be sent
	streamWaiting          // waiting for the total
	streamDone
)

// oneway is a client connection's one-way state.
type oneway struct {
	phase int
	sent  uint64    // data messages handed to Send
	held  uint64    // sequence number of the last data message sent, recorded with the total
	since time.Time // when held was sent
	any   bool      // held is valid
}

// stream advances cc's one-way stream as far as the connection takes it:
// every message is recorded when it is sent, but the last, which is
// recorded when the total confirms that everything arrived, so that the
// measured phase ends only then.
func (cc *clientConn) stream(k *selectionkey.Key, cfg clientConfig, rec *recorder) error {
	ow := &cc.ow
	for cc.pending == nil {
		switch ow.phase {
		case streamBegin:
			ow.phase = streamAccepting
			if err := cc.sendBytes(k, onewayBegin); err != nil {
				return err
			}
		case streamData:
			seq, ok := rec.Next()
			if !ok {
				ow.phase = streamEnd
				continue
			}
			b, err := cc.message(cfg, seq)
			if err != nil {
				return err
			}
			if ow.any {
				rec.Record(ow.held, 0)
			}
			ow.held, ow.since, ow.any = seq, time.Now(), true
			ow.sent++
			if err := cc.send(k, b); err != nil {
				return fmt.Errorf("message %d: %w", seq, err)
			}
		case streamEnd:
			ow.phase = streamWaiting
			if err := cc.sendBytes(k, onewayEnd); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

// sendBytes sends a copy of p.
func (cc *clientConn) sendBytes(k *selectionkey.Key, p []byte) error {
	b, err := cc.c.Pool().TryGet()
	if err != nil {
		return err
	}
	b.Write(p)
	return cc.send(k, b)
}

// receive takes a message the server sent on a one-way stream: its
// acceptance, then the total. Anything else, or the end of the
// connection, fails the stream. It reports whether the stream is done.
func (cc *clientConn) receive(cfg clientConfig, rec *recorder) (bool, error) {
	ow := &cc.ow
	b, err := cc.c.Receive()
	if errors.Is(err, channel.ErrWouldBlock) {
		return false, nil
	}
	if err != nil {
		if ow.phase == streamAccepting {
			return false, fmt.Errorf("the server closed the connection instead of accepting a one-way stream (is it running with -api channel?): %w", err)
		}
		return false, fmt.Errorf("receive on the one-way stream: %w", err)
	}
	defer b.Release()
	switch ow.phase {
	case streamAccepting:
		switch {
		case bytes.Equal(b.Bytes(), onewayAccept):
			ow.phase = streamData
			return false, nil
		case bytes.Equal(b.Bytes(), onewayBegin):
			return false, errOnewayEchoed
		}
		return false, fmt.Errorf("the server answered the request for a one-way stream with %d bytes that do not accept it: is it running with -api channel?", b.Len())
	case streamWaiting:
		return cc.confirm(b, cfg, rec)
	}
	return false, fmt.Errorf("the server sent a %d-byte message in the middle of the one-way stream", b.Len())
}

// confirm checks b, the server's total, against what was sent and records
// the last message.
func (cc *clientConn) confirm(b *bufpool.Buffer, cfg clientConfig, rec *recorder) (bool, error) {
	ow := &cc.ow
	if b.Len() != onewayTotalLen {
		return false, fmt.Errorf("one-way total of %d bytes, want %d", b.Len(), onewayTotalLen)
	}
	msgs, n := binary.LittleEndian.Uint64(b.Bytes()), binary.LittleEndian.Uint64(b.Bytes()[8:])
	if msgs != ow.sent || n != ow.sent*uint64(cfg.size) {
		return false, fmt.Errorf("server counted %d messages, %d bytes; sent %d of %d bytes", msgs, n, ow.sent, cfg.size)
	}
	if ow.any {
		rec.Record(ow.held, time.Since(ow.since))
	}
	ow.phase = streamDone
	return true, nil
}
