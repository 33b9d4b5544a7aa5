// hostilepeers: twelve peers that complete rubin's RDMA hello (version 2)
// and then break the protocol, for TestHostilePeersBesideAClient.
//
//   hostilepeers [-s seconds] [-r] [-b] [-k kinds] host port
//
// Each peer connects over rdma_cm with a valid hello, then:
//   3 flood: send 32 messages past the one credit they were granted;
//   2 big:   send one 1 MiB message, beyond the largest we receive;
//   3 norecv: grant credits in their hello, post no receives, and send a
//            message within their credit, so that its echo meets
//            receiver-not-ready;
//   2 reserved: send a message whose immediate data sets a reserved bit;
//   2 hold:  connect, post receives, and do nothing.
// With -r, a peer that is cut off connects again, until the end; without
// it, each peer attacks once. With -b, peers busy-poll their completion
// queues and event channels, as many tools do; without it they sleep in
// poll(2) until something happens, as peers on other machines cost ours
// nothing while they wait. With -k, only the kinds named by their
// initials (say -k fn) attack; the others hold. After -s seconds (default
// 10), or on SIGTERM, all disconnect. It prints "ready" once all twelve
// have connected, and at the end one line of counts (with -r, the connect
// requests refused are counted there, not reported one by one).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum kind { FLOOD, BIG, NORECV, RESERVED, HOLD };
static const char *names[] = {"flood", "big", "norecv", "reserved", "hold"};
static const enum kind plan[12] = {FLOOD, FLOOD, FLOOD, BIG, BIG, NORECV, NORECV, NORECV, RESERVED, RESERVED, HOLD, HOLD};

#define SLOT 4096
#define NRECV 8
#define BIGLEN (1 << 20)

static const char *host, *port;
static const char *only; // -k: the kinds to run, by initial (f, b, n, r, h)
static int repeat, busy;
static double deadline;
static volatile sig_atomic_t stopping; // SIGTERM: disconnect and report
static atomic_int attempts, established, cut, sends_failed, refused;

static void stop(int sig) {
	(void)sig;
	stopping = 1;
}

// over reports whether the peers' time is up.
static int over(void);

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int over(void) { return stopping || now() >= deadline; }

// wait_event waits for the next connection-manager event, up to ms
// milliseconds (busy: polling without sleeping). It returns its type, or
// -1 if none came.
static int wait_event(struct rdma_event_channel *ec, int ms, struct rdma_cm_event **out) {
	double until = now() + ms / 1000.0;
	for (;;) {
		struct pollfd p = {.fd = ec->fd, .events = POLLIN};
		int left = (int)((until - now()) * 1000);
		if (left < 0)
			left = 0;
		if (poll(&p, 1, busy ? 0 : (left > 100 ? 100 : left)) == 1) {
			if (rdma_get_cm_event(ec, out) == 0)
				return (*out)->event;
		}
		if (now() >= until || stopping)
			return -1;
	}
}

// hello writes rubin's hello: magic "RBN" version 2, largest message,
// data credits, control credits, zero, most data credits.
static void hello(unsigned char b[14], uint32_t maxmsg, uint16_t credits) {
	memcpy(b, "RBN\x02", 4);
	uint32_t m = htonl(maxmsg);
	memcpy(b + 4, &m, 4);
	b[8] = credits >> 8, b[9] = credits & 0xff;
	b[10] = 1, b[11] = 0;
	b[12] = credits >> 8, b[13] = credits & 0xff;
}

static int post_send(struct ibv_qp *qp, struct ibv_mr *mr, void *addr, uint32_t len, uint32_t imm, uint64_t id) {
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm)};
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, &wr, &bad);
}

// attack runs one connection of kind k. It returns 0 when the server cut
// it off, 1 when the time ran out, -1 when it could not connect.
static int attack(enum kind k) {
	int rc = -1;
	struct rdma_cm_event *ev;
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_comp_channel *cc = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr = NULL;
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *ai = NULL;
	size_t len = k == BIG ? BIGLEN + SLOT : (NRECV + 40) * SLOT;
	char *buf = calloc(1, len);
	atomic_fetch_add(&attempts, 1);
	if (!ec || !buf || rdma_getaddrinfo(host, port, &hints, &ai) || rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		goto out;
	if (rdma_resolve_addr(id, NULL, ai->ai_dst_addr, 2000) || wait_event(ec, 5000, &ev) != RDMA_CM_EVENT_ADDR_RESOLVED)
		goto out;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 2000) || wait_event(ec, 5000, &ev) != RDMA_CM_EVENT_ROUTE_RESOLVED)
		goto out;
	rdma_ack_cm_event(ev);
	if (!(pd = ibv_alloc_pd(id->verbs)) || !(cc = ibv_create_comp_channel(id->verbs)) ||
	    !(cq = ibv_create_cq(id->verbs, 256, NULL, cc, 0)) || ibv_req_notify_cq(cq, 0) ||
	    !(mr = ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE)))
		goto out;
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 64, .max_recv_wr = NRECV, .max_send_sge = 1, .max_recv_sge = 1}};
	if (rdma_create_qp(id, pd, &qa))
		goto out;
	if (k != NORECV) {
		for (int i = 0; i < NRECV; i++) {
			struct ibv_sge sge = {.addr = (uintptr_t)(buf + i * SLOT), .length = SLOT, .lkey = mr->lkey};
			struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
			if (ibv_post_recv(id->qp, &wr, &bad))
				goto out;
		}
	}
	unsigned char h[14];
	hello(h, SLOT, NRECV - 1);
	struct rdma_conn_param cp = {.private_data = h, .private_data_len = sizeof h, .retry_count = 7, .rnr_retry_count = 7};
	if (rdma_connect(id, &cp))
		goto out;
	int t = wait_event(ec, 10000, &ev);
	if (t != RDMA_CM_EVENT_ESTABLISHED) {
		if (t >= 0)
			rdma_ack_cm_event(ev);
		goto out;
	}
	rdma_ack_cm_event(ev);
	atomic_fetch_add(&established, 1);
	char *payload = buf + NRECV * SLOT;
	switch (k) {
	case FLOOD:
		for (int i = 0; i < 32; i++)
			if (post_send(id->qp, mr, payload, 64, 0, i))
				atomic_fetch_add(&sends_failed, 1);
		break;
	case BIG:
		if (post_send(id->qp, mr, buf, BIGLEN, 0, 0))
			atomic_fetch_add(&sends_failed, 1);
		break;
	case NORECV:
		if (post_send(id->qp, mr, payload, 256, 0, 0))
			atomic_fetch_add(&sends_failed, 1);
		break;
	case RESERVED:
		if (post_send(id->qp, mr, payload, 64, 1u << 20, 0))
			atomic_fetch_add(&sends_failed, 1);
		break;
	case HOLD:
		break;
	}
	static atomic_int counted;
	if (atomic_fetch_add(&counted, 1) == 11)
		printf("ready\n"), fflush(stdout);
	// Hold until the server cuts us off or the time is up, taking the
	// completions as they come.
	rc = 1;
	while (!over()) {
		struct pollfd p[2] = {{.fd = ec->fd, .events = POLLIN}, {.fd = cc->fd, .events = POLLIN}};
		int n = poll(p, 2, busy ? 0 : 100);
		struct ibv_wc wc[16];
		if (busy || (n > 0 && p[1].revents)) {
			if (!busy) {
				struct ibv_cq *c;
				void *ctx;
				if (ibv_get_cq_event(cc, &c, &ctx) == 0) {
					ibv_ack_cq_events(c, 1);
					ibv_req_notify_cq(c, 0);
				}
			}
			while (ibv_poll_cq(cq, 16, wc) > 0)
				;
		}
		if (n > 0 && p[0].revents && rdma_get_cm_event(ec, &ev) == 0) {
			int t = ev->event;
			rdma_ack_cm_event(ev);
			if (t == RDMA_CM_EVENT_DISCONNECTED) {
				rc = 0;
				atomic_fetch_add(&cut, 1);
				break;
			}
		}
	}
	rdma_disconnect(id);
out:
	if (id && id->qp)
		rdma_destroy_qp(id);
	if (mr)
		ibv_dereg_mr(mr);
	if (cq)
		ibv_destroy_cq(cq);
	if (cc)
		ibv_destroy_comp_channel(cc);
	if (pd)
		ibv_dealloc_pd(pd);
	if (id)
		rdma_destroy_id(id);
	if (ai)
		rdma_freeaddrinfo(ai);
	if (ec)
		rdma_destroy_event_channel(ec);
	free(buf);
	return rc;
}

static void *peer(void *arg) {
	enum kind k = plan[(intptr_t)arg];
	if (only && !strchr(only, names[k][0]))
		k = HOLD;
	while (!over()) {
		int rc = attack(k);
		if (rc == 1)
			break;
		if (rc < 0) {
			// Reconnecting, a refusal is what a server should answer,
			// and the peer asks again at once.
			if (repeat) {
				atomic_fetch_add(&refused, 1);
				continue;
			}
			fprintf(stderr, "hostilepeers: %s peer could not connect\n", names[k]);
			usleep(100000);
		} else if (!repeat) {
			while (!over())
				usleep(100000);
		}
	}
	return NULL;
}

int main(int argc, char **argv) {
	double secs = 10;
	int c;
	while ((c = getopt(argc, argv, "s:rbk:")) != -1) {
		switch (c) {
		case 's': secs = atof(optarg); break;
		case 'r': repeat = 1; break;
		case 'b': busy = 1; break;
		case 'k': only = optarg; break;
		default: goto usage;
		}
	}
	if (argc - optind != 2)
		goto usage;
	host = argv[optind], port = argv[optind + 1];
	deadline = now() + secs;
	signal(SIGTERM, stop);
	pthread_t th[12];
	for (intptr_t i = 0; i < 12; i++)
		pthread_create(&th[i], NULL, peer, (void *)i);
	for (int i = 0; i < 12; i++)
		pthread_join(th[i], NULL);
	printf("connects %d established %d cut %d send-errors %d refused %d\n", attempts, established, cut, sends_failed, refused);
	return 0;
usage:
	fprintf(stderr, "usage: hostilepeers [-s seconds] [-r] [-b] [-k kinds] host port\n");
	return 2;
}
