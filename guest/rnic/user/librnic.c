// SPDX-License-Identifier: MIT
/*
 * librnic: the verbs-like API over /dev/rnic0 (librnic.h, docs/rnic-verbs.md).
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "librnic.h"
#include "spin.h"

/* A store to a doorbell must follow the stores of the WQE it announces (as the kernel's wmb()). */
static inline void db_barrier(void)
{
#if defined(__aarch64__)
	__asm__ volatile("dsb st" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

static int ioc(struct rnic_ctx *ctx, unsigned long cmd, void *arg)
{
	return ioctl(ctx->fd, cmd, arg) ? -errno : 0;
}

struct rnic_ctx *rnic_open(const char *path)
{
	struct rnic_ctx *ctx = calloc(1, sizeof(*ctx));
	int e;

	if (!ctx)
		return NULL;
	ctx->fd = open(path ? path : RNIC_DEV_PATH, O_RDWR | O_CLOEXEC);
	if (ctx->fd < 0 || ioctl(ctx->fd, RNIC_IOC_QUERY, &ctx->info)) {
		e = errno;
		if (ctx->fd >= 0)
			close(ctx->fd);
		free(ctx);
		errno = e;
		return NULL;
	}
	ctx->spin_us = spin_budget_us("RNIC_SPIN_US", 50);
	return ctx;
}

void rnic_close(struct rnic_ctx *ctx)
{
	if (!ctx)
		return;
	close(ctx->fd); /* the driver destroys what is left */
	free(ctx);
}

int rnic_alloc_pd(struct rnic_ctx *ctx, uint32_t *pdn)
{
	return ioc(ctx, RNIC_IOC_ALLOC_PD, pdn);
}

int rnic_dealloc_pd(struct rnic_ctx *ctx, uint32_t pdn)
{
	return ioc(ctx, RNIC_IOC_DEALLOC_PD, &pdn);
}

int rnic_reg_mr(struct rnic_ctx *ctx, uint32_t pdn, void *addr, uint64_t length, uint32_t access,
		struct rnic_mr *mr)
{
	struct rnic_ureg_mr u = { .addr = (uintptr_t)addr, .length = length, .pdn = pdn, .access = access };
	int ret = ioc(ctx, RNIC_IOC_REG_MR, &u);

	if (ret)
		return ret;
	mr->addr = addr;
	mr->length = length;
	mr->lkey = u.lkey;
	mr->rkey = u.rkey;
	return 0;
}

int rnic_dereg_mr(struct rnic_ctx *ctx, struct rnic_mr *mr)
{
	return ioc(ctx, RNIC_IOC_DEREG_MR, &mr->lkey);
}

int rnic_alloc_dm(struct rnic_ctx *ctx, uint64_t length, uint32_t *dm)
{
	struct rnic_ualloc_dm u = { .length = length };
	int ret = ioc(ctx, RNIC_IOC_ALLOC_DM, &u);

	if (!ret)
		*dm = u.dm;
	return ret;
}

int rnic_free_dm(struct rnic_ctx *ctx, uint32_t dm)
{
	return ioc(ctx, RNIC_IOC_FREE_DM, &dm);
}

int rnic_reg_dm_mr(struct rnic_ctx *ctx, uint32_t pdn, uint32_t dm, uint64_t offset, uint64_t length,
		   uint64_t iova, uint32_t access, struct rnic_mr *mr)
{
	struct rnic_ureg_dm_mr u = { .addr = iova, .offset = offset, .length = length, .pdn = pdn, .dm = dm,
				     .access = access };
	int ret = ioc(ctx, RNIC_IOC_REG_DM_MR, &u);

	if (ret)
		return ret;
	mr->addr = (void *)(uintptr_t)iova;
	mr->length = length;
	mr->lkey = u.lkey;
	mr->rkey = u.rkey;
	return 0;
}

int rnic_memcpy_to_dm(struct rnic_ctx *ctx, uint32_t dm, uint64_t offset, const void *src, uint64_t length)
{
	struct rnic_udm_copy u = { .buf = (uintptr_t)src, .offset = offset, .length = length, .dm = dm,
				   .dir = RNIC_DM_COPY_TO_DM };

	return ioc(ctx, RNIC_IOC_DM_COPY, &u);
}

int rnic_memcpy_from_dm(struct rnic_ctx *ctx, void *dst, uint32_t dm, uint64_t offset, uint64_t length)
{
	struct rnic_udm_copy u = { .buf = (uintptr_t)dst, .offset = offset, .length = length, .dm = dm,
				   .dir = RNIC_DM_COPY_FROM_DM };

	return ioc(ctx, RNIC_IOC_DM_COPY, &u);
}

static void *map(struct rnic_ctx *ctx, size_t len, uint64_t off)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ctx->fd, (off_t)off);

	return p == MAP_FAILED ? NULL : p;
}

static size_t page_round(size_t n)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return (n + pg - 1) & ~(pg - 1);
}

struct rnic_cq *rnic_create_cq(struct rnic_ctx *ctx, unsigned depth_log2)
{
	return rnic_create_cq_vec(ctx, depth_log2, 0);
}

struct rnic_cq *rnic_create_cq_vec(struct rnic_ctx *ctx, unsigned depth_log2, unsigned comp_vector)
{
	struct rnic_ucreate_cq u = { .depth_log2 = depth_log2, .comp_vector = comp_vector };
	struct rnic_cq *cq;
	int ret = ioc(ctx, RNIC_IOC_CREATE_CQ, &u), e;

	if (ret) {
		errno = -ret;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		goto fail;
	cq->ctx = ctx;
	cq->cqn = u.cqn;
	cq->depth_log2 = depth_log2;
	cq->comp_vector = comp_vector;
	cq->ring_size = page_round(sizeof(struct rnic_cqe) << depth_log2);
	cq->ring = map(ctx, cq->ring_size, u.ring_off);
	cq->db = map(ctx, RNIC_PAGE_SIZE, u.db_off);
	if (cq->ring && cq->db) {
		if (cq->cqn < RNIC_MAX_CQ)
			ctx->cq_by_cqn[cq->cqn] = cq;
		return cq;
	}
fail:
	e = errno;
	if (cq && cq->ring)
		munmap(cq->ring, cq->ring_size);
	if (cq && cq->db)
		munmap((void *)cq->db, RNIC_PAGE_SIZE);
	ioc(ctx, RNIC_IOC_DESTROY_CQ, &u.cqn);
	free(cq);
	errno = e;
	return NULL;
}

int rnic_destroy_cq(struct rnic_cq *cq)
{
	int ret;

	if (cq->events_unacked)
		return -EBUSY; /* rnic_ack_async_event first */
	ret = ioc(cq->ctx, RNIC_IOC_DESTROY_CQ, &cq->cqn);
	if (ret)
		return ret; /* e.g. -EBUSY: a QP still uses it */
	if (cq->cqn < RNIC_MAX_CQ && cq->ctx->cq_by_cqn[cq->cqn] == cq)
		cq->ctx->cq_by_cqn[cq->cqn] = NULL;
	munmap(cq->ring, cq->ring_size);
	munmap((void *)cq->db, RNIC_PAGE_SIZE);
	free(cq->qps);
	free(cq->stash);
	free(cq);
	return 0;
}

struct rnic_qp *rnic_create_qp(struct rnic_ctx *ctx, uint32_t pdn, struct rnic_cq *send_cq,
			       struct rnic_cq *recv_cq, unsigned sq_log2, unsigned rq_log2)
{
	struct rnic_ucreate_qp u = { .pdn = pdn, .send_cqn = send_cq->cqn, .recv_cqn = recv_cq->cqn,
				     .sq_depth_log2 = sq_log2, .rq_depth_log2 = rq_log2 };
	struct rnic_qp *qp;
	int ret = ioc(ctx, RNIC_IOC_CREATE_QP, &u), e;

	if (ret) {
		errno = -ret;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		goto fail;
	qp->ctx = ctx;
	qp->qpn = u.qpn;
	qp->pdn = pdn;
	qp->send_cq = send_cq;
	qp->recv_cq = recv_cq;
	qp->sq_log2 = sq_log2;
	qp->rq_log2 = rq_log2;
	qp->sq_size = page_round(sizeof(struct rnic_send_wqe) << sq_log2);
	qp->rq_size = page_round(sizeof(struct rnic_recv_wqe) << rq_log2);
	qp->sq = map(ctx, qp->sq_size, u.sq_off);
	qp->rq = map(ctx, qp->rq_size, u.rq_off);
	qp->db = map(ctx, RNIC_PAGE_SIZE, u.db_off);
	if (qp->sq && qp->rq && qp->db) {
		struct rnic_qp **l = realloc(send_cq->qps, (send_cq->nqps + 1) * sizeof(*l));

		if (!l)
			goto fail;
		send_cq->qps = l;
		send_cq->qps[send_cq->nqps++] = qp;
		if (RNIC_QP_INDEX(qp->qpn) < RNIC_MAX_QP)
			ctx->qp_by_index[RNIC_QP_INDEX(qp->qpn)] = qp;
		return qp;
	}
fail:
	e = errno;
	if (qp && qp->sq)
		munmap(qp->sq, qp->sq_size);
	if (qp && qp->rq)
		munmap(qp->rq, qp->rq_size);
	if (qp && qp->db)
		munmap((void *)qp->db, RNIC_PAGE_SIZE);
	ioc(ctx, RNIC_IOC_DESTROY_QP, &u.qpn);
	free(qp);
	errno = e;
	return NULL;
}

int rnic_destroy_qp(struct rnic_qp *qp)
{
	int ret;

	if (qp->events_unacked)
		return -EBUSY; /* rnic_ack_async_event first */
	ret = ioc(qp->ctx, RNIC_IOC_DESTROY_QP, &qp->qpn);
	if (ret)
		return ret;
	if (RNIC_QP_INDEX(qp->qpn) < RNIC_MAX_QP && qp->ctx->qp_by_index[RNIC_QP_INDEX(qp->qpn)] == qp)
		qp->ctx->qp_by_index[RNIC_QP_INDEX(qp->qpn)] = NULL;
	for (unsigned i = 0; i < qp->send_cq->nqps; i++) {
		if (qp->send_cq->qps[i] != qp)
			continue;
		qp->send_cq->qps[i] = qp->send_cq->qps[--qp->send_cq->nqps];
		/* its tracked WRs will not complete any more */
		qp->send_cq->outstanding -= (uint32_t)(qp->posted - qp->done);
		break;
	}
	munmap(qp->sq, qp->sq_size);
	munmap(qp->rq, qp->rq_size);
	munmap((void *)qp->db, RNIC_PAGE_SIZE);
	free(qp);
	return 0;
}

int rnic_modify_qp(struct rnic_qp *qp, const struct rnic_cmd_modify_qp *attr)
{
	struct rnic_umodify_qp u = { .qpn = qp->qpn, .attr = *attr };
	int ret = ioc(qp->ctx, RNIC_IOC_MODIFY_QP, &u);

	if (!ret && (attr->attr_mask & RNIC_QP_ATTR_STATE) && attr->state == RNIC_QPS_RESET)
		qp->sq_pi = qp->rq_pi = qp->sq_ci = qp->rq_ci = 0; /* rings start over at index 0 */
	return ret;
}

int rnic_query_qp(struct rnic_qp *qp, struct rnic_cmd_modify_qp *attr, uint32_t *state)
{
	struct rnic_umodify_qp u = { .qpn = qp->qpn };
	int ret = ioc(qp->ctx, RNIC_IOC_QUERY_QP, &u);

	if (ret)
		return ret;
	if (attr)
		*attr = u.attr;
	if (state)
		*state = u.state;
	return 0;
}

uint32_t rnic_qp_state(struct rnic_qp *qp)
{
	return qp->db[RNIC_QP_DB_STATE / 4];
}

int rnic_counters(struct rnic_ctx *ctx, uint64_t c[RNIC_CNT_COUNT])
{
	return ioc(ctx, RNIC_IOC_COUNTERS, c);
}

int rnic_qp_connect(struct rnic_qp *qp, const struct rnic_conn *local, const struct rnic_conn *remote,
		    const struct rnic_conn_opts *opts)
{
	static const struct rnic_conn_opts defaults;
	const struct rnic_conn_opts *o = opts ? opts : &defaults;
	struct rnic_cmd_modify_qp a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_ACCESS_FLAGS | RNIC_QP_ATTR_PKEY_INDEX;
	a.state = RNIC_QPS_INIT;
	a.pkey = 0xffff;
	a.access = o->access ? o->access
			     : RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ | RNIC_ACCESS_REMOTE_ATOMIC |
				       RNIC_ACCESS_FLUSH_GLOBAL | RNIC_ACCESS_FLUSH_PERSIST;
	ret = rnic_modify_qp(qp, &a);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_PATH_MTU | RNIC_QP_ATTR_DEST_QPN | RNIC_QP_ATTR_RQ_PSN |
		      RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC | RNIC_QP_ATTR_MIN_RNR_TIMER | RNIC_QP_ATTR_AV;
	a.state = RNIC_QPS_RTR;
	a.path_mtu = o->mtu ? o->mtu : (uint16_t)qp->ctx->info.max_mtu;
	a.dest_qpn = remote->qpn;
	a.rq_psn = remote->psn;
	a.max_dest_rd_atomic = o->rd_atomic ? o->rd_atomic : 16;
	a.min_rnr_timer = o->min_rnr_timer ? o->min_rnr_timer : 1;
	a.dest_node = remote->node;
	ret = rnic_modify_qp(qp, &a);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.attr_mask = RNIC_QP_ATTR_STATE | RNIC_QP_ATTR_SQ_PSN | RNIC_QP_ATTR_TIMEOUT | RNIC_QP_ATTR_RETRY_CNT |
		      RNIC_QP_ATTR_RNR_RETRY | RNIC_QP_ATTR_MAX_QP_RD_ATOMIC;
	a.state = RNIC_QPS_RTS;
	a.sq_psn = local->psn;
	a.timeout = o->timeout ? o->timeout : 14;
	a.retry_cnt = o->retry_cnt ? o->retry_cnt : 7;
	a.rnr_retry = o->rnr_retry ? o->rnr_retry : 7;
	a.max_rd_atomic = o->rd_atomic ? o->rd_atomic : 16;
	return rnic_modify_qp(qp, &a);
}

/* ---- connection set-up over TCP ---- */

struct wire_conn {
	uint32_t node, qpn, psn, rkey;
	uint64_t addr, length;
};

static int full_io(int fd, void *buf, size_t n, int send_it)
{
	uint8_t *p = buf;

	while (n) {
		ssize_t r = send_it ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r ? -errno : -ECONNRESET;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

uint32_t rnic_random_psn(void)
{
	uint32_t v = 0;
	struct timespec ts;

	if (getrandom(&v, sizeof(v), 0) == sizeof(v))
		return v & 0xffffff;
	/* no entropy source (it does not happen on Linux >= 3.17): the clock, as before */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint32_t)(ts.tv_nsec ^ ts.tv_sec * 2654435761u ^ (uint32_t)getpid() << 8) & 0xffffff;
}

int rnic_exchange(int sock, const struct rnic_conn *local, struct rnic_conn *remote)
{
	struct wire_conn w = { htonl(local->node), htonl(local->qpn), htonl(local->psn), htonl(local->rkey),
			       htobe64(local->addr), htobe64(local->length) };
	int ret = full_io(sock, &w, sizeof(w), 1);

	if (!ret)
		ret = full_io(sock, &w, sizeof(w), 0);
	if (ret)
		return ret;
	remote->node = ntohl(w.node);
	remote->qpn = ntohl(w.qpn);
	remote->psn = ntohl(w.psn);
	remote->rkey = ntohl(w.rkey);
	remote->addr = be64toh(w.addr);
	remote->length = be64toh(w.length);
	return 0;
}

int rnic_tcp_listen(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_ANY) };
	int one = 1, s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), e;

	if (s < 0)
		return -errno;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 16)) {
		e = errno;
		close(s);
		return -e;
	}
	return s;
}

int rnic_tcp_accept(int lfd)
{
	int one = 1, c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (c < 0)
		return -errno;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return c;
}

/* An IPv4 address, or a name from /etc/hosts (static binaries have no NSS: no getaddrinfo). */
static int resolve(const char *host, struct in_addr *a)
{
	char line[256], *tok, *save;
	FILE *f;

	if (inet_pton(AF_INET, host, a) == 1)
		return 0;
	f = fopen("/etc/hosts", "r");
	if (!f)
		return -EHOSTUNREACH;
	while (fgets(line, sizeof(line), f)) {
		char *c = strchr(line, '#');
		struct in_addr x;

		if (c)
			*c = 0;
		tok = strtok_r(line, " \t\n", &save);
		if (!tok || inet_pton(AF_INET, tok, &x) != 1)
			continue;
		while ((tok = strtok_r(NULL, " \t\n", &save)))
			if (!strcmp(tok, host)) {
				*a = x;
				fclose(f);
				return 0;
			}
	}
	fclose(f);
	return -EHOSTUNREACH;
}

int rnic_tcp_connect(const char *host, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	int one = 1, tries, s = -1, e = 0, ret = resolve(host, &a.sin_addr);

	if (ret)
		return ret;
	for (tries = 0; tries < 100; tries++) { /* the server may not be listening yet */
		struct timespec ts = { 0, 100000000 };

		s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0)
			return -errno;
		if (!connect(s, (struct sockaddr *)&a, sizeof(a)))
			break;
		e = errno;
		close(s);
		s = -1;
		nanosleep(&ts, NULL);
	}
	if (s < 0)
		return -e;
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return s;
}

/* ---- data path ---- */

int rnic_post_send(struct rnic_qp *qp, const struct rnic_send_wqe *wqe)
{
	uint32_t depth = 1u << qp->sq_log2;

	if (qp->sq_pi - qp->sq_ci >= depth) {
		qp->sq_ci = qp->db[RNIC_QP_DB_SQ_CI / 4];
		if (qp->sq_pi - qp->sq_ci >= depth)
			return -EAGAIN;
	}
	qp->sq[qp->sq_pi & (depth - 1)] = *wqe;
	qp->sq_pi++;
	db_barrier();
	qp->db[RNIC_QP_DB_SQ_PI / 4] = qp->sq_pi;
	return 0;
}

int rnic_post_recv(struct rnic_qp *qp, const struct rnic_recv_wqe *wqe)
{
	uint32_t depth = 1u << qp->rq_log2;

	if (qp->rq_pi - qp->rq_ci >= depth) {
		qp->rq_ci = qp->db[RNIC_QP_DB_RQ_CI / 4];
		if (qp->rq_pi - qp->rq_ci >= depth)
			return -EAGAIN;
	}
	qp->rq[qp->rq_pi & (depth - 1)] = *wqe;
	qp->rq_pi++;
	db_barrier();
	qp->db[RNIC_QP_DB_RQ_PI / 4] = qp->rq_pi;
	return 0;
}

/* CQEs from the ring, without the ones rnic_reap kept aside */
static int poll_ring(struct rnic_cq *cq, struct rnic_cqe *out, int n)
{
	uint32_t mask = (1u << cq->depth_log2) - 1;
	int got = 0;

	while (got < n) {
		struct rnic_cqe *e = &cq->ring[cq->ci & mask];
		uint8_t phase = ((cq->ci >> cq->depth_log2) & 1) ^ 1;

		if ((__atomic_load_n(&e->owner, __ATOMIC_ACQUIRE) & 1) != phase)
			break;
		out[got++] = *e;
		cq->ci++;
	}
	if (got) {
		__atomic_thread_fence(__ATOMIC_SEQ_CST); /* the entries are read before the slots are handed back */
		cq->db[RNIC_CQ_DB_CI / 4] = cq->ci;
	}
	return got;
}

int rnic_poll_cq(struct rnic_cq *cq, struct rnic_cqe *out, int n)
{
	int got = 0;

	while (got < n && cq->nstash) {
		out[got++] = cq->stash[cq->stash_head];
		cq->stash_head = (cq->stash_head + 1) % cq->stash_cap;
		cq->nstash--;
	}
	return got + (got < n ? poll_ring(cq, out + got, n - got) : 0);
}

int rnic_wait_cq(struct rnic_cq *cq, struct rnic_cqe *out, int n, int timeout_ms)
{
	uint64_t start, now, deadline;
	struct timespec ts;
	int got;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	start = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	deadline = start + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		got = rnic_poll_cq(cq, out, n);
		if (got)
			return got;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
		if (now - start < (uint64_t)cq->ctx->spin_us * 1000ull) {
			spin_relax();
			continue;
		}
		if (now >= deadline)
			return -ETIMEDOUT;
		/* block: arm, look again (a CQE may have landed before the arm), sleep on the interrupt */
		{
			struct rnic_uwait_cq w = { .cqn = cq->cqn, .events = cq->events };
			uint64_t left_ms = (deadline - now + 999999) / 1000000;
			int ret;

			cq->db[RNIC_CQ_DB_ARM / 4] = RNIC_CQ_ARM_NEXT;
			got = rnic_poll_cq(cq, out, n);
			if (got)
				return got;
			w.timeout_ms = (uint32_t)(left_ms > 60000 ? 60000 : left_ms);
			ret = ioc(cq->ctx, RNIC_IOC_WAIT_CQ, &w);
			if (ret == 0)
				cq->events = w.events;
			else if (ret != -ETIMEDOUT && ret != -EINTR)
				return ret;
		}
	}
}

int rnic_get_cq_events(struct rnic_ctx *ctx, uint32_t *cqns, int n, int timeout_ms)
{
	struct pollfd pf = { ctx->fd, POLLIN, 0 };
	ssize_t r;
	int p;

	if (n <= 0)
		return -EINVAL;
	do
		p = poll(&pf, 1, timeout_ms);
	while (p < 0 && errno == EINTR);
	if (p < 0)
		return -errno;
	if (p == 0)
		return -ETIMEDOUT;
	r = read(ctx->fd, cqns, (size_t)n * sizeof(*cqns));
	return r < 0 ? -errno : (int)(r / (ssize_t)sizeof(*cqns));
}

/* ---- tracked posting: many outstanding, quiet, fence ---- */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

/* ms left of a deadline (-1: none) */
static int left_ms(uint64_t deadline)
{
	uint64_t now;

	if (deadline == UINT64_MAX)
		return -1;
	now = now_ms();
	return now >= deadline ? 0 : (int)(deadline - now > 60000 ? 60000 : deadline - now);
}

static int stash(struct rnic_cq *cq, const struct rnic_cqe *e)
{
	if (cq->nstash == cq->stash_cap) {
		unsigned cap = cq->stash_cap ? 2 * cq->stash_cap : 16;
		struct rnic_cqe *n = malloc(cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		for (unsigned i = 0; i < cq->nstash; i++)
			n[i] = cq->stash[(cq->stash_head + i) % cq->stash_cap];
		free(cq->stash);
		cq->stash = n;
		cq->stash_cap = cap;
		cq->stash_head = 0;
	}
	cq->stash[(cq->stash_head + cq->nstash) % cq->stash_cap] = *e;
	cq->nstash++;
	return 0;
}

int rnic_reap(struct rnic_cq *cq, int timeout_ms)
{
	struct rnic_cqe c[32];
	int got, total = 0, ret;

	got = poll_ring(cq, c, 32);
	if (got == 0 && timeout_ms != 0) {
		/* block on the ring only: stashed CQEs are not ours to wait for */
		unsigned saved = cq->nstash;

		cq->nstash = 0;
		got = rnic_wait_cq(cq, c, 32, timeout_ms < 0 ? 60000 : timeout_ms);
		cq->nstash = saved;
		if (got < 0)
			return got;
	}
	while (got > 0) {
		for (int i = 0; i < got; i++) {
			struct rnic_qp *qp = NULL;

			if (!(c[i].flags & RNIC_CQE_F_RECV))
				for (unsigned k = 0; k < cq->nqps; k++)
					if (cq->qps[k]->qpn == c[i].qpn && cq->qps[k]->done < cq->qps[k]->posted) {
						qp = cq->qps[k];
						break;
					}
			if (!qp) {
				ret = stash(cq, &c[i]);
				if (ret)
					return ret;
				continue;
			}
			qp->done++;
			cq->outstanding--;
			if (c[i].status != RNIC_WC_SUCCESS && qp->errors++ == 0)
				qp->first_error = c[i];
		}
		total += got;
		got = poll_ring(cq, c, 32);
	}
	return total;
}

int rnic_post(struct rnic_qp *qp, const struct rnic_send_wqe *wqe, int timeout_ms)
{
	struct rnic_send_wqe w = *wqe;
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now_ms() + (uint64_t)timeout_ms;
	uint32_t cq_depth = 1u << qp->send_cq->depth_log2;
	int ret;

	if (w.flags & ~(RNIC_WQE_F_SIGNALED | RNIC_WQE_F_SOLICITED | RNIC_WQE_F_FENCE))
		return -EINVAL;
	w.flags |= RNIC_WQE_F_SIGNALED | (qp->fence_next ? RNIC_WQE_F_FENCE : 0);
	for (;;) {
		if (qp->send_cq->outstanding < cq_depth) {
			ret = rnic_post_send(qp, &w);
			if (ret == 0)
				break;
			if (ret != -EAGAIN)
				return ret;
		}
		/* the SQ or the CQ is full: completions make room */
		ret = rnic_reap(qp->send_cq, left_ms(deadline));
		if (ret < 0)
			return ret;
		if (ret == 0 && left_ms(deadline) == 0)
			return -ETIMEDOUT;
	}
	qp->fence_next = 0;
	qp->posted++;
	qp->send_cq->outstanding++;
	return 0;
}

int rnic_quiet(struct rnic_qp *qp, int timeout_ms)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : now_ms() + (uint64_t)timeout_ms;
	int ret = 0;

	while (qp->done < qp->posted) {
		ret = rnic_reap(qp->send_cq, left_ms(deadline));
		if (ret < 0 && ret != -ETIMEDOUT)
			return ret;
		if (qp->done < qp->posted && left_ms(deadline) == 0)
			return -ETIMEDOUT;
	}
	if (qp->errors) {
		qp->errors = 0;
		return -EIO;
	}
	return 0;
}

void rnic_fence(struct rnic_qp *qp)
{
	qp->fence_next = 1;
}

void rnic_wqe_xatomic(struct rnic_send_wqe *w, const struct rnic_xatomic *x)
{
	memset(w, 0, sizeof(*w));
	w->wr_id = x->wr_id;
	w->opcode = x->result ? RNIC_WR_XATOMIC : RNIC_WR_XATOMIC_POST;
	w->flags = RNIC_WQE_F_SIGNALED;
	w->remote_addr = x->remote_addr;
	w->rkey = x->rkey;
	w->swap_add = x->operand;
	w->compare = x->compare;
	w->mask = x->mask;
	w->xop = x->op;
	w->xsize = x->size;
	if (x->result) {
		w->num_sge = 1;
		w->sge[0].addr = (uint64_t)(uintptr_t)x->result;
		w->sge[0].length = x->size;
		w->sge[0].lkey = x->result_lkey;
	}
}

int rnic_post_xatomic(struct rnic_qp *qp, const struct rnic_xatomic *x, int timeout_ms)
{
	struct rnic_send_wqe w;

	rnic_wqe_xatomic(&w, x);
	return rnic_post(qp, &w, timeout_ms);
}

int rnic_get_async_event(struct rnic_ctx *ctx, struct rnic_async_event *ev, int timeout_ms)
{
	struct rnic_uasync_event u = { .timeout_ms = timeout_ms < 0 ? 0xffffffffu : (uint32_t)timeout_ms };
	int ret;

	while ((ret = ioc(ctx, RNIC_IOC_GET_ASYNC_EVENT, &u)) == -ETIMEDOUT && timeout_ms < 0)
		; /* no limit: wait again */
	if (ret)
		return ret;
	memset(ev, 0, sizeof(*ev));
	ev->type = u.type;
	ev->element = u.element;
	ev->detail = u.detail;
	ev->lost = u.lost;
	ev->modeled_at_ns = u.modeled_at_ns;
	switch (u.type) {
	case RNIC_EV_QP_FATAL:
	case RNIC_EV_QP_REQ_ERR:
	case RNIC_EV_QP_ACCESS_ERR:
	case RNIC_EV_COMM_EST:
		if (u.element >= RNIC_QPN_BASE && RNIC_QP_INDEX(u.element) < RNIC_MAX_QP)
			ev->qp = ctx->qp_by_index[RNIC_QP_INDEX(u.element)];
		if (ev->qp)
			ev->qp->events_unacked++;
		break;
	case RNIC_EV_CQ_ERR:
		if (u.element < RNIC_MAX_CQ)
			ev->cq = ctx->cq_by_cqn[u.element];
		if (ev->cq)
			ev->cq->events_unacked++;
		break;
	}
	return 0;
}

void rnic_ack_async_event(struct rnic_async_event *ev)
{
	if (ev->qp && ev->qp->events_unacked)
		ev->qp->events_unacked--;
	if (ev->cq && ev->cq->events_unacked)
		ev->cq->events_unacked--;
	ev->qp = NULL; /* a second ack of the same event does nothing */
	ev->cq = NULL;
}

const char *rnic_event_type_str(unsigned type)
{
	switch (type) {
	case RNIC_EV_CQ_ERR: return "CQ_ERR";
	case RNIC_EV_QP_FATAL: return "QP_FATAL";
	case RNIC_EV_QP_REQ_ERR: return "QP_REQ_ERR";
	case RNIC_EV_QP_ACCESS_ERR: return "QP_ACCESS_ERR";
	case RNIC_EV_COMM_EST: return "COMM_EST";
	case RNIC_EV_PORT_ACTIVE: return "PORT_ACTIVE";
	case RNIC_EV_PORT_ERR: return "PORT_ERR";
	default: return "?";
	}
}

const char *rnic_wc_status_str(unsigned status)
{
	static const char *const s[] = {
		[RNIC_WC_SUCCESS] = "success", [RNIC_WC_LOC_LEN_ERR] = "local length error",
		[RNIC_WC_LOC_QP_OP_ERR] = "local QP operation error", [3] = "?",
		[RNIC_WC_LOC_PROT_ERR] = "local protection error", [RNIC_WC_WR_FLUSH_ERR] = "flushed",
		[6] = "?", [RNIC_WC_BAD_RESP_ERR] = "bad response", [RNIC_WC_LOC_ACCESS_ERR] = "local access error",
		[RNIC_WC_REM_INV_REQ_ERR] = "remote invalid request", [RNIC_WC_REM_ACCESS_ERR] = "remote access error",
		[RNIC_WC_REM_OP_ERR] = "remote operational error", [RNIC_WC_RETRY_EXC_ERR] = "transport retries exceeded",
		[RNIC_WC_RNR_RETRY_EXC_ERR] = "RNR retries exceeded",
	};

	return status < sizeof(s) / sizeof(s[0]) ? s[status] : "?";
}

const char *rnic_qp_state_str(unsigned state)
{
	switch (state) {
	case RNIC_QPS_RESET: return "RESET";
	case RNIC_QPS_INIT: return "INIT";
	case RNIC_QPS_RTR: return "RTR";
	case RNIC_QPS_RTS: return "RTS";
	case RNIC_QPS_ERR: return "ERR";
	default: return "?";
	}
}
