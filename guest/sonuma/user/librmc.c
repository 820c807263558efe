// SPDX-License-Identifier: MIT
/* librmc: see librmc.h and docs/rmc-driver.md. */
#include "librmc.h"
#include "spin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct rmc {
	int fd;
	struct rmc_uapi_info info;
	rmc_qp_t *qps[RMC_QP_COUNT];
	rmc_ctx_t *ctxs[RMC_CTX_COUNT];
};

struct rmc_ctx {
	rmc_t *r;
	unsigned id;
	void *base;
	size_t size;
	uint64_t phys;
	uint64_t key;
};

struct rmc_qp {
	rmc_t *r;
	rmc_ctx_t *ctx;
	unsigned qp, log2, depth, flags;
	uint8_t *wq, *cq;
	volatile uint64_t *db;
	size_t wq_len, cq_len;
	uint32_t posted, rung, consumed, head_written;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int rmc_open(rmc_t **out)
{
	rmc_t *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->fd = open(RMC_DEV_PATH, O_RDWR | O_CLOEXEC);
	if (r->fd < 0 || ioctl(r->fd, RMC_IOC_INFO, &r->info) < 0) {
		int e = errno;

		if (r->fd >= 0)
			close(r->fd);
		free(r);
		return -e;
	}
	*out = r;
	return 0;
}

void rmc_close(rmc_t *r)
{
	unsigned i;

	if (!r)
		return;
	for (i = 0; i < RMC_QP_COUNT; i++)
		if (r->qps[i])
			rmc_qp_destroy(r->qps[i]);
	for (i = 0; i < RMC_CTX_COUNT; i++)
		if (r->ctxs[i])
			rmc_ctx_release(r->ctxs[i]);
	close(r->fd);
	free(r);
}

int rmc_info(rmc_t *r, struct rmc_uapi_info *out)
{
	if (ioctl(r->fd, RMC_IOC_INFO, &r->info) < 0)
		return -errno;
	*out = r->info;
	return 0;
}

unsigned rmc_node_id(const rmc_t *r) { return r->info.node_id; }
unsigned rmc_node_count(const rmc_t *r) { return r->info.node_count; }

static int ctx_map(rmc_t *r, struct rmc_uapi_ctx *u, rmc_ctx_t **out)
{
	rmc_ctx_t *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->base = mmap(NULL, u->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, (off_t)u->mmap_off);
	if (c->base == MAP_FAILED) {
		int e = errno;

		free(c);
		return -e;
	}
	c->r = r;
	c->id = u->id;
	c->size = u->size;
	c->phys = u->phys;
	c->key = u->key;
	r->ctxs[u->id] = c;
	*out = c;
	return 0;
}

int rmc_ctx_register(rmc_t *r, unsigned id, size_t size, unsigned perm, uint64_t nodemask,
		     const struct rmc_layout *layout, rmc_ctx_t **out)
{
	return rmc_ctx_register_key(r, id, size, perm, nodemask, layout, 0, out);
}

int rmc_ctx_register_key(rmc_t *r, unsigned id, size_t size, unsigned perm, uint64_t nodemask,
			 const struct rmc_layout *layout, uint64_t key, rmc_ctx_t **out)
{
	struct rmc_uapi_ctx u = { .id = id, .perm = perm, .size = size, .nodemask = nodemask, .key = key };
	int ret;

	if (id >= RMC_CTX_COUNT || r->ctxs[id])
		return id >= RMC_CTX_COUNT ? -EINVAL : -EBUSY;
	u.version_off = layout ? (int32_t)layout->version_off : RMC_UAPI_NO_LAYOUT;
	if (ioctl(r->fd, RMC_IOC_CTX_REGISTER, &u) < 0)
		return -errno;
	ret = ctx_map(r, &u, out);
	if (ret)
		ioctl(r->fd, RMC_IOC_CTX_RELEASE, &u.id);
	return ret;
}

int rmc_ctx_attach(rmc_t *r, unsigned id, rmc_ctx_t **out)
{
	return rmc_ctx_attach_key(r, id, 0, out);
}

int rmc_ctx_attach_key(rmc_t *r, unsigned id, uint64_t key, rmc_ctx_t **out)
{
	struct rmc_uapi_ctx u = { .id = id, .key = key };

	if (id >= RMC_CTX_COUNT || r->ctxs[id])
		return id >= RMC_CTX_COUNT ? -EINVAL : -EBUSY;
	if (ioctl(r->fd, RMC_IOC_CTX_ATTACH, &u) < 0)
		return -errno;
	return ctx_map(r, &u, out);
}

void *rmc_ctx_base(rmc_ctx_t *c) { return c->base; }
size_t rmc_ctx_size(const rmc_ctx_t *c) { return c->size; }
unsigned rmc_ctx_id(const rmc_ctx_t *c) { return c->id; }
uint64_t rmc_ctx_phys(const rmc_ctx_t *c) { return c->phys; }
uint64_t rmc_ctx_key(const rmc_ctx_t *c) { return c->key; }

int rmc_key_parse(const char *s, uint64_t *out)
{
	char buf[64], *end;
	unsigned long long v;

	if (!s) {
		s = getenv("RMC_KEY");
		if (!s || !*s) {
			*out = 0;
			return 0;
		}
	}
	if (*s == '@') {
		FILE *f = fopen(s + 1, "r");
		size_t n;

		if (!f)
			return -errno;
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
			buf[--n] = 0;
		s = buf;
	}
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

void rmc_ctx_release(rmc_ctx_t *c)
{
	uint32_t id;
	unsigned i;

	if (!c)
		return;
	/* the QPs created on it would keep a pointer to it: they go first */
	for (i = 0; i < RMC_QP_COUNT; i++)
		if (c->r->qps[i] && c->r->qps[i]->ctx == c)
			rmc_qp_destroy(c->r->qps[i]);
	id = c->id;
	munmap(c->base, c->size);
	ioctl(c->r->fd, RMC_IOC_CTX_RELEASE, &id);
	c->r->ctxs[id] = NULL;
	free(c);
}

int rmc_qp_create(rmc_t *r, rmc_ctx_t *c, unsigned depth, unsigned flags, rmc_qp_t **out)
{
	struct rmc_uapi_qp u = { .ctx = c->id };
	rmc_qp_t *q;
	unsigned log2 = 0;
	int e;

	if (depth < 2 || depth > 4096 || (depth & (depth - 1)) || (flags & ~RMC_QP_IRQ))
		return -EINVAL;
	while ((1u << log2) < depth)
		log2++;
	u.depth_log2 = log2;
	u.flags = (flags & RMC_QP_IRQ) ? RMC_UAPI_QP_IRQ : 0;
	if (ioctl(r->fd, RMC_IOC_QP_CREATE, &u) < 0)
		return -errno;
	q = calloc(1, sizeof(*q));
	if (!q) {
		ioctl(r->fd, RMC_IOC_QP_DESTROY, &u.qp);
		return -ENOMEM;
	}
	q->r = r;
	q->ctx = c;
	q->qp = u.qp;
	q->log2 = log2;
	q->depth = depth;
	q->flags = flags;
	q->wq_len = ((size_t)RMC_WQE_SIZE * depth + 4095) & ~(size_t)4095;
	q->cq_len = ((size_t)RMC_CQE_SIZE * depth + 4095) & ~(size_t)4095;
	q->wq = mmap(NULL, q->wq_len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, (off_t)u.wq_mmap_off);
	q->cq = mmap(NULL, q->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, (off_t)u.cq_mmap_off);
	q->db = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, (off_t)u.db_mmap_off);
	if (q->wq == MAP_FAILED || q->cq == MAP_FAILED || q->db == MAP_FAILED) {
		e = errno;
		if (q->wq != MAP_FAILED)
			munmap(q->wq, q->wq_len);
		if (q->cq != MAP_FAILED)
			munmap(q->cq, q->cq_len);
		if (q->db != MAP_FAILED)
			munmap((void *)q->db, 4096);
		ioctl(r->fd, RMC_IOC_QP_DESTROY, &u.qp);
		free(q);
		return -e;
	}
	r->qps[u.qp] = q;
	*out = q;
	return 0;
}

void rmc_qp_destroy(rmc_qp_t *q)
{
	uint32_t id;

	if (!q)
		return;
	id = q->qp;
	munmap(q->wq, q->wq_len);
	munmap(q->cq, q->cq_len);
	munmap((void *)q->db, 4096);
	ioctl(q->r->fd, RMC_IOC_QP_DESTROY, &id);
	q->r->qps[id] = NULL;
	free(q);
}

unsigned rmc_qp_index(const rmc_qp_t *q) { return q->qp; }
unsigned rmc_qp_outstanding(const rmc_qp_t *q) { return q->posted - q->consumed; }

static void flush_head(rmc_qp_t *q)
{
	if (q->head_written != q->consumed) {
		q->db[DB_CQ_HEAD / 8] = q->consumed;
		q->head_written = q->consumed;
	}
}

void rmc_doorbell(rmc_qp_t *q)
{
	if (q->rung == q->posted)
		return;
	/* the device fetches WQE i only while i - CQ_HEAD < depth: hand back the consumed CQ slots
	 * first if the newest WQE would otherwise wait for the next poll */
	if (q->posted - q->head_written > q->depth)
		flush_head(q);
	/* the WQEs (normal memory) must be visible to the device before the doorbell store */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__asm__ volatile("dmb oshst" ::: "memory");
	q->db[DB_WQ_TAIL / 8] = q->posted;
	q->rung = q->posted;
}

int rmc_post_raw(rmc_qp_t *q, const struct rmc_wqe *w, unsigned fl)
{
	if (q->posted - q->consumed >= q->depth)
		return -EAGAIN;
	memcpy(q->wq + (size_t)(q->posted & (q->depth - 1)) * RMC_WQE_SIZE, w, sizeof(*w));
	q->posted++;
	if (!(fl & RMC_POST_DEFER))
		rmc_doorbell(q);
	return 0;
}

static int post(rmc_qp_t *q, uint8_t op, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, uint64_t a0,
		uint64_t a1, uint64_t wr_id, unsigned fl)
{
	struct rmc_wqe w;

	if (node >= q->r->info.node_count || (fl & ~(RMC_POST_DEFER | RMC_POST_NOSPEC)) ||
	    ((fl & RMC_POST_NOSPEC) && op != RMC_OP_SABRE))
		return -EINVAL;
	if ((op == RMC_OP_READ || op == RMC_OP_WRITE || op == RMC_OP_SABRE) &&
	    (loff > q->ctx->size || len > q->ctx->size - loff))
		return -EINVAL;
	memset(&w, 0, sizeof(w));
	w.op = op;
	w.flags = (fl & RMC_POST_NOSPEC) ? RMC_WQE_F_NOSPEC : 0;
	w.node = (uint16_t)node;
	w.length = len;
	w.wr_id = wr_id;
	w.remote_off = roff;
	w.local_off = loff;
	w.operand0 = a0;
	w.operand1 = a1;
	return rmc_post_raw(q, &w, fl);
}

int rmc_post_read(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, uint64_t wr_id, unsigned fl)
{
	return post(q, RMC_OP_READ, node, roff, loff, len, 0, 0, wr_id, fl);
}

int rmc_post_write(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, uint64_t wr_id, unsigned fl)
{
	return post(q, RMC_OP_WRITE, node, roff, loff, len, 0, 0, wr_id, fl);
}

int rmc_post_cas(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t expect, uint64_t desired, uint64_t wr_id,
		 unsigned fl)
{
	return post(q, RMC_OP_CAS, node, roff, 0, 8, expect, desired, wr_id, fl);
}

int rmc_post_faa(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t add, uint64_t wr_id, unsigned fl)
{
	return post(q, RMC_OP_FAA, node, roff, 0, 8, add, 0, wr_id, fl);
}

int rmc_post_sabre(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, uint64_t wr_id, unsigned fl)
{
	return post(q, RMC_OP_SABRE, node, roff, loff, len, 0, 0, wr_id, fl);
}

static const uint8_t *cqe_at(const rmc_qp_t *q, uint32_t k)
{
	return q->cq + (size_t)(k & (q->depth - 1)) * RMC_CQE_SIZE;
}

static int cqe_ready(const rmc_qp_t *q, uint32_t k)
{
	uint8_t phase = 1 ^ ((k >> q->log2) & 1);

	return (__atomic_load_n(cqe_at(q, k) + offsetof(struct rmc_cqe, flags), __ATOMIC_ACQUIRE) & RMC_CQE_F_PHASE) ==
	       phase;
}

int rmc_poll(rmc_qp_t *q, struct rmc_cqe *out, int max)
{
	int n = 0;

	while (n < max && q->consumed != q->posted && cqe_ready(q, q->consumed)) {
		memcpy(&out[n++], cqe_at(q, q->consumed), sizeof(*out));
		q->consumed++;
	}
	/* hand the CQ slots back: in batches, and always before the caller may wait */
	if (q->consumed - q->head_written >= q->depth / 2 || (n == 0 && q->head_written != q->consumed))
		flush_head(q);
	return n;
}

/* RMC_SPIN_US (default 20): how long a wait spins on the CQ before it sleeps */
static unsigned rmc_spin_us(void)
{
	static int cached = -1;

	if (cached < 0)
		cached = (int)spin_budget_us("RMC_SPIN_US", 20);
	return (unsigned)cached;
}

static int wait_next(rmc_qp_t *q, int timeout_ms)
{
	uint64_t start = now_ns(), deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000ull;
	uint64_t spin_ns = (uint64_t)rmc_spin_us() * 1000;
	struct rmc_uapi_wait w = { .qp = q->qp };

	flush_head(q);
	while (now_ns() - start < spin_ns) {
		if (cqe_ready(q, q->consumed))
			return 0;
		spin_relax();
	}
	if (!(q->flags & RMC_QP_IRQ)) {
		/* no completion interrupt: poll, napping 20 us .. 1 ms between polls */
		unsigned nap = 20;

		while (!cqe_ready(q, q->consumed)) {
			if (now_ns() >= deadline)
				return -ETIMEDOUT;
			spin_nap(&nap);
		}
		return 0;
	}
	for (;;) {
		uint64_t now = now_ns();

		if (cqe_ready(q, q->consumed))
			return 0;
		if (now >= deadline)
			return -ETIMEDOUT;
		w.cq_index = q->consumed;
		w.timeout_ms = deadline == UINT64_MAX ? -1 : (int32_t)((deadline - now + 999999) / 1000000);
		if (ioctl(q->r->fd, RMC_IOC_WAIT, &w) < 0 && errno != ETIMEDOUT && errno != EINTR)
			return -errno;
	}
}

int rmc_wait(rmc_qp_t *q, struct rmc_cqe *out, int max, int timeout_ms)
{
	int n = rmc_poll(q, out, max), ret;

	if (n || q->consumed == q->posted)
		return n;
	ret = wait_next(q, timeout_ms);
	if (ret == -ETIMEDOUT)
		return 0;
	if (ret)
		return ret;
	return rmc_poll(q, out, max);
}

int rmc_wait_slot(rmc_qp_t *q, int timeout_ms)
{
	if (q->posted - q->consumed < q->depth)
		return 0;
	return wait_next(q, timeout_ms);
}

static int sync_op(rmc_qp_t *q, int posted, struct rmc_cqe *cqe)
{
	struct rmc_cqe c;
	int n;

	if (posted)
		return posted;
	n = rmc_wait(q, &c, 1, 10000);
	if (n < 0)
		return n;
	if (n == 0)
		return -ETIMEDOUT;
	if (cqe)
		*cqe = c;
	return c.status;
}

int rmc_read(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, struct rmc_cqe *cqe)
{
	if (q->posted != q->consumed)
		return -EBUSY;
	return sync_op(q, rmc_post_read(q, node, roff, loff, len, 0, 0), cqe);
}

int rmc_write(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, struct rmc_cqe *cqe)
{
	if (q->posted != q->consumed)
		return -EBUSY;
	return sync_op(q, rmc_post_write(q, node, roff, loff, len, 0, 0), cqe);
}

int rmc_cas(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t expect, uint64_t desired, uint64_t *old,
	    struct rmc_cqe *cqe)
{
	struct rmc_cqe c;
	int st;

	if (q->posted != q->consumed)
		return -EBUSY;
	st = sync_op(q, rmc_post_cas(q, node, roff, expect, desired, 0, 0), &c);
	if (st >= 0 && old)
		*old = c.value;
	if (cqe)
		*cqe = c;
	return st;
}

int rmc_faa(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t add, uint64_t *old, struct rmc_cqe *cqe)
{
	struct rmc_cqe c;
	int st;

	if (q->posted != q->consumed)
		return -EBUSY;
	st = sync_op(q, rmc_post_faa(q, node, roff, add, 0, 0), &c);
	if (st >= 0 && old)
		*old = c.value;
	if (cqe)
		*cqe = c;
	return st;
}

int rmc_sabre(rmc_qp_t *q, unsigned node, uint64_t roff, uint64_t loff, uint32_t len, unsigned fl,
	      struct rmc_cqe *cqe)
{
	if (q->posted != q->consumed)
		return -EBUSY;
	return sync_op(q, rmc_post_sabre(q, node, roff, loff, len, 0, fl & RMC_POST_NOSPEC), cqe);
}

const char *rmc_op_str(unsigned op)
{
	static const char *const names[] = { "?", "READ", "WRITE", "CAS", "FAA", "SABRE" };

	return op < 6 ? names[op] : "?";
}

const char *rmc_status_str(unsigned status, unsigned info)
{
	static __thread char buf[64]; /* one per thread: callers print it before their next call */
	static const char *const st[] = { "OK", "SABRE_ABORT", "REMOTE_ACCESS", "BAD_REQUEST", "UNREACHABLE",
					  "UNCERTAIN" };
	const char *in = NULL;

	switch (info) {
	case RMC_INFO_LOCKED: in = "LOCKED"; break;
	case RMC_INFO_WINDOW: in = "WINDOW"; break;
	case RMC_INFO_VALIDATE: in = "VALIDATE"; break;
	case RMC_INFO_NO_CTX: in = "NO_CTX"; break;
	case RMC_INFO_BOUNDS: in = "BOUNDS"; break;
	case RMC_INFO_PERM: in = "PERM"; break;
	case RMC_INFO_DENIED: in = "DENIED"; break;
	case RMC_INFO_NO_LAYOUT: in = "NO_LAYOUT"; break;
	case RMC_INFO_BAD_KEY: in = "BAD_KEY"; break;
	case RMC_INFO_BAD_OP: in = "BAD_OP"; break;
	case RMC_INFO_BAD_LEN: in = "BAD_LEN"; break;
	case RMC_INFO_UNALIGNED: in = "UNALIGNED"; break;
	case RMC_INFO_LOCAL_BOUNDS: in = "LOCAL_BOUNDS"; break;
	case RMC_INFO_BAD_NODE: in = "BAD_NODE"; break;
	case RMC_INFO_RESERVED: in = "RESERVED"; break;
	case RMC_INFO_NO_LOCAL_CTX: in = "NO_LOCAL_CTX"; break;
	case RMC_INFO_NOROUTE: in = "NOROUTE"; break;
	case RMC_INFO_NODE_GONE: in = "NODE_GONE"; break;
	case RMC_INFO_LINK_DOWN: in = "LINK_DOWN"; break;
	case RMC_INFO_CONGESTED: in = "CONGESTED"; break;
	case RMC_INFO_TIMEOUT: in = "TIMEOUT"; break;
	case RMC_INFO_BAD_REPLY: in = "BAD_REPLY"; break;
	}
	if (status >= sizeof(st) / sizeof(st[0]))
		return "?";
	if (!in)
		return st[status];
	strcpy(buf, st[status]);
	strcat(buf, "(");
	strcat(buf, in);
	strcat(buf, ")");
	return buf;
}

uint64_t rmc_obj_write_begin(volatile uint64_t *version)
{
	uint64_t v;

	for (;;) {
		v = __atomic_load_n(version, __ATOMIC_RELAXED);
		if (!(v & 1) && __atomic_compare_exchange_n(version, &v, v + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			break;
		spin_relax();
	}
	/* the odd version is visible before any store to the object */
	__asm__ volatile("dmb ish" ::: "memory");
	return v;
}

void rmc_obj_write_end(volatile uint64_t *version, uint64_t begun)
{
	/* every store to the object is visible before the even version */
	__asm__ volatile("dmb ishst" ::: "memory");
	__atomic_store_n(version, begun + 2, __ATOMIC_RELEASE);
}

int rmc_counters(rmc_t *r, uint64_t out[RMC_CNT_COUNT])
{
	return ioctl(r->fd, RMC_IOC_COUNTERS, out) < 0 ? -errno : 0;
}
