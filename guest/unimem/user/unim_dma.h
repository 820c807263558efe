/* SPDX-License-Identifier: MIT */
/*
 * unim_dma: user-initiated RDMA over the Unimem cDMA (ExaNoDe D3.6 sec. 3.4, "API reference"),
 * with the types and functions exactly as the deliverable lists them, so that programs written
 * against it compile unchanged. Built on /dev/dmabuffers (unimem_dma.ko; docs/rdma.md), which
 * must be loaded on every node that takes part (after xilinx_dma.ko).
 *
 * As sec. 3.1.2 describes, a submitted transfer waits in the library's transfer list as
 * DMA_PENDING until the submitter thread hands it to the engine (DMA_STARTED), in submission
 * order. Buffers hold up to 256 MiB (sec. 3.1.1); above 4 MiB they come from the node's
 * contiguous memory area (64 MiB in the default guest), so a size the node cannot provide fails
 * with ENOMEM.
 *
 * Differences from the deliverable, all extensions:
 *  - any number of buffers per node (the deliverable allows one per node);
 *  - unim_dma_wait() waits for a transfer; unim_buf_get_size() and unim_buf_get_node();
 *  - unim_dma_submitter_pause() holds the submitter (transfers stay DMA_PENDING), to hand a
 *    batch to the engine at once;
 *  - thread safety: every function may be called from any thread; completion callbacks run on
 *    the library's completion thread (do not call unim_dma_cleanup() from one).
 */
#ifndef UNIM_DMA_H
#define UNIM_DMA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 3.4.1 Types */
typedef uint32_t unim_node_id_t;                    /* a node ID in the system */
typedef struct unim_dma_node *unim_dma_node_t;      /* a node object */
typedef struct unim_dma_buffer unim_dma_buffer_t;   /* an RDMA buffer */
typedef uint32_t unim_dma_buf_id_t;                 /* an RDMA buffer ID (1 .. 64) */
typedef uint64_t unim_dma_transfer_id_t;            /* unique in the system: node << 48 | n; 0 = error */
typedef struct unim_dma_transfer unim_dma_transfer_t; /* an RDMA transfer object */
typedef void (*unim_comp_cb_t)(void *);             /* completion callback */
typedef enum {
	DMA_PENDING = 0,   /* accepted by the library, not yet handed to the engine */
	DMA_STARTED = 1,   /* handed to the engine */
	DMA_COMPLETED = 2, /* data moved (for _to_mem: copied to the destination too), callback returned */
	DMA_FAILED = 3,    /* the engine reported an error, timed out, or the ID is unknown */
} unim_dma_status_t;

/* 3.4.2 Initialization/cleanup: 0 on success, -1 with errno set (ENODEV: unimem_dma.ko not
 * loaded; EINVAL: node_id is not this node's ID). */
int unim_dma_init(unim_node_id_t node_id);
void unim_dma_cleanup(void);

/* 3.4.3 Buffers: NULL with errno set on error (ENOMEM: the node has no contiguous memory of
 * that size, ENOSPC: 64 buffers, EINVAL: size 0 or above 256 MiB, ETIMEDOUT: the remote node's
 * allocator did not answer, EDQUOT: an unprivileged user's remote-buffer cap). */
unim_dma_buffer_t *unim_alloc_buf_l(uint32_t size);
unim_dma_buffer_t *unim_alloc_buf_r(uint32_t size, unim_dma_node_t node);
void unim_free_buf(unim_dma_buffer_t *buf);
unim_dma_buffer_t *unim_get_buf(unim_dma_buf_id_t id);
unim_dma_buf_id_t unim_get_buf_id(unim_dma_buffer_t *buf);
void *unim_buf_get_memory(unim_dma_buffer_t *buf); /* remote buffers: uncached window mapping */

/* 3.4.4 Transfers: a transfer ID, or 0 on error (NULL buffer, range outside a buffer, size 0;
 * EAGAIN: 4096 transfers already pending). The transfer starts as DMA_PENDING; a transfer the
 * device refuses when the submitter hands it over ends as DMA_FAILED (its callback runs). */
unim_dma_transfer_id_t unim_dma_submit_transfer(unim_dma_buffer_t *src, unim_dma_buffer_t *dst, uint64_t src_off,
						uint64_t dst_off, uint64_t size, unim_comp_cb_t comp_cb, void *cb_arg);
unim_dma_transfer_id_t unim_dma_submit_transfer_from_mem(void *src, unim_dma_buffer_t *dst, uint64_t src_off,
							 uint64_t dst_off, uint64_t size, unim_comp_cb_t comp_cb,
							 void *cb_arg);
unim_dma_transfer_id_t unim_dma_submit_transfer_to_mem(unim_dma_buffer_t *src, void *dst, uint64_t src_off,
						       uint64_t dst_off, uint64_t size, unim_comp_cb_t comp_cb,
						       void *cb_arg);
unim_dma_status_t unim_dma_status(unim_dma_transfer_id_t tID);

/* 3.4.5 Miscellaneous: the node object, or NULL (no such node, or before unim_dma_init) */
unim_dma_node_t unim_dma_get_node(unim_node_id_t id);

/* rackemu extensions */
unim_dma_status_t unim_dma_wait(unim_dma_transfer_id_t tID, int timeout_ms); /* -1: forever */
uint64_t unim_buf_get_size(unim_dma_buffer_t *buf);
unim_node_id_t unim_buf_get_node(unim_dma_buffer_t *buf);
uint64_t unim_buf_get_gaddr(unim_dma_buffer_t *buf); /* its global address */
void unim_dma_submitter_pause(int paused); /* 1: transfers stay DMA_PENDING; 0: submit them, in order */

#ifdef __cplusplus
}
#endif

#endif /* UNIM_DMA_H */
