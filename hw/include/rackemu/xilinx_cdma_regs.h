/* SPDX-License-Identifier: MIT */
/*
 * Xilinx AXI Central DMA (AXI CDMA v4.1): register map, bit fields and the scatter-gather
 * transfer descriptor, bit for bit as in Xilinx/AMD product guide PG034 ("AXI Central Direct
 * Memory Access LogiCORE IP Product Guide", v4.1, chapter "Register Space" and section
 * "Scatter Gather Transfer Descriptor Definition").
 *
 * rackemu's instance is configured as C_INCLUDE_SG = 1 (scatter-gather included, simple mode
 * still available through CDMACR.SGMode = 0), C_M_AXI_ADDR_WIDTH = 64 (the *_MSB registers and
 * descriptor words exist), a 64-bit data width with the data realignment engine, and a 26-bit
 * BTT field, the widest PG034 allows (67,108,863 bytes per transfer or descriptor).
 *
 * This header is the single definition shared by the device core (hw/unimem/cdma.cc), the QEMU
 * glue and machine, the firmware and the tests. The guest uses Linux's unmodified
 * drivers/dma/xilinx/xilinx_dma.c (compatible RACKEMU_CDMA_COMPAT). Plain C, fixed-width
 * integer types only.
 */
#ifndef RACKEMU_XILINX_CDMA_REGS_H
#define RACKEMU_XILINX_CDMA_REGS_H
/* Register and packet tables are aligned by hand: clang-format leaves them alone (docs/style.md). */
/* clang-format off */

#include "rackemu/rk_types.h"

/* ---- Register address map (PG034 "Register Address Map", offsets from C_BASEADDR) ----
 * All registers are 32 bits wide. */
#define XCDMA_CDMACR           0x00u  /* CDMACR: CDMA Control */
#define XCDMA_CDMASR           0x04u  /* CDMASR: CDMA Status */
#define XCDMA_CURDESC_PNTR     0x08u  /* CURDESC_PNTR: Current Descriptor Pointer [31:6] */
#define XCDMA_CURDESC_PNTR_MSB 0x0Cu  /* CURDESC_PNTR_MSB: Current Descriptor Pointer [63:32] */
#define XCDMA_TAILDESC_PNTR    0x10u  /* TAILDESC_PNTR: Tail Descriptor Pointer [31:6] */
#define XCDMA_TAILDESC_PNTR_MSB 0x14u /* TAILDESC_PNTR_MSB: Tail Descriptor Pointer [63:32] */
#define XCDMA_SA               0x18u  /* SA: Source Address [31:0] (simple mode) */
#define XCDMA_SA_MSB           0x1Cu  /* SA_MSB: Source Address [63:32] (simple mode) */
#define XCDMA_DA               0x20u  /* DA: Destination Address [31:0] (simple mode) */
#define XCDMA_DA_MSB           0x24u  /* DA_MSB: Destination Address [63:32] (simple mode) */
#define XCDMA_BTT              0x28u  /* BTT: Bytes to Transfer (simple mode; a write starts it) */
#define XCDMA_REG_END          0x2Cu  /* first offset past the register file */

/* ---- CDMACR (PG034 "CDMACR (CDMA Control - Offset 00h)") ---- */
#define XCDMA_CR_TAILPNTREN    (1u << 1)  /* TailPntrEn: RO 1, tail pointer mode (SG included) */
#define XCDMA_CR_RESET         (1u << 2)  /* Reset: soft reset; reads 1 until the reset completes */
#define XCDMA_CR_SGMODE        (1u << 3)  /* SGMode: 0 = simple DMA, 1 = scatter gather */
#define XCDMA_CR_KEYHOLE_READ  (1u << 4)  /* Key Hole Read: source address fixed (FIXED burst) */
#define XCDMA_CR_KEYHOLE_WRITE (1u << 5)  /* Key Hole Write: destination address fixed */
#define XCDMA_CR_CYCLIC_BD_EN  (1u << 6)  /* Cyclic BD Enable: run the ring, ignore Cmplt/tail */
#define XCDMA_CR_IOC_IRQEN     (1u << 12) /* IOC_IrqEn: CDMASR.IOC_Irq drives cdma_introut */
#define XCDMA_CR_DLY_IRQEN     (1u << 13) /* Dly_IrqEn: CDMASR.Dly_Irq drives cdma_introut */
#define XCDMA_CR_ERR_IRQEN     (1u << 14) /* Err_IrqEn: CDMASR.Err_Irq drives cdma_introut */
#define XCDMA_CR_IRQTHRESHOLD_SHIFT 16u   /* IRQThreshold [23:16]: IOC coalescing count (min 1) */
#define XCDMA_CR_IRQTHRESHOLD_MASK  (0xffu << XCDMA_CR_IRQTHRESHOLD_SHIFT)
#define XCDMA_CR_IRQDELAY_SHIFT     24u   /* IRQDelay [31:24]: delay timeout, 0 = disabled */
#define XCDMA_CR_IRQDELAY_MASK      (0xffu << XCDMA_CR_IRQDELAY_SHIFT)
#define XCDMA_CR_IRQEN_ALL     (XCDMA_CR_IOC_IRQEN | XCDMA_CR_DLY_IRQEN | XCDMA_CR_ERR_IRQEN)
/* Read/write bits; bit 0, 7-11 and 15 are reserved (read as zero), TailPntrEn is read-only. */
#define XCDMA_CR_WRITABLE      0xffff707cu
#define XCDMA_CR_RESET_VALUE   0x00010002u /* TailPntrEn = 1, IRQThreshold = 1 */

/* ---- CDMASR (PG034 "CDMASR (CDMA Status - Offset 04h)") ---- */
#define XCDMA_SR_IDLE          (1u << 1)  /* Idle: RO, no transfer in progress / tail reached */
#define XCDMA_SR_SGINCLD       (1u << 3)  /* SGIncld: RO, the engine was built with SG */
#define XCDMA_SR_DMAINTERR     (1u << 4)  /* DMAIntErr: RO, BTT of 0 (register or descriptor) */
#define XCDMA_SR_DMASLVERR     (1u << 5)  /* DMASlvErr: RO, SLVERR on a data read or write */
#define XCDMA_SR_DMADECERR     (1u << 6)  /* DMADecErr: RO, DECERR on a data read or write */
#define XCDMA_SR_SGINTERR      (1u << 8)  /* SGIntErr: RO, fetched a descriptor with Cmplt set */
#define XCDMA_SR_SGSLVERR      (1u << 9)  /* SGSlvErr: RO, SLVERR on a descriptor fetch/update */
#define XCDMA_SR_SGDECERR      (1u << 10) /* SGDecErr: RO, DECERR on a descriptor fetch/update */
#define XCDMA_SR_IOC_IRQ       (1u << 12) /* IOC_Irq: R/WC, transfer (or threshold) complete */
#define XCDMA_SR_DLY_IRQ       (1u << 13) /* Dly_Irq: R/WC, delay timer expired (SG) */
#define XCDMA_SR_ERR_IRQ       (1u << 14) /* Err_Irq: R/WC, an error bit was set */
#define XCDMA_SR_IRQTHRESHOLDSTS_SHIFT 16u /* IRQThresholdSts [23:16]: RO, threshold counter */
#define XCDMA_SR_IRQTHRESHOLDSTS_MASK  (0xffu << XCDMA_SR_IRQTHRESHOLDSTS_SHIFT)
#define XCDMA_SR_IRQDELAYSTS_SHIFT     24u /* IRQDelaySts [31:24]: RO, delay timer value */
#define XCDMA_SR_IRQDELAYSTS_MASK      (0xffu << XCDMA_SR_IRQDELAYSTS_SHIFT)
#define XCDMA_SR_IRQ_ALL       (XCDMA_SR_IOC_IRQ | XCDMA_SR_DLY_IRQ | XCDMA_SR_ERR_IRQ)
#define XCDMA_SR_ERR_ALL       (XCDMA_SR_DMAINTERR | XCDMA_SR_DMASLVERR | XCDMA_SR_DMADECERR | \
                                XCDMA_SR_SGINTERR | XCDMA_SR_SGSLVERR | XCDMA_SR_SGDECERR)
#define XCDMA_SR_RESET_VALUE   0x0001000au /* Idle = 1, SGIncld = 1, IRQThresholdSts = 1 */

/* ---- CURDESC_PNTR / TAILDESC_PNTR (PG034 "CURDESC_PNTR", "TAILDESC_PNTR") ----
 * Descriptors are 64-byte aligned; bits [5:0] of the low word are reserved (read as zero). */
#define XCDMA_DESC_PTR_MASK    0xffffffc0u

/* ---- BTT (PG034 "BTT (CDMA Bytes to Transfer - Offset 28h)") ---- */
#define XCDMA_BTT_BITS         26u        /* BTT width of this instance (PG034 maximum) */
#define XCDMA_BTT_MASK         ((1u << XCDMA_BTT_BITS) - 1) /* BTT [25:0]; [31:26] reserved */

/* ---- Scatter gather transfer descriptor (PG034 "Scatter Gather Transfer Descriptor
 * Definition"): eight little-endian 32-bit words, aligned on 16 words (64 bytes). ---- */
#define XCDMA_DESC_NXTDESC     0x00u  /* NXTDESC_PNTR: next descriptor [31:6] */
#define XCDMA_DESC_NXTDESC_MSB 0x04u  /* NXTDESC_PNTR_MSB: next descriptor [63:32] */
#define XCDMA_DESC_SA          0x08u  /* SA: source address [31:0] */
#define XCDMA_DESC_SA_MSB      0x0Cu  /* SA_MSB: source address [63:32] */
#define XCDMA_DESC_DA          0x10u  /* DA: destination address [31:0] */
#define XCDMA_DESC_DA_MSB      0x14u  /* DA_MSB: destination address [63:32] */
#define XCDMA_DESC_CONTROL     0x18u  /* CONTROL: BTT [25:0] */
#define XCDMA_DESC_STATUS      0x1Cu  /* STATUS: written back by the engine */
#define XCDMA_DESC_SIZE        0x20u  /* bytes the engine fetches */
#define XCDMA_DESC_ALIGN       0x40u  /* required alignment of a descriptor */
#define XCDMA_DESC_CTRL_BTT_MASK XCDMA_BTT_MASK /* CONTROL [25:0] BTT; [31:26] reserved */
#define XCDMA_DESC_STS_CMPLT   (1u << 31) /* Cmplt: descriptor completed (must be 0 on fetch) */
#define XCDMA_DESC_STS_DECERR  (1u << 30) /* DMADecErr: DECERR while moving this descriptor's data */
#define XCDMA_DESC_STS_SLVERR  (1u << 29) /* DMASlvErr: SLVERR while moving this descriptor's data */
#define XCDMA_DESC_STS_INTERR  (1u << 28) /* DMAIntErr: this descriptor's BTT is 0 */

struct xcdma_desc {
    rk_u32 nxtdesc;
    rk_u32 nxtdesc_msb;
    rk_u32 sa;
    rk_u32 sa_msb;
    rk_u32 da;
    rk_u32 da_msb;
    rk_u32 control;
    rk_u32 status;
};

/* ---- rackemu's model counters (not registers: PG034 has none; the guest cannot read them) ----
 * Declared once: X(NAME, name, description). CDMA_CNT_<NAME> is the counter's offset in a block
 * of 64-bit counters (for tools and traces), CDMA_CNT_INDEX_<NAME> its index; the core's
 * storage (CdmaCounters, hw/unimem/cdma.h) and the docs table come from this list. */
#define CDMA_COUNTER_TABLE(X) \
    X(TRANSFERS,      transfers,      "simple-mode transfers completed") \
    X(CHAINS,         chains,         "SG sessions that reached TAILDESC") \
    X(DESCRIPTORS,    descriptors,    "SG descriptors completed") \
    X(BYTES,          bytes,          "bytes written to destinations") \
    X(DMA_INT_ERRORS, dma_int_errors, "DMAIntErr raised (BTT of 0)") \
    X(DMA_SLV_ERRORS, dma_slv_errors, "DMASlvErr raised (data read or write refused, owner unreachable, " \
                                      "or a transfer in flight at save, after load)") \
    X(DMA_DEC_ERRORS, dma_dec_errors, "DMADecErr raised (data address decodes to nothing)") \
    X(SG_INT_ERRORS,  sg_int_errors,  "SGIntErr raised (stale descriptor, chain too long)") \
    X(SG_SLV_ERRORS,  sg_slv_errors,  "SGSlvErr raised (descriptor fetch or update refused)") \
    X(SG_DEC_ERRORS,  sg_dec_errors,  "SGDecErr raised (descriptor address decodes to nothing)") \
    X(SOFT_RESETS,    soft_resets,    "CDMACR.Reset completions") \
    X(ABORTED,        aborted,        "transfers or chains cut short by CDMACR.Reset") \
    X(GUEST_ERRORS,   guest_errors,   "guest errors logged") \
    X(IRQS_RAISED,    irqs_raised,    "rising edges of cdma_introut")

#define CDMA_CNT_X_INDEX_(N, n, d) CDMA_CNT_INDEX_##N,
#define CDMA_CNT_X_OFFSET_(N, n, d) CDMA_CNT_##N = 8 * CDMA_CNT_INDEX_##N,
#define CDMA_CNT_X_NAME_(N, n, d) #n,
enum cdma_counter_index { CDMA_COUNTER_TABLE(CDMA_CNT_X_INDEX_) CDMA_CNT_COUNT };
enum cdma_counter_offset { CDMA_COUNTER_TABLE(CDMA_CNT_X_OFFSET_) };
/* The counters' names in order, for an initializer: { CDMA_CNT_NAMES } */
#define CDMA_CNT_NAMES CDMA_COUNTER_TABLE(CDMA_CNT_X_NAME_)

/* ---- page size and device-tree binding (where the board puts the device: rackemu/board.h) ---- */
#define RACKEMU_CDMA_SIZE      0x1000u
#define RACKEMU_CDMA_COMPAT    "xlnx,axi-cdma-1.00.a"
#define RACKEMU_CDMA_CHANNEL_COMPAT "xlnx,axi-cdma-channel" /* the child node's compatible */
#define RACKEMU_CDMA_ADDRWIDTH 64u    /* DT xlnx,addrwidth (parent node) */
#define RACKEMU_CDMA_DATAWIDTH 64u    /* DT xlnx,datawidth (channel node), in bits */

/* clang-format on */
#endif /* RACKEMU_XILINX_CDMA_REGS_H */
