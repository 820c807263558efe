/* SPDX-License-Identifier: MIT */
/*
 * A program written against the user-level RDMA API of ExaNoDe D3.6 sec. 3.4 as the deliverable
 * prints it (it declares the prototypes itself, verbatim). It allocates a 32 MiB local buffer
 * (sec. 3.1.1 allows up to 256 MB; rackemu capped buffers at 4 MiB before) and a buffer on node
 * PEER, submits transfers back to back and polls their status with unim_dma_status (sec.
 * 3.1.2: DMA_PENDING in the library's list until the submitter thread submits them, then
 * DMA_STARTED, DMA_COMPLETED), with completion callbacks (tests/e2e/test_unimem_seed_api.py).
 *
 *   unim_dma_seed NODE PEER
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unim_dma.h"

/* sec. 3.4.2 - 3.4.5, verbatim */
int unim_dma_init(unim_node_id_t node_id);
void unim_dma_cleanup(void);
unim_dma_buffer_t *unim_alloc_buf_l(uint32_t size);
unim_dma_buffer_t *unim_alloc_buf_r(uint32_t size, unim_dma_node_t node);
void unim_free_buf(unim_dma_buffer_t *buf);
unim_dma_buffer_t *unim_get_buf(unim_dma_buf_id_t id);
unim_dma_buf_id_t unim_get_buf_id(unim_dma_buffer_t *buf);
void *unim_buf_get_memory(unim_dma_buffer_t *buf);
unim_dma_transfer_id_t unim_dma_submit_transfer(unim_dma_buffer_t *src, unim_dma_buffer_t *dst, uint64_t src_off,
						uint64_t dst_off, uint64_t size, unim_comp_cb_t comp_cb, void *cb_arg);
unim_dma_status_t unim_dma_status(unim_dma_transfer_id_t tID);
unim_dma_node_t unim_dma_get_node(unim_node_id_t id);

#define BIG (32u << 20)
#define N 8
#define PIECE (64u << 10)

static volatile int callbacks;

static void done(void *arg)
{
	(void)arg;
	__atomic_add_fetch(&callbacks, 1, __ATOMIC_SEQ_CST);
}

int main(int argc, char **argv)
{
	unim_dma_transfer_id_t ids[N];
	unim_dma_status_t first[N];
	unim_dma_buffer_t *big, *remote;
	int pending_seen = 0, completed = 0, same;
	char *mem;

	if (argc != 3 || unim_dma_init((unim_node_id_t)atoi(argv[1]))) {
		fprintf(stderr, "usage: unim_dma_seed NODE PEER (with xilinx_dma.ko and unimem_dma.ko loaded)\n");
		return 2;
	}
	big = unim_alloc_buf_l(BIG);
	remote = unim_alloc_buf_r(N * PIECE, unim_dma_get_node((unim_node_id_t)atoi(argv[2])));
	printf("big=%d remote=%d\n", big != NULL, remote != NULL);
	if (!big || !remote)
		return 1;
	mem = unim_buf_get_memory(big);
	for (uint32_t i = 0; i < N * PIECE; i++)
		mem[BIG - N * PIECE + i] = (char)(i * 7 + 3);
	/* from the last MiBs of the big buffer to the remote one, then back to its start */
	for (int i = 0; i < N; i++) {
		ids[i] = unim_dma_submit_transfer(big, remote, BIG - N * PIECE + i * PIECE, i * PIECE, PIECE, done, NULL);
		first[i] = unim_dma_status(ids[i]);
	}
	for (int i = 0; i < N; i++) {
		unim_dma_status_t s;

		pending_seen += first[i] == DMA_PENDING;
		while ((s = unim_dma_status(ids[i])) == DMA_PENDING || s == DMA_STARTED)
			;
		completed += s == DMA_COMPLETED;
	}
	ids[0] = unim_dma_submit_transfer(remote, big, 0, 0, N * PIECE, done, NULL);
	while (unim_dma_status(ids[0]) == DMA_PENDING || unim_dma_status(ids[0]) == DMA_STARTED)
		;
	completed += unim_dma_status(ids[0]) == DMA_COMPLETED;
	same = !memcmp(mem, mem + BIG - N * PIECE, N * PIECE);
	printf("completed=%d callbacks=%d pending_seen=%d same=%d\n", completed, callbacks, pending_seen, same);
	unim_free_buf(remote);
	unim_free_buf(big);
	unim_dma_cleanup();
	return completed == N + 1 && callbacks == N + 1 && same ? 0 : 1;
}
