/* SPDX-License-Identifier: MIT */
/*
 * /dev/unimem user interface (docs/unimem.md, "Driver"). Shared by the kernel module
 * (guest/unimem/kmod/unimem) and the user library (guest/unimem/user/libunimem).
 *
 * Each open file owns one mailbox interface (MIF) and one packetizer interface (PIF) and
 * belongs to the process that opened it (the atomicity driver of ExaNoDe D3.6 sec. 2.2.4): only that
 * process may map, bind, wait on or read them; mappings are not inherited across fork().
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

/*
 * The PID the driver programs into a PIF's PIDT entry: 48 bits, unique in the whole rack, so a
 * receiver (the GSAS atomic service above all) knows which thread of which process on which
 * node sent a packet, and where to reply (ExaNoDe D3.6 sec. 2.2.3-2.2.4):
 *   [47:42] node id   [41:36] the sender's MIF   [35:18] its tgid   [17:0] its tid
 * tgid = tid = 0 never belongs to a user thread: the atomic service (PIF 0, MIF 0) and the
 * node's kernel (UNIMEM_KERNEL_PID: the mailbox driver and the atomicity driver's exit notices)
 * carry it. Processes and threads whose ids do not fit
 * in 18 bits cannot open /dev/unimem (EOVERFLOW; the guest's pid_max is 32768).
 */
#define UNIMEM_PID_ID_BITS 18
#define UNIMEM_PID_ID_MAX ((1u << UNIMEM_PID_ID_BITS) - 1)
#define UNIMEM_PID(node, mif, tgid, tid)                                                        \
	((((__u64)(node) & 0x3f) << 42) | (((__u64)(mif) & 0x3f) << 36) |                        \
	 (((__u64)(tgid) & UNIMEM_PID_ID_MAX) << 18) | ((__u64)(tid) & UNIMEM_PID_ID_MAX))
#define UNIMEM_PID_NODE(p) ((unsigned)(((p) >> 42) & 0x3f))
#define UNIMEM_PID_MIF(p) ((unsigned)(((p) >> 36) & 0x3f))
#define UNIMEM_PID_TGID(p) ((unsigned)(((p) >> 18) & UNIMEM_PID_ID_MAX))
#define UNIMEM_PID_TID(p) ((unsigned)((p) & UNIMEM_PID_ID_MAX))
/* The PID of node `node`'s atomic service: what its replies carry. */
#define UNIMEM_SERVICE_PID(node) UNIMEM_PID(node, 0, 0, 0)
/* The PID of node `node`'s kernel: MIF field 63 with tgid = tid = 0, whichever interface it
 * sends from (the devices' kernel interface, KIF, by default, whose KIF_PIDT the driver sets to
 * it; the mailbox's user interface if unimem's `mailbox_if` chooses one; on devices without the
 * KIF, a free PIF borrowed for an exit notice while the mailbox is off; docs/unimem.md). The
 * MIF field says nothing about interface 63: a user thread there carries its own tgid. */
#define UNIMEM_KERNEL_PID(node) UNIMEM_PID(node, 63, 0, 0)
/*
 * Privileged interfaces: MIFs (and PIFs) UNIMEM_IF_PRIV_FIRST..UNIMEM_IF_PRIV_LAST are handed out
 * only to openers with CAP_SYS_ADMIN (who take them first), so the MIF field of a PID tells any
 * receiver in the rack, from hardware-stamped bits, that the sending process was privileged when
 * it opened the device. The GSAS atomic service accepts remoteFork only from such senders
 * (docs/gsas.md). Unprivileged openers get interfaces above UNIMEM_IF_PRIV_LAST, at most the
 * driver's `max_per_uid` module parameter at once per user (docs/unimem.md).
 */
#define UNIMEM_IF_PRIV_FIRST 1u
#define UNIMEM_IF_PRIV_LAST 8u
#define UNIMEM_PID_PRIVILEGED(p) (UNIMEM_PID_MIF(p) >= UNIMEM_IF_PRIV_FIRST && UNIMEM_PID_MIF(p) <= UNIMEM_IF_PRIV_LAST)
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
 * the atomic service and, like the privileged interfaces 1..8, needs CAP_SYS_ADMIN. EBUSY if
 * taken. */
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

/*
 * The counters of both devices, each array in its device's register order, and the driver's
 * interrupt count. Indices and names come from the one counter table of each device,
 * VMBOX_COUNTER_TABLE and PKTZ_COUNTER_TABLE in rackemu/unimem_regs.h (include it before using
 * the names): vmbox[VMBOX_CNT_INDEX_NACKS] is named UNIMEM_UAPI_VMBOX_COUNTER_NAMES'
 * [VMBOX_CNT_INDEX_NACKS], "nacks". unimem_regs.h checks the array sizes against the tables.
 */
#define UNIMEM_UAPI_VMBOX_COUNTERS 4
#define UNIMEM_UAPI_PKTZ_COUNTERS 5
struct unimem_counters {
	__u64 vmbox[UNIMEM_UAPI_VMBOX_COUNTERS];
	__u64 pktz[UNIMEM_UAPI_PKTZ_COUNTERS];
	__u64 irqs;
};
#define UNIMEM_UAPI_VMBOX_COUNTER_NAMES VMBOX_CNT_NAMES
#define UNIMEM_UAPI_PKTZ_COUNTER_NAMES PKTZ_CNT_NAMES

#define UNIMEM_IOC_MAGIC 'U'
#define UNIMEM_IOC_INFO _IOR(UNIMEM_IOC_MAGIC, 1, struct unimem_info)
#define UNIMEM_IOC_BIND _IOW(UNIMEM_IOC_MAGIC, 2, struct unimem_bind)
#define UNIMEM_IOC_WAIT _IOWR(UNIMEM_IOC_MAGIC, 3, struct unimem_wait)
/* Debug, CAP_SYS_ADMIN: set (1) or clear (0) the PID_CONF bit of this file's PIF. */
#define UNIMEM_IOC_SET_PIDCONF _IOW(UNIMEM_IOC_MAGIC, 4, __u32)
#define UNIMEM_IOC_COUNTERS _IOR(UNIMEM_IOC_MAGIC, 5, struct unimem_counters)

#endif
