/* SPDX-License-Identifier: MIT */
/*
 * rackemu persistent memory: the persistence-domain model of a node's NVM region (docs/pmem.md).
 * Register layout of its control/status block, the modes, the counters and the geometry, shared
 * by the device core (hw/pmem), the QEMU glue, the guest driver, the tools and the tests.
 *
 * Source: Erda (Liu, Hua, Li, Liu, "Erda: Zero-Copy Log-Structured Memory for Remote Data
 * Atomicity"), sec. 1 (a WRITE's ACK means the data reached the NIC's volatile cache, not NVM)
 * and sec. 2.2 (the failure-atomic unit of NVM is 8 bytes); the SNIA NVM Programming Model for
 * the persistence domain per platform (ADR, eADR); Chipmunk (LeBlanc et al., "Chipmunk:
 * Investigating Crash-Consistency in Persistent-Memory File Systems", EuroSys 2023) for the
 * crash states: subsets of the in-flight writes up to a small size (two by default). Where these
 * leave a choice, the choice is rackemu's and docs/pmem.md says so.
 */
#ifndef RACKEMU_PMEM_REGS_H
#define RACKEMU_PMEM_REGS_H
/* Register tables are aligned by hand: clang-format leaves them alone (docs/style.md). */
/* clang-format off */

#include "rackemu/rk_types.h" /* rk_u64, rk_u32 */

/* ---- Geometry ---- */
#define PMEM_LINE_SIZE         64u      /* the unit of pending state and of a crash state: a cache line */
#define PMEM_WORD_SIZE         8u       /* NVM's failure-atomic unit (Erda sec. 2.2): never torn */
#define PMEM_NIC_ENTRY_MAX     4096u    /* bytes of one NIC buffer entry (one RoCE packet's payload at MTU 4096) */
#define PMEM_NIC_ENTRIES_MAX   1024u    /* nic-entries property limit (default 64) */
#define PMEM_LLC_LINES_MAX     65536u   /* llc-lines property limit (default 4096: 256 KiB) */

/* ---- Modes: what a power cut keeps (docs/pmem.md "Modes") ---- */
#define PMEM_MODE_NONE         0u       /* everything durable at once (rackemu before the model) */
#define PMEM_MODE_EADR         1u       /* CPU caches and memory controller in the domain: the NIC's buffer is lost */
#define PMEM_MODE_ADR          2u       /* memory controller only: CPU stores durable once written back,
                                         * RNIC writes once placed (DDIO off) */
#define PMEM_MODE_ADR_DDIO     3u       /* ADR with RNIC writes placed in the LLC: durable after a persistent
                                         * FLUSH, a CPU write-back of the line, or an eviction */
#define PMEM_MODE_COUNT        4u

/* ---- MMIO layout of the control/status block (offsets from its base) ---- */
#define PMEM_REG_ID            0x000u   /* R: PMEM_ID_VALUE */
#define PMEM_REG_MODE          0x008u   /* R: PMEM_MODE_* (property mode) */
#define PMEM_REG_REGION_BASE   0x010u   /* R: guest physical base of the NVM region */
#define PMEM_REG_REGION_SIZE   0x018u   /* R: bytes, a multiple of PMEM_LINE_SIZE */
#define PMEM_REG_NIC_DELAY_NS  0x020u   /* R: delay from a NIC buffer entry's ACK to its placement */
#define PMEM_REG_NIC_ENTRIES   0x028u   /* R: NIC buffer capacity in entries (0: no buffer, placed at once) */
#define PMEM_REG_LLC_LINES     0x030u   /* R: pending lines the LLC holds before it evicts one */
#define PMEM_REG_CTRL          0x038u   /* R/W: PMEM_CTRL_*; reads 0 */
#define PMEM_CTRL_CNT_CLEAR    (1u << 0) /* W: zero the counters (the two gauges stay) */
#define PMEM_COUNTERS          0x100u   /* R: counter i at PMEM_COUNTERS + 8 * i (below) */
#define PMEM_MMIO_SIZE         0x1000u
#define RACKEMU_PMEM_COMPAT    "rackemu,pmem" /* DT: reg = <control block>, <region> */
#define PMEM_ID_VALUE          0x00504d454d4b5201ull /* "RKMEMP" v1 */

/* ---- Counters: PMEM_COUNTERS + PMEM_CNT_* (R, 64-bit) ----
 * X(NAME, name, description), in register order. "Written bytes" of a line are the bytes an
 * RNIC placement wrote plus the bytes a CPU store changed (docs/pmem.md "Counters"). */
#define PMEM_COUNTER_TABLE(X) \
    X(STORE_BYTES,     store_bytes,     "CPU-written bytes durable on arrival (modes none and eadr)") \
    X(STORE_LINES,     store_lines,     "lines made durable on arrival (modes none and eadr)") \
    X(PLACE_BYTES,     place_bytes,     "RNIC-written bytes made durable by their placement (none, eadr, adr)") \
    X(PLACE_LINES,     place_lines,     "lines made durable by a placement") \
    X(FLUSH_BYTES,     flush_bytes,     "written bytes made durable by a persistent FLUSH") \
    X(FLUSH_LINES,     flush_lines,     "lines made durable by a persistent FLUSH") \
    X(WB_BYTES,        wb_bytes,        "written bytes made durable by a CPU write-back (DC CVAP, DC CVAC)") \
    X(WB_LINES,        wb_lines,        "lines made durable by a CPU write-back") \
    X(EVICT_BYTES,     evict_bytes,     "written bytes made durable by an LLC eviction") \
    X(EVICT_LINES,     evict_lines,     "lines made durable by an LLC eviction") \
    X(NIC_ACCEPTED,    nic_accepted,    "RNIC writes acknowledged into the NIC buffer") \
    X(NIC_PLACED,      nic_placed,      "NIC buffer entries placed in the region") \
    X(NIC_FORCED,      nic_forced,      "NIC buffer entries placed early because the buffer was full") \
    X(PENDING_LINES,   pending_lines,   "gauge: lines written but not durable") \
    X(NIC_PENDING,     nic_pending,     "gauge: NIC buffer entries acknowledged but not placed") \
    X(CUTS,            cuts,            "power cuts") \
    X(LOST_BYTES,      lost_bytes,      "bytes lost at the last cut: unplaced NIC bytes and written bytes of " \
                                        "pending lines the cut did not keep") \
    X(LOST_LINES,      lost_lines,      "pending lines the last cut did not keep") \
    X(LOST_NIC,        lost_nic,        "NIC buffer entries lost at the last cut")

#define PMEM_CNT_X_INDEX_(N, n, d) PMEM_CNT_INDEX_##N,
#define PMEM_CNT_X_OFFSET_(N, n, d) PMEM_CNT_##N = 8 * PMEM_CNT_INDEX_##N,
#define PMEM_CNT_X_NAME_(N, n, d) #n,
enum pmem_counter_index { PMEM_COUNTER_TABLE(PMEM_CNT_X_INDEX_) PMEM_CNT_COUNT };
enum pmem_counter_offset { PMEM_COUNTER_TABLE(PMEM_CNT_X_OFFSET_) };
/* The counters' names in register order, for an initializer: { PMEM_CNT_NAMES } */
#define PMEM_CNT_NAMES PMEM_COUNTER_TABLE(PMEM_CNT_X_NAME_)

/* clang-format on */
#endif /* RACKEMU_PMEM_REGS_H */
