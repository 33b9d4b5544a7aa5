package proto

// Stat is a znode's metadata, in the order ZooKeeper encodes it.
type Stat struct {
	Czxid          int64 // the zxid of the change that created the node
	Mzxid          int64 // the zxid of the change that last modified its data
	Ctime          int64 // when it was created, in milliseconds since the epoch
	Mtime          int64 // when its data last changed, in milliseconds since the epoch
	Version        int32 // changes to its data
	Cversion       int32 // changes to its children
	Aversion       int32 // changes to its ACL
	EphemeralOwner int64 // the owning session of an ephemeral node, else 0
	DataLength     int32 // the length of its data
	NumChildren    int32 // the number of its children
	Pzxid          int64 // the zxid of the change that last changed its children
}

// ID names who an ACL entry is for: a scheme ("world", "digest", "auth",
// "ip", "super") and an identity in that scheme ("anyone" for world,
// "user:base64(sha1(user:password))" for digest).
type ID struct {
	Scheme string
	ID     string
}

// ACL is one access control entry: the permissions an identity has.
type ACL struct {
	Perms Perms
	ID    ID
}

// WorldAnyone is the identity of everyone.
var WorldAnyone = ID{Scheme: "world", ID: "anyone"}

// OpenACL lets everyone do everything (ZooDefs.Ids.OPEN_ACL_UNSAFE).
var OpenACL = []ACL{{Perms: PermAll, ID: WorldAnyone}}
