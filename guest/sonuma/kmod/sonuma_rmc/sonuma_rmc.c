// SPDX-License-Identifier: GPL-2.0
/*
 * sonuma_rmc: Linux driver of rackemu's soNUMA Remote Memory Controller with LightSABRes
 * (docs/sonuma.md for the device, docs/rmc-driver.md for this driver).
 *
 * Binds "rackemu,sonuma-rmc", takes the RMC segment from the node's reserved-memory region and
 * exposes /dev/rmc: contexts (a page-granular range of the segment, programmed into the device's
 * context table, mapped into processes), queue pairs (WQ and CQ in zeroed kernel pages, mapped
 * into the owning process with the QP's doorbell page), completion interrupts and counters.
 * Memory that a process maps stays allocated until the last mapping goes away, whatever the
 * order of close, munmap and destroy. A doorbell page is inserted at its first access by a fault
 * handler that checks, under the device mutex, that the QP is still the file's, and it is revoked
 * when its QP is destroyed, whatever the timing of mmap against destroy.
 *
 * A context id is node-global; every registration is a new incarnation (generation). Attaching
 * and QPs are tied to the incarnation: a file that attached id c, or a QP bound to c, never
 * reaches the memory of a later registration of c.
 *
 * Who may use a context (docs/rmc-driver.md): it belongs to the effective uid that registered it.
 * Another file attaches it only with that uid, with CAP_SYS_ADMIN, or by presenting the context's
 * access key, which the driver draws at random unless the owner names one. The key is programmed
 * into the device (CTX_KEY): every request on the context carries it, and other nodes serve only
 * requests whose key equals that of their own context of the same id.
 */
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/of.h>
#include <linux/of_address.h>
#include <linux/of_reserved_mem.h>
#include <linux/platform_device.h>
#include <linux/random.h>
#include <linux/cred.h>
#include <linux/capability.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "rackemu/sonuma_regs.h"
#include "rackemu/sonuma_uapi.h"

/* mmap cookies: page offset = type << 16 | index */
enum { MAP_CTX = 1, MAP_WQ = 2, MAP_CQ = 3, MAP_DB = 4 };
#define COOKIE(type, idx) ((((u64)(type) << 16) | (idx)) << PAGE_SHIFT)

struct rmc_file;

/* A range of the segment, or queue pages: freed when the last reference goes. */
struct rmc_mem {
	struct kref ref;
	struct rmc_dev *rd;
	phys_addr_t phys;
	size_t size;
	void *kva;      /* queue pages: alloc_pages_exact; segment: NULL */
	bool in_segment;
	u64 seg_off;
};

struct rmc_ctx {
	struct rmc_mem *mem;        /* NULL: free */
	struct rmc_file *owner;
	kuid_t uid;                 /* the owner's effective uid at registration */
	u64 key;                    /* access key (CTX_KEY), never 0 */
	u64 gen;                    /* incarnation: set at each registration, never 0 */
	u32 perm;
	u64 nodemask;
	s32 version_off;
};

struct rmc_qp {
	struct rmc_file *owner;     /* NULL: free */
	struct rmc_mem *wq, *cq;
	unsigned int ctx, log2;
	u64 ctx_gen;                /* the incarnation of ctx the QP was created on */
	bool dead;                  /* disabled: its context id was registered again */
	wait_queue_head_t wait;
};

struct rmc_dev {
	struct device *dev;
	void __iomem *regs;
	phys_addr_t regs_phys;
	phys_addr_t seg_base;
	u64 seg_size;
	void *seg_kva;
	int irq;
	struct miscdevice misc;
	struct mutex lock;          /* contexts, QPs, gen_next */
	u64 gen_next;
	spinlock_t range_lock;      /* ranges[]: also taken from munmap, under no other lock */
	struct rmc_ctx ctx[RMC_CTX_COUNT];
	struct rmc_qp qp[RMC_QP_COUNT];
	/* segment ranges in use (including released contexts still mapped somewhere) */
	struct rmc_mem *ranges[RMC_CTX_COUNT * 4];
};

struct rmc_file {
	struct rmc_dev *rd;
	struct address_space *mapping; /* of /dev/rmc: revokes doorbell mappings */
	u64 ctx_gen[RMC_CTX_COUNT];    /* incarnation of context c this file registered/attached, 0: none */
};

static struct rmc_dev *the_rmc;

static inline u64 rd64(struct rmc_dev *rd, u32 off) { return readq(rd->regs + off); }
static inline void wr64(struct rmc_dev *rd, u32 off, u64 v) { writeq(v, rd->regs + off); }

/* Context c is registered and this file registered or attached that incarnation (rd->lock). */
static bool rmc_file_has_ctx(struct rmc_file *f, unsigned int c)
{
	struct rmc_ctx *cx = &f->rd->ctx[c];

	return cx->mem && f->ctx_gen[c] == cx->gen;
}

/* ---- memory objects ---- */

static void rmc_mem_free(struct kref *ref)
{
	struct rmc_mem *m = container_of(ref, struct rmc_mem, ref);
	struct rmc_dev *rd = m->rd;
	unsigned int i;

	if (m->in_segment) {
		spin_lock(&rd->range_lock);
		for (i = 0; i < ARRAY_SIZE(rd->ranges); i++)
			if (rd->ranges[i] == m)
				rd->ranges[i] = NULL;
		spin_unlock(&rd->range_lock);
	} else {
		free_pages_exact(m->kva, m->size);
	}
	kfree(m);
}

static void rmc_mem_put(struct rmc_mem *m)
{
	if (m)
		kref_put(&m->ref, rmc_mem_free);
}

static struct rmc_mem *rmc_queue_alloc(struct rmc_dev *rd, size_t bytes)
{
	struct rmc_mem *m = kzalloc(sizeof(*m), GFP_KERNEL);

	if (!m)
		return NULL;
	m->size = PAGE_ALIGN(bytes);
	m->kva = alloc_pages_exact(m->size, GFP_KERNEL | __GFP_ZERO);
	if (!m->kva) {
		kfree(m);
		return NULL;
	}
	kref_init(&m->ref);
	m->rd = rd;
	m->phys = virt_to_phys(m->kva);
	return m;
}

/* First fit over the segment. */
static struct rmc_mem *rmc_seg_alloc(struct rmc_dev *rd, u64 size)
{
	struct rmc_mem *m = kzalloc(sizeof(*m), GFP_KERNEL);
	u64 off = 0;
	unsigned int i, slot = ARRAY_SIZE(rd->ranges);
	bool moved;

	if (!m)
		return ERR_PTR(-ENOMEM);
	spin_lock(&rd->range_lock);
	for (i = 0; i < ARRAY_SIZE(rd->ranges); i++)
		if (!rd->ranges[i]) {
			slot = i;
			break;
		}
	if (slot == ARRAY_SIZE(rd->ranges))
		goto full;
	do {
		moved = false;
		for (i = 0; i < ARRAY_SIZE(rd->ranges); i++) {
			struct rmc_mem *r = rd->ranges[i];

			if (r && off < r->seg_off + r->size && r->seg_off < off + size) {
				off = r->seg_off + r->size;
				moved = true;
			}
		}
	} while (moved);
	if (off + size > rd->seg_size)
		goto full;
	kref_init(&m->ref);
	m->rd = rd;
	m->in_segment = true;
	m->seg_off = off;
	m->size = size;
	m->phys = rd->seg_base + off;
	rd->ranges[slot] = m;
	spin_unlock(&rd->range_lock);
	memset(rd->seg_kva + off, 0, size);
	return m;
full:
	spin_unlock(&rd->range_lock);
	kfree(m);
	return ERR_PTR(-ENOSPC);
}

static u64 rmc_seg_free_bytes(struct rmc_dev *rd)
{
	u64 used = 0;
	unsigned int i;

	spin_lock(&rd->range_lock);
	for (i = 0; i < ARRAY_SIZE(rd->ranges); i++)
		if (rd->ranges[i])
			used += rd->ranges[i]->size;
	spin_unlock(&rd->range_lock);
	return rd->seg_size - used;
}

/* ---- contexts ---- */

/*
 * Context id c is being registered again: the QPs still bound to an earlier incarnation would
 * reach the new segment. Disable them (the device orphans their in-flight transfers) and wake
 * their waiters; they stay owned (and mapped) until their file destroys them. Between the drop
 * of a context and its next registration its QPs stay enabled: the device completes their
 * requests BAD_REQUEST/NO_LOCAL_CTX, which tells the user what happened.
 */
static void rmc_ctx_retire_qps(struct rmc_dev *rd, unsigned int c)
{
	unsigned int q;

	for (q = 0; q < RMC_QP_COUNT; q++) {
		struct rmc_qp *qp = &rd->qp[q];

		if (qp->owner && !qp->dead && qp->ctx == c) {
			wr64(rd, RMC_QP_REG(q, QP_CTRL), 0);
			WRITE_ONCE(qp->dead, true);
			wake_up_all(&qp->wait);
		}
	}
}

static void rmc_ctx_drop(struct rmc_dev *rd, unsigned int c)
{
	struct rmc_ctx *cx = &rd->ctx[c];

	/* the device completes the context's in-flight transfers before this write returns */
	wr64(rd, RMC_CTX_REG(c, CTX_CTRL), 0);
	rmc_mem_put(cx->mem);
	memset(cx, 0, sizeof(*cx));
}

static long rmc_ctx_register(struct rmc_file *f, struct rmc_uapi_ctx __user *arg)
{
	struct rmc_dev *rd = f->rd;
	struct rmc_uapi_ctx u;
	struct rmc_mem *m;
	long ret = 0;
	u64 layout = 0;

	if (copy_from_user(&u, arg, sizeof(u)))
		return -EFAULT;
	if (!rd->seg_size)
		return -ENODEV;
	if (u.id >= RMC_CTX_COUNT || !u.size || u.size > rd->seg_size || u.reserved ||
	    (u.perm & ~(CTX_PERM_READ | CTX_PERM_WRITE | CTX_PERM_ATOMIC | CTX_PERM_SABRE)))
		return -EINVAL;
	if (u.version_off != RMC_UAPI_NO_LAYOUT) {
		if (u.version_off < 0 || u.version_off > 56 || u.version_off % 8)
			return -EINVAL;
		layout = CTX_LAYOUT_VALID | (u32)u.version_off;
	}
	u.size = PAGE_ALIGN(u.size);
	while (!u.key)
		u.key = get_random_u64();
	mutex_lock(&rd->lock);
	if (rd->ctx[u.id].mem) {
		ret = -EBUSY;
		goto out;
	}
	m = rmc_seg_alloc(rd, u.size);
	if (IS_ERR(m)) {
		ret = PTR_ERR(m);
		goto out;
	}
	wr64(rd, RMC_CTX_REG(u.id, CTX_BASE), m->phys);
	wr64(rd, RMC_CTX_REG(u.id, CTX_SIZE), m->size);
	wr64(rd, RMC_CTX_REG(u.id, CTX_PERM), u.perm);
	wr64(rd, RMC_CTX_REG(u.id, CTX_NODEMASK), u.nodemask);
	wr64(rd, RMC_CTX_REG(u.id, CTX_LAYOUT), layout);
	wr64(rd, RMC_CTX_REG(u.id, CTX_KEY), u.key);
	wr64(rd, RMC_CTX_REG(u.id, CTX_CTRL), CTX_CTRL_VALID);
	if ((rd64(rd, RMC_CTX_REG(u.id, CTX_STATUS)) & CTX_ST_CFG_ERR) ||
	    !(rd64(rd, RMC_CTX_REG(u.id, CTX_CTRL)) & CTX_CTRL_VALID)) {
		dev_warn(rd->dev, "context %u refused by the device (status %#llx)\n", u.id,
			 rd64(rd, RMC_CTX_REG(u.id, CTX_STATUS)));
		wr64(rd, RMC_CTX_REG(u.id, CTX_CTRL), 0);
		rmc_mem_put(m);
		ret = -EIO;
		goto out;
	}
	rmc_ctx_retire_qps(rd, u.id);
	rd->ctx[u.id].gen = ++rd->gen_next;
	rd->ctx[u.id].mem = m;
	rd->ctx[u.id].owner = f;
	rd->ctx[u.id].uid = current_euid();
	rd->ctx[u.id].key = u.key;
	rd->ctx[u.id].perm = u.perm;
	rd->ctx[u.id].nodemask = u.nodemask;
	rd->ctx[u.id].version_off = u.version_off;
	f->ctx_gen[u.id] = rd->ctx[u.id].gen;
	u.mmap_off = COOKIE(MAP_CTX, u.id);
	u.phys = m->phys;
out:
	mutex_unlock(&rd->lock);
	if (!ret && copy_to_user(arg, &u, sizeof(u)))
		return -EFAULT;
	return ret;
}

static long rmc_ctx_attach(struct rmc_file *f, struct rmc_uapi_ctx __user *arg)
{
	struct rmc_dev *rd = f->rd;
	struct rmc_uapi_ctx u;
	struct rmc_ctx *cx;
	long ret = 0;

	if (copy_from_user(&u, arg, sizeof(u)))
		return -EFAULT;
	if (u.id >= RMC_CTX_COUNT)
		return -EINVAL;
	mutex_lock(&rd->lock);
	cx = &rd->ctx[u.id];
	if (!cx->mem) {
		ret = -ENOENT;
	} else if (!uid_eq(current_euid(), cx->uid) && !capable(CAP_SYS_ADMIN) && (!u.key || u.key != cx->key)) {
		ret = -EACCES; /* another user's context, not shared with the caller */
	} else {
		f->ctx_gen[u.id] = cx->gen;
		u.key = cx->key;
		u.perm = cx->perm;
		u.size = cx->mem->size;
		u.nodemask = cx->nodemask;
		u.version_off = cx->version_off;
		u.mmap_off = COOKIE(MAP_CTX, u.id);
		u.phys = cx->mem->phys;
	}
	mutex_unlock(&rd->lock);
	if (!ret && copy_to_user(arg, &u, sizeof(u)))
		return -EFAULT;
	return ret;
}

static long rmc_ctx_release(struct rmc_file *f, u32 id)
{
	struct rmc_dev *rd = f->rd;
	long ret = 0;

	if (id >= RMC_CTX_COUNT)
		return -EINVAL;
	mutex_lock(&rd->lock);
	if (!rmc_file_has_ctx(f, id))
		ret = -ENOENT;
	else if (rd->ctx[id].owner == f)
		rmc_ctx_drop(rd, id);
	f->ctx_gen[id] = 0;
	mutex_unlock(&rd->lock);
	return ret;
}

/* ---- queue pairs ---- */

static void rmc_qp_drop(struct rmc_dev *rd, unsigned int q)
{
	struct rmc_qp *qp = &rd->qp[q];

	/* the device orphans the QP's in-flight transfers before this write returns */
	wr64(rd, RMC_QP_REG(q, QP_CTRL), 0);
	/* a doorbell page still mapped would ring the next owner of this QP index: revoke it
	 * (later accesses fault with SIGBUS, rmc_db_fault); WQ and CQ pages stay with their
	 * mappings
	 */
	if (qp->owner->mapping)
		unmap_mapping_range(qp->owner->mapping, COOKIE(MAP_DB, q), PAGE_SIZE, 1);
	WRITE_ONCE(qp->owner, NULL);
	wake_up_all(&qp->wait);
	rmc_mem_put(qp->wq);
	rmc_mem_put(qp->cq);
	qp->wq = qp->cq = NULL;
	qp->dead = false;
}

static long rmc_qp_create(struct rmc_file *f, struct rmc_uapi_qp __user *arg)
{
	struct rmc_dev *rd = f->rd;
	struct rmc_uapi_qp u;
	struct rmc_mem *wq, *cq;
	unsigned int q;
	long ret = 0;

	if (copy_from_user(&u, arg, sizeof(u)))
		return -EFAULT;
	if (u.ctx >= RMC_CTX_COUNT || u.depth_log2 < RMC_DEPTH_LOG2_MIN || u.depth_log2 > RMC_DEPTH_LOG2_MAX ||
	    (u.flags & ~RMC_UAPI_QP_IRQ))
		return -EINVAL;
	wq = rmc_queue_alloc(rd, (size_t)RMC_WQE_SIZE << u.depth_log2);
	cq = rmc_queue_alloc(rd, (size_t)RMC_CQE_SIZE << u.depth_log2);
	if (!wq || !cq) {
		rmc_mem_put(wq);
		rmc_mem_put(cq);
		return -ENOMEM;
	}
	mutex_lock(&rd->lock);
	if (!rmc_file_has_ctx(f, u.ctx)) {
		ret = -ENOENT;
		goto fail;
	}
	for (q = 0; q < RMC_QP_COUNT; q++)
		if (!rd->qp[q].owner)
			break;
	if (q == RMC_QP_COUNT) {
		ret = -EBUSY;
		goto fail;
	}
	wr64(rd, RMC_QP_REG(q, QP_CTRL), 0);
	wr64(rd, RMC_QP_REG(q, QP_WQ_BASE), wq->phys);
	wr64(rd, RMC_QP_REG(q, QP_CQ_BASE), cq->phys);
	wr64(rd, RMC_QP_REG(q, QP_DEPTH_LOG2), u.depth_log2);
	wr64(rd, RMC_QP_REG(q, QP_CTX), u.ctx);
	wr64(rd, RMC_QP_REG(q, QP_CTRL), QP_CTRL_EN | ((u.flags & RMC_UAPI_QP_IRQ) ? QP_CTRL_IRQ_EN : 0));
	if ((rd64(rd, RMC_QP_REG(q, QP_STATUS)) & QP_ST_CFG_ERR) || !(rd64(rd, RMC_QP_REG(q, QP_CTRL)) & QP_CTRL_EN)) {
		wr64(rd, RMC_QP_REG(q, QP_CTRL), 0);
		dev_warn(rd->dev, "QP %u refused by the device (status %#llx)\n", q,
			 rd64(rd, RMC_QP_REG(q, QP_STATUS)));
		ret = -EIO;
		goto fail;
	}
	rd->qp[q].owner = f;
	rd->qp[q].wq = wq;
	rd->qp[q].cq = cq;
	rd->qp[q].ctx = u.ctx;
	rd->qp[q].ctx_gen = rd->ctx[u.ctx].gen;
	rd->qp[q].dead = false;
	rd->qp[q].log2 = u.depth_log2;
	mutex_unlock(&rd->lock);
	u.qp = q;
	u.wq_mmap_off = COOKIE(MAP_WQ, q);
	u.cq_mmap_off = COOKIE(MAP_CQ, q);
	u.db_mmap_off = COOKIE(MAP_DB, q);
	if (copy_to_user(arg, &u, sizeof(u)))
		return -EFAULT; /* the QP stays; it goes with the file */
	return 0;
fail:
	mutex_unlock(&rd->lock);
	rmc_mem_put(wq);
	rmc_mem_put(cq);
	return ret;
}

static long rmc_qp_destroy(struct rmc_file *f, u32 q)
{
	struct rmc_dev *rd = f->rd;
	long ret = 0;

	if (q >= RMC_QP_COUNT)
		return -EINVAL;
	mutex_lock(&rd->lock);
	if (rd->qp[q].owner != f)
		ret = -ENOENT;
	else
		rmc_qp_drop(rd, q);
	mutex_unlock(&rd->lock);
	return ret;
}

/* The CQE with free-running index idx of a CQ of 1 << log2 entries is valid (its phase). */
static bool rmc_cqe_valid(const struct rmc_mem *cq, unsigned int log2, u32 idx)
{
	const u8 *cqe = (const u8 *)cq->kva + (size_t)(idx & ((1u << log2) - 1)) * RMC_CQE_SIZE;
	u8 phase = 1 ^ ((idx >> log2) & 1);

	return (READ_ONCE(cqe[offsetof(struct rmc_cqe, flags)]) & RMC_CQE_F_PHASE) == phase;
}

/* The QP this wait started on was destroyed or disabled meanwhile (no lock: pointer compares). */
static bool rmc_qp_gone(struct rmc_qp *qp, struct rmc_file *f, struct rmc_mem *cq)
{
	return READ_ONCE(qp->owner) != f || READ_ONCE(qp->cq) != cq || READ_ONCE(qp->dead);
}

static long rmc_wait(struct rmc_file *f, struct rmc_uapi_wait __user *arg)
{
	struct rmc_dev *rd = f->rd;
	struct rmc_uapi_wait u;
	struct rmc_qp *qp;
	struct rmc_mem *cq;
	unsigned int log2;
	long t, ret;

	if (copy_from_user(&u, arg, sizeof(u)))
		return -EFAULT;
	if (u.qp >= RMC_QP_COUNT || u.reserved)
		return -EINVAL;
	qp = &rd->qp[u.qp];
	mutex_lock(&rd->lock);
	if (qp->owner != f) {
		mutex_unlock(&rd->lock);
		return -ENOENT;
	}
	if (qp->dead) {
		mutex_unlock(&rd->lock);
		return -ENOLINK;
	}
	/* sleeping needs the interrupt: turn it on if the QP was created without
	 * (the device takes an IRQ_EN change while the QP is enabled)
	 */
	if (!(rd64(rd, RMC_QP_REG(u.qp, QP_CTRL)) & QP_CTRL_IRQ_EN))
		wr64(rd, RMC_QP_REG(u.qp, QP_CTRL), QP_CTRL_EN | QP_CTRL_IRQ_EN);
	/* the CQ pages stay ours while we sleep, whatever another thread destroys */
	cq = qp->cq;
	kref_get(&cq->ref);
	log2 = qp->log2;
	mutex_unlock(&rd->lock);
	t = wait_event_interruptible_timeout(qp->wait, rmc_cqe_valid(cq, log2, u.cq_index) || rmc_qp_gone(qp, f, cq),
					     u.timeout_ms < 0 ? MAX_SCHEDULE_TIMEOUT : msecs_to_jiffies(u.timeout_ms));
	if (t < 0)
		ret = t; /* -ERESTARTSYS */
	else if (rmc_cqe_valid(cq, log2, u.cq_index))
		ret = 0;
	else if (rmc_qp_gone(qp, f, cq))
		ret = READ_ONCE(qp->owner) == f && READ_ONCE(qp->cq) == cq ? -ENOLINK : -ENOENT;
	else
		ret = -ETIMEDOUT;
	rmc_mem_put(cq);
	return ret;
}

static irqreturn_t rmc_irq(int irq, void *data)
{
	struct rmc_dev *rd = data;
	u64 st = rd64(rd, RMC_REG_IRQ_STATUS);
	unsigned int q;

	if (!st)
		return IRQ_NONE;
	wr64(rd, RMC_REG_IRQ_STATUS, st);
	for (q = 0; q < RMC_QP_COUNT; q++)
		if (st & (1ull << q))
			wake_up(&rd->qp[q].wait);
	return IRQ_HANDLED;
}

static void rmc_read_counters(struct rmc_dev *rd, u64 *c)
{
	unsigned int i;

	for (i = 0; i < RMC_CNT_COUNT; i++)
		c[i] = rd64(rd, RMC_COUNTERS + 8 * i);
}

static long rmc_info(struct rmc_dev *rd, struct rmc_uapi_info __user *arg)
{
	struct rmc_uapi_info u = {};

	u.node_id = rd64(rd, RMC_REG_NODE_ID);
	u.node_count = rd64(rd, RMC_REG_NODE_COUNT);
	u.qp_count = rd64(rd, RMC_REG_QP_COUNT);
	u.ctx_count = rd64(rd, RMC_REG_CTX_COUNT);
	u.seg_size = rd->seg_size;
	u.seg_free = rmc_seg_free_bytes(rd);
	u.att_entries = rd64(rd, RMC_REG_ATT_ENTRIES);
	u.sb_depth = rd64(rd, RMC_REG_SB_DEPTH);
	u.spec = !!(rd64(rd, RMC_REG_STATUS) & RMC_STATUS_SPEC);
	u.fabric_up = !!(rd64(rd, RMC_REG_STATUS) & RMC_STATUS_FABRIC_UP);
	u.t_rmc_mhz = rd64(rd, RMC_REG_T_RMC_MHZ);
	u.t_mem_ns = rd64(rd, RMC_REG_T_MEM_NS);
	u.t_llc_ns = rd64(rd, RMC_REG_T_LLC_NS);
	u.t_hop_ns = rd64(rd, RMC_REG_T_HOP_NS);
	u.t_hops = rd64(rd, RMC_REG_T_HOPS);
	u.t_link_gbps = rd64(rd, RMC_REG_T_LINK_GBPS);
	u.t_r2p2_gbps = rd64(rd, RMC_REG_T_R2P2_GBPS);
	u.t_r2p2_count = rd64(rd, RMC_REG_T_R2P2_COUNT);
	u.t_issue_cycles = rd64(rd, RMC_REG_T_ISSUE_CYC);
	u.timeout_ms = rd64(rd, RMC_REG_TIMEOUT_MS);
	return copy_to_user(arg, &u, sizeof(u)) ? -EFAULT : 0;
}

static long rmc_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct rmc_file *f = file->private_data;
	void __user *p = (void __user *)arg;
	u64 c[RMC_CNT_COUNT];
	u32 v;

	switch (cmd) {
	case RMC_IOC_INFO:
		return rmc_info(f->rd, p);
	case RMC_IOC_CTX_REGISTER:
		return rmc_ctx_register(f, p);
	case RMC_IOC_CTX_ATTACH:
		return rmc_ctx_attach(f, p);
	case RMC_IOC_CTX_RELEASE:
		if (get_user(v, (u32 __user *)p))
			return -EFAULT;
		return rmc_ctx_release(f, v);
	case RMC_IOC_QP_CREATE:
		return rmc_qp_create(f, p);
	case RMC_IOC_QP_DESTROY:
		if (get_user(v, (u32 __user *)p))
			return -EFAULT;
		return rmc_qp_destroy(f, v);
	case RMC_IOC_WAIT:
		return rmc_wait(f, p);
	case RMC_IOC_COUNTERS:
		BUILD_BUG_ON(_IOC_SIZE(RMC_IOC_COUNTERS) != sizeof(c));
		rmc_read_counters(f->rd, c);
		return copy_to_user(p, c, sizeof(c)) ? -EFAULT : 0;
	default:
		return -ENOTTY;
	}
}

/* ---- mmap: a mapping holds a reference on the memory it maps ---- */

static void rmc_vma_open(struct vm_area_struct *vma)
{
	struct rmc_mem *m = vma->vm_private_data;

	if (m)
		kref_get(&m->ref);
}

static void rmc_vma_close(struct vm_area_struct *vma)
{
	rmc_mem_put(vma->vm_private_data);
}

static const struct vm_operations_struct rmc_vm_ops = {
	.open = rmc_vma_open,
	.close = rmc_vma_close,
};

/*
 * A doorbell page is inserted at its first access, under rd->lock, only while its QP is still
 * the file's. rmc_qp_drop clears the owner and zaps the file's mappings of the page under the
 * same lock: a page inserted before is zapped (a VMA that can fault is in the file's mapping),
 * an access after faults SIGBUS. Inserting the page in mmap() instead could not be made safe:
 * the new VMA joins the file's mapping only after mmap() returns, so a destroy in between
 * misses it, even with the page inserted under the lock.
 */
static vm_fault_t rmc_db_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct rmc_file *f = vma->vm_file->private_data;
	struct rmc_dev *rd = f->rd;
	unsigned long idx = vma->vm_pgoff & 0xffff;
	vm_fault_t ret = VM_FAULT_SIGBUS;

	mutex_lock(&rd->lock);
	if (idx < RMC_QP_COUNT && rd->qp[idx].owner == f)
		ret = vmf_insert_pfn(vma, vma->vm_start,
				     (rd->regs_phys + RMC_DB_REG(idx, 0)) >> PAGE_SHIFT);
	mutex_unlock(&rd->lock);
	return ret;
}

static const struct vm_operations_struct rmc_db_vm_ops = {
	.fault = rmc_db_fault,
};

static int rmc_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct rmc_file *f = file->private_data;
	struct rmc_dev *rd = f->rd;
	unsigned long type = vma->vm_pgoff >> 16, idx = vma->vm_pgoff & 0xffff;
	size_t len = vma->vm_end - vma->vm_start;
	struct rmc_mem *m = NULL;
	int ret = -EINVAL;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	mutex_lock(&rd->lock);
	switch (type) {
	case MAP_CTX:
		if (idx < RMC_CTX_COUNT && rmc_file_has_ctx(f, idx))
			m = rd->ctx[idx].mem;
		break;
	case MAP_WQ:
	case MAP_CQ:
		if (idx < RMC_QP_COUNT && rd->qp[idx].owner == f)
			m = type == MAP_WQ ? rd->qp[idx].wq : rd->qp[idx].cq;
		break;
	case MAP_DB:
		if (idx < RMC_QP_COUNT && rd->qp[idx].owner == f && len == PAGE_SIZE) {
			/* nothing mapped yet: rmc_db_fault inserts the page while the QP is f's */
			vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP;
			vma->vm_page_prot = pgprot_device(vma->vm_page_prot);
			vma->vm_ops = &rmc_db_vm_ops;
			ret = 0;
		} else if (idx < RMC_QP_COUNT && rd->qp[idx].owner == f) {
			ret = -EINVAL; /* one page exactly */
		} else {
			ret = -ENOENT;
		}
		mutex_unlock(&rd->lock);
		return ret;
	}
	if (!m || len > m->size) {
		mutex_unlock(&rd->lock);
		return m ? -EINVAL : -ENOENT;
	}
	kref_get(&m->ref);
	mutex_unlock(&rd->lock);
	vma->vm_flags |= VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP;
	ret = remap_pfn_range(vma, vma->vm_start, m->phys >> PAGE_SHIFT, len, vma->vm_page_prot);
	if (ret) {
		rmc_mem_put(m);
		return ret;
	}
	vma->vm_private_data = m;
	vma->vm_ops = &rmc_vm_ops;
	return 0;
}

static int rmc_open(struct inode *inode, struct file *file)
{
	struct rmc_file *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	f->rd = the_rmc;
	f->mapping = file->f_mapping;
	file->private_data = f;
	return 0;
}

static int rmc_release(struct inode *inode, struct file *file)
{
	struct rmc_file *f = file->private_data;
	struct rmc_dev *rd = f->rd;
	unsigned int i;

	mutex_lock(&rd->lock);
	f->mapping = NULL; /* no mapping is left: each held the file */
	for (i = 0; i < RMC_QP_COUNT; i++)
		if (rd->qp[i].owner == f)
			rmc_qp_drop(rd, i);
	for (i = 0; i < RMC_CTX_COUNT; i++)
		if (rd->ctx[i].owner == f)
			rmc_ctx_drop(rd, i);
	mutex_unlock(&rd->lock);
	kfree(f);
	return 0;
}

static const struct file_operations rmc_fops = {
	.owner = THIS_MODULE,
	.open = rmc_open,
	.release = rmc_release,
	.unlocked_ioctl = rmc_ioctl,
	.mmap = rmc_mmap,
};

static ssize_t counters_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	static const char *const names[] = { RMC_UAPI_COUNTER_NAMES };
	struct rmc_dev *rd = dev_get_drvdata(dev);
	u64 c[RMC_CNT_COUNT];
	unsigned int i;
	int n = 0;

	BUILD_BUG_ON(ARRAY_SIZE(names) != RMC_CNT_COUNT);
	rmc_read_counters(rd, c);
	for (i = 0; i < RMC_CNT_COUNT; i++)
		n += sysfs_emit_at(buf, n, "%s=%llu\n", names[i], c[i]);
	return n;
}
static DEVICE_ATTR_RO(counters);

static int rmc_probe(struct platform_device *pdev)
{
	struct device *dev = &pdev->dev;
	struct rmc_dev *rd;
	struct resource *res;
	struct device_node *np;
	struct reserved_mem *rmem = NULL;
	unsigned int i;
	int ret;

	if (the_rmc)
		return -EBUSY; /* one RMC per node */
	rd = devm_kzalloc(dev, sizeof(*rd), GFP_KERNEL);
	if (!rd)
		return -ENOMEM;
	rd->dev = dev;
	mutex_init(&rd->lock);
	spin_lock_init(&rd->range_lock);
	for (i = 0; i < RMC_QP_COUNT; i++)
		init_waitqueue_head(&rd->qp[i].wait);
	rd->regs = devm_platform_get_and_ioremap_resource(pdev, 0, &res);
	if (IS_ERR(rd->regs))
		return PTR_ERR(rd->regs);
	rd->regs_phys = res->start;
	if (readq(rd->regs + RMC_REG_ID) != RMC_ID_VALUE) {
		dev_err(dev, "unexpected ID %#llx (want %#llx): not a rackemu RMC\n",
			readq(rd->regs + RMC_REG_ID), (u64)RMC_ID_VALUE);
		return -ENODEV;
	}
	np = of_parse_phandle(dev->of_node, "memory-region", 0);
	if (np) {
		rmem = of_reserved_mem_lookup(np);
		of_node_put(np);
	}
	if (rmem) {
		rd->seg_base = rmem->base;
		rd->seg_size = rmem->size;
		if (rd->seg_base != rd64(rd, RMC_REG_SEG_BASE) || rd->seg_size != rd64(rd, RMC_REG_SEG_SIZE))
			dev_warn(dev, "device tree segment %pa+%#llx differs from the device's %#llx+%#llx\n",
				 &rd->seg_base, rd->seg_size, rd64(rd, RMC_REG_SEG_BASE), rd64(rd, RMC_REG_SEG_SIZE));
		rd->seg_kva = devm_memremap(dev, rd->seg_base, rd->seg_size, MEMREMAP_WB);
		if (IS_ERR(rd->seg_kva))
			return PTR_ERR(rd->seg_kva);
	} else {
		dev_warn(dev, "no memory-region: contexts cannot be registered (machine rmc-segment-mb=0?)\n");
	}
	rd->irq = platform_get_irq(pdev, 0);
	if (rd->irq < 0)
		return rd->irq;
	ret = devm_request_irq(dev, rd->irq, rmc_irq, 0, "sonuma-rmc", rd);
	if (ret)
		return ret;
	platform_set_drvdata(pdev, rd);
	/* whatever ran before (firmware, an earlier load) leaves no QP or context behind */
	for (i = 0; i < RMC_QP_COUNT; i++)
		wr64(rd, RMC_QP_REG(i, QP_CTRL), 0);
	for (i = 0; i < RMC_CTX_COUNT; i++)
		wr64(rd, RMC_CTX_REG(i, CTX_CTRL), 0);
	wr64(rd, RMC_REG_IRQ_STATUS, ~0ull);
	wr64(rd, RMC_REG_CTRL, RMC_CTRL_EN);
	the_rmc = rd;
	rd->misc.minor = MISC_DYNAMIC_MINOR;
	rd->misc.name = "rmc";
	rd->misc.fops = &rmc_fops;
	rd->misc.mode = 0666;
	ret = misc_register(&rd->misc);
	if (ret) {
		wr64(rd, RMC_REG_CTRL, 0);
		the_rmc = NULL;
		return ret;
	}
	ret = device_create_file(dev, &dev_attr_counters);
	if (ret)
		dev_warn(dev, "no sysfs counters (%d)\n", ret);
	dev_info(dev, "soNUMA RMC: node %llu of %llu, %u QPs, %u contexts, segment %pa+%llu MiB, ATT %llu x %llu blocks%s\n",
		 rd64(rd, RMC_REG_NODE_ID), rd64(rd, RMC_REG_NODE_COUNT), RMC_QP_COUNT, RMC_CTX_COUNT,
		 &rd->seg_base, rd->seg_size >> 20, rd64(rd, RMC_REG_ATT_ENTRIES), rd64(rd, RMC_REG_SB_DEPTH),
		 (rd64(rd, RMC_REG_STATUS) & RMC_STATUS_SPEC) ? ", speculation" : ", no speculation");
	return 0;
}

static int rmc_remove(struct platform_device *pdev)
{
	struct rmc_dev *rd = platform_get_drvdata(pdev);

	device_remove_file(&pdev->dev, &dev_attr_counters);
	misc_deregister(&rd->misc); /* no file is open: the module is pinned while one is */
	wr64(rd, RMC_REG_CTRL, 0);
	the_rmc = NULL;
	return 0;
}

static const struct of_device_id rmc_of_match[] = {
	{ .compatible = RACKEMU_RMC_COMPAT },
	{}
};
MODULE_DEVICE_TABLE(of, rmc_of_match);

static struct platform_driver rmc_driver = {
	.probe = rmc_probe,
	.remove = rmc_remove,
	.driver = {
		.name = "sonuma-rmc",
		.of_match_table = rmc_of_match,
	},
};
module_platform_driver(rmc_driver);

MODULE_DESCRIPTION("rackemu soNUMA Remote Memory Controller with LightSABRes");
MODULE_LICENSE("GPL");
