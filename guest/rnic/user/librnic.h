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
#include "rackemu/roce.h" /* ROCE_XOP_*, ROCE_XATOMIC_SIZE* */

struct rnic_qp;
struct rnic_cq;

struct rnic_ctx {
	int fd;
	struct rnic_uinfo info;
	unsigned spin_us;     /* how long rnic_wait_cq spins before blocking: RNIC_SPIN_US at open, default 50 */
	/* this context's objects by number, for async events (rnic_get_async_event) */
	struct rnic_qp *qp_by_index[RNIC_MAX_QP];
	struct rnic_cq *cq_by_cqn[RNIC_MAX_CQ];
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
	/* tracked posting (rnic_post, rnic_reap): the QPs whose send CQ this is, the tracked WRs
	 * not yet completed on it, and CQEs rnic_reap found that were not its own (rnic_poll_cq
	 * returns them first) */
	struct rnic_qp **qps;
	unsigned nqps;
	uint32_t outstanding;
	struct rnic_cqe *stash;
	unsigned nstash, stash_cap, stash_head;
	uint32_t events_unacked; /* async events returned and not yet acknowledged */
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
	/* tracked posting (rnic_post / rnic_quiet / rnic_fence) */
	uint64_t posted, done;       /* tracked WRs posted and completed (done <= posted) */
	uint64_t errors;             /* tracked WRs completed with an error since the last rnic_quiet */
	struct rnic_cqe first_error; /* the first of those (status, vendor_err, wr_id) */
	int fence_next;              /* rnic_fence: the next rnic_post carries RNIC_WQE_F_FENCE */
	uint32_t events_unacked;     /* async events returned and not yet acknowledged */
};

struct rnic_ctx *rnic_open(const char *path); /* NULL: RNIC_DEV_PATH */
void rnic_close(struct rnic_ctx *ctx);
int rnic_alloc_pd(struct rnic_ctx *ctx, uint32_t *pdn);
int rnic_dealloc_pd(struct rnic_ctx *ctx, uint32_t pdn);
/* [addr, addr + length) of this process: anonymous or file memory (pinned), or a mapping of the
 * node's persistent memory (mmap of /dev/rkpmem0): a persistent MR, whose WRITEs go through the
 * responder's NIC buffer and whose FLUSH persistence makes them durable (docs/rnic-verbs.md
 * "Persistent memory regions"); any other PFN mapping is refused (-EINVAL). */
int rnic_reg_mr(struct rnic_ctx *ctx, uint32_t pdn, void *addr, uint64_t length, uint32_t access,
		struct rnic_mr *mr);
int rnic_dereg_mr(struct rnic_ctx *ctx, struct rnic_mr *mr);
/* Device memory (docs/rnic-verbs.md "Device memory"; ibv_alloc_dm, ibv_free_dm, ibv_reg_dm_mr,
 * ibv_memcpy_to_dm / ibv_memcpy_from_dm): ctx->info.dm_size bytes on the NIC. rnic_reg_dm_mr's
 * MR has addr = (void *)iova (not a local pointer: its bytes are reached by rnic_dm_copy). */
int rnic_alloc_dm(struct rnic_ctx *ctx, uint64_t length, uint32_t *dm);
int rnic_free_dm(struct rnic_ctx *ctx, uint32_t dm);
int rnic_reg_dm_mr(struct rnic_ctx *ctx, uint32_t pdn, uint32_t dm, uint64_t offset, uint64_t length,
		   uint64_t iova, uint32_t access, struct rnic_mr *mr);
int rnic_memcpy_to_dm(struct rnic_ctx *ctx, uint32_t dm, uint64_t offset, const void *src, uint64_t length);
int rnic_memcpy_from_dm(struct rnic_ctx *ctx, void *dst, uint32_t dm, uint64_t offset, uint64_t length);
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

/* A first PSN for a connection: 24 random bits (getrandom), so that another user on the fabric
 * cannot guess where a connection's sequence starts (docs/trust-model.md). */
uint32_t rnic_random_psn(void);
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

/* ---- Asynchronous events (as ibv_get_async_event / ibv_ack_async_event; docs/rnic-verbs.md
 * "Async events") ----
 * Events that belong to no work request: a QP of this context entered the error state
 * (RNIC_EV_QP_FATAL: detail is the RNIC_WC_* cause, e.g. RETRY_EXC; RNIC_EV_QP_REQ_ERR /
 * RNIC_EV_QP_ACCESS_ERR: as responder it refused an invalid request / a remote access, detail
 * the NAK syndrome), its first packet arrived in RTR (RNIC_EV_COMM_EST), a CQ of this context
 * overflowed (RNIC_EV_CQ_ERR), the port went down or up (RNIC_EV_PORT_ERR / _PORT_ACTIVE, to
 * every context). Only the process that owns a QP or CQ sees its events. */
struct rnic_async_event {
	uint32_t type;          /* RNIC_EV_* */
	uint32_t element;       /* QPN, CQN or RNIC_PORT_NUM */
	uint32_t detail;        /* see above */
	uint32_t lost;          /* events this context lost before this one (its queue or the device's was full) */
	uint64_t modeled_at_ns; /* the device's timing-model clock at the event */
	struct rnic_qp *qp;     /* QP events: the QP (NULL if the library does not know it) */
	struct rnic_cq *cq;     /* RNIC_EV_CQ_ERR: the CQ (NULL likewise) */
};
/* The next event: waits up to timeout_ms (0: do not wait; -1: no limit). Returns 0, -EAGAIN
 * (timeout 0, none waiting), -ETIMEDOUT, -EINTR. ctx->fd polls POLLPRI while events wait. Every
 * event returned must be acknowledged: rnic_destroy_qp / rnic_destroy_cq refuse (-EBUSY) an
 * object with events not acknowledged (ibv_destroy_* would block instead). */
int rnic_get_async_event(struct rnic_ctx *ctx, struct rnic_async_event *ev, int timeout_ms);
void rnic_ack_async_event(struct rnic_async_event *ev);
const char *rnic_event_type_str(unsigned type);

/* ---- Many outstanding work requests, quiet and fence (docs/rnic-verbs.md "Outstanding work") ----
 * rnic_post queues a send WQE as a tracked work request: always signaled (its CQE is reaped by
 * the library), fenced if rnic_fence was called since the last post. It does not wait for the
 * WR: when the send queue or the send CQ has no room it reaps completions (waiting up to
 * timeout_ms; -1: no limit) until there is, so any number of WRs may be in flight up to the SQ
 * and CQ depths. Results of fetching operations (READ, atomics) are in their buffers once the
 * WR completed (after rnic_quiet). Completions of non-tracked WRs and receive completions the
 * reaper meets on the CQ are kept and returned by the next rnic_poll_cq/rnic_wait_cq, in order.
 * Returns 0, -ETIMEDOUT, -EINVAL (bad flags), or the error of rnic_wait_cq. */
int rnic_post(struct rnic_qp *qp, const struct rnic_send_wqe *wqe, int timeout_ms);
/* Reap the tracked completions on `cq` (every QP of it): counts them on their QP (done, errors,
 * first_error). timeout_ms 0: only what is there; > 0 or -1: wait for at least one CQE.
 * Returns the CQEs consumed (>= 0) or a negative errno (-ETIMEDOUT). */
int rnic_reap(struct rnic_cq *cq, int timeout_ms);
/* Wait until every tracked WR posted on qp completed (as shmem_quiet). Returns 0 if all
 * succeeded, -EIO if any completed with an error since the last rnic_quiet (qp->first_error
 * holds the first: status RNIC_WC_*, vendor_err, wr_id; qp->errors how many), -ETIMEDOUT. The
 * error record is cleared on return. */
int rnic_quiet(struct rnic_qp *qp, int timeout_ms);
/* Order: the next rnic_post on qp waits in the device until every earlier READ and atomic of qp
 * completed (RNIC_WQE_F_FENCE, as IBV_SEND_FENCE). WRITEs and SENDs of an RC QP are delivered
 * in order anyway; rnic_quiet is the stronger "everything completed". */
void rnic_fence(struct rnic_qp *qp);

/* ---- Extended atomics (the atomic unit; docs/atomic-unit.md) ----
 * op: ROCE_XOP_ADD, _SWAP, _XOR, _AND, _OR, _MCSWAP (if ((old ^ compare) & mask) == 0 then
 * new = (old & ~mask) | (operand & mask)); size: 4 or 8 bytes, remote_addr aligned to it, the
 * peer's MR registered with RNIC_ACCESS_REMOTE_ATOMIC. result != NULL: the value before the
 * operation is written there (size bytes, inside a local MR of result_lkey with LOCAL_WRITE;
 * RNIC_WR_XATOMIC); NULL: nothing is returned (RNIC_WR_XATOMIC_POST, acknowledged like a WRITE).
 * The device needs RNIC_CAP_XATOMIC (ctx->info.caps). */
struct rnic_xatomic {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint32_t rkey;
	uint8_t op;           /* ROCE_XOP_* */
	uint8_t size;         /* ROCE_XATOMIC_SIZE32 or ROCE_XATOMIC_SIZE64 */
	uint64_t operand;     /* ADD: addend; SWAP: new value; XOR/AND/OR: the bits; MCSWAP: new bits */
	uint64_t compare;     /* MCSWAP */
	uint64_t mask;        /* MCSWAP (all ones: compare-and-swap) */
	void *result;         /* fetch: the old value (zero-extended in the CQE's sense: size bytes written) */
	uint32_t result_lkey;
};
/* Fill a send WQE (signaled, no fence) for x. */
void rnic_wqe_xatomic(struct rnic_send_wqe *w, const struct rnic_xatomic *x);
/* rnic_wqe_xatomic + rnic_post (tracked: complete it with rnic_quiet). */
int rnic_post_xatomic(struct rnic_qp *qp, const struct rnic_xatomic *x, int timeout_ms);

const char *rnic_wc_status_str(unsigned status);
const char *rnic_qp_state_str(unsigned state);

#endif
