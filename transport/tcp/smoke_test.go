package tcp

import (
	"bytes"
	"context"
	"testing"

	"github.com/rubin-go/rubin/selectionkey"
	"github.com/rubin-go/rubin/selector"
)

func TestSmoke(t *testing.T) {
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := tr.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		s, err := selector.New(selector.Config{})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		l.SetBlocking(false)
		if _, err := s.Register(l, selectionkey.OpAccept, nil); err != nil {
			t.Error(err)
			return
		}
		for {
			if _, err := s.Select(); err != nil {
				return
			}
			for _, k := range s.SelectedKeys() {
				switch {
				case k.IsAcceptable():
					c, err := l.AcceptTCP()
					if err != nil {
						continue
					}
					c.SetBlocking(false)
					s.Register(c, selectionkey.OpRead, nil)
				case k.IsReadable():
					c := k.Channel().(*Conn)
					for {
						b, err := c.Receive()
						if err != nil {
							if err.Error() != "operation would block" {
								c.Close()
							}
							break
						}
						c.Send(b)
					}
				}
			}
		}
	}()
	c, err := tr.Dial(ctx, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, size := range []int{0, 1, 64, 1000, 70000, 200000} {
		b, _ := tr.Pool().TryGet()
		for i := range size {
			b.Full()[i] = byte(i * 7)
		}
		b.SetLen(size)
		want := bytes.Clone(b.Bytes())
		if err := c.Send(b); err != nil {
			t.Fatal(err)
		}
		got, err := c.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("size %d: mismatch (got %d bytes)", size, got.Len())
		}
		got.Release()
	}
	t.Logf("%+v %+v", tr.Stats(), tr.Pool().Stats())
}
