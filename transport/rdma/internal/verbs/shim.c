#include "shim.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>

static int neg_errno(int rc) {
	if (rc > 0)
		return -rc; // the verbs return positive error numbers
	return errno ? -errno : -EIO;
}

int rv_poll_cq(struct ibv_cq *cq, int n, struct rv_wc *out) {
	struct ibv_wc wc[RV_BATCH];
	if (n > RV_BATCH)
		n = RV_BATCH;
	int got = ibv_poll_cq(cq, n, wc);
	if (got < 0)
		return -EIO;
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
		out[i].imm = out[i].has_imm ? ntohl(wc[i].imm_data) : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return got;
}

int rv_req_notify_cq(struct ibv_cq *cq) {
	int rc = ibv_req_notify_cq(cq, 0);
	return rc ? neg_errno(rc) : 0;
}

// rv_get_cq_events takes every pending event off a non-blocking completion
// channel and returns how many, or -errno; the caller acknowledges them in
// a batch. The count is the result rather than an out parameter so that
// the Go caller passes no pointer, which would cost it a heap allocation.
int rv_get_cq_events(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	int n = 0;
	while (ibv_get_cq_event(ch, &cq, &ctx) == 0)
		n++;
	return (errno == EAGAIN || errno == EWOULDBLOCK || n > 0) ? n : -errno;
}

// recv_list links n receive work requests, with their scatter entries in
// sge, into a list for one post.
static struct ibv_recv_wr *recv_list(const struct rv_recv *wrs, int n, struct ibv_sge *sge,
                                     struct ibv_recv_wr *wr) {
	for (int i = 0; i < n; i++) {
		sge[i] = (struct ibv_sge){.addr = wrs[i].addr, .length = wrs[i].length, .lkey = wrs[i].lkey};
		wr[i] = (struct ibv_recv_wr){.wr_id = wrs[i].wr_id, .sg_list = &sge[i], .num_sge = 1,
		                             .next = i + 1 < n ? &wr[i + 1] : NULL};
	}
	return wr;
}

int rv_post_recv(struct ibv_qp *qp, const struct rv_recv *wrs, int n) {
	struct ibv_sge sge[RV_BATCH];
	struct ibv_recv_wr wr[RV_BATCH], *bad = NULL;
	if (n <= 0 || n > RV_BATCH)
		return n ? -EINVAL : 0;
	int rc = ibv_post_recv(qp, recv_list(wrs, n, sge, wr), &bad);
	return rc ? neg_errno(rc) : 0;
}

int rv_post_srq_recv(struct ibv_srq *srq, const struct rv_recv *wrs, int n) {
	struct ibv_sge sge[RV_BATCH];
	struct ibv_recv_wr wr[RV_BATCH], *bad = NULL;
	if (n <= 0 || n > RV_BATCH)
		return n ? -EINVAL : 0;
	int rc = ibv_post_srq_recv(srq, recv_list(wrs, n, sge, wr), &bad);
	return rc ? neg_errno(rc) : 0;
}

int rv_post_send(struct ibv_qp *qp, const struct rv_send *wrs, int n) {
	struct ibv_sge sge[RV_BATCH];
	struct ibv_send_wr wr[RV_BATCH], *bad = NULL;
	if (n <= 0 || n > RV_BATCH)
		return n ? -EINVAL : 0;
	for (int i = 0; i < n; i++) {
		sge[i] = (struct ibv_sge){.addr = wrs[i].addr, .length = wrs[i].length, .lkey = wrs[i].lkey};
		memset(&wr[i], 0, sizeof wr[i]);
		wr[i].wr_id = wrs[i].wr_id;
		wr[i].sg_list = wrs[i].length ? &sge[i] : NULL;
		wr[i].num_sge = wrs[i].length ? 1 : 0;
		wr[i].opcode = IBV_WR_SEND_WITH_IMM;
		wr[i].imm_data = htonl(wrs[i].imm);
		wr[i].send_flags = ((wrs[i].flags & RV_SIGNALED) ? IBV_SEND_SIGNALED : 0) |
		                   ((wrs[i].flags & RV_INLINE) ? IBV_SEND_INLINE : 0);
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	int rc = ibv_post_send(qp, wr, &bad);
	return rc ? neg_errno(rc) : 0;
}

int rv_set_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

// rv_get_cm_event takes one event off a non-blocking event channel, copies
// what the caller needs and acknowledges it. It returns -EAGAIN if there is
// none.
int rv_get_cm_event(struct rdma_event_channel *ch, struct rv_cm_event *out) {
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		return -errno;
	memset(out, 0, sizeof *out);
	out->type = ev->event;
	out->status = ev->status;
	out->id = ev->id;
	out->listen_id = ev->listen_id;
	const void *pd = ev->param.conn.private_data;
	uint32_t len = ev->param.conn.private_data_len;
	if (ev->id && ev->id->ps == RDMA_PS_UDP)
		len = 0;
	if (pd && len) {
		if (len > RV_PRIVATE_MAX)
			len = RV_PRIVATE_MAX;
		memcpy(out->private_data, pd, len);
		out->private_len = len;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

int rv_resolve_addr(struct rdma_cm_id *id, const char *host, const char *port, int timeout_ms) {
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	int rc = rdma_getaddrinfo(host, port, &hints, &res);
	if (rc)
		return errno ? -errno : -EADDRNOTAVAIL;
	rc = rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, timeout_ms);
	int err = errno;
	rdma_freeaddrinfo(res);
	return rc ? -err : 0;
}

int rv_bind_listen(struct rdma_cm_id *id, const char *host, const char *port, int backlog) {
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	int rc = rdma_getaddrinfo(host, port, &hints, &res);
	if (rc)
		return errno ? -errno : -EADDRNOTAVAIL;
	rc = rdma_bind_addr(id, res->ai_src_addr);
	int err = errno;
	rdma_freeaddrinfo(res);
	if (rc)
		return -err;
	if (rdma_listen(id, backlog))
		return -errno;
	return 0;
}

int rv_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq,
                 uint32_t send_wr, uint32_t recv_wr, uint32_t inline_data, uint32_t *inline_out) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.srq = srq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = send_wr;
	a.cap.max_recv_wr = srq ? 0 : recv_wr;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = srq ? 0 : 1;
	a.cap.max_inline_data = inline_data;
	a.sq_sig_all = 0;
	if (rdma_create_qp(id, pd, &a))
		return -errno;
	*inline_out = a.cap.max_inline_data;
	return 0;
}

// rv_connect connects (accept == 0) or accepts with the given private data.
// Reliable-connected, no RDMA reads or atomics in either direction. Credits
// mean a correct peer always has a receive posted for us, so receiver-not-
// ready retries are bounded (6, the most short of infinite): a peer that
// grants credits and posts no receives breaks its connection instead of
// stalling our sends forever.
int rv_connect(struct rdma_cm_id *id, const void *pd, uint32_t pd_len, int accept) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = pd;
	p.private_data_len = pd_len;
	p.responder_resources = 0;
	p.initiator_depth = 0;
	p.retry_count = 7;
	p.rnr_retry_count = 6;
	int rc = accept ? rdma_accept(id, &p) : rdma_connect(id, &p);
	return rc ? -errno : 0;
}

int rv_qp_to_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	return rc ? neg_errno(rc) : 0;
}

int rv_addr(struct rdma_cm_id *id, int peer, uint8_t ip[16], int *family, int *port) {
	struct sockaddr *sa = peer ? rdma_get_peer_addr(id) : rdma_get_local_addr(id);
	if (!sa)
		return -ENOTCONN;
	*family = sa->sa_family;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)sa;
		memcpy(ip, &in->sin_addr, 4);
		*port = ntohs(in->sin_port);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)sa;
		memcpy(ip, &in6->sin6_addr, 16);
		*port = ntohs(in6->sin6_port);
		return 0;
	}
	return -EAFNOSUPPORT;
}

struct ibv_context *rv_id_verbs(struct rdma_cm_id *id) { return id->verbs; }
struct ibv_qp *rv_id_qp(struct rdma_cm_id *id) { return id->qp; }
uint32_t rv_qp_num(struct ibv_qp *qp) { return qp->qp_num; }
uint32_t rv_mr_lkey(struct ibv_mr *mr) { return mr->lkey; }
struct ibv_context *rv_dev_at(struct ibv_context **l, int i) { return l[i]; }
int rv_ch_fd(struct ibv_comp_channel *ch) { return ch->fd; }
int rv_cm_fd(struct rdma_event_channel *ch) { return ch->fd; }

int rv_async_fd(struct ibv_context *ctx) { return ctx->async_fd; }

// rv_get_async_event takes one asynchronous event of a device whose async_fd
// is non-blocking, reports its type and, for an event of a queue pair, the
// queue pair's number (else 0), and acknowledges it. It returns -EAGAIN if
// there is none.
int rv_get_async_event(struct ibv_context *ctx, int32_t *type, uint32_t *qp_num) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev))
		return -errno;
	*type = ev.event_type;
	*qp_num = 0;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		*qp_num = ev.element.qp->qp_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}
