package tree

import (
	"crypto/sha1"
	"encoding/base64"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/rubin-go/rubin/coord/proto"
)

// Digest returns the digest identity of "user:password" as ZooKeeper's
// DigestAuthenticationProvider makes it: the user, a colon, and the
// base64 of the SHA-1 of the whole "user:password".
func Digest(userPassword string) string {
	user, _, _ := strings.Cut(userPassword, ":")
	sum := sha1.Sum([]byte(userPassword))
	return user + ":" + base64.StdEncoding.EncodeToString(sum[:])
}

// isDigest reports whether id is what Digest returns: a user without a
// colon, a colon, and the base64 of a SHA-1 sum.
func isDigest(id string) bool {
	_, sum, _ := strings.Cut(id, ":")
	b, err := base64.StdEncoding.DecodeString(sum)
	return strings.Contains(id, ":") && err == nil && len(b) == sha1.Size && base64.StdEncoding.EncodeToString(b) == sum
}

const identityOverhead = 32

// AddAuth adds an identity to the session, as ZooKeeper's auth packet
// does. Scheme "digest" takes the identity Digest made of the client's
// "user:password" (the caller makes it, so that the password never
// reaches the tree) and adds it (and "super" if it is
// Config.SuperDigest); anything else than such a digest fails. Scheme
// "ip" takes an address the caller vouches for as the client's
// (ZooKeeper takes it from the connection). Any other scheme fails with
// CodeAuthFailed, after which ZooKeeper closes the connection; so does
// going past Config.MaxAuthBytes. Adding an identity the session has is
// no change.
func (t *Tree) AddAuth(session int64, scheme string, auth []byte) error {
	s, err := t.reader(session)
	if err != nil {
		return err
	}
	var ids []proto.ID
	switch scheme {
	case "digest":
		d := string(auth)
		if !isDigest(d) {
			return proto.CodeAuthFailed
		}
		if t.cfg.SuperDigest != "" && d == t.cfg.SuperDigest {
			ids = append(ids, proto.ID{Scheme: "super"})
		}
		ids = append(ids, proto.ID{Scheme: "digest", ID: d})
	case "ip":
		a, err := netip.ParseAddr(string(auth))
		if err != nil {
			return proto.CodeAuthFailed
		}
		ids = append(ids, proto.ID{Scheme: "ip", ID: a.String()})
	default:
		return proto.CodeAuthFailed
	}
	var add []proto.ID
	size := s.authBytes
	for _, id := range ids {
		if !slices.Contains(s.auth, id) {
			add = append(add, id)
			size += len(id.Scheme) + len(id.ID) + identityOverhead
		}
	}
	if size > t.cfg.MaxAuthBytes {
		return proto.CodeAuthFailed
	}
	s.auth = append(s.auth, add...)
	s.authBytes = size
	return nil
}

// validID reports whether an ACL entry's identity is one ZooKeeper's
// providers accept: digest "user:hash" (exactly one colon), ip an address
// with an optional prefix length.
func validID(id proto.ID) bool {
	switch id.Scheme {
	case "digest":
		// Java's split(":") drops trailing empty strings: "a:" is one part.
		parts := strings.Split(id.ID, ":")
		for len(parts) > 0 && parts[len(parts)-1] == "" {
			parts = parts[:len(parts)-1]
		}
		return len(parts) == 2
	case "ip":
		addr, bits, hasBits := strings.Cut(id.ID, "/")
		a, err := netip.ParseAddr(addr)
		if err != nil || a.Zone() != "" {
			return false
		}
		if hasBits {
			b, err := strconv.Atoi(bits)
			if err != nil || b < 0 || b > a.BitLen() {
				return false
			}
		}
		return true
	}
	return false
}

// fixupACL checks an ACL a client gives and expands it, as ZooKeeper's
// PrepRequestProcessor.fixupACL: duplicates go, world must be "anyone",
// "auth" becomes an entry for each of the session's digest identities
// (and is invalid if it has none), and the rest must be valid ids of a
// known scheme. An empty ACL is invalid.
func (t *Tree) fixupACL(s *session, acl []proto.ACL) ([]proto.ACL, error) {
	var uniq []proto.ACL
	for _, a := range acl {
		if !slices.Contains(uniq, a) {
			uniq = append(uniq, a)
		}
	}
	if len(uniq) == 0 {
		return nil, proto.CodeInvalidACL
	}
	out := make([]proto.ACL, 0, len(uniq))
	for _, a := range uniq {
		switch {
		case a.ID == proto.WorldAnyone:
			out = append(out, a)
		case a.ID.Scheme == "auth":
			found := false
			for _, id := range s.auth {
				if id.Scheme == "digest" {
					found = true
					out = append(out, proto.ACL{Perms: a.Perms, ID: id})
				}
			}
			if !found {
				return nil, proto.CodeInvalidACL
			}
		case validID(a.ID):
			out = append(out, a)
		default:
			return nil, proto.CodeInvalidACL
		}
	}
	return out, nil
}

// checkACL returns CodeNoAuth unless the session may do perm under acl,
// as ZooKeeperServer.checkACL decides: a super identity may do anything,
// else some entry granting one of perm's bits must name world:anyone or
// an identity of the session (digest by equality, ip by address prefix).
func (t *Tree) checkACL(s *session, acl []proto.ACL, perm proto.Perms) error {
	if allowed(s.auth, acl, perm) {
		return nil
	}
	return proto.CodeNoAuth
}

func allowed(ids []proto.ID, acl []proto.ACL, perm proto.Perms) bool {
	if len(acl) == 0 {
		return true
	}
	for _, id := range ids {
		if id.Scheme == "super" {
			return true
		}
	}
	for _, a := range acl {
		if a.Perms&perm == 0 {
			continue
		}
		if a.ID == proto.WorldAnyone {
			return true
		}
		for _, id := range ids {
			if id.Scheme != a.ID.Scheme {
				continue
			}
			switch id.Scheme {
			case "digest":
				if id.ID == a.ID.ID {
					return true
				}
			case "ip":
				if ipMatches(a.ID.ID, id.ID) {
					return true
				}
			}
		}
	}
	return false
}

// ipMatches reports whether the address addr is in the ACL's ip entry
// "address[/bits]".
func ipMatches(entry, addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	base, bits, hasBits := strings.Cut(entry, "/")
	b, err := netip.ParseAddr(base)
	if err != nil || b.BitLen() != a.BitLen() {
		return false
	}
	n := b.BitLen()
	if hasBits {
		if n, err = strconv.Atoi(bits); err != nil {
			return false
		}
	}
	pa, err1 := a.Prefix(n)
	pb, err2 := b.Prefix(n)
	return err1 == nil && err2 == nil && pa == pb
}
