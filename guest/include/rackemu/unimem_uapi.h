/* SPDX-License-Identifier: MIT */
/*
 * /dev/unimem user interface (docs/unimem.md, "Driver"). Shared by the kernel module
 * (guest/kmod/unimem) and the user library (guest/user/libunimem).
 *
 * Each open file owns one mailbox interface (MIF) and one packetizer interface (PIF).
 * mmap offset 0 maps its MIF page, offset 4096 its PIF page; nothing else can be mapped.
 */
#ifndef RACKEMU_UNIMEM_UAPI_H
#define RACKEMU_UNIMEM_UAPI_H

#ifdef __KERNEL__
#include <linux/ioctl.h>
#include <linux/types.h>
#else
#include <linux/ioctl.h>
#include <linux/types.h>
#endif

#define UNIMEM_DEV_PATH "/dev/unimem"
#define UNIMEM_MMAP_MIF 0x0
#define UNIMEM_MMAP_PIF 0x1000

struct unimem_info {
	__u32 node_id;
	__u32 node_count;
	__u32 mif;          /* this file's mailbox interface */
	__u32 pif;          /* this file's packetizer interface */
	__u64 pid_prefix;   /* the 48-bit PID the packetizer stamps on this file's packets */
	__u64 mif_gaddr;    /* global address of this file's MIF: a packet destination */
	__u64 vmbox_base;   /* node-local physical base of the mailbox */
	__u32 fifo_depth;   /* words per FIFO */
	__u32 reserved;
};

/* Choose specific interfaces (before mmap). -1 keeps the current one. Interface 0 belongs to
 * the atomic service and needs CAP_SYS_ADMIN. EBUSY if taken. */
struct unimem_bind {
	__s32 mif;
	__s32 pif;
};

/* Sleep until this file's MIF holds a word (interrupt driven) or timeout_ms pass (0: forever).
 * On return `count` is the FIFO fill level. -ETIMEDOUT on timeout, -EINTR on a signal. */
struct unimem_wait {
	__u32 timeout_ms;
	__u32 count;
};

struct unimem_counters {
	__u64 vmbox_enqueued, vmbox_dequeued, vmbox_nacks, vmbox_truncated;
	__u64 pktz_sent, pktz_acked, pktz_nacked, pktz_illegal, pktz_nopid;
	__u64 irqs;
};

#define UNIMEM_IOC_MAGIC 'U'
#define UNIMEM_IOC_INFO _IOR(UNIMEM_IOC_MAGIC, 1, struct unimem_info)
#define UNIMEM_IOC_BIND _IOW(UNIMEM_IOC_MAGIC, 2, struct unimem_bind)
#define UNIMEM_IOC_WAIT _IOWR(UNIMEM_IOC_MAGIC, 3, struct unimem_wait)
/* Debug, CAP_SYS_ADMIN: set (1) or clear (0) the PID_CONF bit of this file's PIF. */
#define UNIMEM_IOC_SET_PIDCONF _IOW(UNIMEM_IOC_MAGIC, 4, __u32)
#define UNIMEM_IOC_COUNTERS _IOR(UNIMEM_IOC_MAGIC, 5, struct unimem_counters)

#endif
