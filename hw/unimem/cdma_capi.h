/* SPDX-License-Identifier: MIT */
/*
 * C interface of the cDMA (Xilinx AXI CDMA) core for the QEMU glue (hw/qemu/rackemu_cdma.c).
 * Wraps rackemu::unimem::Cdma (cdma.h) and runs its engine on a thread of its own: register
 * writes that start work only wake the engine, so a vCPU never waits for a transfer, and
 * transfers to other nodes block only the engine thread. The core reaches memory (the node's
 * RAM and the global address space window), its interrupt line (line 0) and the guest-error log
 * through the host (rackemu/host.h).
 */
#ifndef RACKEMU_CDMA_CAPI_H
#define RACKEMU_CDMA_CAPI_H

#include <stdint.h>

#include "rackemu/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkCdma RkCdma;

/* Called on the engine thread when it starts (start=1) and before it ends (start=0). */
typedef void (*rk_cdma_thread_fn)(void *opaque, int start);

/* The registers and engine state for migration, as plain data (CdmaState in cdma.h). */
typedef struct RkCdmaState {
    uint32_t cr, sr;            /* CDMACR; CDMASR bits [15:0] */
    uint64_t curdesc, taildesc; /* descriptor pointers */
    uint64_t sa, da;            /* simple-mode addresses */
    uint32_t btt;               /* BTT [25:0] */
    uint32_t irq_count;         /* IRQThreshold counter, 1..255 */
    uint32_t unsignalled;       /* SG completions since the last IOC/Dly event */
    uint32_t phase;             /* CdmaPhase: 0 idle, 1 simple, 2 fetch, 3 transfer, 4 write-back, 5 halted */
    uint32_t resume_valid;      /* 0/1: paused at the tail, resume at resume_next */
    uint64_t resume_next;
    uint64_t session_descriptors; /* descriptors completed in this SG session */
} RkCdmaState;

/* `host` is copied; `thread`/`opaque`: the engine thread's start/end hook (may be NULL). */
RkCdma *rk_cdma_new(const RkHost *host, rk_cdma_thread_fn thread, void *opaque);
void rk_cdma_free(RkCdma *c);
uint64_t rk_cdma_read(RkCdma *c, uint64_t offset, unsigned size);
void rk_cdma_write(RkCdma *c, uint64_t offset, uint64_t value, unsigned size);
void rk_cdma_reset(RkCdma *c);
int rk_cdma_irq_level(RkCdma *c);
/* Quiesce the engine at its next transfer/descriptor boundary and wait for it (VM stopped,
 * state saved); work started meanwhile stays pending until rk_cdma_resume(). */
void rk_cdma_pause(RkCdma *c);
void rk_cdma_resume(RkCdma *c);
void rk_cdma_save(RkCdma *c, RkCdmaState *st);
/* 0, or -1 (nothing changed) if the state is out of range or inconsistent. A transfer or chain
 * in flight at save ends halted with DMASlvErr (cdma.h, Cdma::load). */
int rk_cdma_load(RkCdma *c, const RkCdmaState *st);

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_CDMA_CAPI_H */
