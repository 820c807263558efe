/* SPDX-License-Identifier: MIT */
/*
 * The rackemu RNIC (RoCEv2, InfiniBand RC): PCI identity, BAR layout, registers, the command
 * interface for verbs objects, doorbell pages, queue entries in guest memory (send WQE, receive
 * WQE, CQE) and the counters. The one definition shared by the device core (hw/rnic/rnic*.cc), the
 * QEMU glue (hw/qemu/rackemu_rnic.c), the Linux driver (guest/rnic/kmod/rackemu_rnic), the user library,
 * the firmware and the tests. Plain C, usable from the kernel (rk_types.h) and from C++.
 *
 * Sources: InfiniBand Architecture Specification Vol 1 Release 1.5 ch. 10-11 (verbs: PD, MR with
 * lkey/rkey and access rights, CQ, QP states and attributes, work request and completion
 * contents), ch. 9 (RC transport, in hw/rnic/rc.h); the wire is rackemu/roce.h. Numbering follows
 * rdma-core's libibverbs where it has one (ibv_wr_opcode, ibv_wc_opcode, ibv_wc_status,
 * ibv_qp_state, ibv_access_flags, ibv_qp_attr_mask), so verbs users read familiar values. The
 * register interface itself is rackemu's (no real NIC's): docs/rnic.md "Device interface".
 *
 * Memory the device reaches, all by DMA through PCI (bus master):
 *   - the command block (struct rnic_cmd, 128 bytes, 64-aligned), written by the driver, read and
 *     answered by the device when RNIC_REG_CMD_EXEC is written;
 *   - queues: each send queue, receive queue and completion queue is ONE physically contiguous
 *     ring of 2^n entries (the driver allocates it with dma_alloc_coherent and may map it to the
 *     owning process);
 *   - memory regions: described by a page list (an array of 64-bit guest-physical page
 *     addresses, each aligned to the region's page size), copied by the device at registration,
 *     as real NICs keep a translation table (user buffers are not physically contiguous); or,
 *     with RNIC_MR_F_PHYS, one contiguous guest-physical range whose IOVA is its address (kernel
 *     users, firmware, register-level tests).
 *
 * Indices: every producer/consumer index the driver writes or reads is a free-running 32-bit
 * counter; the ring slot is index & (depth - 1). A doorbell that announces more entries than the
 * ring holds is a guest error: the queue pair (or CQ) goes to the error state.
 */
#ifndef RACKEMU_RNIC_REGS_H
#define RACKEMU_RNIC_REGS_H
/* Register and queue tables are aligned by hand: clang-format leaves them alone (docs/style.md). */
/* clang-format off */

#include "rackemu/rk_types.h" /* rk_u64, rk_u32, rk_u16, rk_u8 */

/* ---- PCI identity ----
 * 1af4:10f0..10ff is the range Red Hat donated to QEMU "for experimental usage without
 * registration" (QEMU docs/specs/pci-ids.txt); rackemu's RNIC takes 1af4:10f5. It must get an
 * official ID before it leaves the lab. Class 0x0207: network controller, InfiniBand. */
#define RNIC_PCI_VENDOR_ID     0x1af4u
#define RNIC_PCI_DEVICE_ID     0x10f5u
#define RNIC_PCI_SUBSYS_VENDOR 0x1af4u
#define RNIC_PCI_SUBSYS_ID     0x1100u  /* QEMU's subsystem ID for emulated devices */
#define RNIC_PCI_CLASS         0x0207u  /* network controller / InfiniBand controller */
#define RNIC_PCI_REVISION      0x01u
#define RACKEMU_RNIC_TYPE      "rackemu-rnic" /* the QOM type: -device rackemu-rnic */
#define RNIC_DRIVER_NAME       "rackemu_rnic"

/* ---- BARs ---- */
#define RNIC_BAR_CTRL          0u       /* BAR0: control registers, 64 KiB, 32-bit non-prefetchable */
#define RNIC_BAR_CTRL_SIZE     0x10000u
#define RNIC_BAR_DB            2u       /* BAR2: doorbell pages, one 4 KiB page per QP and per CQ (user-mappable) */
#define RNIC_BAR_MSIX          4u       /* BAR4: MSI-X table and PBA (exclusive BAR) */

/* ---- Geometry and limits ---- */
#define RNIC_PAGE_SIZE         0x1000u  /* doorbell page size: one page maps into one process */
#define RNIC_MAX_PD            256u
#define RNIC_MAX_MR            4096u
#define RNIC_MAX_CQ            256u
#define RNIC_MAX_QP            256u
#define RNIC_QPN_BASE          0x100u   /* QP numbers are RNIC_QPN_BASE + index (QPN 0/1 are IB's special QPs) */
#define RNIC_QPN(idx)          (RNIC_QPN_BASE + (rk_u32)(idx))
#define RNIC_QP_INDEX(qpn)     ((rk_u32)(qpn) - RNIC_QPN_BASE)
#define RNIC_DEPTH_LOG2_MIN    1u       /* queues of 2..4096 entries */
#define RNIC_DEPTH_LOG2_MAX    12u
#define RNIC_MAX_SEND_SGE      4u       /* SGEs per send WQE */
#define RNIC_MAX_RECV_SGE      3u       /* SGEs per receive WQE */
#define RNIC_MAX_MSG           0x40000000u /* 1 GiB: longest message (sum of SGE lengths) */
#define RNIC_MR_PAGE_SHIFT_MIN 12u      /* MR page sizes 4 KiB .. 1 GiB */
#define RNIC_MR_PAGE_SHIFT_MAX 30u
#define RNIC_MR_MAX_PAGES      0x40000u /* 262144 entries per page list (1 GiB of 4 KiB pages) */
#define RNIC_MR_TOTAL_PAGES    0x100000u /* page-list entries of all MRs together (REG_MR: NO_RESOURCE) */
#define RNIC_MSIX_VECTORS      8u       /* vector 0: async events; CQs choose any vector 0..7 */

/* ---- BAR0 layout ---- */
#define RNIC_REG_ID            0x000u   /* R 32: RNIC_ID_VALUE */
#define RNIC_ID_VALUE          0x524e4943u /* "RNIC" */
#define RNIC_REG_VERSION       0x004u   /* R 32: RNIC_VERSION_VALUE: major [31:16], minor [15:0] */
#define RNIC_VERSION_VALUE     0x00010002u /* 1.2: this header (1.1: extended atomics, the atomic unit's counters; 1.2: the async event queue) */
#define RNIC_REG_CAPS          0x008u   /* R 32: RNIC_CAP_* */
#define RNIC_CAP_FLUSH         (1u << 0) /* FLUSH (0x1C), global visibility and persistence */
#define RNIC_CAP_ATOMIC_WRITE  (1u << 1) /* ATOMIC WRITE (0x1D) */
#define RNIC_CAP_LINK          (1u << 2) /* attached to the node's fabric port (else loopback to itself only) */
#define RNIC_CAP_XATOMIC       (1u << 3) /* extended atomics RNIC_WR_XATOMIC/_POST, executed by the atomic unit (docs/atomic-unit.md) */
#define RNIC_CAP_EQ            (1u << 4) /* the asynchronous event queue (RNIC_REG_EQ_*) */
#define RNIC_REG_NODE_ID       0x00Cu   /* R 32: this node's id in the rack */
#define RNIC_REG_MAX_PD        0x010u   /* R 32: RNIC_MAX_PD */
#define RNIC_REG_MAX_MR        0x014u   /* R 32: RNIC_MAX_MR */
#define RNIC_REG_MAX_CQ        0x018u   /* R 32: RNIC_MAX_CQ */
#define RNIC_REG_MAX_QP        0x01Cu   /* R 32: RNIC_MAX_QP */
#define RNIC_REG_MAC_LO        0x020u   /* R 32: this port's MAC bytes 2..5 (byte 5 in [7:0]) */
#define RNIC_REG_MAC_HI        0x024u   /* R 32: this port's MAC bytes 0..1 (byte 0 in [15:8]) */
#define RNIC_REG_IPV4          0x028u   /* R 32: this port's IPv4 address (198.18.0.1 = 0xC6120001) */
#define RNIC_REG_CTRL          0x02Cu   /* R/W 32: RNIC_CTRL_* */
#define RNIC_CTRL_ENABLE       (1u << 0) /* accept doorbells and frames; 0: frames dropped, doorbells ignored (guest error) */
#define RNIC_CTRL_CNT_CLEAR    (1u << 8) /* W: zero the counters (reads as 0) */
#define RNIC_CTRL_WRITABLE     RNIC_CTRL_ENABLE
#define RNIC_REG_STATUS        0x030u   /* R 32: RNIC_STATUS_* */
#define RNIC_STATUS_LINK_UP    (1u << 0) /* the fabric port is connected */
#define RNIC_REG_MODEL_NS_LO   0x038u   /* R 32: the timing model's clock, ns, low word (latches HI) */
#define RNIC_REG_MODEL_NS_HI   0x03Cu   /* R 32: high word latched by the last MODEL_NS_LO read */

/* Command interface (docs/rnic.md "Commands"): write the 64-aligned guest-physical address of a
 * struct rnic_cmd to CMD_ADDR_LO/HI, then RNIC_CMD_EXEC_GO to CMD_EXEC. The device executes it
 * before the write returns (synchronously, in the vCPU's MMIO write), writes the status and the
 * outputs back into the block and mirrors the status in CMD_STATUS. */
#define RNIC_REG_CMD_ADDR_LO   0x100u   /* R/W 32: command block address [31:6] ([5:0] read as 0) */
#define RNIC_REG_CMD_ADDR_HI   0x104u   /* R/W 32: command block address [63:32] */
#define RNIC_REG_CMD_EXEC      0x108u   /* W 32: RNIC_CMD_EXEC_GO runs the command; other values: guest error */
#define RNIC_CMD_EXEC_GO       1u
#define RNIC_REG_CMD_STATUS    0x10Cu   /* R 32: RNIC_CMD_ST_* of the last command (also in the block) */
#define RNIC_REG_CMD_COUNT     0x110u   /* R 32: commands executed since reset (wraps) */

/* Interrupts: a cause bit per vector. A CQ raises its vector's bit when it writes a CQE while
 * armed (RNIC_CQ_DB_ARM); async events (a QP or CQ entering the error state) raise bit 0. With
 * MSI-X enabled each 0 -> 1 transition of an enabled bit sends the vector's message; without it,
 * INTx is the OR of the enabled bits. The driver clears bits with INT_STATUS (W1C) and reads
 * which CQs fired from CQ_EVENTS (W1C bitmap), which QPs/CQs failed from QP_ERRORS/CQ_ERRORS. */
#define RNIC_REG_INT_STATUS    0x200u   /* R/W1C 32: bit v = vector v has an event */
#define RNIC_REG_INT_ENABLE    0x204u   /* R/W 32: bit v enables vector v (reset 0) */
#define RNIC_INT_ALL           ((1u << RNIC_MSIX_VECTORS) - 1u)
#define RNIC_REG_CQ_EVENTS     0x400u   /* R/W1C 64 x RNIC_MAX_CQ/64: bit c = CQ c fired while armed */
#define RNIC_REG_QP_ERRORS     0x480u   /* R/W1C 64 x RNIC_MAX_QP/64: bit q = QP index q entered Error (not by modify) */
#define RNIC_REG_CQ_ERRORS     0x500u   /* R/W1C 64 x RNIC_MAX_CQ/64: bit c = CQ c overflowed or failed a write */
#define RNIC_BITMAP_WORDS(n)   (((n) + 63u) / 64u)

/* Timing model (docs/rnic.md "Timing model"): the glue's properties, read-only here. */
#define RNIC_REG_LINK_MBPS     0x600u   /* R 32: link bandwidth, Mbit/s (property link-mbps) */
#define RNIC_REG_HOP_NS        0x604u   /* R 32: latency per hop (NIC -> switch -> NIC is 2 hops), ns (hop-ns) */
#define RNIC_REG_NIC_MHZ       0x608u   /* R 32: NIC pipeline clock, MHz (nic-mhz) */
#define RNIC_REG_PCIE_NS       0x60Cu   /* R 32: PCIe one-way latency, ns (pcie-ns) */
#define RNIC_REG_PCIE_MBPS     0x610u   /* R 32: PCIe bandwidth, MByte/s (pcie-mbps) */
#define RNIC_REG_MAX_MTU       0x614u   /* R 32: largest path MTU accepted by modify QP (mtu, 256..4096) */
#define RNIC_REG_DM_SIZE       0x618u   /* R 32: bytes of device memory (dm-size; 0: none; docs/rnic.md "Device memory") */

/* Asynchronous event queue (docs/rnic.md "Async events"): events that belong to no work request
 * (ibv_get_async_event's), written by the device as struct rnic_eqe into ONE ring of 2^n entries
 * in guest memory. Program EQ_BASE_LO/HI and EQ_CTRL.DEPTH_LOG2/VECTOR with ENABLE 0, then set
 * ENABLE: the device checks the ring (64-aligned, depth RNIC_DEPTH_LOG2_MIN..MAX, inside RAM) and
 * refuses a bad one (guest error, EQ_STATUS.BAD_CONFIG, ENABLE stays 0). Enabling starts PI and
 * CI at 0; base and depth cannot change while enabled (guest error). The driver consumes entries
 * by the owner bit (as CQEs) and writes EQ_CI; EQ_ARM asks for one interrupt on the vector at
 * the next event (at once if entries are already waiting), like a CQ's RNIC_CQ_ARM_NEXT.
 * Full ring (PI - CI == depth): the NEW event is dropped, the oldest are kept; it is counted in
 * eq_overflows and EQ_STATUS.OVERFLOW is set (W1C). QP and CQ errors are also in the QP_ERRORS /
 * CQ_ERRORS bitmaps, so a driver that saw OVERFLOW rescans those. With ENABLE 0 no events are
 * written (nor counted as lost). */
#define RNIC_REG_EQ_BASE_LO    0x700u   /* R/W 32: ring address [31:6] ([5:0] read as 0) */
#define RNIC_REG_EQ_BASE_HI    0x704u   /* R/W 32: ring address [63:32] */
#define RNIC_REG_EQ_CTRL       0x708u   /* R/W 32: RNIC_EQ_CTRL_* */
#define RNIC_EQ_CTRL_ENABLE    (1u << 0)  /* write events; 0 -> 1 checks the ring and zeroes PI and CI */
#define RNIC_EQ_CTRL_DEPTH_SHIFT 8u       /* [11:8] depth_log2 (RNIC_DEPTH_LOG2_MIN..MAX) */
#define RNIC_EQ_CTRL_DEPTH_MASK  (0xfu << RNIC_EQ_CTRL_DEPTH_SHIFT)
#define RNIC_EQ_CTRL_VECTOR_SHIFT 16u     /* [18:16] interrupt vector 0..RNIC_MSIX_VECTORS-1 */
#define RNIC_EQ_CTRL_VECTOR_MASK (0x7u << RNIC_EQ_CTRL_VECTOR_SHIFT)
#define RNIC_EQ_CTRL_WRITABLE  (RNIC_EQ_CTRL_ENABLE | RNIC_EQ_CTRL_DEPTH_MASK | RNIC_EQ_CTRL_VECTOR_MASK)
#define RNIC_REG_EQ_PI         0x70Cu   /* R 32: events the device has written (free-running) */
#define RNIC_REG_EQ_CI         0x710u   /* R/W 32: events the driver consumed; beyond PI: guest error, ignored */
#define RNIC_REG_EQ_ARM        0x714u   /* R/W 32: write 1: interrupt on the next event; R: 1 while armed */
#define RNIC_REG_EQ_STATUS     0x718u   /* R/W1C 32: RNIC_EQ_ST_* */
#define RNIC_EQ_ST_OVERFLOW    (1u << 0) /* an event found the ring full and was dropped (sticky, W1C) */
#define RNIC_EQ_ST_BAD_CONFIG  (1u << 1) /* the last ENABLE was refused (ring misaligned, depth, outside RAM; W1C) */
#define RNIC_EQ_ST_W1C         (RNIC_EQ_ST_OVERFLOW | RNIC_EQ_ST_BAD_CONFIG)

#define RNIC_REG_COUNTERS      0x1000u  /* R 64 x RNIC_CNT_COUNT: counters (below), offset RNIC_CNT_<NAME> */

/* ---- BAR2: doorbell pages ----
 * QP index i's page at RNIC_DB_QP(i), CQ c's page at RNIC_DB_CQ(c); 32-bit accesses only. */
#define RNIC_DB_QP(i)          ((rk_u32)(i) * RNIC_PAGE_SIZE)
#define RNIC_DB_CQ_BASE        (RNIC_MAX_QP * RNIC_PAGE_SIZE)
#define RNIC_DB_CQ(c)          (RNIC_DB_CQ_BASE + (rk_u32)(c) * RNIC_PAGE_SIZE)
#define RNIC_BAR_DB_SIZE       (RNIC_DB_CQ_BASE + RNIC_MAX_CQ * RNIC_PAGE_SIZE) /* 2 MiB */
/* in a QP page */
#define RNIC_QP_DB_SQ_PI       0x00u    /* W: send queue producer index (WQEs posted); R: last written */
#define RNIC_QP_DB_RQ_PI       0x04u    /* W: receive queue producer index; R: last written */
#define RNIC_QP_DB_SQ_CI       0x08u    /* R: send WQEs the device has fetched */
#define RNIC_QP_DB_RQ_CI       0x0Cu    /* R: receive WQEs the device has consumed */
#define RNIC_QP_DB_STATE       0x10u    /* R: RNIC_QPS_* */
/* in a CQ page */
#define RNIC_CQ_DB_CI          0x00u    /* W: consumer index (CQEs the driver consumed); R: last written */
#define RNIC_CQ_DB_ARM         0x04u    /* W: RNIC_CQ_ARM_*; R: the CQ's arming (0: not armed) */
#define RNIC_CQ_ARM_NEXT       1u       /* interrupt on the next CQE */
#define RNIC_CQ_ARM_SOLICITED  2u       /* interrupt on the next solicited receive CQE or error CQE */
#define RNIC_CQ_DB_PI          0x08u    /* R: CQEs the device has written */
#define RNIC_CQ_DB_STATUS      0x0Cu    /* R: RNIC_CQ_ST_* */
#define RNIC_CQ_ST_ERROR       (1u << 0) /* overflow or CQE write failure: no more CQEs are written */

/* ---- Commands ---- */
#define RNIC_CMD_SIZE          128u
#define RNIC_CMD_ALIGN         64u
enum rnic_cmd_op {
    RNIC_CMD_NOP          = 0,
    RNIC_CMD_CREATE_PD    = 1,  /* out: handle = pdn */
    RNIC_CMD_DESTROY_PD   = 2,  /* handle = pdn; BUSY while an MR or QP uses it */
    RNIC_CMD_REG_MR       = 3,  /* handle = pdn, params.mr; out: out0 = lkey, out1 = rkey */
    RNIC_CMD_DEREG_MR     = 4,  /* handle = lkey */
    RNIC_CMD_CREATE_CQ    = 5,  /* params.cq; out: handle = cqn */
    RNIC_CMD_DESTROY_CQ   = 6,  /* handle = cqn; BUSY while a QP uses it */
    RNIC_CMD_CREATE_QP    = 7,  /* handle = pdn, params.qp; out: handle = qpn */
    RNIC_CMD_MODIFY_QP    = 8,  /* handle = qpn, params.modify */
    RNIC_CMD_QUERY_QP     = 9,  /* handle = qpn; out: params.modify filled, out0 = state */
    RNIC_CMD_DESTROY_QP   = 10, /* handle = qpn; its work is dropped without completions */
    RNIC_CMD_ALLOC_DM     = 11, /* params.dm.length; out: handle = dm id, out0 = its offset in device memory */
    RNIC_CMD_FREE_DM      = 12, /* handle = dm id; BUSY while an MR is registered over it */
    RNIC_CMD_REG_DM_MR    = 13, /* handle = pdn, params.dm (dm, offset, length, addr = iova, access); out: out0 = lkey, out1 = rkey */
    RNIC_CMD_DM_COPY      = 14, /* handle = dm id, params.dm (offset, length, addr = guest-physical, dir) */
    RNIC_CMD_OP_COUNT
};
enum rnic_cmd_status {
    RNIC_CMD_ST_OK          = 0,
    RNIC_CMD_ST_BAD_OPCODE  = 1,  /* unknown command */
    RNIC_CMD_ST_BAD_PD      = 2,  /* no such protection domain */
    RNIC_CMD_ST_BAD_MR      = 3,  /* no such memory region (key) */
    RNIC_CMD_ST_BAD_CQ      = 4,  /* no such completion queue */
    RNIC_CMD_ST_BAD_QP      = 5,  /* no such queue pair */
    RNIC_CMD_ST_BUSY        = 6,  /* the object is still used (MR/QP on a PD, QP on a CQ) */
    RNIC_CMD_ST_NO_RESOURCE = 7,  /* the table is full */
    RNIC_CMD_ST_BAD_PARAM   = 8,  /* size, depth, alignment, page list, flags or a reserved field */
    RNIC_CMD_ST_BAD_ADDR    = 9,  /* a guest address outside RAM (command block, queue, page list, page) */
    RNIC_CMD_ST_BAD_STATE   = 10, /* QP transition not allowed from the current state */
    RNIC_CMD_ST_BAD_ATTR    = 11, /* QP attribute out of range or missing for the transition */
    RNIC_CMD_ST_BAD_ACCESS  = 12, /* access flags: unknown, or remote write/atomic without local write */
    RNIC_CMD_ST_COUNT
};

/* REG_MR parameters. IOVA: the address the verbs user names (a process virtual address, or
 * with RNIC_MR_F_PHYS the guest-physical address). Byte iova maps to page_list[(iova - (iova0 &
 * ~(page_size-1))) >> page_shift] + offset in the page. */
struct rnic_cmd_mr {
    rk_u64 iova;          /* first byte of the region */
    rk_u64 length;        /* bytes, 1..2^(page_shift) x npages minus the first page's offset */
    rk_u64 page_list;     /* guest-physical address of npages rk_u64 page addresses (8-aligned); PHYS: 0 */
    rk_u32 npages;        /* entries in page_list (PHYS: 0) */
    rk_u32 access;        /* RNIC_ACCESS_* */
    rk_u8  page_shift;    /* log2 of the page size, RNIC_MR_PAGE_SHIFT_MIN..MAX (PHYS: ignored) */
    rk_u8  flags;         /* RNIC_MR_F_* */
    rk_u16 reserved0;
    rk_u32 reserved1;
};
#define RNIC_MR_F_PHYS         (1u << 0) /* iova is a contiguous guest-physical range; no page list */

/* Device memory (docs/rnic.md "Device memory"): RNIC_REG_DM_SIZE bytes on the NIC, allocated in
 * RNIC_DM_ALIGN-byte units (ALLOC_DM rounds the length up), at most RNIC_MAX_DM allocations. An
 * MR over an allocation (REG_DM_MR) maps [addr, addr + length) to bytes [offset, offset + length)
 * of it; its keys work as any MR's (remote READ/WRITE/atomics, local SGEs); FLUSH persistence
 * is refused on it (RNIC_ACCESS_FLUSH_PERSIST: BAD_ACCESS). DM_COPY moves length bytes between
 * guest RAM at addr and the allocation at offset (the ibv_memcpy_to/from_dm analogue). */
#define RNIC_MAX_DM            64u
#define RNIC_DM_ALIGN          64u
#define RNIC_DM_SIZE_MAX       (4u << 20)  /* largest dm-size the device accepts */
#define RNIC_DM_COPY_TO_DM     0u
#define RNIC_DM_COPY_FROM_DM   1u
struct rnic_cmd_dm {
    rk_u64 addr;          /* REG_DM_MR: the MR's iova; DM_COPY: guest-physical address */
    rk_u64 offset;        /* REG_DM_MR, DM_COPY: byte offset in the allocation */
    rk_u64 length;        /* ALLOC_DM, REG_DM_MR, DM_COPY: bytes (1..) */
    rk_u32 dm;            /* REG_DM_MR: the dm id (ALLOC_DM's handle) */
    rk_u32 access;        /* REG_DM_MR: RNIC_ACCESS_* */
    rk_u32 dir;           /* DM_COPY: RNIC_DM_COPY_* */
    rk_u32 reserved;
};

/* Memory region and QP access flags (ibv_access_flags values). */
#define RNIC_ACCESS_LOCAL_WRITE   (1u << 0)
#define RNIC_ACCESS_REMOTE_WRITE  (1u << 1)
#define RNIC_ACCESS_REMOTE_READ   (1u << 2)
#define RNIC_ACCESS_REMOTE_ATOMIC (1u << 3) /* CMP_SWAP, FETCH_ADD (ATOMIC WRITE needs REMOTE_WRITE, as rxe) */
#define RNIC_ACCESS_FLUSH_GLOBAL  (1u << 8) /* FLUSH with global visibility placement */
#define RNIC_ACCESS_FLUSH_PERSIST (1u << 9) /* FLUSH with persistence placement */
#define RNIC_ACCESS_ALL        (RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ | \
                                RNIC_ACCESS_REMOTE_ATOMIC | RNIC_ACCESS_FLUSH_GLOBAL | RNIC_ACCESS_FLUSH_PERSIST)
/* An lkey/rkey: MR table index [31:8], key byte [7:0] (changes at every registration of the index,
 * so a stale key is refused). lkey == rkey; the rkey is valid remotely only with a REMOTE_* flag. */
#define RNIC_KEY_INDEX(key)    ((rk_u32)(key) >> 8)
#define RNIC_KEY_TAG(key)      ((rk_u32)(key) & 0xffu)

/* CREATE_CQ parameters: ring of 2^depth_log2 struct rnic_cqe at ring (64-aligned, contiguous). */
struct rnic_cmd_cq {
    rk_u64 ring;          /* guest-physical address of the CQE ring */
    rk_u8  depth_log2;    /* RNIC_DEPTH_LOG2_MIN..MAX */
    rk_u8  vector;        /* interrupt vector 0..RNIC_MSIX_VECTORS-1 */
    rk_u16 reserved0;
    rk_u32 reserved1;
};

/* CREATE_QP parameters (RC only): rings of struct rnic_send_wqe / rnic_recv_wqe (64-aligned). */
struct rnic_cmd_qp {
    rk_u64 sq_ring;       /* guest-physical address of the send queue */
    rk_u64 rq_ring;       /* guest-physical address of the receive queue */
    rk_u32 send_cqn;      /* CQ for send completions */
    rk_u32 recv_cqn;      /* CQ for receive completions (may equal send_cqn) */
    rk_u8  sq_depth_log2; /* RNIC_DEPTH_LOG2_MIN..MAX */
    rk_u8  rq_depth_log2;
    rk_u16 reserved0;
    rk_u32 reserved1;
};

/* QP states (ibv_qp_state values; SQD/SQE are not modeled). */
#define RNIC_QPS_RESET         0u
#define RNIC_QPS_INIT          1u
#define RNIC_QPS_RTR           2u
#define RNIC_QPS_RTS           3u
#define RNIC_QPS_ERR           6u

/* MODIFY_QP attribute mask (ibv_qp_attr_mask values): which fields of rnic_cmd_modify_qp are
 * taken; the others keep their current values. Required per transition (as IBA 11.2.4.2):
 * RESET->INIT: STATE ACCESS_FLAGS (PKEY optional); INIT->RTR: STATE PATH_MTU DEST_QPN RQ_PSN
 * MAX_DEST_RD_ATOMIC MIN_RNR_TIMER AV; RTR->RTS: STATE SQ_PSN TIMEOUT RETRY_CNT RNR_RETRY
 * MAX_QP_RD_ATOMIC; ->ERR, ->RESET: STATE. */
#define RNIC_QP_ATTR_STATE              (1u << 0)
#define RNIC_QP_ATTR_ACCESS_FLAGS       (1u << 3)
#define RNIC_QP_ATTR_PKEY_INDEX         (1u << 4)  /* here: pkey itself */
#define RNIC_QP_ATTR_AV                 (1u << 7)  /* dest_node or dest_ip/dest_mac, udp_sport, tos */
#define RNIC_QP_ATTR_PATH_MTU           (1u << 8)
#define RNIC_QP_ATTR_TIMEOUT            (1u << 9)
#define RNIC_QP_ATTR_RETRY_CNT          (1u << 10)
#define RNIC_QP_ATTR_RNR_RETRY          (1u << 11)
#define RNIC_QP_ATTR_RQ_PSN             (1u << 12)
#define RNIC_QP_ATTR_MAX_QP_RD_ATOMIC   (1u << 13)
#define RNIC_QP_ATTR_MIN_RNR_TIMER      (1u << 15)
#define RNIC_QP_ATTR_SQ_PSN             (1u << 16)
#define RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC (1u << 17)
#define RNIC_QP_ATTR_DEST_QPN           (1u << 20)
#define RNIC_QP_ATTR_ALL       0x0013bf99u
#define RNIC_DEST_NODE_EXPLICIT 0xffffffffu /* dest_node: use dest_ip and dest_mac as given */

struct rnic_cmd_modify_qp {
    rk_u32 attr_mask;     /* RNIC_QP_ATTR_* */
    rk_u8  state;         /* RNIC_QPS_*: the target state */
    rk_u8  timeout;       /* 0..31: 4.096 us x 2^timeout (0 = infinite) */
    rk_u8  retry_cnt;     /* 0..7 */
    rk_u8  rnr_retry;     /* 0..7, 7 = infinite */
    rk_u8  min_rnr_timer; /* 0..31: the RNR NAK timer code this QP sends (roce_rnr_timer_us) */
    rk_u8  max_rd_atomic; /* initiator depth 1..64 */
    rk_u8  max_dest_rd_atomic; /* responder resources 1..64 */
    rk_u8  tos;           /* IPv4 TOS (DSCP/ECN) of the QP's frames */
    rk_u16 path_mtu;      /* 256, 512, 1024, 2048, 4096 (bytes), at most RNIC_REG_MAX_MTU */
    rk_u16 pkey;          /* partition key, default 0xFFFF */
    rk_u32 access;        /* RNIC_ACCESS_REMOTE_* / FLUSH_* the QP accepts */
    rk_u32 dest_qpn;      /* the peer QP's number */
    rk_u32 rq_psn;        /* first PSN expected from the peer */
    rk_u32 sq_psn;        /* first PSN sent */
    rk_u32 dest_node;     /* peer node id (its MAC and IPv4 by the fabric's rule), or RNIC_DEST_NODE_EXPLICIT */
    rk_u32 dest_ip;       /* peer IPv4 (host order), with RNIC_DEST_NODE_EXPLICIT */
    rk_u8  dest_mac[6];   /* peer MAC, with RNIC_DEST_NODE_EXPLICIT */
    rk_u16 udp_sport;     /* UDP source port 0xC000..0xFFFF; 0: the device derives it from the QPNs */
    rk_u32 reserved[4];
};

struct rnic_cmd {
    rk_u16 opcode;        /* RNIC_CMD_* (in) */
    rk_u16 status;        /* RNIC_CMD_ST_* (out) */
    rk_u32 handle;        /* in: the object the command acts on (pdn, lkey, cqn, qpn); out: created object */
    rk_u32 out0;          /* out: REG_MR lkey, QUERY_QP state */
    rk_u32 out1;          /* out: REG_MR rkey */
    union {
        struct rnic_cmd_mr mr;
        struct rnic_cmd_cq cq;
        struct rnic_cmd_qp qp;
        struct rnic_cmd_modify_qp modify;
        struct rnic_cmd_dm dm;
        rk_u8 raw[112];
    } params;
};

/* ---- Queue entries in guest memory (little-endian) ---- */
struct rnic_sge {
    rk_u64 addr;          /* IOVA in the MR of lkey */
    rk_u32 length;        /* bytes */
    rk_u32 lkey;
};

/* Work request opcodes (ibv_wr_opcode values; FLUSH and ATOMIC_WRITE as rdma-core). */
#define RNIC_WR_WRITE          0u
#define RNIC_WR_WRITE_IMM      1u
#define RNIC_WR_SEND           2u
#define RNIC_WR_SEND_IMM       3u
#define RNIC_WR_READ           4u
#define RNIC_WR_CMP_SWAP       5u
#define RNIC_WR_FETCH_ADD      6u
#define RNIC_WR_FLUSH          14u
#define RNIC_WR_ATOMIC_WRITE   15u
#define RNIC_WR_XATOMIC_FIRST  0x40u    /* reserved for the atomic unit's extended atomics (the NIC-atomics paper) */
#define RNIC_WR_XATOMIC        0x40u    /* extended atomic returning the old value (ROCE_OP_XATOMIC) */
#define RNIC_WR_XATOMIC_POST   0x41u    /* extended atomic, no value returned (ROCE_OP_XATOMIC_POST) */
#define RNIC_WR_XATOMIC_LAST   0x4Fu    /* 0x42..0x4F: reserved (LOC_QP_OP_ERR, RNIC_LERR_OPCODE) */

#define RNIC_WQE_F_SIGNALED    (1u << 0) /* write a CQE on success (errors always complete) */
#define RNIC_WQE_F_SOLICITED   (1u << 1) /* SE bit on the last packet (SEND/WRITE_IMM) */
#define RNIC_WQE_F_FENCE       (1u << 2) /* wait for earlier READ/atomics to complete */

/* Send WQE (128 bytes). Message length: the sum of the SGE lengths (SEND, WRITE, READ: the
 * SGEs are gathered from / scattered to); CMP_SWAP and FETCH_ADD: one SGE of 8 bytes that
 * receives the original value; ATOMIC_WRITE: no SGE, the value in swap_add; FLUSH: no SGE,
 * the range [remote_addr, + flush_len). XATOMIC: xop (ROCE_XOP_*), xsize (ROCE_XATOMIC_SIZE32
 * or _SIZE64; remote_addr aligned to it), operand in swap_add, compare and mask (MCSWAP), one
 * SGE of xsize bytes that receives the old value; XATOMIC_POST: the same without an SGE. An
 * unknown xop or xsize, a wrong SGE: LOC_QP_OP_ERR (RNIC_LERR_OPCODE / _SGE_COUNT / _LENGTH). */
struct rnic_send_wqe {
    rk_u64 wr_id;         /* returned in the CQE */
    rk_u8  opcode;        /* RNIC_WR_* */
    rk_u8  flags;         /* RNIC_WQE_F_* */
    rk_u8  num_sge;       /* 0..RNIC_MAX_SEND_SGE */
    rk_u8  flush_type;    /* FLUSH: placement ROCE_FETH_PLT_* [3:0], selectivity ROCE_FETH_SEL_* [5:4] */
    rk_u32 imm;           /* *_IMM: immediate data, sent as this 32-bit value in network order */
    rk_u64 remote_addr;   /* WRITE/READ/atomics/FLUSH: the peer's IOVA */
    rk_u32 rkey;          /* the peer MR's rkey */
    rk_u32 flush_len;     /* FLUSH: bytes of the range (selectivity RANGE) */
    rk_u64 swap_add;      /* CMP_SWAP: swap; FETCH_ADD: add; ATOMIC_WRITE: the value */
    rk_u64 compare;       /* CMP_SWAP, XATOMIC MCSWAP: compare */
    rk_u64 mask;          /* XATOMIC MCSWAP: the bits compared and swapped (else ignored) */
    rk_u8  xop;           /* XATOMIC*: ROCE_XOP_* */
    rk_u8  xsize;         /* XATOMIC*: operand bytes, 4 or 8 */
    rk_u8  reserved[6];
    struct rnic_sge sge[RNIC_MAX_SEND_SGE];
};

/* Receive WQE (64 bytes). */
struct rnic_recv_wqe {
    rk_u64 wr_id;
    rk_u8  num_sge;       /* 0..RNIC_MAX_RECV_SGE (0: a zero-length receive, e.g. for WRITE_IMM) */
    rk_u8  reserved0[7];
    struct rnic_sge sge[RNIC_MAX_RECV_SGE];
};

/* CQE opcodes (ibv_wc_opcode values). */
#define RNIC_CQE_OP_SEND       0u
#define RNIC_CQE_OP_WRITE      1u
#define RNIC_CQE_OP_READ       2u
#define RNIC_CQE_OP_CMP_SWAP   3u
#define RNIC_CQE_OP_FETCH_ADD  4u
#define RNIC_CQE_OP_FLUSH      8u
#define RNIC_CQE_OP_ATOMIC_WRITE 9u
#define RNIC_CQE_OP_XATOMIC    0x40u    /* RNIC_WR_XATOMIC (byte_len: xsize) */
#define RNIC_CQE_OP_XATOMIC_POST 0x41u  /* RNIC_WR_XATOMIC_POST (byte_len: 0) */
#define RNIC_CQE_OP_RECV       128u
#define RNIC_CQE_OP_RECV_RDMA_IMM 129u  /* a WRITE WITH IMMEDIATE consumed a receive WQE */

/* CQE status (ibv_wc_status values). */
#define RNIC_WC_SUCCESS        0u
#define RNIC_WC_LOC_LEN_ERR    1u       /* receive: message longer than the receive WQE */
#define RNIC_WC_LOC_QP_OP_ERR  2u       /* bad WQE: opcode, SGE count, length, WQE fetch failed */
#define RNIC_WC_LOC_PROT_ERR   4u       /* an SGE failed its lkey check (vendor_err: RNIC_LERR_*) */
#define RNIC_WC_WR_FLUSH_ERR   5u       /* flushed: the QP is in the error state */
#define RNIC_WC_BAD_RESP_ERR   7u       /* malformed or unexpected response */
#define RNIC_WC_LOC_ACCESS_ERR 8u       /* local DMA failed (address outside RAM) */
#define RNIC_WC_REM_INV_REQ_ERR 9u      /* NAK invalid request (vendor_err: the AETH syndrome) */
#define RNIC_WC_REM_ACCESS_ERR 10u      /* NAK remote access error: rkey, bounds, access flag, alignment */
#define RNIC_WC_REM_OP_ERR     11u      /* NAK remote operational error */
#define RNIC_WC_RETRY_EXC_ERR  12u      /* transport retries exhausted */
#define RNIC_WC_RNR_RETRY_EXC_ERR 13u   /* RNR retries exhausted */

/* vendor_err of a CQE: for REM_* statuses the AETH syndrome received; for local errors: */
#define RNIC_LERR_NONE         0u
#define RNIC_LERR_LKEY         1u       /* no MR with this lkey (unknown index or stale key byte) */
#define RNIC_LERR_PD           2u       /* the MR belongs to another PD than the QP */
#define RNIC_LERR_BOUNDS       3u       /* SGE outside the MR */
#define RNIC_LERR_ACCESS       4u       /* writing into an MR without LOCAL_WRITE */
#define RNIC_LERR_OPCODE       5u       /* unknown or reserved WR opcode */
#define RNIC_LERR_SGE_COUNT    6u       /* num_sge too large, or wrong for the opcode */
#define RNIC_LERR_LENGTH       7u       /* message longer than RNIC_MAX_MSG, atomic SGE not 8 bytes */
#define RNIC_LERR_WQE_DMA      8u       /* the WQE could not be read (ring outside RAM) */
#define RNIC_LERR_DATA_DMA     9u       /* an MR page could not be read or written (outside RAM) */
#define RNIC_LERR_RQ_EMPTY     10u      /* (unused in a CQE: an empty receive queue is an RNR NAK) */

#define RNIC_CQE_F_WITH_IMM    (1u << 0) /* imm is valid */
#define RNIC_CQE_F_SOLICITED   (1u << 1) /* receive: the sender set SE */
#define RNIC_CQE_F_RECV        (1u << 2) /* a receive-queue completion */

/* CQE (64 bytes). Valid when (owner & 1) == ((ci >> depth_log2) & 1) ^ 1 for the consumer
 * index ci of its slot: the device writes owner 1 on the first lap, 0 on the second, ... (rings
 * start zeroed). The device writes the whole entry, the owner byte last. */
struct rnic_cqe {
    rk_u64 wr_id;         /* the WQE's wr_id */
    rk_u32 byte_len;      /* receive: bytes placed; READ: bytes read; atomics: 8; WRITE/SEND: message length */
    rk_u32 imm;           /* immediate data (RNIC_CQE_F_WITH_IMM) */
    rk_u32 qpn;           /* the local QP */
    rk_u32 src_qpn;       /* the QP's peer (dest_qpn) */
    rk_u8  opcode;        /* RNIC_CQE_OP_* */
    rk_u8  status;        /* RNIC_WC_* */
    rk_u8  flags;         /* RNIC_CQE_F_* */
    rk_u8  owner;         /* bit 0: phase (above); written last */
    rk_u32 vendor_err;    /* RNIC_LERR_* or the AETH syndrome of a NAK */
    rk_u64 modeled_ns;    /* the timing model's latency of this work request: doorbell (receive: first packet) to CQE */
    rk_u64 modeled_at_ns; /* the timing model's clock when the CQE was written */
    rk_u64 reserved[2];
};

/* Async event types (ibv_event_type values). */
#define RNIC_EV_CQ_ERR         0u       /* element: CQN. The CQ overflowed or a CQE write failed (CQ in error) */
#define RNIC_EV_QP_FATAL       1u       /* element: QPN. The QP entered Error: retries exhausted, bad response, bad doorbell or WQE ring */
#define RNIC_EV_QP_REQ_ERR     2u       /* element: QPN. As responder it NAKed an invalid request (class C) and entered Error */
#define RNIC_EV_QP_ACCESS_ERR  3u       /* element: QPN. As responder it NAKed a remote access error (rkey, bounds, access) and entered Error */
#define RNIC_EV_COMM_EST       4u       /* element: QPN. The first packet arrived while the QP was in RTR */
#define RNIC_EV_PORT_ACTIVE    9u       /* element: port 1. The fabric link came up */
#define RNIC_EV_PORT_ERR       10u      /* element: port 1. The fabric link went down */
#define RNIC_EV_TYPE_MAX       10u
#define RNIC_EV_CQ_ERR_OVERFLOW 0u      /* CQ_ERR detail: a CQE found the CQ full */
#define RNIC_EV_CQ_ERR_WRITE    1u      /* CQ_ERR detail: a CQE write failed (ring outside RAM) */
#define RNIC_PORT_NUM          1u       /* the device's one port, as verbs number ports */

/* Event queue entry (32 bytes). Valid when (owner & 1) == ((ci >> depth_log2) & 1) ^ 1, as a
 * CQE; the device writes the whole entry, the owner byte last. */
struct rnic_eqe {
    rk_u8  type;          /* RNIC_EV_* */
    rk_u8  owner;         /* bit 0: phase; written last */
    rk_u16 reserved0;
    rk_u32 element;       /* QPN, CQN or port number, by type */
    rk_u32 detail;        /* QP_FATAL: the RNIC_WC_* status of the failure (RETRY_EXC, ...), 0 for a
                           * doorbell or send-WQE check fault; REQ/ACCESS_ERR: the AETH NAK syndrome sent; CQ_ERR:
                           * RNIC_EV_CQ_ERR_*; else 0 */
    rk_u32 seq;           /* events generated since ENABLE (dropped ones included): a gap shows a loss */
    rk_u64 modeled_at_ns; /* the timing model's clock when the event happened */
    rk_u64 reserved1;
};

/* ---- Counters: RNIC_REG_COUNTERS + RNIC_CNT_<NAME> (R, 64-bit) ----
 * X(NAME, name, description). The transport engine's (RNIC_RC_COUNTERS, rc.h uses it as
 * RC_COUNTER_TABLE) then the device's own. From it come the offsets RNIC_CNT_<NAME>,
 * RNIC_CNT_COUNT, the names (RNIC_CNT_NAMES), the core's storage and the docs table. */
#define RNIC_RC_COUNTERS(X) \
    X(TX_FRAMES,       tx_frames,       "frames sent") \
    X(TX_BYTES,        tx_bytes,        "bytes of frames sent") \
    X(RX_FRAMES,       rx_frames,       "frames received") \
    X(RX_MALFORMED,    rx_malformed,    "frames dropped as malformed (any WireError but ICRC)") \
    X(RX_ICRC_ERRORS,  rx_icrc_errors,  "frames dropped for a bad ICRC") \
    X(RX_UNKNOWN_QP,   rx_unknown_qp,   "frames for a QP number that does not exist") \
    X(RX_BAD_STATE,    rx_bad_state,    "frames for a QP not in a state to take them, or from the wrong source or P_Key") \
    X(RX_CNP,          rx_cnp,          "congestion notification packets received (not acted on)") \
    X(REQ_PACKETS,     req_packets,     "request packets sent the first time") \
    X(RETRANSMITS,     retransmits,     "request packets sent again (go-back-N)") \
    X(TIMEOUTS,        timeouts,        "retransmission timer expiries") \
    X(IMPLIED_NAKS,    implied_naks,    "responses beyond an incomplete READ/atomic: lost responses") \
    X(SEQ_NAKS_RX,     seq_naks_rx,     "NAK PSN sequence error received") \
    X(RNR_NAKS_RX,     rnr_naks_rx,     "RNR NAKs received") \
    X(ERR_NAKS_RX,     err_naks_rx,     "NAK invalid request / remote access / remote operational received") \
    X(RESP_DROPPED,    resp_dropped,    "responses outside the outstanding PSN range or malformed, dropped") \
    X(RETRY_EXHAUSTED, retry_exhausted, "work requests completed with RETRY_EXC") \
    X(RNR_EXHAUSTED,   rnr_exhausted,   "work requests completed with RNR_RETRY_EXC") \
    X(SEQ_NAKS_TX,     seq_naks_tx,     "NAK PSN sequence error sent") \
    X(RNR_NAKS_TX,     rnr_naks_tx,     "RNR NAKs sent") \
    X(ERR_NAKS_TX,     err_naks_tx,     "NAK invalid request / remote access / remote operational sent") \
    X(ACKS_TX,         acks_tx,         "ACK packets sent") \
    X(ACKS_COALESCED,  acks_coalesced,  "ACK requests answered by a later ACK or response") \
    X(OUT_OF_SEQ,      out_of_seq,      "request packets ahead of the expected PSN, dropped") \
    X(DUPLICATES,      duplicates,      "duplicate request packets (never re-executed)") \
    X(DUP_REPLAYS,     dup_replays,     "duplicate READ/atomic/FLUSH answered from a responder resource") \
    X(DUP_UNANSWERED,  dup_unanswered,  "duplicate READ/atomic whose resource was gone or did not match") \
    X(EXECUTED,        executed,        "request messages executed by the responder") \
    X(WR_COMPLETED,    wr_completed,    "send work requests completed successfully") \
    X(WR_ERRORS,       wr_errors,       "send or receive work requests completed with an error (flushes included)") \
    X(QP_ERRORS,       qp_errors,       "QPs moved to the Error state by the transport") \
    X(MSN_ERRORS,      msn_errors,      "responses whose AETH MSN went backwards or did not match the messages they acknowledge: dropped") \
    X(RX_BACKLOG_DROPS, rx_backlog_drops, "requests dropped because their QP's backlog behind a paused READ was full (RC_MAX_BACKLOG frames; the requester resends them)")

#define RNIC_DEV_COUNTERS(X) \
    X(COMMANDS,        commands,        "commands executed") \
    X(COMMAND_ERRORS,  command_errors,  "commands refused (status not OK)") \
    X(DOORBELLS,       doorbells,       "doorbell writes (SQ, RQ, CQ consumer index, CQ arm)") \
    X(DOORBELL_ERRORS, doorbell_errors, "doorbells refused: unknown object, index beyond the ring, device disabled") \
    X(WQES_FETCHED,    wqes_fetched,    "send and receive WQEs read from guest memory") \
    X(WQE_ERRORS,      wqe_errors,      "WQEs completed with a local error (bad opcode, SGE, lkey, fetch)") \
    X(CQES_WRITTEN,    cqes_written,    "completions written") \
    X(CQ_OVERFLOWS,    cq_overflows,    "CQEs that found their CQ full (the CQ goes to error)") \
    X(CQ_EVENTS,       cq_events,       "armed CQs that fired") \
    X(IRQS,            irqs,            "interrupt cause bits raised (0 -> 1)") \
    X(LOCAL_PROT_ERRORS, local_prot_errors, "SGEs refused by the lkey check") \
    X(REMOTE_VIOLATIONS, remote_violations, "remote accesses refused by the MR check (rkey, PD, bounds, access, alignment)") \
    X(DMA_ERRORS,      dma_errors,      "guest memory accesses that failed (address outside RAM)") \
    X(LINK_TX_DROPS,   link_tx_drops,   "frames dropped at the link: no link, or the device's transmit hold full") \
    X(GUEST_ERRORS,    guest_errors,    "guest errors logged") \
    X(PAYLOAD_TX_BYTES, payload_tx_bytes, "message bytes sent (first transmissions)") \
    X(PAYLOAD_RX_BYTES, payload_rx_bytes, "message bytes placed into guest memory by the responder or READ responses") \
    X(MODELED_WR_NS,   modeled_wr_ns,   "sum of the modeled latency of completed send WRs, ns") \
    X(MODELED_LINK_NS, modeled_link_ns, "modeled link busy time of frames sent, ns") \
    X(MODELED_PCIE_NS, modeled_pcie_ns, "modeled PCIe busy time (WQE/CQE/data DMA), ns") \
    X(RX_DISABLED,     rx_disabled,     "frames dropped because CTRL.ENABLE is 0") \
    X(FLUSHES,         flushes,         "FLUSH requests executed by the responder (placement done before the response)") \
    X(FLUSH_BYTES,     flush_bytes,     "bytes of the ranges FLUSH made globally visible (every placement type)") \
    X(PERSIST_BYTES,   persist_bytes,   "bytes FLUSH persistence wrote back to the RAM's backing file (msync)") \
    X(LINK_BACKPRESSURE, link_backpressure, "times the link pushed back (port ring full): the device paused sending until it had room") \
    X(LINK_TX_HELD,    link_tx_held,    "frames the link could not take at once, held by the device and sent later") \
    X(EQ_EVENTS,       eq_events,       "async events written to the event queue") \
    X(EQ_OVERFLOWS,    eq_overflows,    "async events dropped because the event queue was full (the oldest are kept)") \
    X(RX_PAUSED_DROPS, rx_paused_drops, "frames dropped while the VM was stopped (beyond the device's hold, or held across a load)") \
    X(DIRECT_READS,    direct_reads,    "READ WRs completed by a copy from the responder's RAM file, no frame sent (docs/rnic.md \"Direct path\")") \
    X(DIRECT_READ_BYTES, direct_read_bytes, "bytes those READs placed") \
    X(DIRECT_WRITES,   direct_writes,   "WRITE WRs completed by a copy into the responder's RAM file, no frame sent") \
    X(DIRECT_WRITE_BYTES, direct_write_bytes, "bytes those WRITEs wrote") \
    X(SERVED_DIRECT_READS, served_direct_reads, "READs of this node's memory that peers completed directly (read from its published table)") \
    X(SERVED_DIRECT_WRITES, served_direct_writes, "WRITEs into this node's memory that peers completed directly") \
    X(DIRECT_WAIT_STALLS, direct_wait_stalls, "seconds a table change waited for a live peer's direct WRITE in progress (its QEMU stopped or descheduled)") \
    X(NVM_WRITES,      nvm_writes,      "responder writes acknowledged into the NIC's volatile buffer for persistent memory (one per piece of a packet's payload; docs/rnic.md \"Persistent memory\")") \
    X(NVM_WRITE_BYTES, nvm_write_bytes, "bytes of those writes") \
    X(NVM_FLUSHES,     nvm_flushes,     "FLUSH persistence requests that made a range of persistent memory durable") \
    X(NVM_FLUSH_BYTES, nvm_flush_bytes, "bytes of persistent memory those FLUSHes made durable") \
    X(NVM_ERRORS,      nvm_errors,      "accesses to persistent memory that failed (the node's power cut): NAK or local error") \
    RNIC_CEIL_COUNTERS(X) \
    X(DM_ATOMICS,      dm_atomics,      "remote atomics executed on device memory (by the device, not the atomic unit)") \
    X(DM_RX_BYTES,     dm_rx_bytes,     "bytes the device wrote into device memory through an MR (remote WRITEs, READ results into a DM SGE; not atomics, not DM_COPY)") \
    X(DM_COPY_BYTES,   dm_copy_bytes,   "bytes DM_COPY moved between guest RAM and device memory") \
    RNIC_AMU_COUNTERS(X)

/* The responder's rate ceilings (docs/rnic.md "Rate ceilings": atomic-host-ns, atomic-dm-ns,
 * qp-msg-ns): modeled figures, nothing is delayed. */
#define RNIC_CEIL_COUNTERS(X) \
    X(CEIL_ATOMICS,    ceil_atomics,    "atomics through the responder's atomic serializer (CMP_SWAP, FETCH_ADD, XATOMIC)") \
    X(CEIL_ATOMICS_DELAYED, ceil_atomics_delayed, "atomics that waited for the serializer (an earlier atomic still in service)") \
    X(CEIL_ATOMIC_NS,  ceil_atomic_ns,  "modeled atomic time at the responder: wait for the serializer plus service, summed, ns") \
    X(CEIL_ATOMIC_WAIT_NS, ceil_atomic_wait_ns, "the part of ceil_atomic_ns spent waiting for the serializer, ns") \
    X(CEIL_ATOMIC_BUSY_NS, ceil_atomic_busy_ns, "modeled ns the serializer was busy (service times summed): modeled ceiling rate = ceil_atomics / this") \
    X(CEIL_MSGS_DELAYED, ceil_msgs_delayed, "request messages that waited for their QP's message-rate ceiling (qp-msg-ns)") \
    X(CEIL_MSG_WAIT_NS, ceil_msg_wait_ns, "modeled ns request messages waited for their QP's message-rate ceiling, summed") \
    X(CEIL_ACK_DELAY_NS, ceil_ack_delay_ns, "modeled ns responses and ACKs were delayed by the ceilings (both waits), summed")

/* The atomic unit's (target side of every atomic: docs/atomic-unit.md "Counters"); AMU_OPS..
 * AMU_MAX_OUTSTANDING and AMU_BYPASSES mirror the core's AMU_COUNTERS (hw/rnic/atomic_unit.h),
 * AMU_MODELED_NS, AMU_BUSY_NS and AMU_ACTIVE_NS are the device's. The AMU_* counters are the last
 * of the table (reading one runs the unit's model to the end of what it holds). Modeled figures: the unit's timing model, not the emulator's speed. */
#define RNIC_AMU_COUNTERS(X) \
    X(AMU_OPS,         amu_ops,         "atomics executed by the atomic unit (IB and extended, errors included)") \
    X(AMU_ERRORS,      amu_errors,      "atomics the unit refused (unaligned, bad op/size, address not in RAM)") \
    X(AMU_HITS,        amu_hits,        "unit cache requests that hit") \
    X(AMU_MISSES,      amu_misses,      "unit cache requests that missed (a host read)") \
    X(AMU_FORWARDS,    amu_forwards,    "operands taken from the unit's register file") \
    X(AMU_EVICTIONS,   amu_evictions,   "unit cache lines replaced") \
    X(AMU_HOST_READS,  amu_host_reads,  "modeled host read requests") \
    X(AMU_HOST_WRITES, amu_host_writes, "modeled host write requests") \
    X(AMU_WRITES_SUPPRESSED, amu_writes_suppressed, "host writes saved by rate limiting (result kept in a register)") \
    X(AMU_STALL_TAGS,  amu_stall_tags,  "host requests that waited for a tag") \
    X(AMU_STALL_BUSY,  amu_stall_busy,  "ops that waited for a busy word") \
    X(AMU_STALL_CONFLICT, amu_stall_conflict, "ops that waited for a way in their cache set") \
    X(AMU_STALL_HOSTQ, amu_stall_hostq, "ops that waited for room in the host queue") \
    X(AMU_RAW_HITS,    amu_raw_hits,    "misses that found their address in the RAW buffer") \
    X(AMU_RAW_FLUSHES, amu_raw_flushes, "RAW flushes issued (flush approach)") \
    X(AMU_RAW_FULL,    amu_raw_full,    "writes or evictions that waited for a RAW buffer entry") \
    X(AMU_MAX_OUTSTANDING, amu_max_outstanding, "most modeled host requests outstanding at once (a high-water mark: CNT_CLEAR leaves it)") \
    X(AMU_MODELED_NS,  amu_modeled_ns,  "sum over atomics of the unit's modeled time, arrival to execution, ns") \
    X(AMU_BUSY_NS,     amu_busy_ns,     "the unit's modeled clock: ns from its first arrival to its latest event (idle gaps included)") \
    X(AMU_ACTIVE_NS,   amu_active_ns,   "modeled ns the unit had work (an op or host request in it): modeled rate = ops / active") \
    X(AMU_BYPASSES,    amu_bypasses,    "unit misses that bypassed the cache (amu-conflict-bypass: no free way in the set)")

#define RNIC_COUNTER_TABLE(X) RNIC_RC_COUNTERS(X) RNIC_DEV_COUNTERS(X)

#define RNIC_CNT_X_INDEX_(N, n, d) RNIC_CNT_INDEX_##N,
#define RNIC_CNT_X_OFFSET_(N, n, d) RNIC_CNT_##N = 8 * RNIC_CNT_INDEX_##N,
#define RNIC_CNT_X_NAME_(N, n, d) #n,
enum rnic_counter_index { RNIC_COUNTER_TABLE(RNIC_CNT_X_INDEX_) RNIC_CNT_COUNT };
enum rnic_counter_offset { RNIC_COUNTER_TABLE(RNIC_CNT_X_OFFSET_) };
/* The counters' names in register order, for an initializer: { RNIC_CNT_NAMES } */
#define RNIC_CNT_NAMES RNIC_COUNTER_TABLE(RNIC_CNT_X_NAME_)

#ifdef __cplusplus
static_assert(sizeof(struct rnic_cmd) == RNIC_CMD_SIZE, "command block is 128 bytes");
static_assert(sizeof(struct rnic_cmd_modify_qp) <= 112 && sizeof(struct rnic_cmd_mr) <= 112, "params fit");
static_assert(sizeof(struct rnic_sge) == 16, "SGE is 16 bytes");
static_assert(sizeof(struct rnic_send_wqe) == 128, "send WQE is 128 bytes");
static_assert(sizeof(struct rnic_recv_wqe) == 64, "receive WQE is 64 bytes");
static_assert(sizeof(struct rnic_cqe) == 64, "CQE is 64 bytes");
static_assert(sizeof(struct rnic_eqe) == 32, "EQE is 32 bytes");
static_assert(RNIC_REG_COUNTERS + 8 * RNIC_CNT_COUNT <= RNIC_BAR_CTRL_SIZE, "counters fit BAR0");
static_assert(RNIC_BAR_DB_SIZE == 0x200000u, "BAR2 is 2 MiB");
#elif !defined(__KERNEL__)
_Static_assert(sizeof(struct rnic_cmd) == RNIC_CMD_SIZE, "command block is 128 bytes");
_Static_assert(sizeof(struct rnic_send_wqe) == 128, "send WQE is 128 bytes");
_Static_assert(sizeof(struct rnic_recv_wqe) == 64, "receive WQE is 64 bytes");
_Static_assert(sizeof(struct rnic_cqe) == 64, "CQE is 64 bytes");
_Static_assert(sizeof(struct rnic_eqe) == 32, "EQE is 32 bytes");
#endif

/* clang-format on */
#endif /* RACKEMU_RNIC_REGS_H */
