// SPDX-License-Identifier: GPL-2.0
/*
 * unimem_dma: the kernel side of user-initiated RDMA on Unimem (ExaNoDe D3.6 sec. 3.1): transfers
 * with the node's cDMA engine through Linux's dmaengine API (the unmodified xilinx_dma driver
 * owns the engine), the remote allocator service (sec. 3.1.6) and the DMA buffers device
 * (sec. 3.1.4). Interface: rackemu/unimem_dma_uapi.h; docs/cdma.md, docs/rdma.md.
 *
 *   /dev/unimem_dma   root: synchronous copies between any two physical ranges (tests, tools)
 *   /dev/dmabuffers   RDMA buffers on any node and asynchronous transfers between them, for
 *                     the unim_dma_* library; a process can only reach its own buffers
 *
 * Transfers: each is one or more dmaengine memcpy descriptors (pieces of at most 4 MiB) on the
 * one channel this module holds; the last piece's callback completes it. xilinx_dma reports an
 * engine error only with a log line (the descriptors never complete), so while transfers are in
 * flight a poller reads CDMASR: on an error bit, or a transfer past its deadline, it terminates
 * the channel (which resets the engine) and fails every transfer in flight.
 *
 * Remote allocator: buffers on another node are allocated by that node's unimem_dma over the
 * mailbox (opcodes RALLOC_OP_*; mailbox callbacks run in interrupt context, so the owner
 * allocates in a work item). The owner takes the requester from the packet's hardware-stamped
 * PID (never from the message text), refuses messages a user process wrote to a mailbox device,
 * bounds what each requester node holds (ralloc_max_bytes_per_node, ralloc_max_per_node) and
 * frees it when the requester frees it, when its unimem_dma starts again (a FREE_ALL message at
 * load), or when a probe every RALLOC_PROBE_MS finds the requester node gone (EHOSTUNREACH).
 *
 * Load order: unimem.ko (mailbox), xilinx_dma.ko, then this module on every node that takes
 * part. While it is loaded it holds the DMA channel (dmatest cannot run then).
 */
#include <linux/capability.h>
#include <linux/completion.h>
#include <linux/cred.h>
#include <linux/dma-direct.h>
#include <linux/dma-mapping.h>
#include <linux/dmaengine.h>
#include <linux/io.h>
#include <linux/kfifo.h>
#include <linux/ktime.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/of.h>
#include <linux/of_address.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>

#include "rackemu/unimem_regs.h"
#include "rackemu/unimem_mailbox.h"
#include "rackemu/unimem_dma_uapi.h"
#include "rackemu/xilinx_cdma_regs.h"

#define UDMA_PIECE (4u << 20)		/* below xilinx_dma's 23-bit CDMA limit */
#define UDMA_POLL_MS 2
#define RALLOC_TIMEOUT_MS 2000

static struct dma_chan *udma_chan;
static void __iomem *udma_regs;		/* CDMASR, read while transfers are in flight */
static u32 udma_node, udma_nodes;
static unsigned long copies, errors, timeouts, remote_allocs, served_allocs;
module_param(copies, ulong, 0444);
module_param(errors, ulong, 0444);
module_param(timeouts, ulong, 0444);
module_param(remote_allocs, ulong, 0444);
module_param(served_allocs, ulong, 0444);
/* what one requester node may hold on this node (docs/rdma.md) */
static unsigned long ralloc_max_bytes_per_node = 32ul << 20;
static unsigned int ralloc_max_per_node = 256;
module_param(ralloc_max_bytes_per_node, ulong, 0644);
MODULE_PARM_DESC(ralloc_max_bytes_per_node, "bytes one requester node may hold here (default 32 MiB)");
module_param(ralloc_max_per_node, uint, 0644);
MODULE_PARM_DESC(ralloc_max_per_node, "allocations one requester node may hold here (default 256)");
/* what one unprivileged user may hold on other nodes, all its /dev/dmabuffers files together */
static unsigned long dmabuf_max_remote_bytes_per_uid = 16ul << 20;
module_param(dmabuf_max_remote_bytes_per_uid, ulong, 0644);
MODULE_PARM_DESC(dmabuf_max_remote_bytes_per_uid, "remote buffer bytes one unprivileged user may hold (default 16 MiB)");
static unsigned long ralloc_refused_user, ralloc_refused_cap, ralloc_reclaimed, ralloc_dropped, dmabuf_refused_uid;
module_param(dmabuf_refused_uid, ulong, 0444);
module_param(ralloc_refused_user, ulong, 0444);
module_param(ralloc_refused_cap, ulong, 0444);
module_param(ralloc_reclaimed, ulong, 0444);
module_param(ralloc_dropped, ulong, 0444);

/* ---- transfers ---- */

struct udma_file;

struct udma_xfer {
	struct list_head node;		/* in udma_inflight while the engine has it */
	u64 tid;
	unsigned long deadline;		/* jiffies */
	struct udma_file *owner;	/* async (/dev/dmabuffers), or NULL: */
	struct completion *done;	/* sync waiter */
	int status;
	u32 engine_status;		/* CDMASR when the transfer failed on an engine error */
};

static LIST_HEAD(udma_inflight);
static LIST_HEAD(udma_files);
static DEFINE_MUTEX(udma_files_lock);	/* udma_files; taken before a file's lock */
static DEFINE_SPINLOCK(udma_lock);	/* udma_inflight, file queues */
static DEFINE_MUTEX(udma_submit_lock);	/* descriptor preparation and terminate */
static void udma_poll_fn(struct work_struct *w);
static DECLARE_DELAYED_WORK(udma_poll_work, udma_poll_fn);

struct udma_buf {
	u32 node;
	u64 gaddr, size;
	void *virt;			/* local buffers */
};

struct udma_file {
	struct list_head node;		/* in udma_files */
	kuid_t uid;			/* the opener's: dmabuf_max_remote_bytes_per_uid */
	bool priv;			/* opened with CAP_SYS_ADMIN: not capped */
	struct mutex lock;		/* buffers */
	struct udma_buf bufs[DMABUF_MAX_BUFFERS + 1];	/* index = id, 0 unused */
	DECLARE_KFIFO(done, struct dmabuf_done, 256);	/* guarded by udma_lock */
	wait_queue_head_t wq;
	unsigned int inflight;		/* guarded by udma_lock */
	u64 lost;			/* completions dropped: queue full */
};

/*
 * Buffer memory: physically contiguous, zeroed. Up to UDMA_PIECE (4 MiB, the buddy allocator's
 * largest block) from the page allocator; larger buffers, up to DMABUF_MAX_SIZE (256 MiB, seed
 * 004 sec. 3.1.1), from the contiguous memory area (CMA) through the DMA API on the cDMA's
 * device. The guest kernel reserves 64 MiB of CMA by default (cma= on the kernel command line
 * changes it, within the node's RAM): a size that cannot be met fails with -ENOMEM and a log
 * line that says so.
 */
static unsigned long cma_refused;
module_param(cma_refused, ulong, 0444);

static struct device *udma_dev(void)
{
	return udma_chan->device->dev;
}

static void *udma_mem_alloc(u64 size)
{
	struct page *page;
	dma_addr_t dma;
	void *virt;

	if (size <= UDMA_PIECE)
		return alloc_pages_exact(size, GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN);
	page = dma_alloc_pages(udma_dev(), size, &dma, DMA_BIDIRECTIONAL, GFP_KERNEL | __GFP_NOWARN);
	if (!page) {
		cma_refused++;
		pr_warn_ratelimited("unimem_dma: no %llu MiB of contiguous memory for a buffer (the CMA area is too small or taken: boot the node with more memory and cma=SIZE)\n",
				    size >> 20);
		return NULL;
	}
	virt = page_address(page);
	if (dma != phys_to_dma(udma_dev(), virt_to_phys(virt))) {
		dma_free_pages(udma_dev(), size, page, dma, DMA_BIDIRECTIONAL);
		return NULL; /* a translated DMA address: the global address would be wrong */
	}
	memset(virt, 0, size);
	return virt;
}

static void udma_mem_free(void *virt, u64 size)
{
	if (size <= UDMA_PIECE)
		free_pages_exact(virt, size);
	else
		dma_free_pages(udma_dev(), size, virt_to_page(virt), phys_to_dma(udma_dev(), virt_to_phys(virt)),
			       DMA_BIDIRECTIONAL);
}

/* Whoever removes x from udma_inflight finishes it (callback, poller or terminate). */
static void udma_finish(struct udma_xfer *x, int status)
{
	struct udma_file *f = x->owner;
	struct dmabuf_done d = { .tid = x->tid, .status = status };
	unsigned long flags;

	if (status == -ETIMEDOUT)
		timeouts++;
	else if (status)
		errors++;
	else
		copies++;
	if (!f) {
		x->status = status;
		complete(x->done);
		return;
	}
	spin_lock_irqsave(&udma_lock, flags);
	if (!kfifo_put(&f->done, d))
		f->lost++;
	f->inflight--;
	spin_unlock_irqrestore(&udma_lock, flags);
	wake_up(&f->wq); /* both the interruptible readers and the uninterruptible idle waiters */
	kfree(x);
}

static void udma_callback(void *arg)
{
	struct udma_xfer *x = arg;
	unsigned long flags;
	bool mine;

	spin_lock_irqsave(&udma_lock, flags);
	mine = !list_empty(&x->node);
	if (mine)
		list_del_init(&x->node);
	spin_unlock_irqrestore(&udma_lock, flags);
	if (mine)
		udma_finish(x, 0);
}

/* Fail everything in flight (after terminating the channel); sr: CDMASR seen at the error. */
static void udma_fail_all(int status, u32 sr)
{
	struct udma_xfer *x, *tmp;
	unsigned long flags;
	LIST_HEAD(failed);

	spin_lock_irqsave(&udma_lock, flags);
	list_splice_init(&udma_inflight, &failed);
	spin_unlock_irqrestore(&udma_lock, flags);
	list_for_each_entry_safe(x, tmp, &failed, node) {
		list_del_init(&x->node);
		x->engine_status = sr;
		udma_finish(x, status);
	}
}

static void udma_poll_fn(struct work_struct *w)
{
	struct udma_xfer *x;
	unsigned long flags;
	bool any, late = false;
	u32 sr = udma_regs ? readl(udma_regs + XCDMA_CDMASR) : 0;

	spin_lock_irqsave(&udma_lock, flags);
	any = !list_empty(&udma_inflight);
	list_for_each_entry(x, &udma_inflight, node)
		if (time_after(jiffies, x->deadline))
			late = true;
	spin_unlock_irqrestore(&udma_lock, flags);
	if (!any)
		return;
	if ((sr & XCDMA_SR_ERR_ALL) || late) {
		/* xilinx_dma left the channel stopped (error) or it hangs: reset it, fail the rest */
		mutex_lock(&udma_submit_lock);
		dmaengine_terminate_sync(udma_chan);
		mutex_unlock(&udma_submit_lock);
		pr_warn("unimem_dma: engine %s (CDMASR 0x%x): failing the transfers in flight\n",
			(sr & XCDMA_SR_ERR_ALL) ? "error" : "timeout", sr);
		udma_fail_all((sr & XCDMA_SR_ERR_ALL) ? -EIO : -ETIMEDOUT, sr);
		return;
	}
	schedule_delayed_work(&udma_poll_work, msecs_to_jiffies(UDMA_POLL_MS));
}

/* Queue a transfer between two physical addresses; x is finished exactly once. */
static int udma_submit(struct udma_xfer *x, u64 src, u64 dst, u64 len, unsigned int timeout_ms)
{
	struct dma_async_tx_descriptor *tx;
	unsigned long flags;
	dma_cookie_t cookie;
	u64 off, n;

	/* the larger of the two limits: /dev/unimem_dma checks its own UNIMEM_DMA_MAX_LEN */
	if (!len || len > max_t(u64, UNIMEM_DMA_MAX_LEN, DMABUF_MAX_SIZE) || src + len < src || dst + len < dst)
		return -EINVAL;
	INIT_LIST_HEAD(&x->node);
	x->deadline = jiffies + msecs_to_jiffies(timeout_ms ? timeout_ms : 2000 + 100 * (len >> 20));
	mutex_lock(&udma_submit_lock);
	for (off = 0; off < len; off += n) {
		bool last;

		n = min_t(u64, len - off, UDMA_PIECE);
		last = off + n == len;
		tx = dmaengine_prep_dma_memcpy(udma_chan, dst + off, src + off, n,
					       last ? DMA_PREP_INTERRUPT | DMA_CTRL_ACK : DMA_CTRL_ACK);
		if (!tx)
			goto err;
		if (last) {
			tx->callback = udma_callback;
			tx->callback_param = x;
			spin_lock_irqsave(&udma_lock, flags);
			list_add_tail(&x->node, &udma_inflight);
			spin_unlock_irqrestore(&udma_lock, flags);
		}
		cookie = dmaengine_submit(tx);
		if (dma_submit_error(cookie))
			goto err;
	}
	dma_async_issue_pending(udma_chan);
	mutex_unlock(&udma_submit_lock);
	schedule_delayed_work(&udma_poll_work, msecs_to_jiffies(UDMA_POLL_MS));
	return 0;
err:
	/* drop the pieces already queued; everything in flight fails with them */
	dmaengine_terminate_sync(udma_chan);
	mutex_unlock(&udma_submit_lock);
	spin_lock_irqsave(&udma_lock, flags);
	if (!list_empty(&x->node))
		list_del_init(&x->node);
	spin_unlock_irqrestore(&udma_lock, flags);
	udma_fail_all(-EIO, 0);
	return -ENOMEM;
}

/* ---- /dev/unimem_dma: synchronous copies (root) ---- */

static long udma_copy_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	DECLARE_COMPLETION_ONSTACK(done);
	struct unimem_dma_copy c;
	struct udma_xfer x = { .done = &done };
	ktime_t t0;
	int ret;

	if (cmd != UNIMEM_DMA_IOC_COPY)
		return -ENOTTY;
	if (copy_from_user(&c, (void __user *)arg, sizeof(c)))
		return -EFAULT;
	if (c.len > UNIMEM_DMA_MAX_LEN)
		return -EINVAL;
	t0 = ktime_get();
	ret = udma_submit(&x, c.src, c.dst, c.len, c.timeout_ms);
	if (ret)
		return ret;
	wait_for_completion(&done); /* the poller finishes x at its deadline at the latest */
	c.elapsed_ns = ktime_to_ns(ktime_sub(ktime_get(), t0));
	c.status = x.status;
	c.engine_status = x.engine_status;
	return copy_to_user((void __user *)arg, &c, sizeof(c)) ? -EFAULT : 0;
}

static const struct file_operations udma_copy_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = udma_copy_ioctl,
	.llseek = no_llseek,
};

static struct miscdevice udma_copy_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "unimem_dma",
	.fops = &udma_copy_fops,
	.mode = 0600,
};

/* ---- remote allocator (sec. 3.1.6) ---- */

struct ralloc_owned {			/* what this node allocated for another node */
	struct list_head node;
	u32 requester;
	u64 phys, size;
	void *virt;
};
static LIST_HEAD(ralloc_owned);
static DEFINE_MUTEX(ralloc_owned_lock);
static DEFINE_SPINLOCK(ralloc_fifo_lock);
struct ralloc_msg {
	u64 m;
	u32 from;			/* the sender node, from the packet's PID */
};
static DEFINE_KFIFO(ralloc_fifo, struct ralloc_msg, 64);	/* requests and frees from the mailbox */
#define RALLOC_PROBE_MS 500
#define RA_FREE_ALL ((1ull << 34) - 1)	/* FREE of this "address": everything held for the sender */
#define RA_ST_PROBE 3			/* REPLY status of a liveness probe: ignored by the receiver */

#define RALLOC_SLOTS 64
static struct {				/* this node's requests waiting for a reply */
	u32 seq;
	u32 node;			/* the node asked: only its answer counts */
	bool busy;
	struct completion done;
	int status;
	u64 phys;
} ralloc_wait[RALLOC_SLOTS];
static DEFINE_SPINLOCK(ralloc_wait_lock);
static DEFINE_MUTEX(ralloc_req_lock);
static u32 ralloc_seq;

#define RA_NODE(m) ((u32)(((m) >> 54) & 0x3f))
#define RA_SEQ(m) ((u32)(((m) >> 40) & 0x3fff))
#define RA_SIZE(m) ((m) & ((1ull << 40) - 1))
#define RA_STATUS(m) ((u32)(((m) >> 38) & 3))
#define RA_PHYS(m) ((m) & ((1ull << 34) - 1))
#define RA_MSG(op, node, hi) (((u64)(op) << MAILBOX_OPCODE_SHIFT) | ((u64)(node) << 54) | (hi))

/* Free what this node holds for `from` (all of it for RA_FREE_ALL); ralloc_owned_lock held. */
static unsigned int ralloc_free_owned(u32 from, u64 phys)
{
	struct ralloc_owned *o, *tmp;
	unsigned int n = 0;

	list_for_each_entry_safe(o, tmp, &ralloc_owned, node) {
		if (o->requester == from && (phys == RA_FREE_ALL || o->phys == phys)) {
			list_del(&o->node);
			udma_mem_free(o->virt, o->size);
			kfree(o);
			n++;
			if (phys != RA_FREE_ALL)
				break;
		}
	}
	return n;
}

/* Whether `from` may take `size` more bytes here; ralloc_owned_lock held. */
static bool ralloc_within_cap(u32 from, u64 size)
{
	struct ralloc_owned *o;
	u64 bytes = size;
	unsigned int n = 1;

	list_for_each_entry(o, &ralloc_owned, node) {
		if (o->requester == from) {
			bytes += o->size;
			n++;
		}
	}
	return bytes <= READ_ONCE(ralloc_max_bytes_per_node) && n <= READ_ONCE(ralloc_max_per_node);
}

static void ralloc_probe_fn(struct work_struct *w);
static DECLARE_DELAYED_WORK(ralloc_probe_work, ralloc_probe_fn);

static void ralloc_work_fn(struct work_struct *w)
{
	struct ralloc_msg r;

	while (kfifo_out_spinlocked(&ralloc_fifo, &r, 1, &ralloc_fifo_lock)) {
		u64 m = r.m;
		u32 from = r.from;

		if (MAILBOX_OPCODE(m) == RALLOC_OP_REQ) {
			u64 size = PAGE_ALIGN(RA_SIZE(m));
			struct ralloc_owned *o = NULL;
			u32 status = 2;
			u64 phys = 0;
			bool room;

			if (size && size <= DMABUF_MAX_SIZE && from < udma_nodes) {
				status = 1;
				mutex_lock(&ralloc_owned_lock);
				room = ralloc_within_cap(from, size);
				mutex_unlock(&ralloc_owned_lock);
				if (room)
					o = kzalloc(sizeof(*o), GFP_KERNEL);
				else
					ralloc_refused_cap++;
				if (o)
					o->virt = udma_mem_alloc(size);
				if (o && o->virt) {
					o->requester = from;
					o->size = size;
					o->phys = virt_to_phys(o->virt);
					phys = o->phys;
					mutex_lock(&ralloc_owned_lock);
					list_add(&o->node, &ralloc_owned);
					mutex_unlock(&ralloc_owned_lock);
					served_allocs++;
					status = 0;
					schedule_delayed_work(&ralloc_probe_work, msecs_to_jiffies(RALLOC_PROBE_MS));
				} else {
					kfree(o);
				}
			}
			if (mailbox_send_message(from, RA_MSG(RALLOC_OP_REPLY, udma_node,
							      ((u64)RA_SEQ(m) << 40) | ((u64)status << 38) | phys)) &&
			    status == 0) {
				/* nobody will ever free it: the requester is gone or its mailbox is full */
				pr_warn("unimem_dma: cannot answer node %u's allocation request: freed\n", from);
				mutex_lock(&ralloc_owned_lock);
				ralloc_free_owned(from, phys);
				mutex_unlock(&ralloc_owned_lock);
			}
		} else { /* free */
			unsigned int n;

			mutex_lock(&ralloc_owned_lock);
			n = ralloc_free_owned(from, RA_PHYS(m));
			mutex_unlock(&ralloc_owned_lock);
			if (RA_PHYS(m) == RA_FREE_ALL && n)
				pr_info("unimem_dma: node %u restarted: freed %u allocations it held here\n", from, n);
		}
	}
}
static DECLARE_WORK(ralloc_work, ralloc_work_fn);

/*
 * Every RALLOC_PROBE_MS while this node holds allocations for others: send each requester node
 * a probe (a REPLY with status RA_ST_PROBE, which receivers ignore). EHOSTUNREACH means the
 * node is gone (the bridge answers NODE_GONE/NOROUTE): free what it held. A stopped node
 * (timeout) or a full mailbox (EBUSY) keeps its allocations.
 */
static void ralloc_probe_fn(struct work_struct *w)
{
	DECLARE_BITMAP(nodes, 64);
	struct ralloc_owned *o;
	unsigned int n, freed;
	bool more;

	bitmap_zero(nodes, 64);
	mutex_lock(&ralloc_owned_lock);
	list_for_each_entry(o, &ralloc_owned, node)
		set_bit(o->requester & 63, nodes);
	mutex_unlock(&ralloc_owned_lock);
	for_each_set_bit(n, nodes, 64) {
		if (mailbox_send_message(n, RA_MSG(RALLOC_OP_REPLY, udma_node, (u64)RA_ST_PROBE << 38)) != -EHOSTUNREACH)
			continue;
		mutex_lock(&ralloc_owned_lock);
		freed = ralloc_free_owned(n, RA_FREE_ALL);
		mutex_unlock(&ralloc_owned_lock);
		ralloc_reclaimed += freed;
		pr_info("unimem_dma: node %u is gone: freed %u allocations it held here\n", n, freed);
	}
	mutex_lock(&ralloc_owned_lock);
	more = !list_empty(&ralloc_owned);
	mutex_unlock(&ralloc_owned_lock);
	if (more)
		schedule_delayed_work(&ralloc_probe_work, msecs_to_jiffies(RALLOC_PROBE_MS));
}

/* Mailbox callbacks: interrupt context. Only another node's kernel may ask or free. */
static int ralloc_request_cb(unsigned long long m, const struct mailbox_sender *from)
{
	struct ralloc_msg r = { .m = m, .from = from->node };

	if (from->user) {
		ralloc_refused_user++;
		pr_warn_ratelimited("unimem_dma: refused allocator message 0x%llx written by uid %u on node %u\n", m,
				    from->uid, from->node);
		return 0;
	}
	if (!kfifo_in_spinlocked(&ralloc_fifo, &r, 1, &ralloc_fifo_lock)) {
		ralloc_dropped++;
		pr_warn_ratelimited("unimem_dma: allocator queue full, message 0x%llx dropped\n", m);
	}
	schedule_work(&ralloc_work);
	return 0;
}

static int ralloc_reply_cb(unsigned long long m, const struct mailbox_sender *from)
{
	unsigned long flags;
	int i;

	if (from->user) {
		ralloc_refused_user++;
		return 0;
	}
	if (RA_STATUS(m) == RA_ST_PROBE)
		return 0;
	spin_lock_irqsave(&ralloc_wait_lock, flags);
	for (i = 0; i < RALLOC_SLOTS; i++) {
		if (ralloc_wait[i].busy && ralloc_wait[i].seq == RA_SEQ(m) && ralloc_wait[i].node == from->node) {
			ralloc_wait[i].status = RA_STATUS(m) == 0 ? 0 : RA_STATUS(m) == 1 ? -ENOMEM : -EINVAL;
			ralloc_wait[i].phys = RA_PHYS(m);
			complete(&ralloc_wait[i].done);
			break;
		}
	}
	spin_unlock_irqrestore(&ralloc_wait_lock, flags);
	return 0;
}

/* Allocate size bytes on node; gives the local virtual address (this node) or the phys there. */
static int ralloc_alloc(u32 node, u64 size, u64 *phys, void **virt)
{
	unsigned long flags;
	int slot = -1, i, ret;
	u32 seq;

	size = PAGE_ALIGN(size);
	*virt = NULL;
	if (!size || size > DMABUF_MAX_SIZE)
		return -EINVAL;
	if (node == udma_node) {
		*virt = udma_mem_alloc(size);
		if (!*virt)
			return -ENOMEM;
		*phys = virt_to_phys(*virt);
		return 0;
	}
	spin_lock_irqsave(&ralloc_wait_lock, flags);
	for (i = 0; i < RALLOC_SLOTS && slot < 0; i++)
		if (!ralloc_wait[i].busy)
			slot = i;
	if (slot >= 0) {
		seq = ralloc_seq++ & 0x3fff;
		ralloc_wait[slot].busy = true;
		ralloc_wait[slot].seq = seq;
		ralloc_wait[slot].node = node;
		reinit_completion(&ralloc_wait[slot].done);
	}
	spin_unlock_irqrestore(&ralloc_wait_lock, flags);
	if (slot < 0)
		return -EBUSY;
	ret = mailbox_send_message(node, RA_MSG(RALLOC_OP_REQ, udma_node, ((u64)seq << 40) | size));
	if (!ret && !wait_for_completion_timeout(&ralloc_wait[slot].done, msecs_to_jiffies(RALLOC_TIMEOUT_MS)))
		ret = -ETIMEDOUT; /* is unimem_dma.ko loaded on that node? */
	if (!ret)
		ret = ralloc_wait[slot].status;
	*phys = ralloc_wait[slot].phys;
	spin_lock_irqsave(&ralloc_wait_lock, flags);
	ralloc_wait[slot].busy = false;
	spin_unlock_irqrestore(&ralloc_wait_lock, flags);
	if (!ret)
		remote_allocs++;
	return ret;
}

static void ralloc_free(struct udma_buf *b)
{
	if (b->virt)
		udma_mem_free(b->virt, b->size);
	else if (mailbox_send_message(b->node, RA_MSG(RALLOC_OP_FREE, udma_node, UNIMEM_GADDR_LOCAL(b->gaddr))))
		pr_warn("unimem_dma: could not tell node %u to free 0x%llx\n", b->node, b->gaddr);
	memset(b, 0, sizeof(*b));
}

/* ---- /dev/dmabuffers (sec. 3.1.4) ---- */

static int dmabuf_open(struct inode *inode, struct file *file)
{
	struct udma_file *f = kzalloc(sizeof(*f), GFP_KERNEL);

	if (!f)
		return -ENOMEM;
	mutex_init(&f->lock);
	INIT_KFIFO(f->done);
	init_waitqueue_head(&f->wq);
	f->uid = current_uid();
	f->priv = capable(CAP_SYS_ADMIN);
	mutex_lock(&udma_files_lock);
	list_add(&f->node, &udma_files);
	mutex_unlock(&udma_files_lock);
	file->private_data = f;
	return nonseekable_open(inode, file);
}

/* Bytes uid holds on other nodes through all its files. */
static u64 dmabuf_uid_remote_bytes(kuid_t uid)
{
	struct udma_file *f;
	u64 bytes = 0;
	unsigned int i;

	mutex_lock(&udma_files_lock);
	list_for_each_entry(f, &udma_files, node) {
		if (!uid_eq(f->uid, uid))
			continue;
		mutex_lock(&f->lock);
		for (i = 1; i <= DMABUF_MAX_BUFFERS; i++)
			if (f->bufs[i].size && !f->bufs[i].virt)
				bytes += f->bufs[i].size;
		mutex_unlock(&f->lock);
	}
	mutex_unlock(&udma_files_lock);
	return bytes;
}

static bool dmabuf_idle(struct udma_file *f)
{
	unsigned long flags;
	bool idle;

	spin_lock_irqsave(&udma_lock, flags);
	idle = f->inflight == 0;
	spin_unlock_irqrestore(&udma_lock, flags);
	return idle;
}

static int dmabuf_release(struct inode *inode, struct file *file)
{
	struct udma_file *f = file->private_data;
	unsigned int i;

	/* the engine may still write into these buffers: wait (the poller ends late transfers) */
	wait_event(f->wq, dmabuf_idle(f));
	mutex_lock(&udma_files_lock);
	list_del(&f->node);
	mutex_unlock(&udma_files_lock);
	for (i = 1; i <= DMABUF_MAX_BUFFERS; i++)
		if (f->bufs[i].size)
			ralloc_free(&f->bufs[i]);
	kfree(f);
	return 0;
}

/* The buffer of this file that holds [g, g + len), or NULL. */
static struct udma_buf *dmabuf_find(struct udma_file *f, u64 g, u64 len)
{
	unsigned int i;

	for (i = 1; i <= DMABUF_MAX_BUFFERS; i++) {
		struct udma_buf *b = &f->bufs[i];

		if (b->size && g >= b->gaddr && len <= b->size && g - b->gaddr <= b->size - len)
			return b;
	}
	return NULL;
}

static long dmabuf_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct udma_file *f = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case DMABUF_IOC_INFO: {
		struct dmabuf_info i = { .node_id = udma_node, .node_count = udma_nodes };

		return copy_to_user(uarg, &i, sizeof(i)) ? -EFAULT : 0;
	}
	case DMABUF_IOC_ALLOC: {
		struct dmabuf_alloc a;
		struct udma_buf *b = NULL;
		unsigned int i;
		u64 phys;
		void *virt;
		int ret;

		if (copy_from_user(&a, uarg, sizeof(a)))
			return -EFAULT;
		if (a.node >= udma_nodes || !a.size || a.size > DMABUF_MAX_SIZE)
			return -EINVAL;
		/* Caveat: the check and the allocation are not atomic across files; two concurrent
		 * allocations of one user may pass together (by at most one buffer each)
		 */
		if (a.node != udma_node && !f->priv &&
		    dmabuf_uid_remote_bytes(f->uid) + PAGE_ALIGN(a.size) > READ_ONCE(dmabuf_max_remote_bytes_per_uid)) {
			dmabuf_refused_uid++;
			return -EDQUOT;
		}
		mutex_lock(&f->lock);
		for (i = 1; i <= DMABUF_MAX_BUFFERS && !b; i++)
			if (!f->bufs[i].size)
				b = &f->bufs[i];
		if (!b) {
			mutex_unlock(&f->lock);
			return -ENOSPC;
		}
		ret = ralloc_alloc(a.node, a.size, &phys, &virt);
		if (ret) {
			mutex_unlock(&f->lock);
			return ret;
		}
		b->node = a.node;
		b->size = PAGE_ALIGN(a.size);
		b->gaddr = UNIMEM_GADDR(a.node, phys);
		b->virt = virt;
		a.id = b - f->bufs;
		a.size = b->size;
		a.gaddr = b->gaddr;
		mutex_unlock(&f->lock);
		return copy_to_user(uarg, &a, sizeof(a)) ? -EFAULT : 0;
	}
	case DMABUF_IOC_FREE: {
		u32 id;

		if (get_user(id, (u32 __user *)uarg))
			return -EFAULT;
		if (id < 1 || id > DMABUF_MAX_BUFFERS)
			return -EINVAL;
		/* Caveat: a transfer in flight into this buffer is the caller's race, as in hardware;
		 * wait for the file's transfers so the memory is not freed under the engine.
		 */
		wait_event(f->wq, dmabuf_idle(f));
		mutex_lock(&f->lock);
		if (!f->bufs[id].size) {
			mutex_unlock(&f->lock);
			return -ENOENT;
		}
		ralloc_free(&f->bufs[id]);
		mutex_unlock(&f->lock);
		return 0;
	}
	}
	return -ENOTTY;
}

static int dmabuf_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct udma_file *f = file->private_data;
	u64 off = (u64)vma->vm_pgoff << PAGE_SHIFT, len = vma->vm_end - vma->vm_start;
	u64 id = off / DMABUF_MMAP_STRIDE;
	struct udma_buf *b;
	int ret;

	if (!(vma->vm_flags & VM_SHARED) || off % DMABUF_MMAP_STRIDE || id < 1 || id > DMABUF_MAX_BUFFERS)
		return -EINVAL;
	mutex_lock(&f->lock);
	b = &f->bufs[id];
	if (!b->size || len > b->size) {
		mutex_unlock(&f->lock);
		return -EINVAL;
	}
	/* Caveat: freeing a buffer that is still mapped leaves the mapping to freed memory, as
	 * with the hardware's static mappings; the library unmaps before it frees.
	 */
	vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP;
	if (b->virt) {
		ret = remap_pfn_range(vma, vma->vm_start, virt_to_phys(b->virt) >> PAGE_SHIFT, len, vma->vm_page_prot);
	} else {
		vma->vm_page_prot = pgprot_writecombine(vma->vm_page_prot);
		ret = io_remap_pfn_range(vma, vma->vm_start, (GAS_WINDOW_BASE + b->gaddr) >> PAGE_SHIFT, len,
					 vma->vm_page_prot);
	}
	mutex_unlock(&f->lock);
	return ret;
}

static ssize_t dmabuf_write(struct file *file, const char __user *buf, size_t len, loff_t *ppos)
{
	struct udma_file *f = file->private_data;
	struct dmabuf_xfer t;
	struct udma_xfer *x;
	unsigned long flags;
	size_t done = 0;
	int ret;

	if (!len || len % sizeof(t))
		return -EINVAL;
	for (; done < len; done += sizeof(t)) {
		if (copy_from_user(&t, buf + done, sizeof(t)))
			return done ? done : -EFAULT;
		mutex_lock(&f->lock);
		ret = !t.size || t.size > DMABUF_MAX_SIZE || !dmabuf_find(f, t.src, t.size) ||
		      !dmabuf_find(f, t.dst, t.size) ? -EINVAL : 0;
		mutex_unlock(&f->lock);
		if (ret)
			return done ? done : ret;
		x = kzalloc(sizeof(*x), GFP_KERNEL);
		if (!x)
			return done ? done : -ENOMEM;
		x->tid = t.tid;
		x->owner = f;
		spin_lock_irqsave(&udma_lock, flags);
		f->inflight++;
		spin_unlock_irqrestore(&udma_lock, flags);
		ret = udma_submit(x, GAS_WINDOW_BASE + t.src, GAS_WINDOW_BASE + t.dst, t.size, 0);
		if (ret) {
			/* x was not queued: undo the count and report the failure as a completion */
			udma_finish(x, -EIO);
		}
	}
	return done;
}

static ssize_t dmabuf_read(struct file *file, char __user *buf, size_t len, loff_t *ppos)
{
	struct udma_file *f = file->private_data;
	struct dmabuf_done d;
	unsigned long flags;
	size_t done = 0;
	int ret;

	if (len < sizeof(d))
		return -EINVAL;
	for (;;) {
		spin_lock_irqsave(&udma_lock, flags);
		ret = !kfifo_is_empty(&f->done);
		spin_unlock_irqrestore(&udma_lock, flags);
		if (ret)
			break;
		if (file->f_flags & O_NONBLOCK)
			return -EAGAIN;
		ret = wait_event_interruptible(f->wq, !kfifo_is_empty(&f->done));
		if (ret)
			return ret;
	}
	while (done + sizeof(d) <= len) {
		spin_lock_irqsave(&udma_lock, flags);
		ret = kfifo_get(&f->done, &d);
		spin_unlock_irqrestore(&udma_lock, flags);
		if (!ret)
			break;
		if (copy_to_user(buf + done, &d, sizeof(d)))
			return done ? done : -EFAULT;
		done += sizeof(d);
	}
	return done;
}

static __poll_t dmabuf_poll(struct file *file, poll_table *wait)
{
	struct udma_file *f = file->private_data;
	unsigned long flags;
	__poll_t mask = EPOLLOUT | EPOLLWRNORM;

	poll_wait(file, &f->wq, wait);
	spin_lock_irqsave(&udma_lock, flags);
	if (!kfifo_is_empty(&f->done))
		mask |= EPOLLIN | EPOLLRDNORM;
	spin_unlock_irqrestore(&udma_lock, flags);
	return mask;
}

static const struct file_operations dmabuf_fops = {
	.owner = THIS_MODULE,
	.open = dmabuf_open,
	.release = dmabuf_release,
	.unlocked_ioctl = dmabuf_ioctl,
	.mmap = dmabuf_mmap,
	.read = dmabuf_read,
	.write = dmabuf_write,
	.poll = dmabuf_poll,
	.llseek = no_llseek,
};

static struct miscdevice dmabuf_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "dmabuffers",
	.fops = &dmabuf_fops,
	.mode = 0666,
};

/* ---- module ---- */

static int __init udma_init(void)
{
	struct device_node *np;
	dma_cap_mask_t mask;
	int i, ret;

	if (of_property_read_u32(of_chosen, "rackemu,node-id", &udma_node) ||
	    of_property_read_u32(of_chosen, "rackemu,node-count", &udma_nodes)) {
		pr_err("unimem_dma: no rackemu,node-id / node-count in /chosen: not a rackemu node\n");
		return -ENODEV;
	}
	dma_cap_zero(mask);
	dma_cap_set(DMA_MEMCPY, mask);
	udma_chan = dma_request_chan_by_mask(&mask);
	if (IS_ERR(udma_chan)) {
		ret = PTR_ERR(udma_chan);
		pr_err("unimem_dma: no memcpy DMA channel (insmod xilinx_dma.ko first; is dmatest holding it?): %d\n", ret);
		return ret;
	}
	np = of_find_compatible_node(NULL, NULL, RACKEMU_CDMA_COMPAT);
	udma_regs = np ? of_iomap(np, 0) : NULL;
	of_node_put(np);
	for (i = 0; i < RALLOC_SLOTS; i++)
		init_completion(&ralloc_wait[i].done);
	ret = mailbox_register_sender_callback(RALLOC_OP_REQ, ralloc_request_cb, "remote allocator");
	if (!ret) {
		ret = mailbox_register_sender_callback(RALLOC_OP_FREE, ralloc_request_cb, "remote allocator free");
		if (ret)
			mailbox_unregister_callback(RALLOC_OP_REQ);
	}
	if (!ret) {
		ret = mailbox_register_sender_callback(RALLOC_OP_REPLY, ralloc_reply_cb, "remote allocator reply");
		if (ret) {
			mailbox_unregister_callback(RALLOC_OP_REQ);
			mailbox_unregister_callback(RALLOC_OP_FREE);
		}
	}
	if (ret) {
		pr_err("unimem_dma: mailbox opcodes 0x%x-0x%x are taken: %d\n", RALLOC_OP_REQ, RALLOC_OP_FREE, ret);
		goto err_chan;
	}
	ret = misc_register(&udma_copy_misc);
	if (ret)
		goto err_mbox;
	ret = misc_register(&dmabuf_misc);
	if (ret)
		goto err_copy;
	/* a restarted node: what the other nodes still hold for its earlier incarnation is garbage */
	for (i = 0; i < udma_nodes; i++)
		if (i != udma_node)
			mailbox_send_message(i, RA_MSG(RALLOC_OP_FREE, udma_node, RA_FREE_ALL));
	pr_info("unimem_dma: node %u of %u, %s, /dev/unimem_dma and /dev/dmabuffers ready\n", udma_node, udma_nodes,
		dma_chan_name(udma_chan));
	return 0;

err_copy:
	misc_deregister(&udma_copy_misc);
err_mbox:
	mailbox_unregister_callback(RALLOC_OP_REQ);
	mailbox_unregister_callback(RALLOC_OP_FREE);
	mailbox_unregister_callback(RALLOC_OP_REPLY);
err_chan:
	if (udma_regs)
		iounmap(udma_regs);
	dma_release_channel(udma_chan);
	return ret;
}

static void __exit udma_exit(void)
{
	struct ralloc_owned *o, *tmp;

	misc_deregister(&dmabuf_misc);
	misc_deregister(&udma_copy_misc);
	mailbox_unregister_callback(RALLOC_OP_REQ);
	mailbox_unregister_callback(RALLOC_OP_FREE);
	mailbox_unregister_callback(RALLOC_OP_REPLY);
	cancel_work_sync(&ralloc_work);
	cancel_delayed_work_sync(&ralloc_probe_work);
	cancel_delayed_work_sync(&udma_poll_work);
	dmaengine_terminate_sync(udma_chan);
	udma_fail_all(-EIO, 0);
	list_for_each_entry_safe(o, tmp, &ralloc_owned, node) {
		pr_warn("unimem_dma: freeing %llu bytes still allocated for node %u\n", o->size, o->requester);
		list_del(&o->node);
		udma_mem_free(o->virt, o->size);
		kfree(o);
	}
	if (udma_regs)
		iounmap(udma_regs);
	dma_release_channel(udma_chan);
}

module_init(udma_init);
module_exit(udma_exit);
MODULE_DESCRIPTION("rackemu: cDMA transfers, remote allocator and DMA buffers for Unimem RDMA");
MODULE_AUTHOR("rackemu");
MODULE_LICENSE("GPL");
