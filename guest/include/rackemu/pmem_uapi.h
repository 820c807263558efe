/* SPDX-License-Identifier: MIT */
/*
 * /dev/rkpmem0: the node's persistent-memory region for user space (guest/pmem/kmod/rackemu_pmem,
 * docs/pmem.md "Mapping, storing, persisting"). mmap(MAP_SHARED) at offset o maps the region's
 * bytes [o, o + length) (o a multiple of the page size), cacheable: stores land in the CPU's
 * caches and rk_pmem_persist (rackemu/pmem_persist.h) writes them back. The ioctl below tells
 * where the region is.
 */
#ifndef RACKEMU_PMEM_UAPI_H
#define RACKEMU_PMEM_UAPI_H

#ifdef __KERNEL__
#include <linux/ioctl.h>
#include <linux/types.h>
#else
#include <linux/types.h>
#include <sys/ioctl.h>
#endif

#define RKPMEM_DEV "/dev/rkpmem0"

struct rkpmem_info {
	__u64 base;        /* guest physical base of the region */
	__u64 size;        /* bytes */
	__u32 mode;        /* PMEM_MODE_* (rackemu/pmem_regs.h): none 0, eadr 1, adr 2, adr-ddio 3 */
	__u32 nic_entries; /* the model's NIC buffer (0: none) */
	__u32 llc_lines;   /* pending lines the modeled LLC holds */
	__u32 reserved;    /* 0 */
};

#define RKPMEM_IOC_MAGIC 'P'
#define RKPMEM_IOC_INFO  _IOR(RKPMEM_IOC_MAGIC, 1, struct rkpmem_info)

#endif /* RACKEMU_PMEM_UAPI_H */
