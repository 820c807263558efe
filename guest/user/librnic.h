/* SPDX-License-Identifier: MIT */
/*
 * librnic: a verbs-like API over the rackemu RNIC driver (/dev/rnic0, docs/rnic-verbs.md).
 * Objects are those of the device (rackemu/rnic_regs.h); work requests are struct
 * rnic_send_wqe / rnic_recv_wqe written straight into the mapped rings, completions are
 * struct rnic_cqe read from the mapped CQ ring (kernel bypass: no system call on the data path).
 * Functions return 0 or a negative errno (the driver's dev_err line in dmesg says why a command
 * was refused); constructors return NULL and set errno.
 */
#ifndef RACKEMU_LIBRNIC_H
#define RACKEMU_LIBRNIC_H

#include <stddef.h>
#include <stdint.h>

#include "rackemu/rnic_regs.h"
#include "rackemu/rnic_uapi.h"

struct rnic_ctx {
	int fd;
	struct rnic_uinfo info;
	unsigned spin_us;     /* how long rnic_wait_cq spins before blocking: RNIC_SPIN_US at open, default 50 */
};

struct rnic_mr {
	void *addr;
	uint64_t length;
	uint32_t lkey, rkey;
};

struct rnic_cq {
	struct rnic_ctx *ctx;
	uint32_t cqn, depth_log2, comp_vector;
	struct rnic_cqe *ring;
	size_t ring_size;
	volatile uint32_t *db;
	uint32_t ci;          /* CQEs consumed */
	uint64_t events;      /* interrupt count already seen (rnic_wait_cq) */
};

struct rnic_qp {
	struct rnic_ctx *ctx;
	uint32_t qpn, pdn;
	struct rnic_cq *send_cq, *recv_cq;
	struct rnic_send_wqe *sq;
	struct rnic_recv_wqe *rq;
	size_t sq_size, rq_size;
	uint32_t sq_log2, rq_log2;
	volatile uint32_t *db;
	uint32_t sq_pi, rq_pi;       /* posted */
	uint32_t sq_ci, rq_ci;       /* fetched by the device (cached from the doorbell page) */
};

struct rnic_ctx *rnic_open(const char *path); /* NULL: RNIC_DEV_PATH */
void rnic_close(struct rnic_ctx *ctx);
int rnic_alloc_pd(struct rnic_ctx *ctx, uint32_t *pdn);
int rnic_dealloc_pd(struct rnic_ctx *ctx, uint32_t pdn);
int rnic_reg_mr(struct rnic_ctx *ctx, uint32_t pdn, void *addr, uint64_t length, uint32_t access,
		struct rnic_mr *mr);
int rnic_dereg_mr(struct rnic_ctx *ctx, struct rnic_mr *mr);
struct rnic_cq *rnic_create_cq(struct rnic_ctx *ctx, unsigned depth_log2); /* vector 0 */
/* comp_vector: the interrupt vector the CQ's events raise, 0..ctx->info.irq_vectors-1 (as verbs'
 * ibv_create_cq comp_vector); beyond: NULL with errno EINVAL. */
struct rnic_cq *rnic_create_cq_vec(struct rnic_ctx *ctx, unsigned depth_log2, unsigned comp_vector);
int rnic_destroy_cq(struct rnic_cq *cq);
struct rnic_qp *rnic_create_qp(struct rnic_ctx *ctx, uint32_t pdn, struct rnic_cq *send_cq,
			       struct rnic_cq *recv_cq, unsigned sq_log2, unsigned rq_log2);
int rnic_destroy_qp(struct rnic_qp *qp);
int rnic_modify_qp(struct rnic_qp *qp, const struct rnic_cmd_modify_qp *attr);
int rnic_query_qp(struct rnic_qp *qp, struct rnic_cmd_modify_qp *attr, uint32_t *state);
uint32_t rnic_qp_state(struct rnic_qp *qp); /* RNIC_QPS_*, from the doorbell page */
int rnic_counters(struct rnic_ctx *ctx, uint64_t c[RNIC_CNT_COUNT]);

/* What two sides exchange to connect an RC QP pair (perftest's "remote address" line). */
struct rnic_conn {
	uint32_t node;        /* node id (MAC and IPv4 follow the fabric's rule) */
	uint32_t qpn;
	uint32_t psn;         /* first PSN this side sends */
	uint32_t rkey;
	uint64_t addr;        /* the MR's IOVA the peer may address */
	uint64_t length;
};

struct rnic_conn_opts {
	uint32_t access;      /* RNIC_ACCESS_REMOTE_* / FLUSH_* the QP accepts (0: every one) */
	uint16_t mtu;         /* 0: the device's largest */
	uint8_t timeout;      /* 0: 14 (67 ms); retries: 7 */
	uint8_t retry_cnt, rnr_retry, min_rnr_timer;
	uint8_t rd_atomic;    /* 0: 16 */
};

/* RESET -> INIT -> RTR -> RTS towards `remote`, sending from local->psn. */
int rnic_qp_connect(struct rnic_qp *qp, const struct rnic_conn *local, const struct rnic_conn *remote,
		    const struct rnic_conn_opts *opts);
/* Over a connected TCP socket: send `local`, receive the peer's (network order on the wire). */
int rnic_exchange(int sock, const struct rnic_conn *local, struct rnic_conn *remote);
int rnic_tcp_listen(uint16_t port);                    /* a listening socket (any address) */
int rnic_tcp_accept(int lfd);                          /* one connection, TCP_NODELAY */
int rnic_tcp_connect(const char *host, uint16_t port); /* retries for up to 10 s */

/* Data path. post_*: -EAGAIN if the ring is full. poll: number of CQEs copied (0..n).
 * wait: poll, spin RNIC_SPIN_US microseconds (default 50) with the yield hint, then arm the CQ and
 * block in the driver until its interrupt; returns the number of CQEs (>= 1), -ETIMEDOUT, -EIO. */
int rnic_post_send(struct rnic_qp *qp, const struct rnic_send_wqe *wqe);
int rnic_post_recv(struct rnic_qp *qp, const struct rnic_recv_wqe *wqe);
int rnic_poll_cq(struct rnic_cq *cq, struct rnic_cqe *out, int n);
int rnic_wait_cq(struct rnic_cq *cq, struct rnic_cqe *out, int n, int timeout_ms);

/* The completion channel (as ibv_get_cq_event): the numbers of this context's CQs that fired
 * (armed, then a CQE) since the last call, up to n; waits up to timeout_ms (0: do not wait).
 * Returns how many (>= 1), -ETIMEDOUT, or a negative errno. ctx->fd is pollable (POLLIN). */
int rnic_get_cq_events(struct rnic_ctx *ctx, uint32_t *cqns, int n, int timeout_ms);

const char *rnic_wc_status_str(unsigned status);
const char *rnic_qp_state_str(unsigned state);

#endif
