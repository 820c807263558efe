/* SPDX-License-Identifier: MIT */
/*
 * /dev/rmc: the user interface of sonuma_rmc.ko, the Linux driver of the soNUMA RMC
 * (docs/rmc-driver.md; the device: docs/sonuma.md, hw/include/rackemu/sonuma_regs.h).
 * Plain C, usable from the kernel and from user space. librmc wraps it.
 */
#ifndef RACKEMU_SONUMA_UAPI_H
#define RACKEMU_SONUMA_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>
#ifndef __KERNEL__
#include <sys/ioctl.h>
#endif

#define RMC_DEV_PATH "/dev/rmc"

struct rmc_uapi_info {
	__u32 node_id, node_count;
	__u32 qp_count, ctx_count;
	__u64 seg_size;            /* bytes of the node's RMC segment */
	__u64 seg_free;            /* of which not registered to a context */
	__u32 att_entries, sb_depth;
	__u32 spec;                /* the device speculates (RMC_STATUS_SPEC) */
	__u32 fabric_up;
	__u64 t_rmc_mhz, t_mem_ns, t_llc_ns, t_hop_ns, t_hops, t_link_gbps, t_r2p2_gbps, t_r2p2_count,
		t_issue_cycles, timeout_ms;
};

#define RMC_UAPI_NO_LAYOUT (-1)
struct rmc_uapi_ctx {
	__u32 id;          /* in: context id, 0..RMC_CTX_COUNT-1 */
	__u32 perm;        /* in (register) / out (attach): CTX_PERM_* */
	__u64 size;        /* in (register, rounded up to a page) / out */
	__u64 nodemask;    /* in (register) / out: bit n = node n may access */
	__s32 version_off; /* in (register) / out: LightSABRes version offset 0..56, or RMC_UAPI_NO_LAYOUT */
	__u32 reserved;    /* must be 0 */
	__u64 mmap_off;    /* out: offset to mmap the segment (size bytes, shared, read/write) */
	__u64 phys;        /* out: physical base (for tests and debugging) */
	__u64 key;         /* register: in, the context's access key (0: the driver draws a random one),
	                    * out, the key. attach: in, the key the owner shared with the caller (0:
	                    * none; enough for the owner's uid and CAP_SYS_ADMIN), out, the key. Requests
	                    * on the context carry it; other nodes serve them only if their context of
	                    * the same id has the same key (docs/rmc-driver.md, "Who may use a context") */
};

#define RMC_UAPI_QP_IRQ (1u << 0) /* completion interrupts: RMC_IOC_WAIT may sleep */
struct rmc_uapi_qp {
	__u32 ctx;          /* in: a context this file registered or attached */
	__u32 depth_log2;   /* in: RMC_DEPTH_LOG2_MIN..MAX */
	__u32 flags;        /* in: RMC_UAPI_QP_* */
	__u32 qp;           /* out: QP index */
	__u64 wq_mmap_off;  /* out: the WQ (64 << depth_log2 bytes, page-rounded), read/write */
	__u64 cq_mmap_off;  /* out: the CQ (32 << depth_log2 bytes, page-rounded), read/write */
	__u64 db_mmap_off;  /* out: the QP's doorbell page (device memory), one page */
};

/* RMC_IOC_WAIT: 0 (the CQE is valid), -ETIMEDOUT, -EINTR (signal), -ENOENT (not this file's QP,
 * or destroyed meanwhile), -ENOLINK (the QP was retired: its context id was registered again). */
struct rmc_uapi_wait {
	__u32 qp;
	__u32 cq_index;   /* wait until the CQE with this free-running index is valid */
	__s32 timeout_ms; /* < 0: no timeout */
	__u32 reserved;   /* must be 0 */
};

#define RMC_IOC_MAGIC 'R'
#define RMC_IOC_INFO         _IOR(RMC_IOC_MAGIC, 0x00, struct rmc_uapi_info)
#define RMC_IOC_CTX_REGISTER _IOWR(RMC_IOC_MAGIC, 0x01, struct rmc_uapi_ctx)
#define RMC_IOC_CTX_ATTACH   _IOWR(RMC_IOC_MAGIC, 0x02, struct rmc_uapi_ctx)
#define RMC_IOC_CTX_RELEASE  _IOW(RMC_IOC_MAGIC, 0x03, __u32)
#define RMC_IOC_QP_CREATE    _IOWR(RMC_IOC_MAGIC, 0x04, struct rmc_uapi_qp)
#define RMC_IOC_QP_DESTROY   _IOW(RMC_IOC_MAGIC, 0x05, __u32)
#define RMC_IOC_WAIT         _IOW(RMC_IOC_MAGIC, 0x06, struct rmc_uapi_wait)
#define RMC_IOC_COUNTERS     _IOR(RMC_IOC_MAGIC, 0x07, __u64[36])

/* Counter names, in RMC_CNT_* order (sysfs `counters`, `rmc counters`): generated from the one
 * counter table, RMC_COUNTER_TABLE in rackemu/sonuma_regs.h (include it before using this). */
#define RMC_UAPI_COUNTER_NAMES RMC_CNT_NAMES

#endif /* RACKEMU_SONUMA_UAPI_H */
