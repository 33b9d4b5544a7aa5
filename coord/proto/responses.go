package proto

// The bodies of the answers to single operations. Multi's records are in
// multi.go.

// CreateResponse answers OpCreate with the created node's path, which
// differs from the requested one for sequential nodes.
type CreateResponse struct {
	Path string
}

// Encode implements Record.
func (r *CreateResponse) Encode(e *Encoder) {
	e.String(r.Path)
}

// Decode implements Record.
func (r *CreateResponse) Decode(d *Decoder) {
	r.Path = d.String()
}

// Create2Response answers OpCreate2, OpCreateContainer and OpCreateTTL with
// the path and Stat of the created node.
type Create2Response struct {
	Path string
	Stat Stat
}

// Encode implements Record.
func (r *Create2Response) Encode(e *Encoder) {
	e.String(r.Path)
	e.Stat(&r.Stat)
}

// Decode implements Record.
func (r *Create2Response) Decode(d *Decoder) {
	r.Path = d.String()
	r.Stat = d.Stat()
}

// ExistsResponse answers OpExists for a node that exists (CodeNoNode
// otherwise).
type ExistsResponse struct {
	Stat Stat
}

// Encode implements Record.
func (r *ExistsResponse) Encode(e *Encoder) {
	e.Stat(&r.Stat)
}

// Decode implements Record.
func (r *ExistsResponse) Decode(d *Decoder) {
	r.Stat = d.Stat()
}

// GetDataResponse answers OpGetData, and is a getData result in a
// multiRead.
type GetDataResponse struct {
	Data []byte
	Stat Stat
}

// Encode implements Record.
func (r *GetDataResponse) Encode(e *Encoder) {
	e.Buffer(r.Data)
	e.Stat(&r.Stat)
}

// Decode implements Record.
func (r *GetDataResponse) Decode(d *Decoder) {
	r.Data = d.Buffer()
	r.Stat = d.Stat()
}

// SetDataResponse answers OpSetData and OpCheck, and is a setData result in
// a multi.
type SetDataResponse struct {
	Stat Stat
}

// Encode implements Record.
func (r *SetDataResponse) Encode(e *Encoder) {
	e.Stat(&r.Stat)
}

// Decode implements Record.
func (r *SetDataResponse) Decode(d *Decoder) {
	r.Stat = d.Stat()
}

// GetACLResponse answers OpGetACL.
type GetACLResponse struct {
	ACL  []ACL
	Stat Stat
}

// Encode implements Record.
func (r *GetACLResponse) Encode(e *Encoder) {
	e.ACLs(r.ACL)
	e.Stat(&r.Stat)
}

// Decode implements Record.
func (r *GetACLResponse) Decode(d *Decoder) {
	r.ACL = d.ACLs()
	r.Stat = d.Stat()
}

// SetACLResponse answers OpSetACL.
type SetACLResponse struct {
	Stat Stat
}

// Encode implements Record.
func (r *SetACLResponse) Encode(e *Encoder) {
	e.Stat(&r.Stat)
}

// Decode implements Record.
func (r *SetACLResponse) Decode(d *Decoder) {
	r.Stat = d.Stat()
}

// GetChildrenResponse answers OpGetChildren with the children's names, and
// is a getChildren result in a multiRead.
type GetChildrenResponse struct {
	Children []string
}

// Encode implements Record.
func (r *GetChildrenResponse) Encode(e *Encoder) {
	e.Strings(r.Children)
}

// Decode implements Record.
func (r *GetChildrenResponse) Decode(d *Decoder) {
	r.Children = d.Strings()
}

// GetChildren2Response answers OpGetChildren2.
type GetChildren2Response struct {
	Children []string
	Stat     Stat
}

// Encode implements Record.
func (r *GetChildren2Response) Encode(e *Encoder) {
	e.Strings(r.Children)
	e.Stat(&r.Stat)
}

// Decode implements Record.
func (r *GetChildren2Response) Decode(d *Decoder) {
	r.Children = d.Strings()
	r.Stat = d.Stat()
}

// SyncResponse answers OpSync with the request's path.
type SyncResponse struct {
	Path string
}

// Encode implements Record.
func (r *SyncResponse) Encode(e *Encoder) {
	e.String(r.Path)
}

// Decode implements Record.
func (r *SyncResponse) Decode(d *Decoder) {
	r.Path = d.String()
}

// GetEphemeralsResponse answers OpGetEphemerals.
type GetEphemeralsResponse struct {
	Ephemerals []string
}

// Encode implements Record.
func (r *GetEphemeralsResponse) Encode(e *Encoder) {
	e.Strings(r.Ephemerals)
}

// Decode implements Record.
func (r *GetEphemeralsResponse) Decode(d *Decoder) {
	r.Ephemerals = d.Strings()
}

// GetAllChildrenNumberResponse answers OpGetAllChildrenNum.
type GetAllChildrenNumberResponse struct {
	TotalNumber int32
}

// Encode implements Record.
func (r *GetAllChildrenNumberResponse) Encode(e *Encoder) {
	e.Int32(r.TotalNumber)
}

// Decode implements Record.
func (r *GetAllChildrenNumberResponse) Decode(d *Decoder) {
	r.TotalNumber = d.Int32()
}

// ErrorResponse answers OpAddWatch (with CodeOK), and is the result of a
// failed op in a multi or multiRead.
type ErrorResponse struct {
	Err Code
}

// Encode implements Record.
func (r *ErrorResponse) Encode(e *Encoder) {
	e.Int32(int32(r.Err))
}

// Decode implements Record.
func (r *ErrorResponse) Decode(d *Decoder) {
	r.Err = Code(d.Int32())
}

// ClientInfo is one identity of a session, as WhoAmIResponse lists them.
type ClientInfo struct {
	AuthScheme string // "ip", "digest", ...
	User       string // the identity in that scheme
}

// WhoAmIResponse answers OpWhoAmI with the identities the session has
// authenticated as.
type WhoAmIResponse struct {
	ClientInfo []ClientInfo
}

// Encode implements Record. A nil list is written as an empty vector.
func (r *WhoAmIResponse) Encode(e *Encoder) {
	e.Int32(int32(len(r.ClientInfo)))
	for _, c := range r.ClientInfo {
		e.String(c.AuthScheme)
		e.String(c.User)
	}
}

// Decode implements Record; a null or empty vector reads as nil.
func (r *WhoAmIResponse) Decode(d *Decoder) {
	r.ClientInfo = nil
	n := d.length("vector<ClientInfo>", minClientInfo)
	if n <= 0 {
		return
	}
	r.ClientInfo = make([]ClientInfo, 0, n)
	for range n {
		scheme := d.String()
		r.ClientInfo = append(r.ClientInfo, ClientInfo{AuthScheme: scheme, User: d.String()})
	}
	if d.Err() != nil {
		r.ClientInfo = nil
	}
}
