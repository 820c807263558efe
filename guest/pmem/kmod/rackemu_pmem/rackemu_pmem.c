// SPDX-License-Identifier: GPL-2.0
/*
 * rackemu_pmem: the node's persistent-memory region for user space (docs/pmem.md).
 *
 * Binds to the device-tree node "rackemu,pmem" (reg: the model's control block, then the
 * region) and offers /dev/rkpmem0 (root only, mode 0600):
 *   - mmap(MAP_SHARED) of the region: a plain remap_pfn_range of its pages with the mapping's
 *     default, cacheable attributes (a VM_PFNMAP vma), so that stores go through the CPU's
 *     caches and DC CVAP / DC CVAC from EL0 write them back (rackemu/pmem_persist.h); an offset
 *     or length outside the region, or a private mapping, is refused with EINVAL;
 *   - ioctl RKPMEM_IOC_INFO: base, size and the model's configuration (rackemu/pmem_uapi.h).
 * The region is also Linux's "pmem-region" (of_pmem, nd_pmem: /dev/pmem0); this driver does not
 * claim it, so both may be used (not on the same bytes at once: the block device knows nothing
 * of the mapping).
 */
#include <linux/fs.h>
#include <linux/io.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/of.h>
#include <linux/platform_device.h>
#include <linux/uaccess.h>

#include "rackemu/pmem_regs.h"
#include "rackemu/pmem_uapi.h"

struct rkpmem {
	void __iomem *ctrl;
	struct resource region;
	struct rkpmem_info info;
	struct miscdevice misc;
};

static struct rkpmem *rkpmem_of(struct file *file)
{
	return container_of(file->private_data, struct rkpmem, misc);
}

static int rkpmem_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct rkpmem *p = rkpmem_of(file);
	u64 len = vma->vm_end - vma->vm_start;
	u64 off;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (vma->vm_pgoff > (p->info.size >> PAGE_SHIFT))
		return -EINVAL;
	off = (u64)vma->vm_pgoff << PAGE_SHIFT;
	if (len > p->info.size - off)
		return -EINVAL;
	return remap_pfn_range(vma, vma->vm_start, (p->info.base + off) >> PAGE_SHIFT, len, vma->vm_page_prot);
}

static long rkpmem_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct rkpmem *p = rkpmem_of(file);

	if (cmd != RKPMEM_IOC_INFO)
		return -ENOTTY;
	if (copy_to_user((void __user *)arg, &p->info, sizeof(p->info)))
		return -EFAULT;
	return 0;
}

static const struct file_operations rkpmem_fops = {
	.owner = THIS_MODULE,
	.mmap = rkpmem_mmap,
	.unlocked_ioctl = rkpmem_ioctl,
	.llseek = noop_llseek,
};

static int rkpmem_probe(struct platform_device *pdev)
{
	struct device *dev = &pdev->dev;
	struct resource *r;
	struct rkpmem *p;
	int ret;

	p = devm_kzalloc(dev, sizeof(*p), GFP_KERNEL);
	if (!p)
		return -ENOMEM;
	p->ctrl = devm_platform_ioremap_resource(pdev, 0);
	if (IS_ERR(p->ctrl))
		return PTR_ERR(p->ctrl);
	if (readq(p->ctrl + PMEM_REG_ID) != PMEM_ID_VALUE) {
		dev_err(dev, "no rackemu persistent-memory block (ID 0x%llx)\n", readq(p->ctrl + PMEM_REG_ID));
		return -ENODEV;
	}
	r = platform_get_resource(pdev, IORESOURCE_MEM, 1);
	if (!r)
		return -ENODEV;
	p->info.base = readq(p->ctrl + PMEM_REG_REGION_BASE);
	p->info.size = readq(p->ctrl + PMEM_REG_REGION_SIZE);
	if (p->info.base != r->start || p->info.size != resource_size(r) || !PAGE_ALIGNED(p->info.base) ||
	    !PAGE_ALIGNED(p->info.size)) {
		dev_err(dev, "region %pR and the block's [0x%llx, +0x%llx) disagree\n", r, p->info.base,
			p->info.size);
		return -ENODEV;
	}
	p->info.mode = (u32)readq(p->ctrl + PMEM_REG_MODE);
	p->info.nic_entries = (u32)readq(p->ctrl + PMEM_REG_NIC_ENTRIES);
	p->info.llc_lines = (u32)readq(p->ctrl + PMEM_REG_LLC_LINES);
	p->misc.minor = MISC_DYNAMIC_MINOR;
	p->misc.name = "rkpmem0";
	p->misc.fops = &rkpmem_fops;
	p->misc.parent = dev;
	p->misc.mode = 0600;
	ret = misc_register(&p->misc);
	if (ret)
		return ret;
	platform_set_drvdata(pdev, p);
	dev_info(dev, "/dev/rkpmem0: %llu MiB at 0x%llx, mode %u\n", p->info.size >> 20, p->info.base, p->info.mode);
	return 0;
}

static int rkpmem_remove(struct platform_device *pdev)
{
	struct rkpmem *p = platform_get_drvdata(pdev);

	misc_deregister(&p->misc);
	return 0;
}

static const struct of_device_id rkpmem_of_match[] = {
	{ .compatible = RACKEMU_PMEM_COMPAT },
	{}
};
MODULE_DEVICE_TABLE(of, rkpmem_of_match);

static struct platform_driver rkpmem_driver = {
	.probe = rkpmem_probe,
	.remove = rkpmem_remove,
	.driver = {
		.name = "rackemu-pmem",
		.of_match_table = rkpmem_of_match,
	},
};
module_platform_driver(rkpmem_driver);

MODULE_DESCRIPTION("rackemu persistent memory: /dev/rkpmem0");
MODULE_LICENSE("GPL");
