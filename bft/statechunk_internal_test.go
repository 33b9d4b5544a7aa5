package bft

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/quick"
)

// The chunks of a state, in order, are the state, each at most the chunk
// size and only the last one shorter; the reply cache and snapshot come
// back from the state bytes as they went in.
func TestStateChunksProperty(t *testing.T) {
	f := func(seed uint64, n uint16, size uint8, clients uint8) bool {
		rng := rand.New(rand.NewPCG(seed, 1))
		snap := make([]byte, int(n))
		for i := range snap {
			snap[i] = byte(rng.Uint32())
		}
		var replies []Reply
		for c := range int(clients % 8) {
			res := make([]byte, rng.IntN(20))
			for i := range res {
				res[i] = byte(rng.Uint32())
			}
			if len(res) == 0 {
				res = nil
			}
			replies = append(replies, Reply{Client: ClientID(2*c + 1), Timestamp: rng.Uint64(), Result: res})
		}
		cs := &coreState{time: rng.Uint64(), replies: replies}
		for c := range int(clients % 5) {
			cn := clientNotes{client: ClientID(3*c + 2), next: 1}
			for range rng.IntN(4) {
				p := make([]byte, rng.IntN(6))
				if len(p) == 0 {
					p = nil
				}
				cn.kept = append(cn.kept, keptNote{num: cn.next + uint64(rng.IntN(3)), payload: p})
				cn.next = cn.kept[len(cn.kept)-1].num + 1
			}
			cs.notes = append(cs.notes, cn)
		}
		state := encodeState(cs, snap)
		sz := uint64(size%64) + 1
		count := chunkCount(uint64(len(state)), sz)
		var joined []byte
		for i := range count {
			c := chunkOf(state, sz, i)
			if uint64(len(c)) > sz || len(c) == 0 || i+1 < count && uint64(len(c)) != sz {
				return false
			}
			joined = append(joined, c...)
		}
		if !bytes.Equal(joined, state) || len(chunkDigests(state, sz)) != int(count) {
			return false
		}
		got, gotSnap, err := decodeState(state)
		if err == nil && !bytes.Equal(encodeState(got, gotSnap), state) {
			return false
		}
		gotReplies := got.replies
		if err != nil || got.time != cs.time || !bytes.Equal(gotSnap, snap) || len(gotReplies) != len(replies) {
			return false
		}
		for i := range replies {
			a, b := replies[i], gotReplies[i]
			if a.Client != b.Client || a.Timestamp != b.Timestamp || !bytes.Equal(a.Result, b.Result) {
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
		t.Fatal(err)
	}
}

// A manifest is accepted only if it is the certified one, well formed and
// within MaxStateBytes.
func TestCheckManifest(t *testing.T) {
	state := encodeState(&coreState{}, bytes.Repeat([]byte("x"), 1000))
	chunks := chunkDigests(state, 64)
	d := manifestDigest(64, uint64(len(state)), chunks)
	good := func() *State {
		return &State{Seq: 8, ChunkSize: 64, Length: uint64(len(state)), Chunks: append([]Digest(nil), chunks...)}
	}
	if err := checkManifest(good(), d, 1<<20); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		m    func(*State)
		max  int
		want error
	}{
		"chunk lied":     {func(m *State) { m.Chunks[3][0] ^= 1 }, 1 << 20, ErrForged},
		"length lied":    {func(m *State) { m.Length-- }, 1 << 20, ErrForged},
		"chunk missing":  {func(m *State) { m.Chunks = m.Chunks[1:] }, 1 << 20, ErrInvalid},
		"zero size":      {func(m *State) { m.ChunkSize = 0 }, 1 << 20, ErrInvalid},
		"oversize chunk": {func(m *State) { m.ChunkSize = 1 << 30; m.Chunks = m.Chunks[:1] }, 1 << 20, ErrInvalid},
		"too large":      {func(*State) {}, 512, ErrTooLarge},
	} {
		m := good()
		c.m(m)
		if err := checkManifest(m, d, c.max); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func FuzzDecodeState(f *testing.F) {
	f.Add(encodeState(&coreState{time: 1e18, replies: []Reply{{Client: 1, Timestamp: 2, Notes: 3, Result: []byte("r")}, {Client: 5}}, notes: []clientNotes{{client: 2, next: 9, kept: []keptNote{{num: 7, payload: []byte("n")}, {num: 8}}}}}, []byte("snapshot")))
	f.Add([]byte{0x80})
	f.Add([]byte{0, 2, 1, 1, 0, 0, 1, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, snap, err := decodeState(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if again := encodeState(cs, snap); !bytes.Equal(again, b) {
			t.Fatalf("re-encodes to %x from %x", again, b)
		}
	})
}
