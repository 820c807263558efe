/* SPDX-License-Identifier: MIT */
/*
 * C interface of the Unimem device cores, for the QEMU glue (hw/qemu/rackemu_unimem.c), which
 * is C. Thin wrappers over rackemu::unimem::Vmbox and Packetizer; see vmbox.h, packetizer.h.
 */
#ifndef RACKEMU_UNIMEM_CAPI_H
#define RACKEMU_UNIMEM_CAPI_H

#include "rackemu/fabric_proto.h"
#include "rackemu/host.h"
#include "rackemu/unimem_regs.h"
#include <stdint.h>

#include "rackemu/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct RkVmbox RkVmbox;
typedef struct RkPacketizer RkPacketizer;
/* The packetizer's transmit link (packetizer.h, PacketizerTransmit): carries PIF `pif`'s packet
 * to global address `dest`; the answer comes back through rk_pktz_complete(tag). */
typedef void (*rk_pktz_tx_fn)(void *opaque, unsigned pif, uint64_t tag, uint64_t dest, unsigned mif,
                              const uint64_t words[4]);

/* The vmbox's architectural state (vmbox.h, VmboxState) as C data for the glue's VMState. */
#define RK_VMBOX_SAVED_COUNTERS (VMBOX_CNT_COUNT + 2)
typedef struct RkVmboxState {
    uint32_t depth;                             /* words per FIFO: must match the device's */
    uint32_t fill[UNIMEM_IF_COUNT];             /* words queued per FIFO */
    uint64_t irq_enable;                        /* IRQ_ENABLE */
    uint64_t counters[RK_VMBOX_SAVED_COUNTERS]; /* VMBOX_COUNTER_TABLE order, then empty_reads, bad_access */
    uint32_t kif_fill;                          /* words queued in the KIF */
    uint64_t kif_ctrl;                          /* KIF_CTRL */
    uint64_t kif_counters[VMBOX_KIF_CNT_COUNT]; /* VMBOX_KIF_COUNTER_TABLE order */
    uint32_t nwords;                            /* sum of fill[] and kif_fill */
    uint64_t *words; /* FIFO 0's words oldest first, then FIFO 1's, ..., then the KIF's; malloc'd (free()) */
} RkVmboxState;

/* The packetizer's architectural state (packetizer.h, PacketizerState) as C data. */
#define RK_PKTZ_SAVED_COUNTERS (PKTZ_CNT_COUNT + 4)
typedef struct RkPktzState {
    uint64_t pif_regs[UNIMEM_IF_COUNT * 6];    /* per PIF: payload0 lo/hi, payload1 lo/hi, dest lo/hi */
    uint16_t pif_written[UNIMEM_IF_COUNT * 3]; /* per PIF and register: bytes written since the last packet */
    uint32_t pif_status[UNIMEM_IF_COUNT];      /* PKTZ_ST_* */
    uint8_t pif_waiting[UNIMEM_IF_COUNT];      /* 1: the packet awaits its acknowledgement */
    uint64_t pidt[UNIMEM_IF_COUNT];
    uint64_t base_dest, pid_conf;
    /* PKTZ_COUNTER_TABLE order, then fabric_errors, overwrites, stale_completions, bad_access */
    uint64_t counters[RK_PKTZ_SAVED_COUNTERS];
    /* the KIF: its registers, written-bytes tracking, status and waiting flag as a PIF's */
    uint64_t kif_regs[6];
    uint16_t kif_written[3];
    uint32_t kif_status;
    uint8_t kif_waiting;
    uint64_t kif_pidt, kif_conf;
    uint64_t kif_counters[PKTZ_KIF_CNT_COUNT]; /* PKTZ_KIF_COUNTER_TABLE order */
} RkPktzState;

/* `host`: interrupt line 0 = the arrival interrupt, guest errors (copied: the RkHost may go).
 * `kif`: the kernel interface is present. */
RkVmbox *rk_vmbox_new(const RkHost *host, unsigned depth, int burst_known_issue, int kif);
void rk_vmbox_free(RkVmbox *v);
/* RK_OK; RK_NACK (full FIFO) or RK_SLAVE_ERROR (bad FIFO access): the access ends in a bus error. */
rk_status rk_vmbox_read(RkVmbox *v, uint64_t offset, unsigned size, uint64_t *value);
rk_status rk_vmbox_write(RkVmbox *v, uint64_t offset, uint64_t value, unsigned size);
/* Into FIFO `mif` (0..63, UNIMEM_KIF) from interface `src_if` (0..63, UNIMEM_KIF):
 * RK_OK = acknowledged, RK_NACK = refused. */
rk_status rk_vmbox_deliver(RkVmbox *v, unsigned mif, unsigned src_if, const uint64_t *words, unsigned nwords);
/* A RKF_SVC_UNIMEM_MBOX request from a peer (`payload`: h->len bytes): the reply status
 * (RKF_ST_*), or -1 when no reply is due. */
int rk_vmbox_serve_frame(RkVmbox *v, const struct rkf_frame_hdr *h, const void *payload);
/* The same two, answering first (Vmbox::deliver with an answer, vmbox.h): `answer(opaque, r)`
 * runs with the result (rk_status for deliver, the reply status or -1 for serve_frame) before
 * the words become visible to the guest and raise the arrival interrupt. */
typedef void (*rk_vmbox_answer_fn)(void *opaque, int result);
rk_status rk_vmbox_deliver_answer_first(RkVmbox *v, unsigned mif, unsigned src_if, const uint64_t *words,
                                        unsigned nwords, rk_vmbox_answer_fn answer, void *opaque);
int rk_vmbox_serve_frame_answer_first(RkVmbox *v, const struct rkf_frame_hdr *h, const void *payload,
                                      rk_vmbox_answer_fn answer, void *opaque);
int rk_vmbox_irq_level(RkVmbox *v);
void rk_vmbox_reset(RkVmbox *v);
/* Migration: freeze(1) refuses deliveries (NACK) until freeze(0), so none is acknowledged after
 * the snapshot; save replaces st->words; load returns 0, or -1 (refused, nothing changed). */
void rk_vmbox_freeze(RkVmbox *v, int on);
void rk_vmbox_save(RkVmbox *v, RkVmboxState *st);
int rk_vmbox_load(RkVmbox *v, const RkVmboxState *st);
void rk_vmbox_state_free(RkVmboxState *st);

/* `host`: guest errors (the packetizer raises no interrupt); `tx`: the transmit link;
 * `kif`: the kernel interface is present. */
RkPacketizer *rk_pktz_new(const RkHost *host, rk_pktz_tx_fn tx, void *tx_opaque, int kif);
void rk_pktz_free(RkPacketizer *p);
uint64_t rk_pktz_read(RkPacketizer *p, uint64_t offset, unsigned size);
void rk_pktz_write(RkPacketizer *p, uint64_t offset, uint64_t value, unsigned size);
/* RK_OK = ACK, RK_NACK = NACK, anything else = NACK | FABRIC_ERR. */
void rk_pktz_complete(RkPacketizer *p, uint64_t tag, rk_status st);
/* A RKF_SVC_UNIMEM_MBOX reply frame. */
void rk_pktz_serve_reply(RkPacketizer *p, const struct rkf_frame_hdr *h);
void rk_pktz_fail_all(RkPacketizer *p);
void rk_pktz_reset(RkPacketizer *p);
uint32_t rk_pktz_status(RkPacketizer *p, unsigned pif);
/* Migration: load returns 0, or -1 (refused, nothing changed); a PIF waiting for its
 * acknowledgement at save completes with NACK | FABRIC_ERR. */
void rk_pktz_save(RkPacketizer *p, RkPktzState *st);
int rk_pktz_load(RkPacketizer *p, const RkPktzState *st);

/*
 * Global address space window (gas.h). The core reaches the window's owners through the host's
 * DMA (rackemu/host.h: dma_rw at GAS_WINDOW_BASE + G) and reads the service counters from
 * host->rmem; node id and count come from the host.
 */
typedef struct RkGas RkGas;
/* The window's architectural state for migration (GasState): its own counter registers
 * (GAS_CTRL_LOADS .. GAS_CTRL_BUS_ERRORS, in table order) and the node it belongs to. */
#define RK_GAS_STATE_COUNTERS 4
typedef struct RkGasState {
    uint32_t node_id, node_count;
    uint64_t counters[RK_GAS_STATE_COUNTERS];
} RkGasState;

RkGas *rk_gas_new(const struct RkHost *host);
void rk_gas_free(RkGas *g);
uint64_t rk_gas_window_size(RkGas *g);
/* RK_OK, or the cause of the bus error the access ends in (Gas::window_read in gas.h). */
rk_status rk_gas_window_read(RkGas *g, uint64_t offset, unsigned size, uint64_t *value);
rk_status rk_gas_window_write(RkGas *g, uint64_t offset, uint64_t value, unsigned size);
uint64_t rk_gas_ctrl_read(RkGas *g, uint64_t offset, unsigned size);
void rk_gas_ctrl_write(RkGas *g, uint64_t offset, uint64_t value, unsigned size);
void rk_gas_save(RkGas *g, RkGasState *st);
/* 0, or -1 (nothing changed) for a state of another node or rack size. */
int rk_gas_load(RkGas *g, const RkGasState *st);

#ifdef __cplusplus
}
#endif

#endif /* RACKEMU_UNIMEM_CAPI_H */
