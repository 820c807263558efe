/* SPDX-License-Identifier: MIT */
/*
 * C interface of the cDMA (Xilinx AXI CDMA) core for the QEMU glue (hw/qemu/rackemu_cdma.c).
 * Wraps rackemu::unimem::Cdma (cdma.h) and runs its engine on a thread of its own: register
 * writes that start work only wake the engine, so a vCPU never waits for a transfer, and
 * transfers to other nodes block only the engine thread.
 */
#ifndef RACKEMU_CDMA_CAPI_H
#define RACKEMU_CDMA_CAPI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkCdma RkCdma;

enum { RK_CDMA_MEM_OK = 0, RK_CDMA_MEM_DECODE_ERR = 1, RK_CDMA_MEM_SLAVE_ERR = 2 };
/* Move len bytes between buf and the node's physical address addr (engine thread). */
typedef int (*rk_cdma_mem_fn)(void *opaque, int write, uint64_t addr, void *buf, uint64_t len);
typedef void (*rk_cdma_irq_fn)(void *opaque, int level);
typedef void (*rk_cdma_log_fn)(void *opaque, const char *msg);
/* Called on the engine thread when it starts (start=1) and before it ends (start=0). */
typedef void (*rk_cdma_thread_fn)(void *opaque, int start);

RkCdma *rk_cdma_new(rk_cdma_mem_fn mem, rk_cdma_irq_fn irq, rk_cdma_log_fn log, rk_cdma_thread_fn thread,
                    void *opaque);
void rk_cdma_free(RkCdma *c);
uint64_t rk_cdma_read(RkCdma *c, uint64_t offset, unsigned size);
void rk_cdma_write(RkCdma *c, uint64_t offset, uint64_t value, unsigned size);
void rk_cdma_reset(RkCdma *c);
int rk_cdma_irq_level(RkCdma *c);

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_CDMA_CAPI_H */
