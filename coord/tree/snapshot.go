package tree

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/rubin-go/rubin/coord/proto"
)

// snapshotMagic starts every snapshot, followed by a byte, the format's
// version: snapshotVersion, or 1, which held sessions' passwords where
// version 2 holds their hashes (HashPassword). Restore reads both.
const (
	snapshotMagic   = "rubinzt"
	snapshotVersion = 2
)

// Snapshot encodes the tree canonically: the same state gives the same
// bytes on every replica. It holds the last zxid, every znode in path
// order (data, ACL, Stat), and every session in id order with its
// password's hash, timeout, deadline, identities and watches in path
// order. Integers are big-endian, lengths and counts 4 bytes. Config is
// not in it: replicas agree on that separately.
func (t *Tree) Snapshot() []byte { return t.encode(snapshotVersion) }

// encode encodes the tree in a format's version. Versions differ only
// in what a session's password field means, not in its layout.
func (t *Tree) encode(version byte) []byte {
	var b []byte
	b = append(b, snapshotMagic...)
	b = append(b, version)
	b = binary.BigEndian.AppendUint64(b, uint64(t.lastZxid))
	paths := slices.Sorted(maps.Keys(t.nodes))
	b = binary.BigEndian.AppendUint32(b, uint32(len(paths)))
	for _, p := range paths {
		n := t.nodes[p]
		b = appendString(b, p)
		b = appendString(b, string(n.data))
		b = binary.BigEndian.AppendUint32(b, uint32(len(n.acl)))
		for _, a := range n.acl {
			b = binary.BigEndian.AppendUint32(b, uint32(a.Perms))
			b = appendString(b, a.ID.Scheme)
			b = appendString(b, a.ID.ID)
		}
		st := n.stat
		for _, v := range []int64{st.Czxid, st.Mzxid, st.Ctime, st.Mtime} {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
		for _, v := range []int32{st.Version, st.Cversion, st.Aversion} {
			b = binary.BigEndian.AppendUint32(b, uint32(v))
		}
		b = binary.BigEndian.AppendUint64(b, uint64(st.EphemeralOwner))
		b = binary.BigEndian.AppendUint64(b, uint64(st.Pzxid))
	}
	ids := t.Sessions()
	b = binary.BigEndian.AppendUint32(b, uint32(len(ids)))
	for _, id := range ids {
		s := t.sessions[id]
		b = binary.BigEndian.AppendUint64(b, uint64(s.id))
		b = appendString(b, string(s.passwdHash))
		b = binary.BigEndian.AppendUint32(b, uint32(s.timeout))
		b = binary.BigEndian.AppendUint64(b, uint64(s.deadline))
		b = binary.BigEndian.AppendUint32(b, uint32(len(s.auth)))
		for _, id := range s.auth {
			b = appendString(b, id.Scheme)
			b = appendString(b, id.ID)
		}
		watched := slices.Sorted(maps.Keys(s.watches))
		b = binary.BigEndian.AppendUint32(b, uint32(len(watched)))
		for _, p := range watched {
			b = appendString(b, p)
			b = append(b, byte(s.watches[p]))
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// ErrSnapshot is wrapped by every error of Restore.
var ErrSnapshot = errors.New("tree: bad snapshot")

// Restore decodes a snapshot made by Snapshot into a tree with config
// cfg. It checks everything a tree holds to be true (valid, ordered and
// unique paths whose parents exist, no children of ephemerals, owners of
// ephemerals among the sessions, valid ACLs and identities, the limits of
// cfg) and that the input is the canonical encoding of what it decodes;
// it allocates no more than a small multiple of len(b).
//
// A snapshot of version 1 holds sessions' passwords: the tree keeps
// their hashes instead, and its Snapshot is of the current version.
func Restore(cfg Config, b []byte) (*Tree, error) {
	t, version, err := decode(cfg, b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	if !bytes.Equal(t.encode(version), b) {
		return nil, fmt.Errorf("%w: not in canonical form", ErrSnapshot)
	}
	if version == 1 {
		for _, s := range t.sessions {
			s.passwdHash = HashPassword(s.passwdHash)
		}
	}
	return t, nil
}

// Smallest encodings, which bound a count by the bytes left.
const (
	minNodeSize    = 4 + 4 + 4 + 4*8 + 3*4 + 8 + 8
	minACLSize     = 4 + 4 + 4
	minSessionSize = 8 + 4 + 4 + 8 + 4 + 4
	minIDSize      = 4 + 4
	minWatchSize   = 4 + 1
)

// decode decodes a snapshot and returns its format's version. The tree
// it returns holds a version 1 snapshot's passwords as they are, where
// hashes belong.
func decode(cfg Config, b []byte) (*Tree, byte, error) {
	r := &reader{b: b}
	if string(r.next(len(snapshotMagic))) != snapshotMagic {
		return nil, 0, errors.New("no snapshot magic")
	}
	version := r.u8()
	if r.err == nil && (version < 1 || version > snapshotVersion) {
		return nil, 0, fmt.Errorf("format version %d, not 1 to %d", version, snapshotVersion)
	}
	t, err := decodeBody(cfg, r, version)
	return t, version, err
}

func decodeBody(cfg Config, r *reader, version byte) (*Tree, error) {
	t := empty(cfg)
	t.lastZxid = r.i64()
	count := r.count(minNodeSize)
	prev := ""
	for i := 0; i < count && r.err == nil; i++ {
		p := r.str(len(r.b))
		if i == 0 && p != "/" {
			return nil, errors.New("the first node is not the root")
		}
		if i > 0 && (p <= prev || !validPath(p)) {
			return nil, fmt.Errorf("node path %q invalid or out of order", p)
		}
		prev = p
		n := &node{data: []byte(r.str(cfg.withDefaults().MaxDataSize))}
		acls := r.count(minACLSize)
		if r.err == nil && acls == 0 {
			return nil, fmt.Errorf("node %q has an empty ACL", p)
		}
		n.acl = make([]proto.ACL, 0, acls)
		for j := 0; j < acls && r.err == nil; j++ {
			a := proto.ACL{Perms: proto.Perms(r.u32())}
			a.ID.Scheme = r.str(len(r.b))
			a.ID.ID = r.str(len(r.b))
			if r.err == nil && a.ID != proto.WorldAnyone && !validID(a.ID) {
				return nil, fmt.Errorf("node %q: invalid ACL identity %s:%s", p, a.ID.Scheme, a.ID.ID)
			}
			if slices.Contains(n.acl, a) {
				return nil, fmt.Errorf("node %q: ACL entry repeated", p)
			}
			n.acl = append(n.acl, a)
		}
		st := &n.stat
		st.Czxid, st.Mzxid, st.Ctime, st.Mtime = r.i64(), r.i64(), r.i64(), r.i64()
		st.Version, st.Cversion, st.Aversion = int32(r.u32()), int32(r.u32()), int32(r.u32())
		st.EphemeralOwner, st.Pzxid = r.i64(), r.i64()
		st.DataLength = int32(len(n.data))
		if r.err != nil {
			break
		}
		if owner := st.EphemeralOwner; owner != 0 && owner != containerOwner && !sessionOwner(owner) {
			if ttl := owner &^ ttlOwner; ttl <= 0 || ttl > maxTTL {
				return nil, fmt.Errorf("node %q: invalid ephemeral owner %#x", p, owner)
			}
		}
		if p != "/" {
			parentPath, name := parentOf(p)
			parent := t.nodes[parentPath]
			if parent == nil {
				return nil, fmt.Errorf("node %q has no parent", p)
			}
			if sessionOwner(parent.stat.EphemeralOwner) {
				return nil, fmt.Errorf("node %q is the child of an ephemeral node", p)
			}
			t.put(p, n)
			t.link(parentPath, name)
		} else {
			t.put(p, n)
		}
		if t.size > t.cfg.MaxTreeBytes {
			return nil, fmt.Errorf("nodes past %d bytes", t.cfg.MaxTreeBytes)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	for _, p := range []string{"/", procPath, quotaPath, configPath} {
		if t.nodes[p] == nil {
			return nil, fmt.Errorf("node %q missing", p)
		}
	}

	count = r.count(minSessionSize)
	if count > t.cfg.MaxSessions {
		return nil, fmt.Errorf("%d sessions, more than %d", count, t.cfg.MaxSessions)
	}
	var prevID int64
	for i := 0; i < count && r.err == nil; i++ {
		s := &session{id: r.i64(), ephemerals: map[string]struct{}{}, watches: map[string]watchBits{}}
		if !ValidSessionID(s.id) || (i > 0 && s.id <= prevID) {
			return nil, fmt.Errorf("session %#x invalid or out of order", s.id)
		}
		prevID = s.id
		if version == 1 {
			s.passwdHash = []byte(r.str(maxPasswordLen))
		} else if s.passwdHash = []byte(r.str(PasswordHashSize)); r.err == nil && len(s.passwdHash) != PasswordHashSize {
			return nil, fmt.Errorf("session %#x: password hash of %d bytes", s.id, len(s.passwdHash))
		}
		s.timeout = int32(r.u32())
		s.deadline = r.i64()
		if r.err == nil && s.timeout <= 0 {
			return nil, fmt.Errorf("session %#x: timeout %d", s.id, s.timeout)
		}
		ids := r.count(minIDSize)
		for j := 0; j < ids && r.err == nil; j++ {
			id := proto.ID{Scheme: r.str(len(r.b)), ID: r.str(len(r.b))}
			if r.err != nil {
				break
			}
			switch {
			case id.Scheme == "super" && id.ID == "":
			case id.Scheme == "digest" && validID(id):
			case id.Scheme == "ip" && validID(id) && !bytes.ContainsRune([]byte(id.ID), '/'):
			default:
				return nil, fmt.Errorf("session %#x: invalid identity %s:%s", s.id, id.Scheme, id.ID)
			}
			if slices.Contains(s.auth, id) {
				return nil, fmt.Errorf("session %#x: identity repeated", s.id)
			}
			s.auth = append(s.auth, id)
			s.authBytes += len(id.Scheme) + len(id.ID) + identityOverhead
			if s.authBytes > t.cfg.MaxAuthBytes {
				return nil, fmt.Errorf("session %#x: identities past the limit", s.id)
			}
		}
		t.sessions[s.id] = s
		watches := r.count(minWatchSize)
		prev := ""
		for j := 0; j < watches && r.err == nil; j++ {
			p := r.str(len(r.b))
			bits := watchBits(r.u8())
			if r.err != nil {
				break
			}
			if (j > 0 && p <= prev) || !validPath(p) || bits == 0 || bits&^watchAll != 0 {
				return nil, fmt.Errorf("session %#x: watch on %q invalid or out of order", s.id, p)
			}
			prev = p
			for bit := watchData; bit <= watchRecursive; bit <<= 1 {
				if bits&bit != 0 {
					if err := t.addWatch(s, p, bit); err != nil {
						return nil, fmt.Errorf("session %#x: watches past the limit", s.id)
					}
				}
			}
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%d bytes after the end", len(r.b))
	}
	for _, p := range slices.Sorted(maps.Keys(t.nodes)) {
		owner := t.nodes[p].stat.EphemeralOwner
		if sessionOwner(owner) && t.sessions[owner] == nil {
			return nil, fmt.Errorf("node %q: owner %#x is no session", p, owner)
		}
		t.index(p, owner, true)
	}
	return t, nil
}

// A reader decodes a snapshot; after its first error it reads zeros.
type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated")

func (r *reader) next(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = errShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.next(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.next(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) i64() int64 {
	if v := r.next(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// str reads a string of at most limit bytes.
func (r *reader) str(limit int) string {
	n := r.u32()
	if r.err == nil && uint64(n) > uint64(limit) {
		r.err = fmt.Errorf("length %d past its limit %d", n, limit)
	}
	return string(r.next(int(n)))
}

// count reads a count of items each at least size bytes long, and fails
// if the bytes left cannot hold them.
func (r *reader) count(size int) int {
	n := r.u32()
	if r.err == nil && uint64(n)*uint64(size) > uint64(len(r.b)) {
		r.err = fmt.Errorf("count %d past the %d bytes left", n, len(r.b))
		return 0
	}
	return int(n)
}
