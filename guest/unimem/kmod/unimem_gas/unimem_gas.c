// SPDX-License-Identifier: GPL-2.0
/*
 * unimem_gas: Linux driver for rackemu's Unimem global address space window (ExaNoDe D3.6 sec. 1,
 * sec. 3.1.6; layout in rackemu/unimem_regs.h, interface in rackemu/unimem_gas_uapi.h).
 *
 * Binds "rackemu,unimem-gas" (reg 0: control page, reg 1: the window). /dev/unimem_gas maps
 * any part of the window into a process (mmap offset = global address) and exports local,
 * physically contiguous memory so other nodes can reach it. Root only (mode 0600): this is raw
 * access to every node's memory, the equivalent of /dev/mem for the rack; the GSAS atomicity
 * driver is where per-process rights belong.
 */
#include <linux/io.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/of.h>
#include <linux/platform_device.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "rackemu/unimem_regs.h"
#include "rackemu/unimem_gas_uapi.h"

struct unimem_gas {
	struct device *dev;
	void __iomem *ctrl;
	phys_addr_t window_phys;
	u64 window_size;
	u32 node_id, node_count;
	struct miscdevice misc;
};

struct unimem_gas_file {
	struct unimem_gas *gas;
	struct mutex lock;		/* exports */
	unsigned int nexports;
	struct {
		void *virt;
		size_t size;
	} exports[UNIMEM_GAS_EXPORTS_PER_FILE];
};

static struct unimem_gas *unimem_gas_dev;	/* one window per node */
static DEFINE_MUTEX(unimem_gas_dev_lock);

static int unimem_gas_open(struct inode *inode, struct file *file)
{
	struct unimem_gas_file *f;

	f = kzalloc(sizeof(*f), GFP_KERNEL);
	if (!f)
		return -ENOMEM;
	f->gas = container_of(file->private_data, struct unimem_gas, misc);
	mutex_init(&f->lock);
	file->private_data = f;
	return 0;
}

static int unimem_gas_release(struct inode *inode, struct file *file)
{
	struct unimem_gas_file *f = file->private_data;
	unsigned int i;

	for (i = 0; i < f->nexports; i++)
		free_pages_exact(f->exports[i].virt, f->exports[i].size);
	kfree(f);
	return 0;
}

static void unimem_gas_read_counters(struct unimem_gas *g, u64 *c)
{
	unsigned int i;

	for (i = 0; i < GAS_CNT_COUNT; i++)
		c[i] = readq(g->ctrl + GAS_CNT_BASE + 8 * i);
}

static long unimem_gas_export(struct unimem_gas_file *f, struct unimem_gas_export __user *uarg)
{
	struct unimem_gas_export e;
	size_t size;
	void *virt;
	long ret = 0;

	if (copy_from_user(&e, uarg, sizeof(e)))
		return -EFAULT;
	if (e.size == 0 || e.size > UNIMEM_GAS_EXPORT_MAX)
		return -EINVAL;
	size = PAGE_ALIGN(e.size);
	mutex_lock(&f->lock);
	if (f->nexports == UNIMEM_GAS_EXPORTS_PER_FILE) {
		ret = -ENOSPC;
		goto out;
	}
	virt = alloc_pages_exact(size, GFP_KERNEL | __GFP_ZERO | __GFP_NOWARN);
	if (!virt) {
		ret = -ENOMEM;
		goto out;
	}
	e.local_phys = virt_to_phys(virt);
	e.gaddr = UNIMEM_GADDR(f->gas->node_id, e.local_phys);
	if (copy_to_user(uarg, &e, sizeof(e))) {
		free_pages_exact(virt, size);
		ret = -EFAULT;
		goto out;
	}
	f->exports[f->nexports].virt = virt;
	f->exports[f->nexports].size = size;
	f->nexports++;
out:
	mutex_unlock(&f->lock);
	return ret;
}

static long unimem_gas_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct unimem_gas_file *f = file->private_data;
	struct unimem_gas *g = f->gas;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case UNIMEM_GAS_IOC_INFO: {
		struct unimem_gas_info info = {
			.node_id = g->node_id,
			.node_count = g->node_count,
			.window_base = g->window_phys,
			.window_size = g->window_size,
			.node_shift = UNIMEM_GADDR_NODE_SHIFT,
		};

		return copy_to_user(uarg, &info, sizeof(info)) ? -EFAULT : 0;
	}
	case UNIMEM_GAS_IOC_EXPORT:
		return unimem_gas_export(f, uarg);
	case UNIMEM_GAS_IOC_COUNTERS: {
		u64 c[GAS_CNT_COUNT];

		BUILD_BUG_ON(_IOC_SIZE(UNIMEM_GAS_IOC_COUNTERS) != sizeof(c));
		unimem_gas_read_counters(g, c);
		return copy_to_user(uarg, &c, sizeof(c)) ? -EFAULT : 0;
	}
	default:
		return -ENOTTY;
	}
}

static int unimem_gas_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct unimem_gas_file *f = file->private_data;
	struct unimem_gas *g = f->gas;
	u64 gaddr = (u64)vma->vm_pgoff << PAGE_SHIFT;
	u64 len = vma->vm_end - vma->vm_start;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;	/* a private mapping would copy the window on a write fault */
	if (gaddr >= g->window_size || len > g->window_size - gaddr)
		return -EINVAL;	/* beyond the cluster */
	if (UNIMEM_GADDR_NODE(gaddr) != UNIMEM_GADDR_NODE(gaddr + len - 1))
		return -EINVAL;	/* spans two nodes */
	vma->vm_flags |= VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP;
	/* Normal non-cacheable: uncached as the hardware's window, unaligned and SIMD accesses allowed */
	vma->vm_page_prot = pgprot_writecombine(vma->vm_page_prot);
	return io_remap_pfn_range(vma, vma->vm_start, (g->window_phys + gaddr) >> PAGE_SHIFT, len,
				  vma->vm_page_prot);
}

static const struct file_operations unimem_gas_fops = {
	.owner = THIS_MODULE,
	.open = unimem_gas_open,
	.release = unimem_gas_release,
	.unlocked_ioctl = unimem_gas_ioctl,
	.mmap = unimem_gas_mmap,
	.llseek = no_llseek,
};

static ssize_t counters_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	static const char *const names[] = { UNIMEM_GAS_UAPI_COUNTER_NAMES };
	struct unimem_gas *g = dev_get_drvdata(dev);
	u64 c[GAS_CNT_COUNT];
	unsigned int i;
	int at = 0;

	BUILD_BUG_ON(ARRAY_SIZE(names) != GAS_CNT_COUNT);
	unimem_gas_read_counters(g, c);
	for (i = 0; i < GAS_CNT_COUNT; i++)
		at += sysfs_emit_at(buf, at, "%s%s=%llu", i ? " " : "", names[i], c[i]);
	return at + sysfs_emit_at(buf, at, "\n");
}
static DEVICE_ATTR_RO(counters);

static ssize_t node_id_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct unimem_gas *g = dev_get_drvdata(dev);

	return sysfs_emit(buf, "%u\n", g->node_id);
}
static DEVICE_ATTR_RO(node_id);

static struct attribute *unimem_gas_attrs[] = {
	&dev_attr_counters.attr,
	&dev_attr_node_id.attr,
	NULL,
};
ATTRIBUTE_GROUPS(unimem_gas);

static int unimem_gas_probe(struct platform_device *pdev)
{
	struct device *dev = &pdev->dev;
	struct unimem_gas *g;
	struct resource *win;
	int ret;

	g = devm_kzalloc(dev, sizeof(*g), GFP_KERNEL);
	if (!g)
		return -ENOMEM;
	g->dev = dev;
	g->ctrl = devm_platform_ioremap_resource_byname(pdev, "ctrl");
	if (IS_ERR(g->ctrl))
		return PTR_ERR(g->ctrl);
	win = platform_get_resource_byname(pdev, IORESOURCE_MEM, "window");
	if (!win) {
		dev_err(dev, "no \"window\" register range in the device tree\n");
		return -EINVAL;
	}
	if (readq(g->ctrl + GAS_CTRL_ID) != GAS_ID_VALUE) {
		dev_err(dev, "no Unimem GAS control page (bad id register)\n");
		return -ENODEV;
	}
	g->node_id = readq(g->ctrl + GAS_CTRL_NODE_ID);
	g->node_count = readq(g->ctrl + GAS_CTRL_NODE_COUNT);
	g->window_phys = win->start;
	g->window_size = readq(g->ctrl + GAS_CTRL_WINDOW_SIZE);
	if (g->window_phys != readq(g->ctrl + GAS_CTRL_WINDOW_BASE) || g->window_size > resource_size(win) ||
	    g->node_id >= g->node_count) {
		dev_err(dev, "device tree window %pR does not match the control page (base %#llx size %#llx)\n",
			win, readq(g->ctrl + GAS_CTRL_WINDOW_BASE), g->window_size);
		return -EINVAL;
	}
	/* The window is mapped only into processes; claim it so nothing else maps it. */
	if (!devm_request_mem_region(dev, win->start, resource_size(win), "unimem-gas-window")) {
		dev_err(dev, "window %pR is busy\n", win);
		return -EBUSY;
	}
	platform_set_drvdata(pdev, g);

	mutex_lock(&unimem_gas_dev_lock);
	if (unimem_gas_dev) {
		mutex_unlock(&unimem_gas_dev_lock);
		dev_err(dev, "a second GAS window is not supported\n");
		return -EBUSY;
	}
	g->misc.minor = MISC_DYNAMIC_MINOR;
	g->misc.name = "unimem_gas";
	g->misc.fops = &unimem_gas_fops;
	g->misc.mode = 0600;
	ret = misc_register(&g->misc);
	if (ret) {
		mutex_unlock(&unimem_gas_dev_lock);
		dev_err(dev, "cannot register /dev/unimem_gas: %d\n", ret);
		return ret;
	}
	unimem_gas_dev = g;
	mutex_unlock(&unimem_gas_dev_lock);
	dev_info(dev, "node %u of %u: global address window %pa + %#llx, /dev/unimem_gas ready\n",
		 g->node_id, g->node_count, &g->window_phys, g->window_size);
	return 0;
}

static int unimem_gas_remove(struct platform_device *pdev)
{
	struct unimem_gas *g = platform_get_drvdata(pdev);

	mutex_lock(&unimem_gas_dev_lock);
	misc_deregister(&g->misc);
	unimem_gas_dev = NULL;
	mutex_unlock(&unimem_gas_dev_lock);
	return 0;
}

static const struct of_device_id unimem_gas_of_match[] = {
	{ .compatible = RACKEMU_GAS_COMPAT },
	{ }
};
MODULE_DEVICE_TABLE(of, unimem_gas_of_match);

static struct platform_driver unimem_gas_driver = {
	.probe = unimem_gas_probe,
	.remove = unimem_gas_remove,
	.driver = {
		.name = "unimem-gas",
		.of_match_table = unimem_gas_of_match,
		.dev_groups = unimem_gas_groups,
	},
};
module_platform_driver(unimem_gas_driver);

MODULE_DESCRIPTION("rackemu Unimem global address space window");
MODULE_AUTHOR("rackemu");
MODULE_LICENSE("GPL");
