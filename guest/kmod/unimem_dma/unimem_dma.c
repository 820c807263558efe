// SPDX-License-Identifier: GPL-2.0
/*
 * unimem_dma: physical-to-physical copies with the node's cDMA engine through Linux's
 * dmaengine API (the unmodified xilinx_dma driver owns the engine). Source and destination may
 * be local RAM or another node's memory in the global address space window, so one call moves
 * data local-to-remote, remote-to-local or remote-to-remote. Interface:
 * rackemu/unimem_dma_uapi.h; docs/cdma.md.
 *
 * Load after xilinx_dma.ko (the channel is requested at the first copy). Root only: the
 * addresses are raw physical addresses.
 */
#include <linux/completion.h>
#include <linux/io.h>
#include <linux/of.h>
#include <linux/of_address.h>
#include <linux/dmaengine.h>
#include <linux/ktime.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/uaccess.h>

#include "rackemu/unimem_dma_uapi.h"
#include "rackemu/xilinx_cdma_regs.h"

#define UNIMEM_DMA_PIECE (4u << 20) /* below xilinx_dma's 23-bit CDMA limit */

static DEFINE_MUTEX(udma_lock);	/* one copy at a time; the channel */
static struct dma_chan *udma_chan;
/*
 * The engine's registers, mapped read-only in spirit: xilinx_dma reports an engine error only by
 * a log line (the descriptors never complete), so while a copy runs this driver reads CDMASR to
 * turn an error into -EIO at once instead of a timeout.
 */
static void __iomem *udma_regs;
static unsigned long copies, errors, timeouts;
module_param(copies, ulong, 0444);
module_param(errors, ulong, 0444);
module_param(timeouts, ulong, 0444);

static void udma_done(void *arg)
{
	complete(arg);
}

static int udma_get_chan(void)
{
	dma_cap_mask_t mask;
	struct dma_chan *chan;

	if (udma_chan)
		return 0;
	dma_cap_zero(mask);
	dma_cap_set(DMA_MEMCPY, mask);
	chan = dma_request_chan_by_mask(&mask);
	if (IS_ERR(chan)) {
		pr_err("unimem_dma: no memcpy DMA channel (is xilinx_dma.ko loaded?): %ld\n", PTR_ERR(chan));
		return PTR_ERR(chan);
	}
	udma_chan = chan;
	if (!udma_regs) {
		struct device_node *np = of_find_compatible_node(NULL, NULL, RACKEMU_CDMA_COMPAT);

		udma_regs = np ? of_iomap(np, 0) : NULL;
		of_node_put(np);
	}
	pr_info("unimem_dma: using %s%s\n", dma_chan_name(chan),
		udma_regs ? "" : " (engine status not readable: errors end in timeouts)");
	return 0;
}

static long udma_copy(struct unimem_dma_copy *c)
{
	DECLARE_COMPLETION_ONSTACK(done);
	struct dma_async_tx_descriptor *tx;
	dma_cookie_t cookie = 0;
	u64 off, n;
	unsigned long timeout;
	ktime_t t0;
	long left = 0;

	if (!c->len || c->len > UNIMEM_DMA_MAX_LEN || c->src + c->len < c->src || c->dst + c->len < c->dst)
		return -EINVAL;
	t0 = ktime_get();
	for (off = 0; off < c->len; off += n) {
		bool last;

		n = min_t(u64, c->len - off, UNIMEM_DMA_PIECE);
		last = off + n == c->len;
		tx = dmaengine_prep_dma_memcpy(udma_chan, c->dst + off, c->src + off, n,
					       last ? DMA_PREP_INTERRUPT | DMA_CTRL_ACK : DMA_CTRL_ACK);
		if (!tx) {
			dmaengine_terminate_sync(udma_chan);
			return -ENOMEM;
		}
		if (last) {
			tx->callback = udma_done;
			tx->callback_param = &done;
		}
		cookie = dmaengine_submit(tx);
		if (dma_submit_error(cookie)) {
			dmaengine_terminate_sync(udma_chan);
			return -EIO;
		}
	}
	dma_async_issue_pending(udma_chan);
	timeout = jiffies + msecs_to_jiffies(c->timeout_ms ? c->timeout_ms : 2000 + 100 * (c->len >> 20));
	for (;;) {
		left = wait_for_completion_timeout(&done, msecs_to_jiffies(2));
		if (left)
			break;
		c->engine_status = udma_regs ? readl(udma_regs + XCDMA_CDMASR) : 0;
		if (c->engine_status & XCDMA_SR_ERR_ALL)
			break;
		if (time_after(jiffies, timeout))
			break;
	}
	c->elapsed_ns = ktime_to_ns(ktime_sub(ktime_get(), t0));
	if (left && dma_async_is_tx_complete(udma_chan, cookie, NULL, NULL) == DMA_COMPLETE) {
		c->status = 0;
		c->engine_status = 0;
		copies++;
		return 0;
	}
	/* xilinx_dma leaves a failed channel stopped; terminate_all resets it for the next copy */
	dmaengine_terminate_sync(udma_chan);
	if (c->engine_status & XCDMA_SR_ERR_ALL) {
		c->status = -EIO;
		errors++;
	} else {
		c->status = -ETIMEDOUT;
		timeouts++;
	}
	return 0;
}

static long udma_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct unimem_dma_copy c;
	long ret;

	if (cmd != UNIMEM_DMA_IOC_COPY)
		return -ENOTTY;
	if (copy_from_user(&c, (void __user *)arg, sizeof(c)))
		return -EFAULT;
	mutex_lock(&udma_lock);
	ret = udma_get_chan();
	if (!ret)
		ret = udma_copy(&c);
	mutex_unlock(&udma_lock);
	if (ret)
		return ret;
	return copy_to_user((void __user *)arg, &c, sizeof(c)) ? -EFAULT : 0;
}

static const struct file_operations udma_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = udma_ioctl,
	.llseek = no_llseek,
};

static struct miscdevice udma_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "unimem_dma",
	.fops = &udma_fops,
	.mode = 0600,
};

static int __init udma_init(void)
{
	return misc_register(&udma_misc);
}

static void __exit udma_exit(void)
{
	misc_deregister(&udma_misc);
	if (udma_chan)
		dma_release_channel(udma_chan);
	if (udma_regs)
		iounmap(udma_regs);
}

module_init(udma_init);
module_exit(udma_exit);
MODULE_DESCRIPTION("rackemu: physical copies with the cDMA engine, local and remote");
MODULE_AUTHOR("rackemu");
MODULE_LICENSE("GPL");
