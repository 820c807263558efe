/* SPDX-License-Identifier: MIT */
/*
 * Unimem virtualized mailbox (vmbox) and virtualized packetizer: register layout.
 *
 * Source: ExaNoDe deliverable (ExaNoDe D3.6), section 2.2.3 (Figures 6-8), section 5.1
 * (vmbox, Table 3) and section 5.2 (packetizer, Tables 4 and 5, Figures 14-18).
 * This header is the single definition shared by the device cores (hw/unimem), the
 * QEMU glue, the Linux drivers (guest/unimem/kmod), the user programs, the firmware and the tests.
 * It is plain C and includes nothing but fixed-width integer types.
 */
#ifndef RACKEMU_UNIMEM_REGS_H
#define RACKEMU_UNIMEM_REGS_H
/* Register and packet tables are aligned by hand: clang-format leaves them alone (docs/style.md). */
/* clang-format off */

#include "rackemu/rk_types.h"

#define UNIMEM_IF_COUNT        64u      /* FIFOs / PIFs per node (sec. 2.2.3) */
#define UNIMEM_IF_PAGE_SHIFT   12u
#define UNIMEM_IF_PAGE_SIZE    0x1000u  /* one 4 KiB page per interface (Fig. 6, 7) */
#define UNIMEM_IF_SERVICE      0u       /* interface 0 belongs to the atomic service */
/* The kernel interface (KIF, rackemu extension): a 65th vmbox FIFO and a 65th
 * packetizer interface reserved for the node's kernel (the mailbox driver of sec. 3.2, the
 * atomicity driver's notices), so that the 63 user interfaces 1..63 of sec. 2.2.3 all stay
 * free. Its pages and registers sit in offsets the seed leaves unused (VMBOX_KIF_OFFSET,
 * PKTZ_KIF_OFFSET, the KIF rows of the control page and the TIF); MIF/PIF 0..63 and the seed's
 * tables are unchanged. UNIMEM_KIF is its index wherever an interface number is carried
 * (the fabric's rkf_mbox_deliver.mif and .src_if, the packetizer's tags). Only a KIF may send
 * into a KIF: a PIF's destination check (BASE_DEST) cannot name it, and the receiving vmbox
 * refuses a delivery into its KIF whose sending interface is not a KIF. */
#define UNIMEM_KIF             64u
#define UNIMEM_IF_TOTAL        65u      /* interfaces 0..63 and the KIF */
#define UNIMEM_CAP_KIF         (1ull << 0) /* CAPS bit of both devices: the KIF is present */

/* ---- Global address layout (ExaNoDe D3.6 sec. 3.1.6: 40-bit addresses carrying the node id) ----
 * rackemu places the node id in bits [39:34] and the node-local physical address in [33:0]
 * (16 GiB per node, 64 nodes). The packetizer's BASE_DEST check uses bits [33:18].
 */
#define UNIMEM_GADDR_BITS      40u
#define UNIMEM_GADDR_NODE_SHIFT 34u
#define UNIMEM_GADDR_NODE_MASK 0x3full
#define UNIMEM_GADDR_LOCAL_MASK ((1ull << UNIMEM_GADDR_NODE_SHIFT) - 1)
#define UNIMEM_GADDR(node, local) \
    ((((rk_u64)(node) & UNIMEM_GADDR_NODE_MASK) << UNIMEM_GADDR_NODE_SHIFT) | \
     ((rk_u64)(local) & UNIMEM_GADDR_LOCAL_MASK))
#define UNIMEM_GADDR_NODE(a)   (((rk_u64)(a) >> UNIMEM_GADDR_NODE_SHIFT) & UNIMEM_GADDR_NODE_MASK)
#define UNIMEM_GADDR_LOCAL(a)  ((rk_u64)(a) & UNIMEM_GADDR_LOCAL_MASK)

/* ---- Virtualized mailbox (sec. 5.1) ----
 * 64 MIF pages at 0x1000 * n; page 64 (offset 0x40000) is rackemu's control page.
 */
#define VMBOX_MIF_OFFSET(n)    ((rk_u64)(n) << UNIMEM_IF_PAGE_SHIFT)
/* MIF data register (Table 3): a 64-bit store enqueues one word, a burst several; a 64-bit
 * load dequeues one word. Any 8-byte-aligned offset in [0x00, 0x40) addresses the FIFO, so
 * a 16-, 32- or 64-byte burst (stp, ld1/st1 of q registers) moves 2, 4 or 8 words. */
#define VMBOX_MIF_DATA         0x00u
#define VMBOX_MIF_DATA_SPAN    0x40u
/* rackemu extension, read-only: number of words queued in this FIFO. */
#define VMBOX_MIF_COUNT        0x800u
/* Value a load of an empty FIFO returns (sec. 5.1.1). */
#define VMBOX_EMPTY_PATTERN    0xCAFEBEBEDEADBEAFull

/* Control page (rackemu extension; the seed's Table 3 is not reproduced in the source text).
 * Only the driver maps it. */
#define VMBOX_CTRL_OFFSET      0x40000u
#define VMBOX_CTRL_ID          0x00u   /* R: VMBOX_ID_VALUE */
#define VMBOX_CTRL_DEPTH       0x08u   /* R: FIFO depth in 64-bit words */
#define VMBOX_CTRL_IRQ_STATUS  0x10u   /* R: bit n = FIFO n non-empty and its IRQ enabled */
#define VMBOX_CTRL_IRQ_ENABLE  0x18u   /* R/W: bit n enables FIFO n's arrival interrupt */
#define VMBOX_CTRL_NONEMPTY    0x20u   /* R: bit n = FIFO n non-empty */
#define VMBOX_CTRL_FLUSH       0x28u   /* WC: bit n empties FIFO n */
#define VMBOX_CTRL_COUNTERS    0x30u   /* R: the counters below, 64-bit each */
/* The one list of the vmbox's counters, in register order (counter i at VMBOX_CTRL_COUNTERS +
 * 8 * i of the control page): X(NAME, name, description). From it come the offsets
 * VMBOX_CNT_NAME (from VMBOX_CTRL_COUNTERS), VMBOX_CNT_COUNT, VMBOX_CTRL_NAME, the names
 * (VMBOX_CNT_NAMES), the core's storage and the tables the tests and the docs read
 * (tests/e2e/qtest.py reads it through the compiler). */
#define VMBOX_COUNTER_TABLE(X) \
    X(NACKS,     nacks,     "stores and bursts refused because a FIFO was full") \
    X(TRUNCATED, truncated, "words dropped by the burst known-issue mode (burst-known-issue=on)") \
    X(ENQUEUED,  enqueued,  "words enqueued since reset (stores and deliveries)") \
    X(DEQUEUED,  dequeued,  "words dequeued since reset (loads)")
#define VMBOX_CNT_X_INDEX_(N, n, d) VMBOX_CNT_INDEX_##N,
#define VMBOX_CNT_X_OFFSET_(N, n, d) VMBOX_CNT_##N = 8 * VMBOX_CNT_INDEX_##N,
#define VMBOX_CNT_X_NAME_(N, n, d) #n,
enum vmbox_counter_index { VMBOX_COUNTER_TABLE(VMBOX_CNT_X_INDEX_) VMBOX_CNT_COUNT };
enum vmbox_counter_offset { VMBOX_COUNTER_TABLE(VMBOX_CNT_X_OFFSET_) };
/* The counters' names in register order, for an initializer: { VMBOX_CNT_NAMES } */
#define VMBOX_CNT_NAMES VMBOX_COUNTER_TABLE(VMBOX_CNT_X_NAME_)
/* Control-page offsets of the counters (the names the driver and the docs use). */
#define VMBOX_CTRL_NACKS       (VMBOX_CTRL_COUNTERS + VMBOX_CNT_NACKS)     /* 0x30 */
#define VMBOX_CTRL_TRUNCATED   (VMBOX_CTRL_COUNTERS + VMBOX_CNT_TRUNCATED) /* 0x38 */
#define VMBOX_CTRL_ENQUEUED    (VMBOX_CTRL_COUNTERS + VMBOX_CNT_ENQUEUED)  /* 0x40 */
#define VMBOX_CTRL_DEQUEUED    (VMBOX_CTRL_COUNTERS + VMBOX_CNT_DEQUEUED)  /* 0x48 */
#define VMBOX_ID_VALUE         0x524b564d42580001ull /* "RKVMBX" v1 */
/* KIF rows of the control page (rackemu extension). */
#define VMBOX_CTRL_CAPS        0x100u  /* R: UNIMEM_CAP_KIF when the KIF is present (property kif) */
#define VMBOX_CTRL_KIF_CTRL    0x108u  /* R/W: bits below; reset 0 (the KIF refuses deliveries) */
#define VMBOX_KIF_ENABLE       (1ull << 0) /* the KIF accepts deliveries (clear: every one NACKed) */
#define VMBOX_KIF_IRQ_ENABLE   (1ull << 1) /* the KIF's arrival interrupt (the vmbox's one line) */
#define VMBOX_CTRL_KIF_STATUS  0x110u  /* R: bits below */
#define VMBOX_KIF_NONEMPTY     (1ull << 0) /* the KIF holds a word */
#define VMBOX_KIF_IRQ          (1ull << 1) /* NONEMPTY and IRQ_ENABLE: the KIF drives the line */
#define VMBOX_CTRL_KIF_FLUSH   0x118u  /* WC: bit 0 empties the KIF (reads 0) */
#define VMBOX_CTRL_KIF_COUNTERS 0x120u /* R: the KIF's counters below, 64-bit each */
/* The KIF's counters (counter i at VMBOX_CTRL_KIF_COUNTERS + 8 * i of the control page), as
 * VMBOX_COUNTER_TABLE: offsets VMBOX_KIF_CNT_NAME (from VMBOX_CTRL_KIF_COUNTERS). */
#define VMBOX_KIF_COUNTER_TABLE(X) \
    X(ENQUEUED, enqueued, "words delivered into the KIF") \
    X(DEQUEUED, dequeued, "words dequeued from the KIF (loads)") \
    X(NACKS,    nacks,    "deliveries into the KIF refused because it was full") \
    X(REFUSED,  refused,  "deliveries into the KIF refused: KIF disabled, or the sender not a KIF (that one logged)")
#define VMBOX_KIF_CNT_X_INDEX_(N, n, d) VMBOX_KIF_CNT_INDEX_##N,
#define VMBOX_KIF_CNT_X_OFFSET_(N, n, d) VMBOX_KIF_CNT_##N = 8 * VMBOX_KIF_CNT_INDEX_##N,
enum vmbox_kif_counter_index { VMBOX_KIF_COUNTER_TABLE(VMBOX_KIF_CNT_X_INDEX_) VMBOX_KIF_CNT_COUNT };
enum vmbox_kif_counter_offset { VMBOX_KIF_COUNTER_TABLE(VMBOX_KIF_CNT_X_OFFSET_) };
/* The KIF page: laid out as a MIF page (FIFO window VMBOX_MIF_DATA..+VMBOX_MIF_DATA_SPAN: loads
 * dequeue; VMBOX_MIF_COUNT: the fill level). CPU stores into the FIFO window are refused with a
 * bus error: the KIF is filled by packetizer KIFs only. Never mapped to user space. */
#define VMBOX_KIF_OFFSET       0x41000u
#define VMBOX_MMIO_SIZE        (VMBOX_KIF_OFFSET + UNIMEM_IF_PAGE_SIZE)
#define VMBOX_DEFAULT_DEPTH    256u    /* words per FIFO = 64 packets of 256 bits */

/* ---- Virtualized packetizer (sec. 5.2) ----
 * 64 PIF pages at 0x1000 * n, the trust interface (TIF) page at 0x40000 (Fig. 7).
 */
#define PKTZ_PIF_OFFSET(n)     ((rk_u64)(n) << UNIMEM_IF_PAGE_SHIFT)
/* PIF registers (Table 5); each is 128 bits wide, written as two 64-bit halves. */
#define PKTZ_PIF_PAYLOAD0      0x00u   /* bits [127:48] are transmitted */
#define PKTZ_PIF_PAYLOAD1      0x10u   /* bits [127:0] are transmitted */
#define PKTZ_PIF_DEST          0x20u   /* bits [39:0]: global address of the target MIF */
#define PKTZ_PIF_STATUS        0x30u   /* R: status bits below */
#define PKTZ_PIF_STATUS_HI     0x38u   /* R: 0 (STATUS is a 128-bit register; bits [127:64]) */
#define PKTZ_PIF_END           0x40u   /* end of a PIF's registers; the rest of the page is unmapped */
#define PKTZ_ST_PEND           (1u << 0) /* packet under preparation/transmission */
#define PKTZ_ST_ILLEGAL        (1u << 1) /* destination outside the BASE_DEST window */
#define PKTZ_ST_NACK           (1u << 2) /* negative acknowledgement received */
#define PKTZ_ST_ACK            (1u << 3) /* positive acknowledgement received */
#define PKTZ_ST_OVERWR_BUF     (1u << 4) /* debug: PIF written while a packet was pending */
/* rackemu extension: the NACK came from the fabric (destination node absent or the
 * fabric is down), not from the destination vmbox. Always set together with NACK. */
#define PKTZ_ST_FABRIC_ERR     (1u << 5)
/* TIF registers (Table 4) */
#define PKTZ_TIF_OFFSET        0x40000u
#define PKTZ_TIF_PIDT(n)       ((rk_u64)(n) * 8u) /* 0x000-0x1F8, bits [47:0] valid */
#define PKTZ_TIF_BASE_DEST     0x200u  /* bits [33:18] valid */
#define PKTZ_TIF_PID_CONF      0x208u  /* bit n: PIDT entry n valid */
#define PKTZ_TIF_CLR_REQ       0x210u  /* WC: bit n clears PIF n's pending request */
/* rackemu extension, read-only counters in the TIF page */
#define PKTZ_TIF_ID            0x300u  /* R: PKTZ_ID_VALUE */
#define PKTZ_TIF_COUNTERS      0x308u  /* R: the counters below, 64-bit each */
/* The one list of the packetizer's counters, in register order (counter i at PKTZ_TIF_COUNTERS
 * + 8 * i of the TIF page), as VMBOX_COUNTER_TABLE: offsets PKTZ_CNT_NAME (from
 * PKTZ_TIF_COUNTERS), PKTZ_CNT_COUNT, PKTZ_TIF_NAME, names PKTZ_CNT_NAMES. */
#define PKTZ_COUNTER_TABLE(X) \
    X(SENT,    sent,    "packets transmitted") \
    X(ACKED,   acked,   "ACKs received") \
    X(NACKED,  nacked,  "NACKs received (vmbox full or fabric error)") \
    X(ILLEGAL, illegal, "setups refused for an illegal destination") \
    X(NOPID,   nopid,   "setups dropped because the PID_CONF bit was clear")
#define PKTZ_CNT_X_INDEX_(N, n, d) PKTZ_CNT_INDEX_##N,
#define PKTZ_CNT_X_OFFSET_(N, n, d) PKTZ_CNT_##N = 8 * PKTZ_CNT_INDEX_##N,
#define PKTZ_CNT_X_NAME_(N, n, d) #n,
enum pktz_counter_index { PKTZ_COUNTER_TABLE(PKTZ_CNT_X_INDEX_) PKTZ_CNT_COUNT };
enum pktz_counter_offset { PKTZ_COUNTER_TABLE(PKTZ_CNT_X_OFFSET_) };
#define PKTZ_CNT_NAMES PKTZ_COUNTER_TABLE(PKTZ_CNT_X_NAME_)
#define PKTZ_TIF_SENT          (PKTZ_TIF_COUNTERS + PKTZ_CNT_SENT)    /* 0x308 */
#define PKTZ_TIF_ACKED         (PKTZ_TIF_COUNTERS + PKTZ_CNT_ACKED)   /* 0x310 */
#define PKTZ_TIF_NACKED        (PKTZ_TIF_COUNTERS + PKTZ_CNT_NACKED)  /* 0x318 */
#define PKTZ_TIF_ILLEGAL       (PKTZ_TIF_COUNTERS + PKTZ_CNT_ILLEGAL) /* 0x320 */
#define PKTZ_TIF_NOPID         (PKTZ_TIF_COUNTERS + PKTZ_CNT_NOPID)   /* 0x328 */
#define PKTZ_ID_VALUE          0x524b504b545a0001ull /* "RKPKTZ" v1 */
/* KIF rows of the TIF page (rackemu extension); only the driver maps the TIF. */
#define PKTZ_TIF_CAPS          0x400u  /* R: UNIMEM_CAP_KIF when the KIF is present (property kif) */
#define PKTZ_TIF_KIF_PIDT      0x408u  /* R/W: bits [47:0], the PID the KIF stamps (the kernel's) */
#define PKTZ_TIF_KIF_CONF      0x410u  /* R/W: bit 0, KIF_PIDT valid (as PID_CONF for a PIF) */
#define PKTZ_TIF_KIF_CLR_REQ   0x418u  /* WC: bit 0 abandons the KIF's request (as CLR_REQ) */
#define PKTZ_TIF_KIF_COUNTERS  0x420u  /* R: the KIF's counters below, 64-bit each */
/* The KIF's counters (counter i at PKTZ_TIF_KIF_COUNTERS + 8 * i of the TIF page). */
#define PKTZ_KIF_COUNTER_TABLE(X) \
    X(SENT,    sent,    "packets the KIF transmitted") \
    X(ACKED,   acked,   "ACKs the KIF received") \
    X(NACKED,  nacked,  "NACKs the KIF received (FIFO full, KIF refused or fabric error)") \
    X(ILLEGAL, illegal, "KIF setups refused for an illegal destination") \
    X(NOPID,   nopid,   "KIF setups dropped because KIF_CONF was clear")
#define PKTZ_KIF_CNT_X_INDEX_(N, n, d) PKTZ_KIF_CNT_INDEX_##N,
#define PKTZ_KIF_CNT_X_OFFSET_(N, n, d) PKTZ_KIF_CNT_##N = 8 * PKTZ_KIF_CNT_INDEX_##N,
enum pktz_kif_counter_index { PKTZ_KIF_COUNTER_TABLE(PKTZ_KIF_CNT_X_INDEX_) PKTZ_KIF_CNT_COUNT };
enum pktz_kif_counter_offset { PKTZ_KIF_COUNTER_TABLE(PKTZ_KIF_CNT_X_OFFSET_) };
/* The KIF page: the PIF registers of Table 5 at the same offsets (PKTZ_PIF_PAYLOAD0 ..
 * PKTZ_PIF_STATUS_HI). Its destination may be a MIF of any node (bits [33:18] equal BASE_DEST,
 * as for a PIF) or any node's KIF (PKTZ_DEST_IS_KIF); the packet carries KIF_PIDT as its PID. */
#define PKTZ_KIF_OFFSET        0x41000u
#define PKTZ_MMIO_SIZE         (PKTZ_KIF_OFFSET + UNIMEM_IF_PAGE_SIZE)

#define PKTZ_PID_MASK          ((1ull << 48) - 1)
#define PKTZ_BASE_DEST_MASK    0x3fffc0000ull       /* bits [33:18] */
#define PKTZ_DEST_MASK         ((1ull << UNIMEM_GADDR_BITS) - 1)
/* A destination is legal when its bits [33:18] equal BASE_DEST's bits [33:18]; bits [17:12]
 * then select the MIF and bits [39:34] the node. */
#define PKTZ_DEST_MIF(d)       ((unsigned)(((d) >> UNIMEM_IF_PAGE_SHIFT) & 0x3f))
/* A KIF's destination names node (bits [39:34])'s KIF when its page is the vmbox's KIF page
 * (`base`: BASE_DEST, the vmbox's address bits [33:18]). A PIF can never name it: bits [33:18]
 * of that page are BASE_DEST + 1. */
#define PKTZ_DEST_IS_KIF(d, base) \
    ((UNIMEM_GADDR_LOCAL(d) & ~(rk_u64)(UNIMEM_IF_PAGE_SIZE - 1)) == (rk_u64)(base) + VMBOX_KIF_OFFSET)

/* The 256-bit atomic packet (Fig. 17) as four little-endian 64-bit words, in the order they
 * are pushed into the destination FIFO:
 *   word 0 bits [47:0]  = PID from the PIDT (never from the PIF writer)
 *   word 0 bits [63:48] = payload0 bits [63:48]
 *   word 1              = payload0 bits [127:64]
 *   word 2, word 3      = payload1 bits [63:0], [127:64]
 */
#define UNIMEM_PACKET_WORDS    4u
#define UNIMEM_PACKET_PID(w0)  ((w0) & PKTZ_PID_MASK)

/* ---- Global address space window (sec. 1, sec. 3.1.6) ----
 * Every node's memory is reachable from every node's CPU and DMA engines: global address G
 * (40 bits, node in [39:34]) appears in a node's physical map at GAS_WINDOW_BASE + G. A load
 * or store there travels through the fabric and completes, uncached, on the owner node's
 * memory; a window address that is not RAM on its owner, or whose owner is down, ends in a
 * bus error. The window covers node_count * 16 GiB. Its control page (rackemu extension,
 * read-only) identifies the window and counts the accesses.
 */
#define GAS_WINDOW_BASE        0x10000000000ull /* 1 TiB: above virt's highest region */
#define GAS_WINDOW_NODE_SIZE   (1ull << UNIMEM_GADDR_NODE_SHIFT)
#define GAS_WINDOW_ADDR(node, local) (GAS_WINDOW_BASE + UNIMEM_GADDR(node, local))
#define GAS_CTRL_ID            0x00u   /* R: GAS_ID_VALUE */
#define GAS_CTRL_NODE_ID       0x08u   /* R: this node's id */
#define GAS_CTRL_NODE_COUNT    0x10u   /* R: nodes in the window */
#define GAS_CTRL_WINDOW_BASE   0x18u   /* R: GAS_WINDOW_BASE */
#define GAS_CTRL_WINDOW_SIZE   0x20u   /* R: node_count * GAS_WINDOW_NODE_SIZE */
#define GAS_CTRL_LOADS         0x40u   /* R: CPU loads through the window */
#define GAS_CTRL_STORES        0x48u   /* R: CPU stores through the window */
#define GAS_CTRL_LOCAL         0x50u   /* R: of those, to this node's own window */
#define GAS_CTRL_BUS_ERRORS    0x58u   /* R: accesses answered with a bus error */
#define GAS_CTRL_SERVED_READS  0x60u   /* R: other nodes' reads served from this node's RAM */
#define GAS_CTRL_SERVED_WRITES 0x68u   /* R: other nodes' writes into this node's RAM */
#define GAS_CTRL_SERVED_REFUSED 0x70u  /* R: other nodes' accesses refused (not RAM) */
#define GAS_CTRL_TIMEOUTS      0x78u   /* R: remote accesses of this node that timed out */
#define GAS_CTRL_DIRECT_READS  0x80u   /* R: remote reads of this node copied directly from the owner's RAM */
#define GAS_CTRL_DIRECT_WRITES 0x88u   /* R: remote writes of this node copied directly into the owner's RAM */
#define GAS_CTRL_SIZE          0x1000u
#define GAS_ID_VALUE           0x00524b4741530001ull /* "RKGAS" v1 */

/* The control page's counters, declared once: X(NAME, name, description) in register order from
 * GAS_CNT_BASE, one 64-bit register each (GAS_CNT_<NAME> is the offset in the control page and
 * equals GAS_CTRL_<NAME> above). LOADS..BUS_ERRORS are the window's own; SERVED_*, TIMEOUTS
 * and DIRECT_* are the node's one-sided memory service's (remote memory statistics). */
#define GAS_COUNTER_TABLE(X) \
    X(LOADS,          loads,          "CPU loads through the window") \
    X(STORES,         stores,         "CPU stores through the window") \
    X(LOCAL,          local,          "of those, to this node's own window") \
    X(BUS_ERRORS,     bus_errors,     "accesses answered with a bus error") \
    X(SERVED_READS,   served_reads,   "other nodes' reads served from this node's RAM") \
    X(SERVED_WRITES,  served_writes,  "other nodes' writes into this node's RAM") \
    X(SERVED_REFUSED, served_refused, "other nodes' accesses refused (not RAM)") \
    X(TIMEOUTS,       timeouts,       "remote accesses of this node that timed out") \
    X(DIRECT_READS,   direct_reads,   "remote reads of this node copied directly from the owner's RAM") \
    X(DIRECT_WRITES,  direct_writes,  "remote writes of this node copied directly into the owner's RAM")

#define GAS_CNT_BASE           GAS_CTRL_LOADS
#define GAS_CNT_X_INDEX_(N, n, d) GAS_CNT_INDEX_##N,
#define GAS_CNT_X_OFFSET_(N, n, d) GAS_CNT_##N = GAS_CNT_BASE + 8 * GAS_CNT_INDEX_##N,
#define GAS_CNT_X_NAME_(N, n, d) #n,
enum gas_counter_index { GAS_COUNTER_TABLE(GAS_CNT_X_INDEX_) GAS_CNT_COUNT };
enum gas_counter_offset { GAS_COUNTER_TABLE(GAS_CNT_X_OFFSET_) };
/* The counters' names in register order, for an initializer: { GAS_CNT_NAMES } */
#define GAS_CNT_NAMES GAS_COUNTER_TABLE(GAS_CNT_X_NAME_)

/* ---- device-tree binding (where the board puts the devices: rackemu/board.h) ---- */
#define RACKEMU_VMBOX_COMPAT   "rackemu,unimem-vmbox"
#define RACKEMU_PKTZ_COMPAT    "rackemu,unimem-packetizer"
#define RACKEMU_GAS_COMPAT     "rackemu,unimem-gas"

/* The guest's counter ioctls (guest/include/rackemu: unimem_uapi.h, unimem_gas_uapi.h) carry
 * these tables' counters as fixed arrays: a new counter grows them there too. */
#ifdef __cplusplus
static_assert(VMBOX_CNT_COUNT == 4, "struct unimem_counters (unimem_uapi.h) carries 4 vmbox counters");
static_assert(PKTZ_CNT_COUNT == 5, "struct unimem_counters (unimem_uapi.h) carries 5 packetizer counters");
static_assert(GAS_CNT_COUNT == 10, "UNIMEM_GAS_IOC_COUNTERS (unimem_gas_uapi.h) carries 10 counters");
#elif !defined(__KERNEL__)
_Static_assert(VMBOX_CNT_COUNT == 4, "struct unimem_counters (unimem_uapi.h) carries 4 vmbox counters");
_Static_assert(PKTZ_CNT_COUNT == 5, "struct unimem_counters (unimem_uapi.h) carries 5 packetizer counters");
_Static_assert(GAS_CNT_COUNT == 10, "UNIMEM_GAS_IOC_COUNTERS (unimem_gas_uapi.h) carries 10 counters");
#endif

/* clang-format on */
#endif /* RACKEMU_UNIMEM_REGS_H */
