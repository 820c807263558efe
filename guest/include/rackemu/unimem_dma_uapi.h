/* SPDX-License-Identifier: MIT */
/*
 * /dev/unimem_dma: copies between any two physical ranges of the node's address space
 * (local RAM, or GAS_WINDOW_BASE + a global address: another node's memory) with the cDMA
 * engine, through Linux's dmaengine API and the unmodified xilinx_dma driver
 * (guest/unimem/kmod/unimem_dma, docs/cdma.md). Root only. The user-level RDMA library (unim_dma_*)
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

/*
 * /dev/dmabuffers (ExaNoDe D3.6 sec. 3.1.4, the "DMA buffers module", with the remote allocator of
 * sec. 3.1.6 behind it): RDMA buffers on any node, user-initiated transfers between them.
 * Interface of the unim_dma_* library (guest/unimem/user/unim_dma.h); docs/rdma.md.
 *   ioctl DMABUF_IOC_INFO               this node and the cluster size
 *   ioctl DMABUF_IOC_ALLOC {node, size} a buffer on `node` (this one or a remote one: the remote
 *                                       allocator there is asked over the mailbox); gives its id
 *                                       and global address. Up to DMABUF_MAX_BUFFERS per file.
 *   ioctl DMABUF_IOC_FREE {id}
 *   mmap(offset = id * DMABUF_MMAP_STRIDE) the buffer: local RAM cached, remote through the global
 *                                       address space window, uncached
 *   write(struct dmabuf_xfer[])         start transfers; src and dst must lie inside buffers of
 *                                       this file (else EINVAL: a process cannot DMA elsewhere)
 *   read(struct dmabuf_done[])          completed transfers (blocking unless O_NONBLOCK; poll)
 * Closing the file waits for its transfers and frees its buffers.
 */
#define DMABUF_DEV_PATH "/dev/dmabuffers"
#define DMABUF_MAX_BUFFERS 64u
/* bytes per buffer: 256 MiB as ExaNoDe D3.6 sec. 3.1.1 gives it. Above 4 MiB a buffer comes from the
 * node's contiguous memory area (CMA, 64 MiB in the default guest): ENOMEM when it cannot. */
#define DMABUF_MAX_SIZE (256u << 20)
#define DMABUF_MMAP_STRIDE (1ull << 32)   /* mmap offset of buffer id: id * stride */

struct dmabuf_info {
	__u32 node_id;
	__u32 node_count;
};

struct dmabuf_alloc {
	__u32 node;	/* in: where */
	__u32 id;	/* out: 1 .. DMABUF_MAX_BUFFERS */
	__u64 size;	/* in: bytes; out: rounded up to pages */
	__u64 gaddr;	/* out: global address */
};

struct dmabuf_xfer {
	__u64 src;	/* global address */
	__u64 dst;	/* global address */
	__u64 size;	/* bytes, 1 .. DMABUF_MAX_SIZE */
	__u64 tid;	/* the caller's transfer id, echoed in dmabuf_done */
};

struct dmabuf_done {
	__u64 tid;
	__s32 status;	/* 0, -EIO (engine error), -ETIMEDOUT */
	__u32 reserved;
};

#define DMABUF_IOC_INFO  _IOR('D', 2, struct dmabuf_info)
#define DMABUF_IOC_ALLOC _IOWR('D', 3, struct dmabuf_alloc)
#define DMABUF_IOC_FREE  _IOW('D', 4, __u32)

/* The remote allocator's mailbox messages (opcodes reserved while unimem_dma.ko is loaded):
 *   request 0xB: [59:54] requester node, [53:40] sequence, [39:0] bytes
 *   reply   0xC: [59:54] owner node, [53:40] sequence, [39:38] status (0 ok, 1 no memory,
 *                2 refused), [33:0] node-local physical address
 *   free    0xD: [59:54] requester node, [33:0] node-local physical address */
#define RALLOC_OP_REQ   0xbu
#define RALLOC_OP_REPLY 0xcu
#define RALLOC_OP_FREE  0xdu

#endif /* RACKEMU_UNIMEM_DMA_UAPI_H */
