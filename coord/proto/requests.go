package proto

// The bodies of the requests of single operations, in the order of
// zookeeper.jute. Multi's records are in multi.go.

// CreateRequest is the body of OpCreate, OpCreate2 and OpCreateContainer,
// and a create op of a multi: a node to make at Path (with a sequential
// mode, a prefix of the name, to which the server appends a number).
type CreateRequest struct {
	Path  string
	Data  []byte
	ACL   []ACL
	Flags CreateMode
}

// Encode implements Record.
func (r *CreateRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Buffer(r.Data)
	e.ACLs(r.ACL)
	e.Int32(int32(r.Flags))
}

// Decode implements Record.
func (r *CreateRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Data = d.Buffer()
	r.ACL = d.ACLs()
	r.Flags = CreateMode(d.Int32())
}

// CreateTTLRequest is the body of OpCreateTTL: a CreateRequest for a mode
// with a time to live, TTL milliseconds.
type CreateTTLRequest struct {
	Path  string
	Data  []byte
	ACL   []ACL
	Flags CreateMode
	TTL   int64
}

// Encode implements Record.
func (r *CreateTTLRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Buffer(r.Data)
	e.ACLs(r.ACL)
	e.Int32(int32(r.Flags))
	e.Int64(r.TTL)
}

// Decode implements Record.
func (r *CreateTTLRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Data = d.Buffer()
	r.ACL = d.ACLs()
	r.Flags = CreateMode(d.Int32())
	r.TTL = d.Int64()
}

// DeleteRequest is the body of OpDelete, and a delete op of a multi.
// Version -1 matches any version.
type DeleteRequest struct {
	Path    string
	Version int32
}

// Encode implements Record.
func (r *DeleteRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Int32(r.Version)
}

// Decode implements Record.
func (r *DeleteRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Version = d.Int32()
}

// ExistsRequest is the body of OpExists; Watch leaves a watch on the node,
// fired when it is created, deleted or its data changes.
type ExistsRequest struct {
	Path  string
	Watch bool
}

// Encode implements Record.
func (r *ExistsRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Bool(r.Watch)
}

// Decode implements Record.
func (r *ExistsRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Watch = d.Bool()
}

// GetDataRequest is the body of OpGetData, and a read op of a multiRead.
type GetDataRequest struct {
	Path  string
	Watch bool
}

// Encode implements Record.
func (r *GetDataRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Bool(r.Watch)
}

// Decode implements Record.
func (r *GetDataRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Watch = d.Bool()
}

// SetDataRequest is the body of OpSetData, and a setData op of a multi.
// Version -1 matches any version.
type SetDataRequest struct {
	Path    string
	Data    []byte
	Version int32
}

// Encode implements Record.
func (r *SetDataRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Buffer(r.Data)
	e.Int32(r.Version)
}

// Decode implements Record.
func (r *SetDataRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Data = d.Buffer()
	r.Version = d.Int32()
}

// GetACLRequest is the body of OpGetACL.
type GetACLRequest struct {
	Path string
}

// Encode implements Record.
func (r *GetACLRequest) Encode(e *Encoder) {
	e.String(r.Path)
}

// Decode implements Record.
func (r *GetACLRequest) Decode(d *Decoder) {
	r.Path = d.String()
}

// SetACLRequest is the body of OpSetACL; Version is the ACL version to
// match, -1 for any.
type SetACLRequest struct {
	Path    string
	ACL     []ACL
	Version int32
}

// Encode implements Record.
func (r *SetACLRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.ACLs(r.ACL)
	e.Int32(r.Version)
}

// Decode implements Record.
func (r *SetACLRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.ACL = d.ACLs()
	r.Version = d.Int32()
}

// GetChildrenRequest is the body of OpGetChildren, and a read op of a
// multiRead.
type GetChildrenRequest struct {
	Path  string
	Watch bool
}

// Encode implements Record.
func (r *GetChildrenRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Bool(r.Watch)
}

// Decode implements Record.
func (r *GetChildrenRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Watch = d.Bool()
}

// GetChildren2Request is the body of OpGetChildren2, which answers with the
// node's Stat as well.
type GetChildren2Request struct {
	Path  string
	Watch bool
}

// Encode implements Record.
func (r *GetChildren2Request) Encode(e *Encoder) {
	e.String(r.Path)
	e.Bool(r.Watch)
}

// Decode implements Record.
func (r *GetChildren2Request) Decode(d *Decoder) {
	r.Path = d.String()
	r.Watch = d.Bool()
}

// SyncRequest is the body of OpSync.
type SyncRequest struct {
	Path string
}

// Encode implements Record.
func (r *SyncRequest) Encode(e *Encoder) {
	e.String(r.Path)
}

// Decode implements Record.
func (r *SyncRequest) Decode(d *Decoder) {
	r.Path = d.String()
}

// CheckVersionRequest is the body of OpCheck, and a check op of a multi: it
// fails unless the node's version is Version (-1 matches any).
type CheckVersionRequest struct {
	Path    string
	Version int32
}

// Encode implements Record.
func (r *CheckVersionRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Int32(r.Version)
}

// Decode implements Record.
func (r *CheckVersionRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Version = d.Int32()
}

// AddWatchRequest is the body of OpAddWatch: a persistent watch, on the
// node alone or on its whole subtree.
type AddWatchRequest struct {
	Path string
	Mode AddWatchMode
}

// Encode implements Record.
func (r *AddWatchRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Int32(int32(r.Mode))
}

// Decode implements Record.
func (r *AddWatchRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Mode = AddWatchMode(d.Int32())
}

// CheckWatchesRequest is the body of OpCheckWatches: does the session hold
// watches of the type on the path?
type CheckWatchesRequest struct {
	Path string
	Type WatcherType
}

// Encode implements Record.
func (r *CheckWatchesRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Int32(int32(r.Type))
}

// Decode implements Record.
func (r *CheckWatchesRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Type = WatcherType(d.Int32())
}

// RemoveWatchesRequest is the body of OpRemoveWatches.
type RemoveWatchesRequest struct {
	Path string
	Type WatcherType
}

// Encode implements Record.
func (r *RemoveWatchesRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Int32(int32(r.Type))
}

// Decode implements Record.
func (r *RemoveWatchesRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Type = WatcherType(d.Int32())
}

// GetEphemeralsRequest is the body of OpGetEphemerals: the session's
// ephemeral nodes whose paths start with PrefixPath (all of them for "" or
// "/").
type GetEphemeralsRequest struct {
	PrefixPath string
}

// Encode implements Record.
func (r *GetEphemeralsRequest) Encode(e *Encoder) {
	e.String(r.PrefixPath)
}

// Decode implements Record.
func (r *GetEphemeralsRequest) Decode(d *Decoder) {
	r.PrefixPath = d.String()
}

// GetAllChildrenNumberRequest is the body of OpGetAllChildrenNum: how many
// nodes are below Path.
type GetAllChildrenNumberRequest struct {
	Path string
}

// Encode implements Record.
func (r *GetAllChildrenNumberRequest) Encode(e *Encoder) {
	e.String(r.Path)
}

// Decode implements Record.
func (r *GetAllChildrenNumberRequest) Decode(d *Decoder) {
	r.Path = d.String()
}
