package tree

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"

	"github.com/rubin-go/rubin/coord/proto"
)

// randomOps feeds a tree n operations drawn from a seeded source, over a
// small set of paths and sessions so that they collide: every kind of
// write, reads with watches, sessions opening, closing and expiring, and
// multis. It returns a hash of every result and event, so that two runs
// can be compared.
func randomOps(h *harness, seed uint64, n int) uint64 {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	names := []string{"a", "b", "c"}
	path := func() string {
		p := ""
		for d := rng.IntN(3) + 1; d > 0; d-- {
			p += "/" + names[rng.IntN(len(names))]
		}
		return p
	}
	acls := [][]proto.ACL{
		proto.OpenACL,
		{{Perms: proto.PermRead, ID: proto.WorldAnyone}},
		{{Perms: proto.PermAll, ID: proto.ID{Scheme: "auth"}}},
		{{Perms: proto.PermAll, ID: proto.ID{Scheme: "digest", ID: Digest("u1:p")}}, {Perms: proto.PermRead, ID: proto.WorldAnyone}},
	}
	sess := func() int64 { return int64(rng.IntN(4) + 1) }
	hash := fnv.New64a()
	out := func(v ...any) { fmt.Fprintln(hash, v...) }
	for range n {
		h.now += int64(rng.IntN(1000))
		s := sess()
		if rng.IntN(8) != 0 { // a request touches its session; now and then one lapses
			h.tr.Touch(s, h.now)
		}
		switch k := rng.IntN(20); k {
		case 0:
			to, err := h.tr.CreateSession(h.w(s), HashPassword([]byte{byte(s)}), int32(rng.IntN(50000)))
			out("session", s, to, err)
		case 1:
			out("auth", h.tr.AddAuth(s, "digest", []byte(Digest(fmt.Sprintf("u%d:p", rng.IntN(2))))))
		case 2, 3, 16, 17, 18, 19:
			mode, ttl := proto.ModePersistent, int64(-1)
			if k < 16 {
				mode, ttl = proto.CreateMode(rng.IntN(7)), []int64{-1, 500, 5000}[rng.IntN(3)]
			}
			p, st, evs, err := h.tr.CreateTTL(h.w(s), path(), []byte(path()), acls[rng.IntN(len(acls))], mode, ttl)
			out("create", p, st, evs, err)
		case 4:
			evs, err := h.tr.Delete(h.w(s), path(), int32(rng.IntN(3)-1))
			out("delete", evs, err)
		case 5:
			st, evs, err := h.tr.SetData(h.w(s), path(), []byte(path()), int32(rng.IntN(3)-1))
			out("set", st, evs, err)
		case 6:
			st, err := h.tr.SetACL(h.w(s), path(), acls[rng.IntN(len(acls))], -1)
			out("setacl", st, err)
		case 7:
			d, st, err := h.tr.GetData(s, path(), rng.IntN(2) == 0)
			out("get", string(d), st, err)
		case 8:
			st, err := h.tr.Exists(s, path(), rng.IntN(2) == 0)
			out("exists", st, err)
		case 9:
			c, st, err := h.tr.GetChildren(s, path(), rng.IntN(2) == 0)
			out("children", c, st, err)
		case 10:
			out("addwatch", h.tr.AddWatch(s, path(), proto.AddWatchMode(rng.IntN(2))))
		case 11:
			out("removewatch", h.tr.RemoveWatches(s, path(), proto.WatcherType(rng.IntN(5)+1)))
		case 12:
			evs, err := h.tr.CloseSession(h.w(s))
			out("close", evs, err)
		case 13:
			ids, evs, err := h.tr.Expire(h.w(0))
			out("expire", ids, evs, err)
			out("touch", h.tr.Touch(s, h.now))
		case 14:
			var ops []Op
			for k := rng.IntN(4); k >= 0; k-- {
				op := Op{Type: []proto.OpCode{proto.OpCreate, proto.OpCreate2, proto.OpDelete, proto.OpSetData, proto.OpCheck}[rng.IntN(5)],
					Path: path(), Data: []byte("m"), ACL: proto.OpenACL, Mode: proto.CreateMode(rng.IntN(4)), Version: int32(rng.IntN(3) - 1)}
				ops = append(ops, op)
			}
			res, evs, err := h.tr.Multi(h.w(s), ops)
			out("multi", res, evs, err)
		case 15:
			gone, evs, err := h.tr.Sweep(h.w(0))
			out("sweep", gone, evs, err)
			evs, err = h.tr.SetWatches(s, h.zxid-int64(rng.IntN(20)), []string{path()}, []string{path()}, []string{path()}, nil, nil)
			out("setwatches", evs, err)
		}
	}
	return hash.Sum64()
}
