// SPDX-License-Identifier: GPL-2.0
/*
 * rackemu_rnic: Linux driver of rackemu's RoCEv2 RNIC (docs/rnic.md for the device,
 * docs/rnic-verbs.md for this driver and the verbs library).
 *
 * Binds PCI 1af4:10f5 and exposes /dev/rnicN. Every verbs object (PD, MR, CQ, QP) is created by
 * the device's command interface on behalf of one open file and belongs to it: only that file
 * uses, maps or destroys it, and closing the file (or the process dying) destroys all of it,
 * QPs first, then CQs, MRs (their pages unpinned) and PDs. An MR pins the user pages
 * (pin_user_pages_fast, FOLL_LONGTERM, charged to RLIMIT_MEMLOCK) and hands the device their DMA
 * addresses as a page list; an MR over a PFN mapping (VM_PFNMAP: the node's persistent memory as
 * /dev/rkpmem0 maps it) is accepted only when every page lies inside the device tree's
 * `pmem-region`, and is registered by its physical pages, unpinned (nothing to pin: the region
 * is no memory the kernel reuses). Queue rings are zeroed kernel pages the owner maps; a mapping keeps
 * its ring allocated until it goes, whatever the order of destroy, munmap and close. A doorbell
 * page is inserted at its first access by a fault handler that checks, under the device mutex,
 * that the object is still the file's, and it is revoked (unmapped) when its object is
 * destroyed, so a later object with the same index is never reachable through a stale mapping,
 * whatever the timing of mmap against destroy. Each uid may hold a share of every object kind
 * and a bounded amount of ring memory; the last objects of each kind are root's (module
 * parameters, docs/rnic-verbs.md "Limits"). The device's counters are root's too: they count
 * every user's traffic. Completion interrupts: the process arms a CQ
 * through its doorbell page, and RNIC_IOC_WAIT_CQ sleeps until the CQ fires.
 * Asynchronous events: the device writes them into one event queue (RNIC_REG_EQ_*) the driver
 * owns, interrupting on vector 0 while armed; the handler hands each to the file that owns its
 * QP or CQ (port events to every open file), where RNIC_IOC_GET_ASYNC_EVENT takes them.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/io.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/of.h>
#include <linux/of_address.h>
#include <linux/pci.h>
#include <linux/poll.h>
#include <linux/sched/mm.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "rackemu/rnic_regs.h"
#include "rackemu/rnic_uapi.h"

#define COOKIE(type, idx) RNIC_MAP_OFF(type, idx, PAGE_SHIFT)

struct rnic_file;

/*
 * Per-uid limits (docs/rnic-verbs.md "Limits"). An unprivileged uid (all its files together) may
 * hold at most max_<kind>_per_uid objects of each kind and max_ring_kib_per_uid KiB of queue
 * rings; the last reserved_<kind> slots of each kind are left to privileged files (opened with
 * CAP_SYS_ADMIN or by uid 0), which no limit applies to. Refusals are counted.
 */
enum rnic_kind { RNIC_K_PD, RNIC_K_MR, RNIC_K_CQ, RNIC_K_QP, RNIC_KINDS };
static const char *const rnic_kind_name[RNIC_KINDS] = { "pd", "mr", "cq", "qp" };
static const u32 rnic_kind_max[RNIC_KINDS] = { RNIC_MAX_PD, RNIC_MAX_MR, RNIC_MAX_CQ, RNIC_MAX_QP };

static unsigned int max_pd_per_uid = RNIC_MAX_PD / 4;
module_param(max_pd_per_uid, uint, 0644);
MODULE_PARM_DESC(max_pd_per_uid, "PDs one unprivileged uid may hold (default 64 of 256)");
static unsigned int max_mr_per_uid = RNIC_MAX_MR / 4;
module_param(max_mr_per_uid, uint, 0644);
MODULE_PARM_DESC(max_mr_per_uid, "MRs one unprivileged uid may hold (default 1024 of 4096)");
static unsigned int max_cq_per_uid = RNIC_MAX_CQ / 4;
module_param(max_cq_per_uid, uint, 0644);
MODULE_PARM_DESC(max_cq_per_uid, "CQs one unprivileged uid may hold (default 64 of 256)");
static unsigned int max_qp_per_uid = RNIC_MAX_QP / 4;
module_param(max_qp_per_uid, uint, 0644);
MODULE_PARM_DESC(max_qp_per_uid, "QPs one unprivileged uid may hold (default 64 of 256)");
static unsigned int reserved_pd = RNIC_MAX_PD / 16;
module_param(reserved_pd, uint, 0644);
MODULE_PARM_DESC(reserved_pd, "PDs only privileged files may take (default 16)");
static unsigned int reserved_mr = RNIC_MAX_MR / 16;
module_param(reserved_mr, uint, 0644);
MODULE_PARM_DESC(reserved_mr, "MRs only privileged files may take (default 256)");
static unsigned int reserved_cq = RNIC_MAX_CQ / 16;
module_param(reserved_cq, uint, 0644);
MODULE_PARM_DESC(reserved_cq, "CQs only privileged files may take (default 16)");
static unsigned int reserved_qp = RNIC_MAX_QP / 16;
module_param(reserved_qp, uint, 0644);
MODULE_PARM_DESC(reserved_qp, "QPs only privileged files may take (default 16)");
static unsigned int max_ring_kib_per_uid = 16384;
module_param(max_ring_kib_per_uid, uint, 0644);
MODULE_PARM_DESC(max_ring_kib_per_uid, "KiB of kernel memory the queue rings of one unprivileged uid may take (default 16384)");
static bool unprivileged_counters;
module_param(unprivileged_counters, bool, 0644);
MODULE_PARM_DESC(unprivileged_counters, "let every user read the device-wide counters (default N: privileged files only)");

static unsigned int *const rnic_uid_max[RNIC_KINDS] = {
	&max_pd_per_uid, &max_mr_per_uid, &max_cq_per_uid, &max_qp_per_uid,
};
static unsigned int *const rnic_reserved[RNIC_KINDS] = {
	&reserved_pd, &reserved_mr, &reserved_cq, &reserved_qp,
};

/* refusals: an object beyond the uid's share, one of root's reserve, ring memory beyond the bound */
static atomic_long_t refused_uid_quota, refused_reserve, refused_ring_mem, refused_counters;

static int rnic_refused_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%ld\n", atomic_long_read(kp->arg));
}

static const struct kernel_param_ops rnic_refused_ops = { .get = rnic_refused_get };
module_param_cb(refused_uid_quota, &rnic_refused_ops, &refused_uid_quota, 0444);
MODULE_PARM_DESC(refused_uid_quota, "objects refused because their uid held max_<kind>_per_uid");
module_param_cb(refused_reserve, &rnic_refused_ops, &refused_reserve, 0444);
MODULE_PARM_DESC(refused_reserve, "objects refused to unprivileged files because only root's reserve was left");
module_param_cb(refused_ring_mem, &rnic_refused_ops, &refused_ring_mem, 0444);
MODULE_PARM_DESC(refused_ring_mem, "CQs and QPs refused because their rings exceeded max_ring_kib_per_uid");
module_param_cb(refused_counters, &rnic_refused_ops, &refused_counters, 0444);
MODULE_PARM_DESC(refused_counters, "counter reads refused to unprivileged files");

/* What one uid holds on one device: shared by its open files and its rings (rd->users_lock). */
struct rnic_user {
	struct list_head node;      /* in rd->users */
	struct rnic_dev *rd;
	kuid_t uid;
	unsigned int refs;          /* open files and rings; rd->users_lock */
	u64 ring_bytes;             /* rd->users_lock */
	u32 objs[RNIC_KINDS];       /* rd->lock */
};

/* A queue ring: zeroed pages, freed when the object and the last mapping are gone. */
struct rnic_ring {
	struct kref ref;
	struct device *dev;
	struct rnic_user *user;     /* charged with size */
	void *kva;
	size_t size;    /* page-rounded */
	dma_addr_t dma;
};

struct rnic_mr {
	struct rnic_file *owner;    /* NULL: free */
	u32 key;
	u32 pdn;
	struct page **pages;
	unsigned long npages;
	struct sg_table sgt;
	struct mm_struct *mm;       /* charged for the pinned pages */
	dma_addr_t *pmem;           /* persistent memory (a PFN mapping): each page's DMA address */
};

struct rnic_cq {
	struct rnic_file *owner;
	struct rnic_ring *ring;
	u64 events;                 /* times the CQ fired (interrupt) */
	bool error;
	wait_queue_head_t wait;
};

struct rnic_qp {
	struct rnic_file *owner;
	struct rnic_ring *sq, *rq;
	u32 send_cqn, recv_cqn, pdn;
};

/*
 * One interrupt vector: its handler acknowledges only its own INT_STATUS bit (MSI-X), or all of
 * them (INTx, one line). CQs name their vector at creation (verbs' comp_vector).
 */
struct rnic_vec {
	struct rnic_dev *rd;
	u32 mask;
	char name[24];              /* /proc/interrupts: rackemu_rnic-v<N> */
};

#define RNIC_EQ_LOG2   8u /* the driver's event queue: 256 entries (8 KiB) */
#define RNIC_EQ_VECTOR 0u /* on the async vector, beside the QP/CQ error bitmaps */

struct rnic_dev {
	struct pci_dev *pdev;
	void __iomem *regs;
	resource_size_t db_phys;
	int id;
	char name[16];
	struct miscdevice misc;
	int nvec;
	struct rnic_vec vec[RNIC_MSIX_VECTORS];
	struct mutex lock;          /* objects and the command block */
	spinlock_t irq_lock;        /* events, error flags */
	struct rnic_cmd *cmd;
	dma_addr_t cmd_dma;
	struct rnic_file *pd_owner[RNIC_MAX_PD + 1];
	struct rnic_file *dm_owner[RNIC_MAX_DM + 1]; /* device-memory allocations by id */
	struct rnic_mr *mr;         /* RNIC_MAX_MR */
	struct rnic_cq cq[RNIC_MAX_CQ];
	struct rnic_qp qp[RNIC_MAX_QP];
	/* async events (rd->irq_lock): the device's queue, and the open files to deliver to */
	struct rnic_eqe *eq;
	dma_addr_t eq_dma;
	u32 eq_ci;
	struct list_head files;
	/* limits: objects of each kind in use (rd->lock), the uids that hold any (rd->users_lock) */
	u32 in_use[RNIC_KINDS];
	spinlock_t users_lock;
	struct list_head users;
};

struct rnic_file {
	struct rnic_dev *rd;
	struct address_space *mapping;
	struct rnic_user *user;     /* the opener's uid */
	bool priv;                  /* opened with CAP_SYS_ADMIN or by uid 0: no limit, reserve, counters */
	/* completion channel: CQs of this file that fired since the last read() (rd->irq_lock) */
	DECLARE_BITMAP(fired, RNIC_MAX_CQ);
	wait_queue_head_t wait;
	/* async events for this file (rd->irq_lock): a ring, the newest dropped when full */
	struct list_head node;      /* in rd->files */
	struct rnic_uasync_event ev[RNIC_FILE_EVENTS];
	u32 ev_head, ev_tail, ev_lost;
};

static DEFINE_IDA(rnic_ida);

static inline u32 rd32(struct rnic_dev *rd, u32 off) { return readl(rd->regs + off); }
static inline void wr32(struct rnic_dev *rd, u32 off, u32 v) { writel(v, rd->regs + off); }

static const char *const cmd_status_name[RNIC_CMD_ST_COUNT] = {
	"ok", "bad opcode", "no such PD", "no such MR", "no such CQ", "no such QP", "busy",
	"no resource", "bad parameter", "address outside RAM", "bad QP state transition",
	"bad QP attribute", "bad access flags",
};

static int cmd_errno(u16 st)
{
	switch (st) {
	case RNIC_CMD_ST_OK: return 0;
	case RNIC_CMD_ST_BAD_PD: case RNIC_CMD_ST_BAD_MR: case RNIC_CMD_ST_BAD_CQ:
	case RNIC_CMD_ST_BAD_QP: return -ENOENT;
	case RNIC_CMD_ST_BUSY: return -EBUSY;
	case RNIC_CMD_ST_NO_RESOURCE: return -ENOSPC;
	case RNIC_CMD_ST_BAD_ADDR: return -EFAULT;
	case RNIC_CMD_ST_BAD_STATE: return -EPERM;
	case RNIC_CMD_ST_BAD_ACCESS: return -EACCES;
	default: return -EINVAL;
	}
}

/*
 * Run the command in rd->cmd (rd->lock held; opcode and inputs filled). The device executes it
 * before the CMD_EXEC write returns. A refusal is logged with the command and the status.
 */
static int rnic_exec(struct rnic_dev *rd, const char *what)
{
	u16 st;

	rd->cmd->status = 0xffff; /* writel orders the block's stores before the doorbell */
	wr32(rd, RNIC_REG_CMD_EXEC, RNIC_CMD_EXEC_GO);
	st = READ_ONCE(rd->cmd->status);
	if (st == 0xffff) /* a block outside RAM is never written back */
		st = (u16)rd32(rd, RNIC_REG_CMD_STATUS);
	if (st != RNIC_CMD_ST_OK)
		dev_err(&rd->pdev->dev, "%s refused by the device: %s (status %u)\n", what,
			st < RNIC_CMD_ST_COUNT ? cmd_status_name[st] : "unknown", st);
	return cmd_errno(st);
}

static void rnic_cmd_init(struct rnic_dev *rd, u16 op, u32 handle)
{
	memset(rd->cmd, 0, sizeof(*rd->cmd));
	rd->cmd->opcode = op;
	rd->cmd->handle = handle;
}

/* ---- limits ---- */

/* The rnic_user of uid on rd, with a reference; NULL if out of memory. */
static struct rnic_user *rnic_user_get(struct rnic_dev *rd, kuid_t uid)
{
	struct rnic_user *u, *n = kzalloc(sizeof(*n), GFP_KERNEL_ACCOUNT);

	if (!n)
		return NULL;
	spin_lock(&rd->users_lock);
	list_for_each_entry(u, &rd->users, node) {
		if (uid_eq(u->uid, uid)) {
			u->refs++;
			spin_unlock(&rd->users_lock);
			kfree(n);
			return u;
		}
	}
	n->rd = rd;
	n->uid = uid;
	n->refs = 1;
	list_add(&n->node, &rd->users);
	spin_unlock(&rd->users_lock);
	return n;
}

static void rnic_user_put(struct rnic_user *u)
{
	struct rnic_dev *rd = u->rd;

	spin_lock(&rd->users_lock);
	if (--u->refs) {
		spin_unlock(&rd->users_lock);
		return;
	}
	list_del(&u->node);
	spin_unlock(&rd->users_lock);
	kfree(u);
}

/*
 * May f create one more object of kind k (rd->lock held)? An unprivileged file is refused
 * -EDQUOT beyond its uid's share and -ENOSPC when only root's reserve is left; both counted.
 */
static int rnic_quota_check(struct rnic_file *f, enum rnic_kind k)
{
	struct rnic_dev *rd = f->rd;
	unsigned int share = READ_ONCE(*rnic_uid_max[k]), reserve = READ_ONCE(*rnic_reserved[k]);

	if (f->priv)
		return 0;
	if (f->user->objs[k] >= share) {
		atomic_long_inc(&refused_uid_quota);
		dev_warn_ratelimited(&rd->pdev->dev, "uid %u holds %u %ss, its share (max_%s_per_uid): refused\n",
				     from_kuid_munged(&init_user_ns, f->user->uid), f->user->objs[k],
				     rnic_kind_name[k], rnic_kind_name[k]);
		return -EDQUOT;
	}
	if (rd->in_use[k] + reserve >= rnic_kind_max[k]) {
		atomic_long_inc(&refused_reserve);
		dev_warn_ratelimited(&rd->pdev->dev, "%u of %u %ss in use, the last %u are root's (reserved_%s): uid %u refused\n",
				     rd->in_use[k], rnic_kind_max[k], rnic_kind_name[k], reserve, rnic_kind_name[k],
				     from_kuid_munged(&init_user_ns, f->user->uid));
		return -ENOSPC;
	}
	return 0;
}

/* f created (took) or destroyed (put back) an object of kind k; rd->lock held. */
static void rnic_quota_take(struct rnic_file *f, enum rnic_kind k)
{
	f->user->objs[k]++;
	f->rd->in_use[k]++;
}

static void rnic_quota_put(struct rnic_file *f, enum rnic_kind k)
{
	f->user->objs[k]--;
	f->rd->in_use[k]--;
}

/* ---- rings ---- */

static void rnic_ring_free(struct kref *ref)
{
	struct rnic_ring *r = container_of(ref, struct rnic_ring, ref);
	struct rnic_user *u = r->user;
	size_t size = r->size;

	dma_unmap_single(r->dev, r->dma, size, DMA_BIDIRECTIONAL);
	free_pages_exact(r->kva, size);
	kfree(r);
	spin_lock(&u->rd->users_lock);
	u->ring_bytes -= size;
	spin_unlock(&u->rd->users_lock);
	rnic_user_put(u);
}

static void rnic_ring_put(struct rnic_ring *r)
{
	if (r)
		kref_put(&r->ref, rnic_ring_free);
}

/*
 * A ring of bytes for f: charged to f's uid (refused -EDQUOT beyond max_ring_kib_per_uid unless
 * f is privileged) and to its memory cgroup (__GFP_ACCOUNT); -ENOMEM without a warning splat.
 */
static struct rnic_ring *rnic_ring_alloc(struct rnic_file *f, size_t bytes)
{
	struct rnic_dev *rd = f->rd;
	struct rnic_user *u = f->user;
	u64 limit = (u64)READ_ONCE(max_ring_kib_per_uid) << 10;
	size_t size = PAGE_ALIGN(bytes);
	struct rnic_ring *r;

	spin_lock(&rd->users_lock);
	if (!f->priv && u->ring_bytes + size > limit) {
		u64 held = u->ring_bytes;

		spin_unlock(&rd->users_lock);
		atomic_long_inc(&refused_ring_mem);
		dev_warn_ratelimited(&rd->pdev->dev, "uid %u: rings of %llu KiB + %zu KiB exceed max_ring_kib_per_uid (%llu): refused\n",
				     from_kuid_munged(&init_user_ns, u->uid), held >> 10, size >> 10, limit >> 10);
		return ERR_PTR(-EDQUOT);
	}
	u->ring_bytes += size;
	u->refs++;
	spin_unlock(&rd->users_lock);

	r = kzalloc(sizeof(*r), GFP_KERNEL_ACCOUNT);
	if (!r)
		goto fail;
	kref_init(&r->ref);
	r->dev = &rd->pdev->dev;
	r->user = u;
	r->size = size;
	r->kva = alloc_pages_exact(r->size, GFP_KERNEL_ACCOUNT | __GFP_ZERO | __GFP_NOWARN);
	if (!r->kva)
		goto fail_free;
	r->dma = dma_map_single(r->dev, r->kva, r->size, DMA_BIDIRECTIONAL);
	if (dma_mapping_error(r->dev, r->dma)) {
		free_pages_exact(r->kva, r->size);
		goto fail_free;
	}
	return r;
fail_free:
	kfree(r);
fail:
	dev_warn_ratelimited(&rd->pdev->dev, "no memory for a ring of %zu KiB\n", size >> 10);
	spin_lock(&rd->users_lock);
	u->ring_bytes -= size;
	spin_unlock(&rd->users_lock);
	rnic_user_put(u);
	return ERR_PTR(-ENOMEM);
}

/* ---- protection domains ---- */

static int rnic_alloc_pd(struct rnic_file *f, u32 __user *p)
{
	struct rnic_dev *rd = f->rd;
	int ret;
	u32 pdn;

	mutex_lock(&rd->lock);
	ret = rnic_quota_check(f, RNIC_K_PD);
	if (ret) {
		mutex_unlock(&rd->lock);
		return ret;
	}
	rnic_cmd_init(rd, RNIC_CMD_CREATE_PD, 0);
	ret = rnic_exec(rd, "CREATE_PD");
	pdn = rd->cmd->handle;
	if (!ret && (pdn == 0 || pdn > RNIC_MAX_PD)) {
		dev_err(&rd->pdev->dev, "CREATE_PD returned PD %u outside 1..%u\n", pdn, RNIC_MAX_PD);
		ret = -EIO;
	}
	if (!ret) {
		rd->pd_owner[pdn] = f;
		rnic_quota_take(f, RNIC_K_PD);
	}
	mutex_unlock(&rd->lock);
	if (!ret && put_user(pdn, p))
		return -EFAULT; /* the PD stays with the file and goes at close */
	return ret;
}

static bool rnic_pd_ok(struct rnic_file *f, u32 pdn)
{
	return pdn >= 1 && pdn <= RNIC_MAX_PD && f->rd->pd_owner[pdn] == f;
}

static int rnic_dealloc_pd_locked(struct rnic_file *f, u32 pdn)
{
	struct rnic_dev *rd = f->rd;
	int ret;

	if (!rnic_pd_ok(f, pdn)) {
		dev_err(&rd->pdev->dev, "DEALLOC_PD: PD %u is not this file's\n", pdn);
		return -ENOENT;
	}
	rnic_cmd_init(rd, RNIC_CMD_DESTROY_PD, pdn);
	ret = rnic_exec(rd, "DESTROY_PD");
	if (!ret) {
		rd->pd_owner[pdn] = NULL;
		rnic_quota_put(f, RNIC_K_PD);
	}
	return ret;
}

/* ---- memory regions ---- */

static void rnic_mr_unpin(struct rnic_dev *rd, struct rnic_mr *m)
{
	if (m->pmem) {
		unsigned long i;

		for (i = 0; i < m->npages && m->pmem[i]; i++)
			dma_unmap_resource(&rd->pdev->dev, m->pmem[i], PAGE_SIZE, DMA_BIDIRECTIONAL, 0);
		kvfree(m->pmem);
	}
	if (m->sgt.sgl) {
		dma_unmap_sgtable(&rd->pdev->dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
		sg_free_table(&m->sgt);
	}
	if (m->pages) {
		unpin_user_pages_dirty_lock(m->pages, m->npages, true);
		kvfree(m->pages);
	}
	if (m->mm) {
		atomic64_sub(m->npages, &m->mm->pinned_vm);
		mmdrop(m->mm);
	}
	memset(m, 0, sizeof(*m));
}

/* Whether the caller's mapping at addr is a PFN mapping (no struct pages to pin). */
static bool rnic_is_pfnmap(u64 addr)
{
	struct vm_area_struct *vma;
	bool pfnmap;

	mmap_read_lock(current->mm);
	vma = vma_lookup(current->mm, (unsigned long)addr);
	pfnmap = vma && (vma->vm_flags & VM_PFNMAP);
	mmap_read_unlock(current->mm);
	return pfnmap;
}

/*
 * A persistent MR (docs/rnic-verbs.md "Persistent memory regions"): m->npages pages from page
 * `first` of the caller's PFN mappings, each of which must lie inside the device tree's
 * `pmem-region` (of_find_compatible_node): a user never registers other physical memory.
 * Fills m->pmem with each page's DMA address. -EINVAL: no region, a page not mapped, not a PFN
 * mapping or outside the region.
 */
static int rnic_mr_pmem(struct device *dev, const struct rnic_ureg_mr *u, unsigned long first,
			struct rnic_mr *m)
{
	struct device_node *np = of_find_compatible_node(NULL, NULL, "pmem-region");
	struct resource res;
	unsigned long i, pfn = 0;
	int ret;

	ret = np ? of_address_to_resource(np, 0, &res) : -ENODEV;
	of_node_put(np);
	if (ret) {
		dev_err(dev, "REG_MR: [0x%llx, +%llu) is a PFN mapping and the node has no pmem-region\n",
			u->addr, u->length);
		return -EINVAL;
	}
	m->pmem = kvcalloc(m->npages, sizeof(*m->pmem), GFP_KERNEL_ACCOUNT);
	if (!m->pmem)
		return -ENOMEM;
	mmap_read_lock(current->mm);
	for (i = 0; i < m->npages; i++) {
		unsigned long va = (first + i) << PAGE_SHIFT;
		struct vm_area_struct *vma = vma_lookup(current->mm, va);
		phys_addr_t pa;

		if (!vma || !(vma->vm_flags & VM_PFNMAP) || follow_pfn(vma, va, &pfn)) {
			dev_err(dev, "REG_MR: page 0x%lx of [0x%llx, +%llu) is not a PFN mapping\n", va, u->addr,
				u->length);
			ret = -EINVAL;
			break;
		}
		pa = PFN_PHYS(pfn);
		if (pa < res.start || pa > res.end || res.end - pa < PAGE_SIZE - 1) {
			dev_err(dev, "REG_MR: page 0x%lx of [0x%llx, +%llu) is outside the pmem-region\n", va,
				u->addr, u->length);
			ret = -EINVAL;
			break;
		}
		m->pmem[i] = dma_map_resource(dev, pa, PAGE_SIZE, DMA_BIDIRECTIONAL, 0);
		if (dma_mapping_error(dev, m->pmem[i])) {
			m->pmem[i] = 0;
			ret = -EIO;
			break;
		}
	}
	mmap_read_unlock(current->mm);
	return ret;
}

static int rnic_reg_mr(struct rnic_file *f, void __user *p)
{
	struct rnic_dev *rd = f->rd;
	struct device *dev = &rd->pdev->dev;
	struct rnic_ureg_mr u;
	struct rnic_mr m = {};
	struct sg_dma_page_iter it;
	unsigned long first, last, lock_limit, i = 0;
	u64 *list = NULL;
	dma_addr_t list_dma;
	long got = 0;
	int ret;

	if (copy_from_user(&u, p, sizeof(u)))
		return -EFAULT;
	if (!u.length || u.addr + u.length < u.addr) {
		dev_err(dev, "REG_MR: length %llu at 0x%llx is empty or wraps\n", u.length, u.addr);
		return -EINVAL;
	}
	first = u.addr >> PAGE_SHIFT;
	last = (u.addr + u.length - 1) >> PAGE_SHIFT;
	m.npages = last - first + 1;
	if (m.npages > RNIC_MR_MAX_PAGES) {
		dev_err(dev, "REG_MR: %lu pages, the device takes at most %u per region\n", m.npages,
			RNIC_MR_MAX_PAGES);
		return -EINVAL;
	}
	if (u.access & ~RNIC_ACCESS_ALL) {
		dev_err(dev, "REG_MR: unknown access flags 0x%x\n", u.access & ~RNIC_ACCESS_ALL);
		return -EINVAL;
	}
	/* refuse beyond the uid's share before pinning anything (checked again at registration) */
	mutex_lock(&rd->lock);
	ret = rnic_quota_check(f, RNIC_K_MR);
	mutex_unlock(&rd->lock);
	if (ret)
		return ret;
	if (rnic_is_pfnmap(u.addr)) { /* persistent memory: nothing to pin or charge */
		ret = rnic_mr_pmem(dev, &u, first, &m);
		if (ret)
			goto fail;
		goto pages_ready;
	}
	/* charge the pinned pages to the process, as ib_umem does */
	lock_limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	if (atomic64_add_return(m.npages, &current->mm->pinned_vm) > lock_limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(m.npages, &current->mm->pinned_vm);
		dev_err(dev, "REG_MR: pinning %lu pages exceeds RLIMIT_MEMLOCK (%lu pages); raise ulimit -l\n",
			m.npages, lock_limit);
		return -ENOMEM;
	}
	m.mm = current->mm;
	mmgrab(m.mm);
	m.pages = kvcalloc(m.npages, sizeof(*m.pages), GFP_KERNEL_ACCOUNT);
	if (!m.pages) {
		ret = -ENOMEM;
		goto fail;
	}
	while (got < (long)m.npages) {
		long n = pin_user_pages_fast((first + got) << PAGE_SHIFT, m.npages - got,
					     FOLL_WRITE | FOLL_LONGTERM, m.pages + got);
		if (n <= 0) {
			dev_err(dev, "REG_MR: cannot pin page 0x%lx of [0x%llx, +%llu) (%ld): not mapped writable?\n",
				(first + got) << PAGE_SHIFT, u.addr, u.length, n);
			m.npages = got; /* unpin what was pinned; the charge follows */
			atomic64_sub((last - first + 1) - got, &current->mm->pinned_vm);
			ret = n ? (int)n : -EFAULT;
			goto fail;
		}
		got += n;
	}
	ret = sg_alloc_table_from_pages(&m.sgt, m.pages, m.npages, 0, m.npages << PAGE_SHIFT, GFP_KERNEL_ACCOUNT);
	if (ret)
		goto fail;
	ret = dma_map_sgtable(dev, &m.sgt, DMA_BIDIRECTIONAL, 0);
	if (ret) {
		sg_free_table(&m.sgt);
		m.sgt.sgl = NULL;
		goto fail;
	}
pages_ready:
	list = dma_alloc_coherent(dev, m.npages * sizeof(u64), &list_dma, GFP_KERNEL);
	if (!list) {
		ret = -ENOMEM;
		goto fail;
	}
	if (m.pmem) {
		for (i = 0; i < m.npages; i++)
			list[i] = m.pmem[i];
	} else {
		for_each_sgtable_dma_page(&m.sgt, &it, 0)
			list[i++] = sg_page_iter_dma_address(&it);
	}

	mutex_lock(&rd->lock);
	if (!rnic_pd_ok(f, u.pdn)) {
		mutex_unlock(&rd->lock);
		dev_err(dev, "REG_MR: PD %u is not this file's\n", u.pdn);
		ret = -ENOENT;
		goto fail;
	}
	ret = rnic_quota_check(f, RNIC_K_MR);
	if (ret) {
		mutex_unlock(&rd->lock);
		goto fail;
	}
	rnic_cmd_init(rd, RNIC_CMD_REG_MR, u.pdn);
	rd->cmd->params.mr.iova = u.addr;
	rd->cmd->params.mr.length = u.length;
	rd->cmd->params.mr.page_list = list_dma;
	rd->cmd->params.mr.npages = (u32)m.npages;
	rd->cmd->params.mr.access = u.access;
	rd->cmd->params.mr.page_shift = PAGE_SHIFT;
	ret = rnic_exec(rd, "REG_MR");
	if (!ret) {
		u32 idx = RNIC_KEY_INDEX(rd->cmd->out0);

		u.lkey = rd->cmd->out0;
		u.rkey = rd->cmd->out1;
		if (idx >= RNIC_MAX_MR || rd->mr[idx].owner) {
			dev_err(dev, "REG_MR: the device returned key 0x%x of a used or invalid index\n", u.lkey);
			ret = -EIO;
		} else {
			m.owner = f;
			m.key = u.lkey;
			m.pdn = u.pdn;
			rd->mr[idx] = m;
			rnic_quota_take(f, RNIC_K_MR);
		}
	}
	mutex_unlock(&rd->lock);
	dma_free_coherent(dev, m.npages * sizeof(u64), list, list_dma); /* the device copied it */
	list = NULL;
	if (ret)
		goto fail;
	if (copy_to_user(p, &u, sizeof(u)))
		return -EFAULT; /* registered; released at close */
	return 0;
fail:
	if (list)
		dma_free_coherent(dev, m.npages * sizeof(u64), list, list_dma);
	rnic_mr_unpin(rd, &m);
	return ret;
}

static int rnic_dereg_mr_locked(struct rnic_file *f, u32 key)
{
	struct rnic_dev *rd = f->rd;
	u32 idx = RNIC_KEY_INDEX(key);
	int ret;

	if (idx >= RNIC_MAX_MR || rd->mr[idx].owner != f || rd->mr[idx].key != key) {
		dev_err(&rd->pdev->dev, "DEREG_MR: key 0x%x is not one of this file's regions\n", key);
		return -ENOENT;
	}
	rnic_cmd_init(rd, RNIC_CMD_DEREG_MR, key);
	ret = rnic_exec(rd, "DEREG_MR");
	if (ret)
		return ret;
	rnic_mr_unpin(rd, &rd->mr[idx]);
	rnic_quota_put(f, RNIC_K_MR);
	return 0;
}

/* ---- device memory (docs/rnic-verbs.md "Device memory") ---- */

static bool rnic_dm_ok(struct rnic_file *f, u32 dm)
{
	return dm >= 1 && dm <= RNIC_MAX_DM && f->rd->dm_owner[dm] == f;
}

static int rnic_alloc_dm(struct rnic_file *f, void __user *p)
{
	struct rnic_dev *rd = f->rd;
	struct rnic_ualloc_dm u;
	int ret;

	if (copy_from_user(&u, p, sizeof(u)))
		return -EFAULT;
	if (u.reserved || !u.length)
		return -EINVAL;
	mutex_lock(&rd->lock);
	rnic_cmd_init(rd, RNIC_CMD_ALLOC_DM, 0);
	rd->cmd->params.dm.length = u.length;
	ret = rnic_exec(rd, "ALLOC_DM");
	if (!ret) {
		u.dm = rd->cmd->handle;
		if (u.dm < 1 || u.dm > RNIC_MAX_DM || rd->dm_owner[u.dm]) {
			dev_err(&rd->pdev->dev, "ALLOC_DM: the device returned id %u, used or invalid\n", u.dm);
			ret = -EIO;
		} else {
			rd->dm_owner[u.dm] = f;
		}
	}
	mutex_unlock(&rd->lock);
	if (ret)
		return ret;
	return copy_to_user(p, &u, sizeof(u)) ? -EFAULT : 0; /* allocated; freed at close */
}

static int rnic_free_dm_locked(struct rnic_file *f, u32 dm)
{
	struct rnic_dev *rd = f->rd;
	int ret;

	if (!rnic_dm_ok(f, dm))
		return -ENOENT;
	rnic_cmd_init(rd, RNIC_CMD_FREE_DM, dm);
	ret = rnic_exec(rd, "FREE_DM");
	if (!ret)
		rd->dm_owner[dm] = NULL;
	return ret;
}

static int rnic_reg_dm_mr(struct rnic_file *f, void __user *p)
{
	struct rnic_dev *rd = f->rd;
	struct rnic_ureg_dm_mr u;
	u32 idx;
	int ret;

	if (copy_from_user(&u, p, sizeof(u)))
		return -EFAULT;
	if (u.reserved)
		return -EINVAL;
	mutex_lock(&rd->lock);
	if (!rnic_pd_ok(f, u.pdn) || !rnic_dm_ok(f, u.dm)) {
		ret = -ENOENT;
		goto out;
	}
	ret = rnic_quota_check(f, RNIC_K_MR);
	if (ret)
		goto out;
	rnic_cmd_init(rd, RNIC_CMD_REG_DM_MR, u.pdn);
	rd->cmd->params.dm.addr = u.addr;
	rd->cmd->params.dm.offset = u.offset;
	rd->cmd->params.dm.length = u.length;
	rd->cmd->params.dm.dm = u.dm;
	rd->cmd->params.dm.access = u.access;
	ret = rnic_exec(rd, "REG_DM_MR");
	if (ret)
		goto out;
	u.lkey = rd->cmd->out0;
	u.rkey = rd->cmd->out1;
	idx = RNIC_KEY_INDEX(u.lkey);
	if (idx >= RNIC_MAX_MR || rd->mr[idx].owner) {
		dev_err(&rd->pdev->dev, "REG_DM_MR: the device returned key 0x%x of a used or invalid index\n", u.lkey);
		ret = -EIO;
		goto out;
	}
	/* no pages pinned: the region is the device's own memory */
	rd->mr[idx].owner = f;
	rd->mr[idx].key = u.lkey;
	rd->mr[idx].pdn = u.pdn;
	rnic_quota_take(f, RNIC_K_MR);
out:
	mutex_unlock(&rd->lock);
	if (ret)
		return ret;
	return copy_to_user(p, &u, sizeof(u)) ? -EFAULT : 0; /* registered; released at close */
}

#define RNIC_DM_BOUNCE (64u << 10)

/*
 * Copy between the caller's buffer and an allocation through a coherent bounce buffer, one
 * DM_COPY command per RNIC_DM_BOUNCE bytes.
 */
static int rnic_dm_copy(struct rnic_file *f, void __user *p)
{
	struct rnic_dev *rd = f->rd;
	struct device *dev = &rd->pdev->dev;
	struct rnic_udm_copy u;
	dma_addr_t bounce_dma;
	u64 done = 0;
	void *bounce;
	int ret = 0;

	if (copy_from_user(&u, p, sizeof(u)))
		return -EFAULT;
	if (u.dir > RNIC_DM_COPY_FROM_DM || !u.length || u.offset + u.length < u.offset)
		return -EINVAL;
	bounce = dma_alloc_coherent(dev, RNIC_DM_BOUNCE, &bounce_dma, GFP_KERNEL);
	if (!bounce)
		return -ENOMEM;
	mutex_lock(&rd->lock);
	if (!rnic_dm_ok(f, u.dm))
		ret = -ENOENT;
	while (!ret && done < u.length) {
		u32 n = (u32)min_t(u64, u.length - done, RNIC_DM_BOUNCE);
		void __user *ub = (void __user *)(uintptr_t)(u.buf + done);

		if (u.dir == RNIC_DM_COPY_TO_DM && copy_from_user(bounce, ub, n)) {
			ret = -EFAULT;
			break;
		}
		rnic_cmd_init(rd, RNIC_CMD_DM_COPY, u.dm);
		rd->cmd->params.dm.addr = bounce_dma;
		rd->cmd->params.dm.offset = u.offset + done;
		rd->cmd->params.dm.length = n;
		rd->cmd->params.dm.dir = u.dir;
		ret = rnic_exec(rd, "DM_COPY");
		if (!ret && u.dir == RNIC_DM_COPY_FROM_DM && copy_to_user(ub, bounce, n))
			ret = -EFAULT;
		done += n;
	}
	mutex_unlock(&rd->lock);
	dma_free_coherent(dev, RNIC_DM_BOUNCE, bounce, bounce_dma);
	return ret;
}

/* ---- completion queues ---- */

static bool rnic_cq_ok(struct rnic_file *f, u32 cqn)
{
	return cqn < RNIC_MAX_CQ && f->rd->cq[cqn].owner == f;
}

static int rnic_create_cq(struct rnic_file *f, void __user *p)
{
	struct rnic_dev *rd = f->rd;
	struct rnic_ucreate_cq u;
	struct rnic_ring *ring;
	int ret;

	if (copy_from_user(&u, p, sizeof(u)))
		return -EFAULT;
	if (u.depth_log2 < RNIC_DEPTH_LOG2_MIN || u.depth_log2 > RNIC_DEPTH_LOG2_MAX) {
		dev_err(&rd->pdev->dev, "CREATE_CQ: depth 2^%u outside 2^%u..2^%u\n", u.depth_log2,
			RNIC_DEPTH_LOG2_MIN, RNIC_DEPTH_LOG2_MAX);
		return -EINVAL;
	}
	if (u.comp_vector >= (u32)rd->nvec || u.reserved) {
		dev_err(&rd->pdev->dev, "CREATE_CQ: completion vector %u: this device has vectors 0..%d%s\n",
			u.comp_vector, rd->nvec - 1, u.reserved ? " (and the reserved field must be 0)" : "");
		return -EINVAL;
	}
	ring = rnic_ring_alloc(f, sizeof(struct rnic_cqe) << u.depth_log2);
	if (IS_ERR(ring))
		return PTR_ERR(ring);
	mutex_lock(&rd->lock);
	ret = rnic_quota_check(f, RNIC_K_CQ);
	if (ret) {
		mutex_unlock(&rd->lock);
		rnic_ring_put(ring);
		return ret;
	}
	rnic_cmd_init(rd, RNIC_CMD_CREATE_CQ, 0);
	rd->cmd->params.cq.ring = ring->dma;
	rd->cmd->params.cq.depth_log2 = (u8)u.depth_log2;
	rd->cmd->params.cq.vector = (u8)u.comp_vector;
	ret = rnic_exec(rd, "CREATE_CQ");
	u.cqn = rd->cmd->handle;
	if (!ret && (u.cqn >= RNIC_MAX_CQ || rd->cq[u.cqn].owner)) {
		dev_err(&rd->pdev->dev, "CREATE_CQ returned CQ %u, invalid or in use\n", u.cqn);
		ret = -EIO;
	}
	if (!ret) {
		struct rnic_cq *cq = &rd->cq[u.cqn];

		spin_lock_irq(&rd->irq_lock);
		cq->owner = f;
		cq->ring = ring;
		cq->events = 0;
		cq->error = false;
		spin_unlock_irq(&rd->irq_lock);
		rnic_quota_take(f, RNIC_K_CQ);
	}
	mutex_unlock(&rd->lock);
	if (ret) {
		rnic_ring_put(ring);
		return ret;
	}
	u.ring_off = COOKIE(RNIC_MAP_CQ, u.cqn);
	u.db_off = COOKIE(RNIC_MAP_CQDB, u.cqn);
	return copy_to_user(p, &u, sizeof(u)) ? -EFAULT : 0;
}

static int rnic_destroy_cq_locked(struct rnic_file *f, u32 cqn)
{
	struct rnic_dev *rd = f->rd;
	struct rnic_cq *cq;
	int ret;

	if (!rnic_cq_ok(f, cqn)) {
		dev_err(&rd->pdev->dev, "DESTROY_CQ: CQ %u is not this file's\n", cqn);
		return -ENOENT;
	}
	cq = &rd->cq[cqn];
	rnic_cmd_init(rd, RNIC_CMD_DESTROY_CQ, cqn);
	ret = rnic_exec(rd, "DESTROY_CQ");
	if (ret)
		return ret;
	if (f->mapping)
		unmap_mapping_range(f->mapping, COOKIE(RNIC_MAP_CQDB, cqn), PAGE_SIZE, 1);
	spin_lock_irq(&rd->irq_lock);
	cq->owner = NULL;
	cq->error = true; /* wake and fail any waiter */
	__clear_bit(cqn, f->fired);
	spin_unlock_irq(&rd->irq_lock);
	wake_up_all(&cq->wait);
	rnic_ring_put(cq->ring);
	cq->ring = NULL;
	rnic_quota_put(f, RNIC_K_CQ);
	return 0;
}

static int rnic_wait_cq(struct rnic_file *f, void __user *p)
{
	struct rnic_dev *rd = f->rd;
	struct rnic_uwait_cq u;
	struct rnic_cq *cq;
	long left;
	int ret = 0;

	if (copy_from_user(&u, p, sizeof(u)))
		return -EFAULT;
	mutex_lock(&rd->lock);
	ret = rnic_cq_ok(f, u.cqn) ? 0 : -ENOENT;
	mutex_unlock(&rd->lock);
	if (ret) {
		dev_err(&rd->pdev->dev, "WAIT_CQ: CQ %u is not this file's\n", u.cqn);
		return ret;
	}
	cq = &rd->cq[u.cqn];
	left = wait_event_interruptible_timeout(cq->wait,
						READ_ONCE(cq->events) != u.events || READ_ONCE(cq->error),
						msecs_to_jiffies(u.timeout_ms));
	if (left < 0)
		return left;
	if (READ_ONCE(cq->error) || READ_ONCE(cq->owner) != f)
		return -EIO;
	if (READ_ONCE(cq->events) == u.events)
		return -ETIMEDOUT;
	u.events = READ_ONCE(cq->events);
	return copy_to_user(p, &u, sizeof(u)) ? -EFAULT : 0;
}

/* ---- queue pairs ---- */

static bool rnic_qp_ok(struct rnic_file *f, u32 qpn)
{
	u32 idx = RNIC_QP_INDEX(qpn);

	return qpn >= RNIC_QPN_BASE && idx < RNIC_MAX_QP && f->rd->qp[idx].owner == f;
}

static int rnic_create_qp(struct rnic_file *f, void __user *p)
{
	struct rnic_dev *rd = f->rd;
	struct device *dev = &rd->pdev->dev;
	struct rnic_ucreate_qp u;
	struct rnic_ring *sq = NULL, *rq = NULL;
	int ret;

	if (copy_from_user(&u, p, sizeof(u)))
		return -EFAULT;
	if (u.sq_depth_log2 < RNIC_DEPTH_LOG2_MIN || u.sq_depth_log2 > RNIC_DEPTH_LOG2_MAX ||
	    u.rq_depth_log2 < RNIC_DEPTH_LOG2_MIN || u.rq_depth_log2 > RNIC_DEPTH_LOG2_MAX) {
		dev_err(dev, "CREATE_QP: depths 2^%u/2^%u outside 2^%u..2^%u\n", u.sq_depth_log2,
			u.rq_depth_log2, RNIC_DEPTH_LOG2_MIN, RNIC_DEPTH_LOG2_MAX);
		return -EINVAL;
	}
	sq = rnic_ring_alloc(f, sizeof(struct rnic_send_wqe) << u.sq_depth_log2);
	if (IS_ERR(sq))
		return PTR_ERR(sq);
	rq = rnic_ring_alloc(f, sizeof(struct rnic_recv_wqe) << u.rq_depth_log2);
	if (IS_ERR(rq)) {
		ret = PTR_ERR(rq);
		rq = NULL;
		goto out_free;
	}
	mutex_lock(&rd->lock);
	if (!rnic_pd_ok(f, u.pdn) || !rnic_cq_ok(f, u.send_cqn) || !rnic_cq_ok(f, u.recv_cqn)) {
		mutex_unlock(&rd->lock);
		dev_err(dev, "CREATE_QP: PD %u, send CQ %u or receive CQ %u is not this file's\n", u.pdn,
			u.send_cqn, u.recv_cqn);
		ret = -ENOENT;
		goto out_free;
	}
	ret = rnic_quota_check(f, RNIC_K_QP);
	if (ret) {
		mutex_unlock(&rd->lock);
		goto out_free;
	}
	rnic_cmd_init(rd, RNIC_CMD_CREATE_QP, u.pdn);
	rd->cmd->params.qp.sq_ring = sq->dma;
	rd->cmd->params.qp.rq_ring = rq->dma;
	rd->cmd->params.qp.send_cqn = u.send_cqn;
	rd->cmd->params.qp.recv_cqn = u.recv_cqn;
	rd->cmd->params.qp.sq_depth_log2 = (u8)u.sq_depth_log2;
	rd->cmd->params.qp.rq_depth_log2 = (u8)u.rq_depth_log2;
	ret = rnic_exec(rd, "CREATE_QP");
	u.qpn = rd->cmd->handle;
	if (!ret && (u.qpn < RNIC_QPN_BASE || RNIC_QP_INDEX(u.qpn) >= RNIC_MAX_QP ||
		     rd->qp[RNIC_QP_INDEX(u.qpn)].owner)) {
		dev_err(dev, "CREATE_QP returned QPN 0x%x, invalid or in use\n", u.qpn);
		ret = -EIO;
	}
	if (!ret) {
		struct rnic_qp *qp = &rd->qp[RNIC_QP_INDEX(u.qpn)];

		qp->owner = f;
		qp->sq = sq;
		qp->rq = rq;
		qp->pdn = u.pdn;
		qp->send_cqn = u.send_cqn;
		qp->recv_cqn = u.recv_cqn;
		rnic_quota_take(f, RNIC_K_QP);
	}
	mutex_unlock(&rd->lock);
	if (ret)
		goto out_free;
	u.sq_off = COOKIE(RNIC_MAP_SQ, RNIC_QP_INDEX(u.qpn));
	u.rq_off = COOKIE(RNIC_MAP_RQ, RNIC_QP_INDEX(u.qpn));
	u.db_off = COOKIE(RNIC_MAP_QPDB, RNIC_QP_INDEX(u.qpn));
	return copy_to_user(p, &u, sizeof(u)) ? -EFAULT : 0;
out_free:
	rnic_ring_put(sq);
	rnic_ring_put(rq);
	return ret;
}

static int rnic_modify_qp(struct rnic_file *f, void __user *p, bool query)
{
	struct rnic_dev *rd = f->rd;
	struct rnic_umodify_qp u;
	int ret;

	if (copy_from_user(&u, p, sizeof(u)))
		return -EFAULT;
	mutex_lock(&rd->lock);
	if (!rnic_qp_ok(f, u.qpn)) {
		mutex_unlock(&rd->lock);
		dev_err(&rd->pdev->dev, "%s_QP: QP 0x%x is not this file's\n", query ? "QUERY" : "MODIFY", u.qpn);
		return -ENOENT;
	}
	rnic_cmd_init(rd, query ? RNIC_CMD_QUERY_QP : RNIC_CMD_MODIFY_QP, u.qpn);
	if (!query)
		rd->cmd->params.modify = u.attr;
	ret = rnic_exec(rd, query ? "QUERY_QP" : "MODIFY_QP");
	if (!ret && query) {
		u.attr = rd->cmd->params.modify;
		u.state = rd->cmd->out0;
	}
	mutex_unlock(&rd->lock);
	if (!ret && query && copy_to_user(p, &u, sizeof(u)))
		return -EFAULT;
	return ret;
}

static int rnic_destroy_qp_locked(struct rnic_file *f, u32 qpn)
{
	struct rnic_dev *rd = f->rd;
	struct rnic_qp *qp;
	int ret;

	if (!rnic_qp_ok(f, qpn)) {
		dev_err(&rd->pdev->dev, "DESTROY_QP: QP 0x%x is not this file's\n", qpn);
		return -ENOENT;
	}
	qp = &rd->qp[RNIC_QP_INDEX(qpn)];
	rnic_cmd_init(rd, RNIC_CMD_DESTROY_QP, qpn);
	ret = rnic_exec(rd, "DESTROY_QP");
	if (ret)
		return ret;
	if (f->mapping)
		unmap_mapping_range(f->mapping, COOKIE(RNIC_MAP_QPDB, RNIC_QP_INDEX(qpn)), PAGE_SIZE, 1);
	rnic_ring_put(qp->sq);
	rnic_ring_put(qp->rq);
	memset(qp, 0, sizeof(*qp));
	rnic_quota_put(f, RNIC_K_QP);
	return 0;
}

/* ---- async events ---- */

/* Queue an event for f (rd->irq_lock held); a full queue drops it and counts it. */
static void rnic_file_event(struct rnic_file *f, const struct rnic_eqe *e)
{
	struct rnic_uasync_event *u;

	if (f->ev_tail - f->ev_head >= RNIC_FILE_EVENTS) {
		f->ev_lost++;
		return;
	}
	u = &f->ev[f->ev_tail % RNIC_FILE_EVENTS];
	memset(u, 0, sizeof(*u));
	u->type = e->type;
	u->element = e->element;
	u->detail = e->detail;
	u->modeled_at_ns = e->modeled_at_ns;
	f->ev_tail++;
	wake_up_interruptible(&f->wait);
}

/*
 * Take every event the device wrote (rd->irq_lock held), give each to its owner, then hand the
 * entries back (EQ_CI) and re-arm: an event written meanwhile interrupts again at once.
 */
static void rnic_eq_drain(struct rnic_dev *rd)
{
	const u32 depth = 1u << RNIC_EQ_LOG2;
	struct rnic_file *f;
	u32 st, n = 0;

	for (;;) {
		struct rnic_eqe *e = &rd->eq[rd->eq_ci & (depth - 1)];
		struct rnic_eqe ev;
		u32 idx;

		if ((READ_ONCE(e->owner) & 1) != (((rd->eq_ci >> RNIC_EQ_LOG2) & 1) ^ 1))
			break;
		dma_rmb(); /* the owner byte is written last */
		ev = *e;
		rd->eq_ci++;
		n++;
		switch (ev.type) {
		case RNIC_EV_QP_FATAL:
		case RNIC_EV_QP_REQ_ERR:
		case RNIC_EV_QP_ACCESS_ERR:
		case RNIC_EV_COMM_EST:
			idx = RNIC_QP_INDEX(ev.element);
			if (ev.element >= RNIC_QPN_BASE && idx < RNIC_MAX_QP && rd->qp[idx].owner)
				rnic_file_event(rd->qp[idx].owner, &ev);
			break;
		case RNIC_EV_CQ_ERR:
			if (ev.element < RNIC_MAX_CQ && rd->cq[ev.element].owner)
				rnic_file_event(rd->cq[ev.element].owner, &ev);
			break;
		case RNIC_EV_PORT_ACTIVE:
		case RNIC_EV_PORT_ERR:
			dev_info(&rd->pdev->dev, "port %u: link %s\n", ev.element,
				 ev.type == RNIC_EV_PORT_ACTIVE ? "up" : "down");
			list_for_each_entry(f, &rd->files, node)
				rnic_file_event(f, &ev);
			break;
		default:
			dev_warn_ratelimited(&rd->pdev->dev, "async event of unknown type %u (element 0x%x) ignored\n",
					     ev.type, ev.element);
		}
	}
	if (n)
		wr32(rd, RNIC_REG_EQ_CI, rd->eq_ci);
	st = rd32(rd, RNIC_REG_EQ_STATUS);
	if (st & RNIC_EQ_ST_OVERFLOW) { /* whose events were lost is unknown: every file is told */
		wr32(rd, RNIC_REG_EQ_STATUS, RNIC_EQ_ST_OVERFLOW);
		dev_warn_ratelimited(&rd->pdev->dev, "the async event queue overflowed: events were lost\n");
		list_for_each_entry(f, &rd->files, node) {
			f->ev_lost++;
			wake_up_interruptible(&f->wait);
		}
	}
	wr32(rd, RNIC_REG_EQ_ARM, 1);
}

static bool rnic_has_event(struct rnic_file *f)
{
	unsigned long flags;
	bool any;

	spin_lock_irqsave(&f->rd->irq_lock, flags);
	any = f->ev_tail != f->ev_head;
	spin_unlock_irqrestore(&f->rd->irq_lock, flags);
	return any;
}

static int rnic_get_async_event(struct rnic_file *f, void __user *p)
{
	struct rnic_dev *rd = f->rd;
	struct rnic_uasync_event u, out;
	long left;
	u32 lost;

	if (copy_from_user(&u, p, sizeof(u)))
		return -EFAULT;
	if (u.reserved) {
		dev_err(&rd->pdev->dev, "GET_ASYNC_EVENT: the reserved field must be 0\n");
		return -EINVAL;
	}
	for (;;) {
		spin_lock_irq(&rd->irq_lock);
		if (f->ev_tail != f->ev_head) {
			out = f->ev[f->ev_head % RNIC_FILE_EVENTS];
			f->ev_head++;
			lost = f->ev_lost;
			f->ev_lost = 0;
			spin_unlock_irq(&rd->irq_lock);
			out.timeout_ms = u.timeout_ms;
			out.lost = lost;
			return copy_to_user(p, &out, sizeof(out)) ? -EFAULT : 0;
		}
		spin_unlock_irq(&rd->irq_lock);
		if (!u.timeout_ms)
			return -EAGAIN;
		left = wait_event_interruptible_timeout(f->wait, READ_ONCE(f->ev_tail) != READ_ONCE(f->ev_head),
							msecs_to_jiffies(u.timeout_ms));
		if (left < 0)
			return left;
		if (!left && READ_ONCE(f->ev_tail) == READ_ONCE(f->ev_head))
			return -ETIMEDOUT;
	}
}

/* ---- interrupts ---- */

static irqreturn_t rnic_irq(int irq, void *data)
{
	struct rnic_vec *vec = data;
	struct rnic_dev *rd = vec->rd;
	u32 st = rd32(rd, RNIC_REG_INT_STATUS) & vec->mask, w;
	unsigned long flags;

	if (!st)
		return IRQ_NONE;
	wr32(rd, RNIC_REG_INT_STATUS, st); /* W1C before reading the bitmaps: a later event raises again */
	spin_lock_irqsave(&rd->irq_lock, flags);
	for (w = 0; w < RNIC_BITMAP_WORDS(RNIC_MAX_CQ); w++) {
		u64 ev = readq(rd->regs + RNIC_REG_CQ_EVENTS + 8 * w);
		u64 er = readq(rd->regs + RNIC_REG_CQ_ERRORS + 8 * w);
		u64 bits = ev | er;

		if (ev)
			writeq(ev, rd->regs + RNIC_REG_CQ_EVENTS + 8 * w);
		if (er)
			writeq(er, rd->regs + RNIC_REG_CQ_ERRORS + 8 * w);
		while (bits) {
			unsigned int c = w * 64 + __ffs64(bits);
			struct rnic_cq *cq = &rd->cq[c];

			bits &= bits - 1;
			if (ev & (1ull << (c % 64))) {
				cq->events++;
				if (cq->owner) {
					__set_bit(c, cq->owner->fired);
					wake_up_interruptible(&cq->owner->wait);
				}
			}
			if (er & (1ull << (c % 64))) {
				cq->error = true;
				dev_warn_ratelimited(&rd->pdev->dev, "CQ %u entered the error state (overflow or CQE write failure)\n", c);
			}
			wake_up_all(&cq->wait);
		}
	}
	for (w = 0; w < RNIC_BITMAP_WORDS(RNIC_MAX_QP); w++) {
		u64 er = readq(rd->regs + RNIC_REG_QP_ERRORS + 8 * w);

		if (er) {
			writeq(er, rd->regs + RNIC_REG_QP_ERRORS + 8 * w);
			dev_info_ratelimited(&rd->pdev->dev, "QPs entered the error state: index bitmap word %u = 0x%llx\n", w, er);
		}
	}
	if (rd->eq && (st & BIT(RNIC_EQ_VECTOR)))
		rnic_eq_drain(rd);
	spin_unlock_irqrestore(&rd->irq_lock, flags);
	return IRQ_HANDLED;
}

/* ---- file operations ---- */

static long rnic_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct rnic_file *f = file->private_data;
	struct rnic_dev *rd = f->rd;
	void __user *p = (void __user *)arg;
	u32 v;
	int ret;

	switch (cmd) {
	case RNIC_IOC_QUERY: {
		struct rnic_uinfo u = {};
		u32 lo = rd32(rd, RNIC_REG_MAC_LO), hi = rd32(rd, RNIC_REG_MAC_HI);

		u.node_id = rd32(rd, RNIC_REG_NODE_ID);
		u.caps = rd32(rd, RNIC_REG_CAPS);
		u.version = rd32(rd, RNIC_REG_VERSION);
		u.max_mtu = rd32(rd, RNIC_REG_MAX_MTU);
		u.max_pd = rd32(rd, RNIC_REG_MAX_PD);
		u.max_mr = rd32(rd, RNIC_REG_MAX_MR);
		u.max_cq = rd32(rd, RNIC_REG_MAX_CQ);
		u.max_qp = rd32(rd, RNIC_REG_MAX_QP);
		u.ipv4 = rd32(rd, RNIC_REG_IPV4);
		u.mac[0] = hi >> 8; u.mac[1] = hi; u.mac[2] = lo >> 24; u.mac[3] = lo >> 16;
		u.mac[4] = lo >> 8; u.mac[5] = lo;
		u.link_up = rd32(rd, RNIC_REG_STATUS) & RNIC_STATUS_LINK_UP;
		u.link_mbps = rd32(rd, RNIC_REG_LINK_MBPS);
		u.hop_ns = rd32(rd, RNIC_REG_HOP_NS);
		u.nic_mhz = rd32(rd, RNIC_REG_NIC_MHZ);
		u.pcie_ns = rd32(rd, RNIC_REG_PCIE_NS);
		u.pcie_mbps = rd32(rd, RNIC_REG_PCIE_MBPS);
		u.irq_vectors = rd->nvec;
		u.dm_size = rd32(rd, RNIC_REG_DM_SIZE);
		return copy_to_user(p, &u, sizeof(u)) ? -EFAULT : 0;
	}
	case RNIC_IOC_ALLOC_PD:
		return rnic_alloc_pd(f, p);
	case RNIC_IOC_REG_MR:
		return rnic_reg_mr(f, p);
	case RNIC_IOC_ALLOC_DM:
		return rnic_alloc_dm(f, p);
	case RNIC_IOC_REG_DM_MR:
		return rnic_reg_dm_mr(f, p);
	case RNIC_IOC_DM_COPY:
		return rnic_dm_copy(f, p);
	case RNIC_IOC_CREATE_CQ:
		return rnic_create_cq(f, p);
	case RNIC_IOC_CREATE_QP:
		return rnic_create_qp(f, p);
	case RNIC_IOC_MODIFY_QP:
		return rnic_modify_qp(f, p, false);
	case RNIC_IOC_QUERY_QP:
		return rnic_modify_qp(f, p, true);
	case RNIC_IOC_WAIT_CQ:
		return rnic_wait_cq(f, p);
	case RNIC_IOC_GET_ASYNC_EVENT:
		return rnic_get_async_event(f, p);
	case RNIC_IOC_COUNTERS: {
		u64 c[RNIC_CNT_COUNT];

		/* device-wide: they count every user's traffic (frames, bytes, flushes, commands) */
		if (!f->priv && !READ_ONCE(unprivileged_counters)) {
			atomic_long_inc(&refused_counters);
			return -EPERM;
		}
		for (v = 0; v < RNIC_CNT_COUNT; v++)
			c[v] = readq(rd->regs + RNIC_REG_COUNTERS + 8 * v);
		return copy_to_user(p, c, sizeof(c)) ? -EFAULT : 0;
	}
	case RNIC_IOC_DEALLOC_PD:
	case RNIC_IOC_DEREG_MR:
	case RNIC_IOC_DESTROY_CQ:
	case RNIC_IOC_DESTROY_QP:
	case RNIC_IOC_FREE_DM:
		if (get_user(v, (u32 __user *)p))
			return -EFAULT;
		mutex_lock(&rd->lock);
		if (cmd == RNIC_IOC_DEALLOC_PD)
			ret = rnic_dealloc_pd_locked(f, v);
		else if (cmd == RNIC_IOC_DEREG_MR)
			ret = rnic_dereg_mr_locked(f, v);
		else if (cmd == RNIC_IOC_DESTROY_CQ)
			ret = rnic_destroy_cq_locked(f, v);
		else if (cmd == RNIC_IOC_FREE_DM)
			ret = rnic_free_dm_locked(f, v);
		else
			ret = rnic_destroy_qp_locked(f, v);
		mutex_unlock(&rd->lock);
		return ret;
	default:
		return -ENOTTY;
	}
}

static void rnic_vma_open(struct vm_area_struct *vma)
{
	struct rnic_ring *r = vma->vm_private_data;

	if (r)
		kref_get(&r->ref);
}

static void rnic_vma_close(struct vm_area_struct *vma)
{
	rnic_ring_put(vma->vm_private_data);
}

static const struct vm_operations_struct rnic_vm_ops = {
	.open = rnic_vma_open,
	.close = rnic_vma_close,
};

/* The doorbell page at (type, idx) if that QP or CQ is f's, else 0; rd->lock held. */
static resource_size_t rnic_db_phys_locked(struct rnic_file *f, unsigned long type, unsigned long idx)
{
	struct rnic_dev *rd = f->rd;

	if (type == RNIC_MAP_QPDB && idx < RNIC_MAX_QP && rd->qp[idx].owner == f)
		return rd->db_phys + RNIC_DB_QP(idx);
	if (type == RNIC_MAP_CQDB && idx < RNIC_MAX_CQ && rd->cq[idx].owner == f)
		return rd->db_phys + RNIC_DB_CQ(idx);
	return 0;
}

/*
 * A doorbell page is inserted at its first access, under rd->lock, only while its object is
 * still the file's. A destroy clears the owner and zaps the file's mappings of the page under the
 * same lock: a page inserted before is zapped (the VMA is in the file's mapping once it can
 * fault), an access after faults SIGBUS. Inserting the page in mmap() instead could not be made
 * safe: the new VMA joins the file's mapping only after mmap() returns, so a destroy in between
 * misses it.
 */
static vm_fault_t rnic_db_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct rnic_file *f = vma->vm_file->private_data;
	struct rnic_dev *rd = f->rd;
	resource_size_t db;
	vm_fault_t ret = VM_FAULT_SIGBUS;

	mutex_lock(&rd->lock);
	db = rnic_db_phys_locked(f, vma->vm_pgoff >> 16, vma->vm_pgoff & 0xffff);
	if (db)
		ret = vmf_insert_pfn(vma, vma->vm_start, db >> PAGE_SHIFT);
	mutex_unlock(&rd->lock);
	return ret;
}

static const struct vm_operations_struct rnic_db_vm_ops = {
	.fault = rnic_db_fault,
};

static int rnic_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct rnic_file *f = file->private_data;
	struct rnic_dev *rd = f->rd;
	unsigned long type = vma->vm_pgoff >> 16, idx = vma->vm_pgoff & 0xffff;
	size_t len = vma->vm_end - vma->vm_start;
	struct rnic_ring *r = NULL;
	resource_size_t db;
	int ret = -ENOENT;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	mutex_lock(&rd->lock);
	if (type == RNIC_MAP_QPDB || type == RNIC_MAP_CQDB) {
		db = rnic_db_phys_locked(f, type, idx);
		mutex_unlock(&rd->lock);
		if (!db)
			return -ENOENT;
		if (len != PAGE_SIZE)
			return -EINVAL;
		/* nothing mapped yet: rnic_db_fault inserts the page while the object is f's */
		vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP;
		vma->vm_page_prot = pgprot_device(vma->vm_page_prot);
		vma->vm_ops = &rnic_db_vm_ops;
		return 0;
	}
	switch (type) {
	case RNIC_MAP_SQ:
	case RNIC_MAP_RQ:
		if (idx < RNIC_MAX_QP && rd->qp[idx].owner == f)
			r = type == RNIC_MAP_SQ ? rd->qp[idx].sq : rd->qp[idx].rq;
		break;
	case RNIC_MAP_CQ:
		if (idx < RNIC_MAX_CQ && rd->cq[idx].owner == f)
			r = rd->cq[idx].ring;
		break;
	}
	if (!r || len > r->size) {
		mutex_unlock(&rd->lock);
		return r ? -EINVAL : ret;
	}
	kref_get(&r->ref);
	mutex_unlock(&rd->lock);
	vma->vm_flags |= VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP;
	ret = remap_pfn_range(vma, vma->vm_start, virt_to_phys(r->kva) >> PAGE_SHIFT, len, vma->vm_page_prot);
	if (ret) {
		rnic_ring_put(r);
		return ret;
	}
	vma->vm_private_data = r;
	vma->vm_ops = &rnic_vm_ops;
	return 0;
}

static int rnic_open(struct inode *inode, struct file *file)
{
	struct rnic_dev *rd = container_of(file->private_data, struct rnic_dev, misc);
	struct rnic_file *f = kzalloc(sizeof(*f), GFP_KERNEL_ACCOUNT);

	if (!f)
		return -ENOMEM;
	f->rd = rd;
	f->mapping = file->f_mapping;
	f->priv = capable(CAP_SYS_ADMIN) || uid_eq(current_uid(), GLOBAL_ROOT_UID);
	f->user = rnic_user_get(rd, current_uid());
	if (!f->user) {
		kfree(f);
		return -ENOMEM;
	}
	init_waitqueue_head(&f->wait);
	spin_lock_irq(&rd->irq_lock);
	list_add_tail(&f->node, &rd->files);
	spin_unlock_irq(&rd->irq_lock);
	file->private_data = f;
	return 0;
}

static bool rnic_fired(struct rnic_file *f)
{
	unsigned long flags;
	bool any;

	spin_lock_irqsave(&f->rd->irq_lock, flags);
	any = !bitmap_empty(f->fired, RNIC_MAX_CQ);
	spin_unlock_irqrestore(&f->rd->irq_lock, flags);
	return any;
}

/*
 * The completion channel: read() returns the numbers (u32) of this file's CQs that fired since
 * the last read, blocking until one does (O_NONBLOCK: -EAGAIN); poll() says POLLIN then.
 */
static ssize_t rnic_read(struct file *file, char __user *buf, size_t len, loff_t *off)
{
	struct rnic_file *f = file->private_data;
	struct rnic_dev *rd = f->rd;
	u32 out[16];
	unsigned int n = 0, c;
	int ret;

	if (len < sizeof(u32))
		return -EINVAL;
	for (;;) {
		spin_lock_irq(&rd->irq_lock);
		for_each_set_bit(c, f->fired, RNIC_MAX_CQ) {
			if (n == ARRAY_SIZE(out) || (n + 1) * sizeof(u32) > len)
				break;
			__clear_bit(c, f->fired);
			out[n++] = c;
		}
		spin_unlock_irq(&rd->irq_lock);
		if (n)
			break;
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		ret = wait_event_interruptible(f->wait, rnic_fired(f));
		if (ret)
			return ret;
	}
	return copy_to_user(buf, out, n * sizeof(u32)) ? -EFAULT : n * sizeof(u32);
}

static __poll_t rnic_poll(struct file *file, poll_table *wait)
{
	struct rnic_file *f = file->private_data;

	poll_wait(file, &f->wait, wait);
	return (rnic_fired(f) ? EPOLLIN | EPOLLRDNORM : 0) | (rnic_has_event(f) ? EPOLLPRI : 0);
}

/* Destroy everything the file owns, in dependency order: QPs, CQs, MRs, device memory, PDs. */
static void rnic_file_cleanup(struct rnic_file *f)
{
	struct rnic_dev *rd = f->rd;
	unsigned int i;

	mutex_lock(&rd->lock);
	for (i = 0; i < RNIC_MAX_QP; i++)
		if (rd->qp[i].owner == f)
			rnic_destroy_qp_locked(f, RNIC_QPN(i));
	for (i = 0; i < RNIC_MAX_CQ; i++)
		if (rd->cq[i].owner == f)
			rnic_destroy_cq_locked(f, i);
	for (i = 0; i < RNIC_MAX_MR; i++)
		if (rd->mr[i].owner == f)
			rnic_dereg_mr_locked(f, rd->mr[i].key);
	for (i = 1; i <= RNIC_MAX_DM; i++)
		if (rd->dm_owner[i] == f)
			rnic_free_dm_locked(f, i);
	for (i = 1; i <= RNIC_MAX_PD; i++)
		if (rd->pd_owner[i] == f)
			rnic_dealloc_pd_locked(f, i);
	mutex_unlock(&rd->lock);
}

static int rnic_release(struct inode *inode, struct file *file)
{
	struct rnic_file *f = file->private_data;

	f->mapping = NULL; /* no mapping is left: each held the file */
	rnic_file_cleanup(f); /* its QPs and CQs are gone: no event names it any more */
	spin_lock_irq(&f->rd->irq_lock);
	list_del(&f->node);
	spin_unlock_irq(&f->rd->irq_lock);
	rnic_user_put(f->user); /* rings still mapped keep it */
	kfree(f);
	return 0;
}

/*
 * /sys/class/misc/rnicN/limits (root only: it tells what other users hold): the objects of each
 * kind in use, then one line per uid holding anything: its objects and ring memory.
 */
static ssize_t limits_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct miscdevice *misc = dev_get_drvdata(dev);
	struct rnic_dev *rd = container_of(misc, struct rnic_dev, misc);
	struct rnic_user *u;
	int at;

	mutex_lock(&rd->lock);
	at = sysfs_emit(buf, "in_use pd=%u mr=%u cq=%u qp=%u\n", rd->in_use[RNIC_K_PD], rd->in_use[RNIC_K_MR],
			rd->in_use[RNIC_K_CQ], rd->in_use[RNIC_K_QP]);
	spin_lock(&rd->users_lock);
	list_for_each_entry(u, &rd->users, node)
		at += sysfs_emit_at(buf, at, "uid=%u pd=%u mr=%u cq=%u qp=%u ring_kib=%llu\n",
				    from_kuid_munged(&init_user_ns, u->uid), u->objs[RNIC_K_PD], u->objs[RNIC_K_MR],
				    u->objs[RNIC_K_CQ], u->objs[RNIC_K_QP], u->ring_bytes >> 10);
	spin_unlock(&rd->users_lock);
	mutex_unlock(&rd->lock);
	return at;
}
static DEVICE_ATTR_ADMIN_RO(limits);

static struct attribute *rnic_attrs[] = {
	&dev_attr_limits.attr,
	NULL,
};
ATTRIBUTE_GROUPS(rnic);

static const struct file_operations rnic_fops = {
	.owner = THIS_MODULE,
	.open = rnic_open,
	.release = rnic_release,
	.unlocked_ioctl = rnic_ioctl,
	.mmap = rnic_mmap,
	.read = rnic_read,
	.poll = rnic_poll,
};

/* ---- PCI ---- */

static int rnic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct device *dev = &pdev->dev;
	struct rnic_dev *rd;
	u32 ident, ver;
	int ret, i;

	rd = devm_kzalloc(dev, sizeof(*rd), GFP_KERNEL);
	if (!rd)
		return -ENOMEM;
	rd->pdev = pdev;
	mutex_init(&rd->lock);
	spin_lock_init(&rd->irq_lock);
	INIT_LIST_HEAD(&rd->files);
	spin_lock_init(&rd->users_lock);
	INIT_LIST_HEAD(&rd->users);
	for (i = 0; i < RNIC_MAX_CQ; i++)
		init_waitqueue_head(&rd->cq[i].wait);
	rd->mr = devm_kcalloc(dev, RNIC_MAX_MR, sizeof(*rd->mr), GFP_KERNEL);
	if (!rd->mr)
		return -ENOMEM;
	ret = pcim_enable_device(pdev);
	if (ret) {
		dev_err(dev, "cannot enable the PCI function (%d)\n", ret);
		return ret;
	}
	ret = pcim_iomap_regions(pdev, BIT(RNIC_BAR_CTRL), RNIC_DRIVER_NAME);
	if (ret) {
		dev_err(dev, "cannot map BAR%u (%d)\n", RNIC_BAR_CTRL, ret);
		return ret;
	}
	rd->regs = pcim_iomap_table(pdev)[RNIC_BAR_CTRL];
	if (pci_resource_len(pdev, RNIC_BAR_DB) < RNIC_BAR_DB_SIZE) {
		dev_err(dev, "BAR%u is %llu bytes, the doorbells need %u\n", RNIC_BAR_DB,
			(unsigned long long)pci_resource_len(pdev, RNIC_BAR_DB), RNIC_BAR_DB_SIZE);
		return -ENODEV;
	}
	rd->db_phys = pci_resource_start(pdev, RNIC_BAR_DB);
	ident = rd32(rd, RNIC_REG_ID);
	ver = rd32(rd, RNIC_REG_VERSION);
	if (ident != RNIC_ID_VALUE || (ver >> 16) != (RNIC_VERSION_VALUE >> 16)) {
		dev_err(dev, "not a rackemu RNIC this driver knows: ID 0x%08x version 0x%08x (want 0x%08x, major %u)\n",
			ident, ver, RNIC_ID_VALUE, RNIC_VERSION_VALUE >> 16);
		return -ENODEV;
	}
	ret = dma_set_mask_and_coherent(dev, DMA_BIT_MASK(64));
	if (ret) {
		dev_err(dev, "no usable DMA mask (%d)\n", ret);
		return ret;
	}
	pci_set_master(pdev);
	rd->cmd = dmam_alloc_coherent(dev, RNIC_CMD_SIZE, &rd->cmd_dma, GFP_KERNEL);
	if (!rd->cmd)
		return -ENOMEM;
	wr32(rd, RNIC_REG_CMD_ADDR_LO, lower_32_bits(rd->cmd_dma));
	wr32(rd, RNIC_REG_CMD_ADDR_HI, upper_32_bits(rd->cmd_dma));
	if (rd32(rd, RNIC_REG_CAPS) & RNIC_CAP_EQ) {
		rd->eq = dmam_alloc_coherent(dev, sizeof(struct rnic_eqe) << RNIC_EQ_LOG2, &rd->eq_dma, GFP_KERNEL);
		if (!rd->eq)
			return -ENOMEM;
		wr32(rd, RNIC_REG_EQ_CTRL, 0);
		wr32(rd, RNIC_REG_EQ_BASE_LO, lower_32_bits(rd->eq_dma));
		wr32(rd, RNIC_REG_EQ_BASE_HI, upper_32_bits(rd->eq_dma));
		wr32(rd, RNIC_REG_EQ_CTRL, RNIC_EQ_CTRL_ENABLE | RNIC_EQ_LOG2 << RNIC_EQ_CTRL_DEPTH_SHIFT |
						   RNIC_EQ_VECTOR << RNIC_EQ_CTRL_VECTOR_SHIFT);
		if (!(rd32(rd, RNIC_REG_EQ_CTRL) & RNIC_EQ_CTRL_ENABLE)) {
			dev_err(dev, "the device refused the event queue at 0x%llx (EQ_STATUS 0x%x)\n",
				(unsigned long long)rd->eq_dma, rd32(rd, RNIC_REG_EQ_STATUS));
			return -EIO;
		}
		wr32(rd, RNIC_REG_EQ_ARM, 1);
	}

	rd->nvec = pci_alloc_irq_vectors(pdev, 1, RNIC_MSIX_VECTORS, PCI_IRQ_MSIX | PCI_IRQ_LEGACY);
	if (rd->nvec < 0) {
		dev_err(dev, "no interrupt (%d)\n", rd->nvec);
		return rd->nvec;
	}
	for (i = 0; i < rd->nvec; i++) {
		rd->vec[i].rd = rd;
		rd->vec[i].mask = pdev->msix_enabled ? BIT(i) : RNIC_INT_ALL;
		snprintf(rd->vec[i].name, sizeof(rd->vec[i].name), RNIC_DRIVER_NAME "-v%d", i);
		ret = devm_request_irq(dev, pci_irq_vector(pdev, i), rnic_irq, IRQF_SHARED, rd->vec[i].name,
				       &rd->vec[i]);
		if (ret) {
			dev_err(dev, "cannot request interrupt vector %d (%d)\n", i, ret);
			goto fail_vec;
		}
	}
	wr32(rd, RNIC_REG_INT_STATUS, RNIC_INT_ALL);
	wr32(rd, RNIC_REG_INT_ENABLE, RNIC_INT_ALL);
	wr32(rd, RNIC_REG_CTRL, RNIC_CTRL_ENABLE);

	rd->id = ida_alloc(&rnic_ida, GFP_KERNEL);
	if (rd->id < 0) {
		ret = rd->id;
		goto fail_vec;
	}
	snprintf(rd->name, sizeof(rd->name), "rnic%d", rd->id);
	rd->misc.minor = MISC_DYNAMIC_MINOR;
	rd->misc.name = rd->name;
	rd->misc.fops = &rnic_fops;
	rd->misc.mode = 0666;
	rd->misc.groups = rnic_groups;
	rd->misc.parent = dev;
	ret = misc_register(&rd->misc);
	if (ret) {
		dev_err(dev, "cannot register /dev/%s (%d)\n", rd->name, ret);
		goto fail_ida;
	}
	pci_set_drvdata(pdev, rd);
	dev_info(dev, "/dev/%s: node %u, caps 0x%x, max MTU %u, %d interrupt vector(s) (%s), link %s\n",
		 rd->name, rd32(rd, RNIC_REG_NODE_ID), rd32(rd, RNIC_REG_CAPS), rd32(rd, RNIC_REG_MAX_MTU),
		 rd->nvec, pdev->msix_enabled ? "MSI-X" : "INTx",
		 (rd32(rd, RNIC_REG_STATUS) & RNIC_STATUS_LINK_UP) ? "up" : "down");
	return 0;
fail_ida:
	ida_free(&rnic_ida, rd->id);
fail_vec:
	wr32(rd, RNIC_REG_INT_ENABLE, 0);
	wr32(rd, RNIC_REG_EQ_CTRL, 0);
	while (--i >= 0)
		devm_free_irq(dev, pci_irq_vector(pdev, i), &rd->vec[i]);
	pci_free_irq_vectors(pdev);
	return ret;
}

static void rnic_remove(struct pci_dev *pdev)
{
	struct rnic_dev *rd = pci_get_drvdata(pdev);
	int i;

	misc_deregister(&rd->misc); /* no new opens; open files keep the module (fops owner) */
	wr32(rd, RNIC_REG_CTRL, 0);
	wr32(rd, RNIC_REG_EQ_CTRL, 0); /* before devres frees its ring */
	wr32(rd, RNIC_REG_INT_ENABLE, 0);
	for (i = 0; i < rd->nvec; i++)
		devm_free_irq(&pdev->dev, pci_irq_vector(pdev, i), &rd->vec[i]);
	pci_free_irq_vectors(pdev);
	ida_free(&rnic_ida, rd->id);
}

static const struct pci_device_id rnic_ids[] = {
	{ PCI_DEVICE(RNIC_PCI_VENDOR_ID, RNIC_PCI_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, rnic_ids);

static struct pci_driver rnic_driver = {
	.name = RNIC_DRIVER_NAME,
	.id_table = rnic_ids,
	.probe = rnic_probe,
	.remove = rnic_remove,
};
module_pci_driver(rnic_driver);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("rackemu RoCEv2 RNIC: verbs objects, memory pinning, queue mapping, completion interrupts");
