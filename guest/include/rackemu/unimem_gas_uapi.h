/* SPDX-License-Identifier: MIT */
/*
 * /dev/unimem_gas user interface (docs/unimem.md, "Global address space"). Shared by the kernel
 * module (guest/unimem/kmod/unimem_gas) and the user programs (guest/unimem/user/gas.c).
 *
 * mmap(offset = global address G, page aligned) maps the global address space window at
 * G: loads and stores there complete on the owner node's memory (node = G bits [39:34]). A
 * mapping stays inside one node's 16 GiB and inside the cluster. The pages are mapped
 * Normal non-cacheable, so every access size the CPU issues, unaligned ones included, reaches
 * the owner. An access the owner refuses (not RAM there) or cannot answer (node down) is a bus
 * error: the process gets SIGBUS.
 *
 * UNIMEM_GAS_IOC_EXPORT allocates physically contiguous, zeroed memory on this node and gives
 * its global address, so other nodes can reach it; it lives as long as the open file.
 */
#ifndef RACKEMU_UNIMEM_GAS_UAPI_H
#define RACKEMU_UNIMEM_GAS_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define UNIMEM_GAS_DEV_PATH "/dev/unimem_gas"
#define UNIMEM_GAS_EXPORT_MAX (4u << 20)  /* bytes per export */
#define UNIMEM_GAS_EXPORTS_PER_FILE 16u

struct unimem_gas_info {
	__u32 node_id;
	__u32 node_count;
	__u64 window_base;  /* physical base of the window (GAS_WINDOW_BASE) */
	__u64 window_size;  /* node_count << node_shift */
	__u32 node_shift;   /* the node id sits in global address bits [node_shift + 5 : node_shift] */
	__u32 reserved;
};

struct unimem_gas_export {
	__u64 size;        /* in: bytes, 1 .. UNIMEM_GAS_EXPORT_MAX (rounded up to pages) */
	__u64 local_phys;  /* out: node-local physical address */
	__u64 gaddr;       /* out: global address (this node's id | local_phys) */
};

/*
 * The window's counters (the GAS control page) in register order: the one counter table,
 * GAS_COUNTER_TABLE in rackemu/unimem_regs.h (include it before using the names), gives the
 * indices (GAS_CNT_INDEX_*) and the names (UNIMEM_GAS_UAPI_COUNTER_NAMES); unimem_regs.h checks
 * the count.
 */
#define UNIMEM_GAS_UAPI_COUNTERS 10
#define UNIMEM_GAS_UAPI_COUNTER_NAMES GAS_CNT_NAMES

#define UNIMEM_GAS_IOC_INFO     _IOR('G', 1, struct unimem_gas_info)
#define UNIMEM_GAS_IOC_EXPORT   _IOWR('G', 2, struct unimem_gas_export)
#define UNIMEM_GAS_IOC_COUNTERS _IOR('G', 3, __u64[UNIMEM_GAS_UAPI_COUNTERS])

#endif /* RACKEMU_UNIMEM_GAS_UAPI_H */
