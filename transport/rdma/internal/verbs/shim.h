// C side of package verbs: trampolines for the verbs that <infiniband/verbs.h>
// defines static inline (cgo cannot call those), batch-shaped so that one
// cgo crossing posts or polls many work requests, and the few connection
// manager steps that are easier to write against the C structures.
#ifndef RUBIN_VERBS_SHIM_H
#define RUBIN_VERBS_SHIM_H

#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

// The most work requests or completions one call handles.
#define RV_BATCH 64

// Flags of rv_send.flags.
#define RV_SIGNALED 1
#define RV_INLINE 2

// The most private data a connect carries in the TCP port space.
#define RV_PRIVATE_MAX 56

// A completion, flattened.
struct rv_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t imm; // host order; valid when has_imm
	uint32_t qp_num;
	uint32_t has_imm;
	uint32_t vendor_err;
	uint32_t pad;
};

// A receive work request with one scatter entry.
struct rv_recv {
	uint64_t wr_id;
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

// A send-with-immediate work request with zero or one gather entry.
struct rv_send {
	uint64_t wr_id;
	uint64_t addr;
	uint32_t length; // 0: no gather entry
	uint32_t lkey;
	uint32_t imm; // host order
	uint32_t flags;
};

// A connection manager event, copied out and already acknowledged.
struct rv_cm_event {
	int32_t type;
	int32_t status;
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	uint8_t private_data[RV_PRIVATE_MAX];
	uint32_t private_len;
};

int rv_poll_cq(struct ibv_cq *cq, int n, struct rv_wc *out);
int rv_req_notify_cq(struct ibv_cq *cq);
int rv_get_cq_events(struct ibv_comp_channel *ch);
int rv_post_recv(struct ibv_qp *qp, const struct rv_recv *wrs, int n);
int rv_post_srq_recv(struct ibv_srq *srq, const struct rv_recv *wrs, int n);
int rv_post_send(struct ibv_qp *qp, const struct rv_send *wrs, int n);
int rv_set_nonblock(int fd);
int rv_get_cm_event(struct rdma_event_channel *ch, struct rv_cm_event *out);
int rv_resolve_addr(struct rdma_cm_id *id, const char *host, const char *port, int timeout_ms);
int rv_bind_listen(struct rdma_cm_id *id, const char *host, const char *port, int backlog);
int rv_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq,
                 uint32_t send_wr, uint32_t recv_wr, uint32_t inline_data, uint32_t *inline_out);
int rv_connect(struct rdma_cm_id *id, const void *pd, uint32_t pd_len, int accept);
int rv_qp_to_error(struct ibv_qp *qp);
int rv_addr(struct rdma_cm_id *id, int peer, uint8_t ip[16], int *family, int *port);
struct ibv_context *rv_id_verbs(struct rdma_cm_id *id);
struct ibv_qp *rv_id_qp(struct rdma_cm_id *id);
uint32_t rv_qp_num(struct ibv_qp *qp);
uint32_t rv_mr_lkey(struct ibv_mr *mr);
struct ibv_context *rv_dev_at(struct ibv_context **l, int i);
int rv_ch_fd(struct ibv_comp_channel *ch);
int rv_cm_fd(struct rdma_event_channel *ch);
int rv_async_fd(struct ibv_context *ctx);
int rv_get_async_event(struct ibv_context *ctx, int32_t *type, uint32_t *qp_num);

#endif
