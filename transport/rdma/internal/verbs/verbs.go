//go:build linux && cgo

package verbs

/*
#cgo LDFLAGS: -lrdmacm -libverbs
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"unsafe"
)

// Batch is the most work requests or completions one call handles.
const Batch = C.RV_BATCH

// PrivateMax is the most private data a connect or accept carries.
const PrivateMax = C.RV_PRIVATE_MAX

// errnoOf converts a shim return value (negative errno) to an error.
func errnoOf(rc C.int) error {
	if rc >= 0 {
		return nil
	}
	return syscall.Errno(-rc)
}

// call wraps the error of a library call with its name.
func call(name string, rc C.int) error {
	if err := errnoOf(rc); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// lastErr is errno after a library call that reports failure with NULL.
func lastErr(name string, err error) error {
	if err == nil {
		err = syscall.EIO
	}
	return fmt.Errorf("%s: %w", name, err)
}

// A Context is an open RDMA device.
type Context struct{ p *C.struct_ibv_context }

// Name is the device's name, such as "mlx5_0" or "rxe0".
func (c Context) Name() string {
	if c.p == nil {
		return ""
	}
	return C.GoString(C.ibv_get_device_name(c.p.device))
}

// Valid reports whether c refers to a device.
func (c Context) Valid() bool { return c.p != nil }

// Devices returns the devices the connection manager has open. They stay
// open for the life of the process; the list is the library's.
func Devices() ([]Context, error) {
	var n C.int
	list, err := C.rdma_get_devices(&n)
	if list == nil {
		return nil, lastErr("rdma_get_devices", err)
	}
	defer C.rdma_free_devices(list)
	ctxs := make([]Context, 0, int(n))
	for i := 0; i < int(n); i++ {
		ctxs = append(ctxs, Context{C.rv_dev_at(list, C.int(i))})
	}
	return ctxs, nil
}

// A PD is a protection domain.
type PD struct{ p *C.struct_ibv_pd }

// AllocPD allocates a protection domain on c.
func AllocPD(c Context) (PD, error) {
	pd, err := C.ibv_alloc_pd(c.p)
	if pd == nil {
		return PD{}, lastErr("ibv_alloc_pd", err)
	}
	return PD{pd}, nil
}

// Dealloc frees the protection domain.
func (pd PD) Dealloc() error { return call("ibv_dealloc_pd", -C.ibv_dealloc_pd(pd.p)) }

// An MR is registered memory.
type MR struct{ p *C.struct_ibv_mr }

// RegMR registers mem, which must not move or be freed while registered,
// for local access only: the device may read it for sends and write it
// for receives, and no peer can name it.
func RegMR(pd PD, mem []byte) (MR, error) {
	if len(mem) == 0 {
		return MR{}, errors.New("ibv_reg_mr: empty region")
	}
	mr, err := C.ibv_reg_mr(pd.p, unsafe.Pointer(unsafe.SliceData(mem)), C.size_t(len(mem)), C.IBV_ACCESS_LOCAL_WRITE)
	if mr == nil {
		return MR{}, lastErr("ibv_reg_mr", err)
	}
	return MR{mr}, nil
}

// LKey is the region's local key.
func (m MR) LKey() uint32 { return uint32(C.rv_mr_lkey(m.p)) }

// Dereg deregisters the region.
func (m MR) Dereg() error { return call("ibv_dereg_mr", -C.ibv_dereg_mr(m.p)) }

// A CompChannel delivers completion-queue events on a descriptor.
type CompChannel struct{ p *C.struct_ibv_comp_channel }

// CreateCompChannel creates a completion channel with a non-blocking
// descriptor.
func CreateCompChannel(c Context) (CompChannel, error) {
	ch, err := C.ibv_create_comp_channel(c.p)
	if ch == nil {
		return CompChannel{}, lastErr("ibv_create_comp_channel", err)
	}
	if err := call("fcntl", C.rv_set_nonblock(C.rv_ch_fd(ch))); err != nil {
		C.ibv_destroy_comp_channel(ch)
		return CompChannel{}, err
	}
	return CompChannel{ch}, nil
}

// FD is the channel's descriptor; it is readable when an event is pending.
func (ch CompChannel) FD() int { return int(C.rv_ch_fd(ch.p)) }

// Events takes all pending events off the channel and returns how many;
// they must be acknowledged with CQ.Ack.
func (ch CompChannel) Events() (int, error) {
	n := C.rv_get_cq_events(ch.p)
	if n < 0 {
		return 0, call("ibv_get_cq_event", n)
	}
	return int(n), nil
}

// Destroy destroys the channel; its CQs must be destroyed first.
func (ch CompChannel) Destroy() error {
	return call("ibv_destroy_comp_channel", -C.ibv_destroy_comp_channel(ch.p))
}

// A CQ is a completion queue.
type CQ struct{ p *C.struct_ibv_cq }

// CreateCQ creates a completion queue of at least entries entries whose
// events go to ch.
func CreateCQ(c Context, entries int, ch CompChannel) (CQ, error) {
	cq, err := C.ibv_create_cq(c.p, C.int(entries), nil, ch.p, 0)
	if cq == nil {
		return CQ{}, lastErr("ibv_create_cq", err)
	}
	return CQ{cq}, nil
}

// WC is a work completion. Its layout is struct rv_wc's.
type WC struct {
	WRID      uint64
	Status    uint32
	Opcode    uint32
	ByteLen   uint32
	Imm       uint32
	QPNum     uint32
	HasImm    uint32
	VendorErr uint32
	_         uint32
}

// Completion opcodes and the success status.
const (
	WCSend      = C.IBV_WC_SEND
	WCRecv      = C.IBV_WC_RECV
	WCSuccess   = C.IBV_WC_SUCCESS
	WCFlushErr  = C.IBV_WC_WR_FLUSH_ERR
	WCLocLenErr = C.IBV_WC_LOC_LEN_ERR // a message longer than its receive
)

// StatusString names a completion status, as ibv_wc_status_str does.
func StatusString(status uint32) string {
	return C.GoString(C.ibv_wc_status_str(C.enum_ibv_wc_status(status)))
}

// Poll fills wcs with up to len(wcs) (at most Batch) completions.
func (cq CQ) Poll(wcs []WC) (int, error) {
	if len(wcs) == 0 {
		return 0, nil
	}
	n := C.rv_poll_cq(cq.p, C.int(len(wcs)), (*C.struct_rv_wc)(unsafe.Pointer(&wcs[0])))
	if n < 0 {
		return 0, call("ibv_poll_cq", n)
	}
	return int(n), nil
}

// ReqNotify arms the queue: the next completion raises an event on its
// channel.
func (cq CQ) ReqNotify() error { return call("ibv_req_notify_cq", C.rv_req_notify_cq(cq.p)) }

// Ack acknowledges n events taken off the queue's channel.
func (cq CQ) Ack(n int) {
	if n > 0 {
		C.ibv_ack_cq_events(cq.p, C.uint(n))
	}
}

// Destroy destroys the queue; no QP may still use it, and every event
// must have been acknowledged.
func (cq CQ) Destroy() error { return call("ibv_destroy_cq", -C.ibv_destroy_cq(cq.p)) }

// Recv is a receive work request into one registered region. Its layout is
// struct rv_recv's.
type Recv struct {
	WRID   uint64
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Send is a send-with-immediate work request of zero or one registered
// region. Its layout is struct rv_send's.
type Send struct {
	WRID   uint64
	Addr   uint64
	Length uint32
	LKey   uint32
	Imm    uint32
	Flags  uint32
}

// Send flags.
const (
	Signaled = C.RV_SIGNALED
	Inline   = C.RV_INLINE
)

// An SRQ is a shared receive queue.
type SRQ struct{ p *C.struct_ibv_srq }

// CreateSRQ creates a shared receive queue for up to maxWR receives.
func CreateSRQ(pd PD, maxWR int) (SRQ, error) {
	var attr C.struct_ibv_srq_init_attr
	attr.attr.max_wr = C.uint32_t(maxWR)
	attr.attr.max_sge = 1
	srq, err := C.ibv_create_srq(pd.p, &attr)
	if srq == nil {
		return SRQ{}, lastErr("ibv_create_srq", err)
	}
	return SRQ{srq}, nil
}

// Valid reports whether srq refers to a queue.
func (srq SRQ) Valid() bool { return srq.p != nil }

// PostRecv posts up to Batch receives.
func (srq SRQ) PostRecv(wrs []Recv) error {
	if len(wrs) == 0 {
		return nil
	}
	return call("ibv_post_srq_recv", C.rv_post_srq_recv(srq.p, (*C.struct_rv_recv)(unsafe.Pointer(&wrs[0])), C.int(len(wrs))))
}

// Destroy destroys the queue; no QP may still use it.
func (srq SRQ) Destroy() error { return call("ibv_destroy_srq", -C.ibv_destroy_srq(srq.p)) }

// A QP is a reliable-connected queue pair.
type QP struct{ p *C.struct_ibv_qp }

// Valid reports whether qp refers to a queue pair.
func (qp QP) Valid() bool { return qp.p != nil }

// Num is the queue pair number that completions carry.
func (qp QP) Num() uint32 { return uint32(C.rv_qp_num(qp.p)) }

// PostRecv posts up to Batch receives.
func (qp QP) PostRecv(wrs []Recv) error {
	if len(wrs) == 0 {
		return nil
	}
	return call("ibv_post_recv", C.rv_post_recv(qp.p, (*C.struct_rv_recv)(unsafe.Pointer(&wrs[0])), C.int(len(wrs))))
}

// PostSend posts up to Batch sends with immediate data.
func (qp QP) PostSend(wrs []Send) error {
	if len(wrs) == 0 {
		return nil
	}
	return call("ibv_post_send", C.rv_post_send(qp.p, (*C.struct_rv_send)(unsafe.Pointer(&wrs[0])), C.int(len(wrs))))
}

// ToError moves the queue pair to the error state, which flushes every
// posted work request with WCFlushErr.
func (qp QP) ToError() error { return call("ibv_modify_qp", C.rv_qp_to_error(qp.p)) }

// An EventChannel delivers connection-manager events on a descriptor.
type EventChannel struct{ p *C.struct_rdma_event_channel }

// CreateEventChannel creates an event channel with a non-blocking
// descriptor.
func CreateEventChannel() (EventChannel, error) {
	ch, err := C.rdma_create_event_channel()
	if ch == nil {
		return EventChannel{}, lastErr("rdma_create_event_channel", err)
	}
	if err := call("fcntl", C.rv_set_nonblock(C.rv_cm_fd(ch))); err != nil {
		C.rdma_destroy_event_channel(ch)
		return EventChannel{}, err
	}
	return EventChannel{ch}, nil
}

// Valid reports whether ch refers to a channel.
func (ch EventChannel) Valid() bool { return ch.p != nil }

// FD is the channel's descriptor; it is readable when an event is pending.
func (ch EventChannel) FD() int { return int(C.rv_cm_fd(ch.p)) }

// Destroy destroys the channel; its IDs must be destroyed or migrated
// first.
func (ch EventChannel) Destroy() { C.rdma_destroy_event_channel(ch.p) }

// EventType is the type of a connection-manager event.
type EventType int32

// The connection-manager events the transport handles.
const (
	AddrResolved   EventType = C.RDMA_CM_EVENT_ADDR_RESOLVED
	AddrError      EventType = C.RDMA_CM_EVENT_ADDR_ERROR
	RouteResolved  EventType = C.RDMA_CM_EVENT_ROUTE_RESOLVED
	RouteError     EventType = C.RDMA_CM_EVENT_ROUTE_ERROR
	ConnectRequest EventType = C.RDMA_CM_EVENT_CONNECT_REQUEST
	ConnectError   EventType = C.RDMA_CM_EVENT_CONNECT_ERROR
	Unreachable    EventType = C.RDMA_CM_EVENT_UNREACHABLE
	Rejected       EventType = C.RDMA_CM_EVENT_REJECTED
	Established    EventType = C.RDMA_CM_EVENT_ESTABLISHED
	Disconnected   EventType = C.RDMA_CM_EVENT_DISCONNECTED
	DeviceRemoval  EventType = C.RDMA_CM_EVENT_DEVICE_REMOVAL
	TimewaitExit   EventType = C.RDMA_CM_EVENT_TIMEWAIT_EXIT
	AddrChange     EventType = C.RDMA_CM_EVENT_ADDR_CHANGE
)

func (t EventType) String() string {
	return C.GoString(C.rdma_event_str(C.enum_rdma_cm_event_type(t)))
}

// An Event is a connection-manager event, already acknowledged.
type Event struct {
	Type     EventType
	Status   int // negative errno, or a reject reason for Rejected
	ID       ID  // the ID the event is for; a new ID for ConnectRequest
	ListenID ID  // for ConnectRequest, the listening ID
	Private  []byte
}

// AsyncEventType is the type of a device's asynchronous event.
type AsyncEventType int32

// The asynchronous events the transport acts on.
const (
	QPFatal        AsyncEventType = C.IBV_EVENT_QP_FATAL
	QPReqErr       AsyncEventType = C.IBV_EVENT_QP_REQ_ERR
	QPAccessErr    AsyncEventType = C.IBV_EVENT_QP_ACCESS_ERR
	PathMigErr     AsyncEventType = C.IBV_EVENT_PATH_MIG_ERR
	CQErr          AsyncEventType = C.IBV_EVENT_CQ_ERR
	SRQErr         AsyncEventType = C.IBV_EVENT_SRQ_ERR
	PortErr        AsyncEventType = C.IBV_EVENT_PORT_ERR
	DeviceFatal    AsyncEventType = C.IBV_EVENT_DEVICE_FATAL
	LastWQEReached AsyncEventType = C.IBV_EVENT_QP_LAST_WQE_REACHED
)

func (t AsyncEventType) String() string {
	return C.GoString(C.ibv_event_type_str(C.enum_ibv_event_type(t)))
}

// An AsyncEvent is a device's asynchronous event, already acknowledged.
type AsyncEvent struct {
	Type  AsyncEventType
	QPNum uint32 // the queue pair's number, for events of a queue pair
}

// WatchAsyncEvents makes the device's asynchronous event descriptor
// non-blocking and returns it; it is readable when an event is pending.
func (c Context) WatchAsyncEvents() (int, error) {
	fd := C.rv_async_fd(c.p)
	if err := call("fcntl", C.rv_set_nonblock(fd)); err != nil {
		return -1, err
	}
	return int(fd), nil
}

// AsyncEvent takes the device's next asynchronous event without waiting;
// ErrNoEvent if there is none.
func (c Context) AsyncEvent() (AsyncEvent, error) {
	var typ C.int32_t
	var qpn C.uint32_t
	if rc := C.rv_get_async_event(c.p, &typ, &qpn); rc < 0 {
		if syscall.Errno(-rc) == syscall.EAGAIN {
			return AsyncEvent{}, ErrNoEvent
		}
		return AsyncEvent{}, call("ibv_get_async_event", rc)
	}
	return AsyncEvent{Type: AsyncEventType(typ), QPNum: uint32(qpn)}, nil
}

// ErrNoEvent is returned by Get when no event is pending.
var ErrNoEvent = errors.New("no event pending")

// Get takes the next event off the channel without waiting; ErrNoEvent if
// there is none. Private points into ev's own storage.
func (ch EventChannel) Get(ev *Event, storage *[PrivateMax]byte) error {
	var out C.struct_rv_cm_event
	if rc := C.rv_get_cm_event(ch.p, &out); rc < 0 {
		if syscall.Errno(-rc) == syscall.EAGAIN {
			return ErrNoEvent
		}
		return call("rdma_get_cm_event", rc)
	}
	*ev = Event{Type: EventType(out._type), Status: int(out.status), ID: ID{out.id}, ListenID: ID{out.listen_id}}
	n := copy(storage[:], unsafe.Slice((*byte)(unsafe.Pointer(&out.private_data[0])), int(out.private_len)))
	ev.Private = storage[:n]
	return nil
}

// An ID is a connection-manager identifier: a listener or one end of a
// connection, with its queue pair once created.
type ID struct{ p *C.struct_rdma_cm_id }

// CreateID creates an ID in the TCP port space whose events go to ch.
func CreateID(ch EventChannel) (ID, error) {
	var id *C.struct_rdma_cm_id
	if rc, err := C.rdma_create_id(ch.p, &id, nil, C.RDMA_PS_TCP); rc != 0 {
		return ID{}, lastErr("rdma_create_id", err)
	}
	return ID{id}, nil
}

// Valid reports whether id refers to an identifier.
func (id ID) Valid() bool { return id.p != nil }

// Context is the device the ID is bound to, once its address is resolved.
func (id ID) Context() Context { return Context{C.rv_id_verbs(id.p)} }

// QP is the ID's queue pair, once created.
func (id ID) QP() QP { return QP{C.rv_id_qp(id.p)} }

// ResolveAddr starts resolving host and port (through rdma_getaddrinfo) to
// a device and address; AddrResolved or AddrError follows.
func (id ID) ResolveAddr(host string, port int, timeoutMS int) error {
	h, p := C.CString(host), C.CString(strconv.Itoa(port))
	defer C.free(unsafe.Pointer(h))
	defer C.free(unsafe.Pointer(p))
	return call("rdma_resolve_addr", C.rv_resolve_addr(id.p, h, p, C.int(timeoutMS)))
}

// ResolveRoute starts resolving the route; RouteResolved or RouteError
// follows.
func (id ID) ResolveRoute(timeoutMS int) error {
	if rc, err := C.rdma_resolve_route(id.p, C.int(timeoutMS)); rc != 0 {
		return lastErr("rdma_resolve_route", err)
	}
	return nil
}

// Listen binds the ID to host and port (an empty host binds every
// address, port 0 picks one) and listens.
func (id ID) Listen(host string, port int, backlog int) error {
	var h *C.char
	if host != "" {
		h = C.CString(host)
		defer C.free(unsafe.Pointer(h))
	}
	p := C.CString(strconv.Itoa(port))
	defer C.free(unsafe.Pointer(p))
	return call("rdma_listen", C.rv_bind_listen(id.p, h, p, C.int(backlog)))
}

// QPConfig sizes a queue pair.
type QPConfig struct {
	PD         PD
	CQ         CQ  // for sends and receives
	SRQ        SRQ // optional
	SendWR     int
	RecvWR     int // ignored with an SRQ
	InlineData int // asked for; the device may grant less
}

// CreateQP creates the ID's reliable-connected queue pair and returns how
// many bytes a send may carry inline.
func (id ID) CreateQP(cfg QPConfig) (inline int, err error) {
	var got C.uint32_t
	rc := C.rv_create_qp(id.p, cfg.PD.p, cfg.CQ.p, cfg.SRQ.p, C.uint32_t(cfg.SendWR), C.uint32_t(cfg.RecvWR), C.uint32_t(cfg.InlineData), &got)
	if rc < 0 && cfg.InlineData > 0 && syscall.Errno(-rc) == syscall.EINVAL {
		// Some devices refuse any inline size they do not support.
		rc = C.rv_create_qp(id.p, cfg.PD.p, cfg.CQ.p, cfg.SRQ.p, C.uint32_t(cfg.SendWR), C.uint32_t(cfg.RecvWR), 0, &got)
	}
	if err := call("rdma_create_qp", rc); err != nil {
		return 0, err
	}
	return int(got), nil
}

// DestroyQP destroys the ID's queue pair.
func (id ID) DestroyQP() { C.rdma_destroy_qp(id.p) }

// Connect starts connecting with private data; Established, Rejected,
// Unreachable or ConnectError follows.
func (id ID) Connect(private []byte) error { return id.connect(private, 0, "rdma_connect") }

// Accept accepts a connect request with private data; Established follows.
func (id ID) Accept(private []byte) error { return id.connect(private, 1, "rdma_accept") }

func (id ID) connect(private []byte, accept C.int, name string) error {
	var p unsafe.Pointer
	if len(private) > 0 {
		p = C.CBytes(private)
		defer C.free(p)
	}
	return call(name, C.rv_connect(id.p, p, C.uint32_t(len(private)), accept))
}

// Reject rejects a connect request.
func (id ID) Reject() error {
	if rc, err := C.rdma_reject(id.p, nil, 0); rc != 0 {
		return lastErr("rdma_reject", err)
	}
	return nil
}

// Disconnect disconnects, moving the queue pair to the error state.
func (id ID) Disconnect() error {
	if rc, err := C.rdma_disconnect(id.p); rc != 0 {
		return lastErr("rdma_disconnect", err)
	}
	return nil
}

// Migrate moves the ID's events to ch.
func (id ID) Migrate(ch EventChannel) error {
	if rc, err := C.rdma_migrate_id(id.p, ch.p); rc != 0 {
		return lastErr("rdma_migrate_id", err)
	}
	return nil
}

// Destroy destroys the ID, whose queue pair must be destroyed first.
func (id ID) Destroy() error {
	if rc, err := C.rdma_destroy_id(id.p); rc != 0 {
		return lastErr("rdma_destroy_id", err)
	}
	return nil
}

// LocalAddr and PeerAddr are the ID's addresses, nil before they are known.
func (id ID) LocalAddr() *net.TCPAddr { return id.addr(0) }

// PeerAddr is the address of the ID's peer.
func (id ID) PeerAddr() *net.TCPAddr { return id.addr(1) }

func (id ID) addr(peer C.int) *net.TCPAddr {
	var ip [16]C.uint8_t
	var family, port C.int
	if C.rv_addr(id.p, peer, &ip[0], &family, &port) < 0 {
		return nil
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&ip[0])), 16)
	if family == C.AF_INET {
		return &net.TCPAddr{IP: net.IPv4(b[0], b[1], b[2], b[3]), Port: int(port)}
	}
	return &net.TCPAddr{IP: append(net.IP(nil), b...), Port: int(port)}
}
