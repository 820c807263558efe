/* SPDX-License-Identifier: MIT */
/*
 * /dev/unimem_dma: copies between any two physical ranges of the node's address space
 * (local RAM, or GAS_WINDOW_BASE + a global address: another node's memory) with the cDMA
 * engine, through Linux's dmaengine API and the unmodified xilinx_dma driver
 * (guest/kmod/unimem_dma, docs/cdma.md). Root only. The user-level RDMA library (unim_dma_*)
 * builds on the same path.
 */
#ifndef RACKEMU_UNIMEM_DMA_UAPI_H
#define RACKEMU_UNIMEM_DMA_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define UNIMEM_DMA_DEV_PATH "/dev/unimem_dma"
#define UNIMEM_DMA_MAX_LEN (64u << 20) /* bytes per copy (split into descriptors of <= 4 MiB) */

struct unimem_dma_copy {
	__u64 src;		/* in: physical source address */
	__u64 dst;		/* in: physical destination address */
	__u64 len;		/* in: bytes, 1 .. UNIMEM_DMA_MAX_LEN */
	__u32 timeout_ms;	/* in: 0 = 2000 + 100 ms per MiB */
	__s32 status;		/* out: 0, -EIO (the engine reported an error), -ETIMEDOUT */
	__u64 elapsed_ns;	/* out: submit to completion */
	__u32 engine_status;	/* out: the engine's CDMASR when the copy failed (error bits 4-10) */
	__u32 reserved;
};

#define UNIMEM_DMA_IOC_COPY _IOWR('D', 1, struct unimem_dma_copy)

#endif /* RACKEMU_UNIMEM_DMA_UAPI_H */
