/* SPDX-License-Identifier: MIT */
/*
 * The rackemu RNIC driver's user interface (/dev/rnic0, docs/rnic-verbs.md): the ioctls that
 * create and destroy verbs objects, the mmap cookies of queues and doorbell pages, and the wait.
 * Register layouts, queue entries and QP attributes are the device's own (rackemu/rnic_regs.h):
 * the library writes struct rnic_send_wqe / rnic_recv_wqe into the mapped rings and reads
 * struct rnic_cqe, and MODIFY_QP takes struct rnic_cmd_modify_qp as the device does.
 */
#ifndef RACKEMU_RNIC_UAPI_H
#define RACKEMU_RNIC_UAPI_H

#ifdef __KERNEL__
#include <linux/ioctl.h>
#include <linux/types.h>
#else
#include <stdint.h>
#include <sys/ioctl.h>
#endif
#include "rackemu/rnic_regs.h"

#define RNIC_DEV_PATH "/dev/rnic0"

/* RNIC_IOC_QUERY: the device's identity and limits (read from BAR0). */
struct rnic_uinfo {
	rk_u32 node_id, caps, version, max_mtu;
	rk_u32 max_pd, max_mr, max_cq, max_qp;
	rk_u32 ipv4;          /* host order */
	rk_u8 mac[6];
	rk_u16 link_up;
	rk_u32 link_mbps, hop_ns, nic_mhz, pcie_ns, pcie_mbps;
	rk_u32 irq_vectors;   /* interrupt vectors the driver got (MSI-X, else 1: INTx) */
	rk_u32 dm_size;       /* bytes of device memory (RNIC_REG_DM_SIZE; 0: none) */
};

/* RNIC_IOC_REG_MR: pin [addr, addr + length) of the calling process and register it. A range
 * mapped from the node's persistent memory (/dev/rkpmem0, a PFN mapping) is registered by its
 * physical pages when every one lies inside the device tree's pmem-region, else -EINVAL. */
struct rnic_ureg_mr {
	rk_u64 addr;          /* in: user virtual address (the MR's IOVA) */
	rk_u64 length;        /* in: bytes, 1..RNIC_MAX_MSG x 4 (1 GiB of pages at most) */
	rk_u32 pdn;           /* in */
	rk_u32 access;        /* in: RNIC_ACCESS_* */
	rk_u32 lkey, rkey;    /* out */
};

/* RNIC_IOC_CREATE_CQ */
struct rnic_ucreate_cq {
	rk_u32 depth_log2;    /* in: RNIC_DEPTH_LOG2_MIN..MAX */
	rk_u32 cqn;           /* out */
	rk_u64 ring_off;      /* out: mmap offset of the CQE ring (2^depth_log2 x 64 bytes, page-rounded) */
	rk_u64 db_off;        /* out: mmap offset of the CQ's doorbell page (one page) */
	rk_u32 comp_vector;   /* in: the interrupt vector its events raise, 0..irq_vectors-1 (EINVAL beyond) */
	rk_u32 reserved;      /* in: 0 */
};

/* RNIC_IOC_CREATE_QP */
struct rnic_ucreate_qp {
	rk_u32 pdn, send_cqn, recv_cqn;       /* in: objects of this file */
	rk_u32 sq_depth_log2, rq_depth_log2;  /* in */
	rk_u32 qpn;                           /* out */
	rk_u64 sq_off, rq_off, db_off;        /* out: mmap offsets (rings page-rounded; doorbell one page) */
};

/* RNIC_IOC_MODIFY_QP / RNIC_IOC_QUERY_QP */
struct rnic_umodify_qp {
	rk_u32 qpn;
	rk_u32 state;                         /* QUERY: out, the current state */
	struct rnic_cmd_modify_qp attr;       /* MODIFY: in; QUERY: out */
};

/* RNIC_IOC_WAIT_CQ: sleep until CQ cqn has fired (armed through its doorbell page) more often
 * than `events` says, or timeout_ms passes (0: do not sleep). Returns 0 with events = the CQ's
 * count now; -ETIMEDOUT; -EINTR on a signal; -EIO if the CQ is in error. */
struct rnic_uwait_cq {
	rk_u32 cqn;
	rk_u32 timeout_ms;
	rk_u64 events;                        /* in: count already seen; out: count now */
};

/* RNIC_IOC_GET_ASYNC_EVENT: the next asynchronous event of this file (docs/rnic-verbs.md "Async
 * events"): events of its own QPs and CQs, and the port's (to every open file). Waits up to
 * timeout_ms; 0: do not wait. Returns 0 with the event; -EAGAIN (timeout_ms 0) or -ETIMEDOUT
 * when there is none; -EINTR on a signal. The file keeps up to RNIC_FILE_EVENTS events; beyond
 * that the newest are dropped and counted in `lost` (as are events the device's queue dropped,
 * counted on every file). poll() on the file reports EPOLLPRI while events wait. */
struct rnic_uasync_event {
	rk_u32 timeout_ms;    /* in */
	rk_u32 type;          /* out: RNIC_EV_* */
	rk_u32 element;       /* out: QPN, CQN or RNIC_PORT_NUM */
	rk_u32 detail;        /* out: as struct rnic_eqe's */
	rk_u64 modeled_at_ns; /* out: the device's timing-model clock at the event */
	rk_u32 lost;          /* out: events this file lost since the last call */
	rk_u32 reserved;      /* in: 0 */
};
#define RNIC_FILE_EVENTS 64u

/* Device memory (docs/rnic-verbs.md "Device memory"; the device's ALLOC_DM, REG_DM_MR, DM_COPY).
 * RNIC_IOC_ALLOC_DM: length bytes of the NIC's memory (rounded up to 64), owned by this file. */
struct rnic_ualloc_dm {
	rk_u64 length;        /* in */
	rk_u32 dm;            /* out: the allocation's id */
	rk_u32 reserved;      /* in: 0 */
};
/* RNIC_IOC_REG_DM_MR: an MR over [offset, offset + length) of allocation dm, at iova addr. */
struct rnic_ureg_dm_mr {
	rk_u64 addr;          /* in: the MR's iova (0: zero-based, as ibv_reg_dm_mr) */
	rk_u64 offset;        /* in: byte offset in the allocation */
	rk_u64 length;        /* in */
	rk_u32 pdn, dm;       /* in */
	rk_u32 access;        /* in: RNIC_ACCESS_* (no FLUSH_PERSIST) */
	rk_u32 lkey, rkey;    /* out */
	rk_u32 reserved;      /* in: 0 */
};
/* RNIC_IOC_DM_COPY: length bytes between the caller's buf and the allocation at offset. */
struct rnic_udm_copy {
	rk_u64 buf;           /* in: user address */
	rk_u64 offset;        /* in: byte offset in the allocation */
	rk_u64 length;        /* in */
	rk_u32 dm;            /* in */
	rk_u32 dir;           /* in: RNIC_DM_COPY_TO_DM / RNIC_DM_COPY_FROM_DM */
};

#define RNIC_IOC_MAGIC 'R'
#define RNIC_IOC_QUERY       _IOR(RNIC_IOC_MAGIC, 0x40, struct rnic_uinfo)
#define RNIC_IOC_ALLOC_PD    _IOR(RNIC_IOC_MAGIC, 0x41, rk_u32)
#define RNIC_IOC_DEALLOC_PD  _IOW(RNIC_IOC_MAGIC, 0x42, rk_u32)
#define RNIC_IOC_REG_MR      _IOWR(RNIC_IOC_MAGIC, 0x43, struct rnic_ureg_mr)
#define RNIC_IOC_DEREG_MR    _IOW(RNIC_IOC_MAGIC, 0x44, rk_u32)
#define RNIC_IOC_CREATE_CQ   _IOWR(RNIC_IOC_MAGIC, 0x45, struct rnic_ucreate_cq)
#define RNIC_IOC_DESTROY_CQ  _IOW(RNIC_IOC_MAGIC, 0x46, rk_u32)
#define RNIC_IOC_CREATE_QP   _IOWR(RNIC_IOC_MAGIC, 0x47, struct rnic_ucreate_qp)
#define RNIC_IOC_MODIFY_QP   _IOW(RNIC_IOC_MAGIC, 0x48, struct rnic_umodify_qp)
#define RNIC_IOC_QUERY_QP    _IOWR(RNIC_IOC_MAGIC, 0x49, struct rnic_umodify_qp)
#define RNIC_IOC_DESTROY_QP  _IOW(RNIC_IOC_MAGIC, 0x4a, rk_u32)
#define RNIC_IOC_WAIT_CQ     _IOWR(RNIC_IOC_MAGIC, 0x4b, struct rnic_uwait_cq)
#define RNIC_IOC_COUNTERS    _IOR(RNIC_IOC_MAGIC, 0x4c, rk_u64[RNIC_CNT_COUNT])
#define RNIC_IOC_GET_ASYNC_EVENT _IOWR(RNIC_IOC_MAGIC, 0x4d, struct rnic_uasync_event)
#define RNIC_IOC_ALLOC_DM    _IOWR(RNIC_IOC_MAGIC, 0x4e, struct rnic_ualloc_dm)
#define RNIC_IOC_FREE_DM     _IOW(RNIC_IOC_MAGIC, 0x4f, rk_u32)
#define RNIC_IOC_REG_DM_MR   _IOWR(RNIC_IOC_MAGIC, 0x50, struct rnic_ureg_dm_mr)
#define RNIC_IOC_DM_COPY     _IOW(RNIC_IOC_MAGIC, 0x51, struct rnic_udm_copy)

/* mmap offsets: page offset = type << 16 | index */
#define RNIC_MAP_SQ   1u
#define RNIC_MAP_RQ   2u
#define RNIC_MAP_CQ   3u
#define RNIC_MAP_QPDB 4u
#define RNIC_MAP_CQDB 5u
#define RNIC_MAP_OFF(type, idx, page_shift) ((((rk_u64)(type) << 16) | (rk_u64)(idx)) << (page_shift))

#endif
