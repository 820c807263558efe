/* SPDX-License-Identifier: MIT */
/*
 * soNUMA Remote Memory Controller (RMC) with LightSABRes: register layout, queue entries and
 * the payloads of the RMC fabric service (RKF_SVC_RMC, hw/include/rackemu/fabric_proto.h).
 *
 * Source: the SABRes paper sec. 4.1-4.2 (stream buffers, ATT, speculation bit, validate stage, odd/even
 * versions, version location given at registration), sec. 5.1-5.2 (RGP/R2P2/RCP, SABRe
 * registration and validation packets, CQ success field), Table 2 (timing). Where the seed is
 * silent: soNUMA (WQ/CQ in memory, 64-byte source unrolling, strict request-reply) and rackemu's
 * choices, documented in docs/sonuma.md. Single definition shared by the device core
 * (hw/sonuma), the QEMU glue, the Linux driver, the user library, the firmware and the tests.
 */
#ifndef RACKEMU_SONUMA_REGS_H
#define RACKEMU_SONUMA_REGS_H
/* Register and packet tables are aligned by hand: clang-format leaves them alone (docs/style.md). */
/* clang-format off */

#include "rackemu/rk_types.h" /* rk_u64, rk_u32, rk_u16, rk_u8 */

/* ---- Geometry ---- */
#define RMC_QP_COUNT           64u      /* queue pairs (one per thread; at least 64) */
#define RMC_CTX_COUNT          16u      /* contexts */
#define RMC_BLOCK_SIZE         64u      /* cache block: the unit of unrolling (sec. 5) */
#define RMC_WQE_SIZE           64u
#define RMC_CQE_SIZE           32u
#define RMC_DEPTH_LOG2_MIN     1u       /* 2 entries */
#define RMC_DEPTH_LOG2_MAX     12u      /* 4096 entries */
#define RMC_XFER_MAX           0x1000000u /* READ/WRITE length limit: 16 MiB */
#define RMC_SABRE_MAX          0x10000u /* SABRe object limit: 64 KiB (one request frame) */
#define RMC_ATT_MAX            64u      /* att-entries property limit (default 16, sec. 5.1) */
#define RMC_SB_MAX             64u      /* sb-depth property limit (default 32, sec. 5.1) */

/* ---- MMIO layout (offsets from RACKEMU_RMC_BASE) ---- */
#define RMC_QP_TABLE           0x1000u
#define RMC_QP_STRIDE          0x40u
#define RMC_QP_REG(q, r)       (RMC_QP_TABLE + (rk_u32)(q) * RMC_QP_STRIDE + (r))
#define RMC_CTX_TABLE          0x2000u
#define RMC_CTX_STRIDE         0x40u
#define RMC_CTX_REG(c, r)      (RMC_CTX_TABLE + (rk_u32)(c) * RMC_CTX_STRIDE + (r))
#define RMC_COUNTERS           0x3000u
#define RMC_DB_BASE            0x10000u
#define RMC_DB_STRIDE          0x1000u  /* one page per QP: mappable into one process */
#define RMC_DB_REG(q, r)       (RMC_DB_BASE + (rk_u32)(q) * RMC_DB_STRIDE + (r))
#define RMC_MMIO_SIZE          0x50000u

/* ---- Global registers ---- */
#define RMC_REG_ID             0x000u   /* R: RMC_ID_VALUE */
#define RMC_REG_NODE_ID        0x008u   /* R: this node */
#define RMC_REG_NODE_COUNT     0x010u   /* R: nodes in the cluster */
#define RMC_REG_QP_COUNT       0x018u   /* R: RMC_QP_COUNT */
#define RMC_REG_CTX_COUNT      0x020u   /* R: RMC_CTX_COUNT */
#define RMC_REG_ATT_ENTRIES    0x028u   /* R: ATT entries per R2P2 (sec. 5.1; property) */
#define RMC_REG_SB_DEPTH       0x030u   /* R: blocks per stream buffer (sec. 5.1; property) */
#define RMC_REG_CTRL           0x038u   /* R/W: RMC_CTRL_* */
#define RMC_CTRL_EN            (1u << 0) /* accept doorbells, serve remote requests */
#define RMC_CTRL_CNT_CLEAR     (1u << 8) /* W: zero the counters (reads as 0) */
#define RMC_REG_STATUS         0x040u   /* R: RMC_STATUS_* */
#define RMC_STATUS_SPEC        (1u << 0) /* LightSABRes speculation on (property sabre-speculation) */
#define RMC_STATUS_FABRIC_UP   (1u << 1) /* the node's fabric link is up */
#define RMC_STATUS_LLC         (1u << 2) /* the data this node serves is LLC-resident (property llc-resident) */
#define RMC_REG_IRQ_STATUS     0x048u   /* R/W1C: bit q = QP q wrote a CQE with IRQ_EN set */
#define RMC_REG_SEG_BASE       0x050u   /* R: reserved segment base (machine), 0 if none */
#define RMC_REG_SEG_SIZE       0x058u   /* R: reserved segment size */
#define RMC_REG_T_RMC_MHZ      0x060u   /* R: RMC pipeline clock (Table 2: 1 GHz) */
#define RMC_REG_T_MEM_NS       0x068u   /* R: memory access latency seen by the R2P2 (sec. 5.1: 90) */
#define RMC_REG_T_LLC_NS       0x070u   /* R: on-chip (LLC) access latency */
#define RMC_REG_T_HOP_NS       0x078u   /* R: network latency per hop (Table 2: 35) */
#define RMC_REG_T_HOPS         0x080u   /* R: hops between two nodes */
#define RMC_REG_T_LINK_GBPS    0x088u   /* R: link bandwidth, GB/s (Table 2: 100) */
#define RMC_REG_T_R2P2_GBPS    0x090u   /* R: sustained bandwidth per R2P2, GB/s (sec. 5.1: 20) */
#define RMC_REG_T_R2P2_COUNT   0x098u   /* R: R2P2s per chip (Table 2: 4) */
#define RMC_REG_T_ISSUE_CYC    0x0a0u   /* R: R2P2 cycles per block issued */
#define RMC_REG_TIMEOUT_MS     0x0a8u   /* R: time after which a pending transfer is unreachable */
#define RMC_REG_WINDOW_BLOCKS  0x0b0u   /* R: block requests in flight per destination (RGP) */
#define RMC_ID_VALUE           0x00524b524d430001ull /* "RKRMC" v1 */

/* ---- QP table: RMC_QP_REG(q, r) ---- */
#define QP_WQ_BASE             0x00u    /* R/W: guest physical, 64-byte aligned */
#define QP_CQ_BASE             0x08u    /* R/W: guest physical, 64-byte aligned */
#define QP_DEPTH_LOG2          0x10u    /* R/W: entries = 1 << value, RMC_DEPTH_LOG2_MIN..MAX */
#define QP_CTX                 0x18u    /* R/W: the context this QP's requests use */
#define QP_CTRL                0x20u    /* R/W: QP_CTRL_* */
#define QP_CTRL_EN             (1u << 0) /* set: validate and start; clear: stop, orphan in-flight */
#define QP_CTRL_IRQ_EN         (1u << 1) /* completion interrupt */
#define QP_STATUS              0x28u    /* R: QP_ST_*; bits [63:32] transfers in flight */
#define QP_ST_ERR              (1u << 0) /* stopped: WQ/CQ access failed (cannot happen once validated) */
#define QP_ST_CFG_ERR          (1u << 1) /* the last EN write was refused (see docs) */
#define QP_ST_BUSY             (1u << 2) /* transfers in flight */
#define QP_WQ_HEAD             0x30u    /* R: next WQ index the RGP fetches */
#define QP_CQ_TAIL             0x38u    /* R: next CQ index the RCP writes */

/* ---- Context table: RMC_CTX_REG(c, r) ---- */
#define CTX_BASE               0x00u    /* R/W: segment guest physical base, 64-byte aligned */
#define CTX_SIZE               0x08u    /* R/W: bytes, non-zero multiple of 64 */
#define CTX_PERM               0x10u    /* R/W: CTX_PERM_* granted to remote nodes */
#define CTX_PERM_READ          (1u << 0)
#define CTX_PERM_WRITE         (1u << 1)
#define CTX_PERM_ATOMIC        (1u << 2) /* CAS, FAA */
#define CTX_PERM_SABRE         (1u << 3) /* needs CTX_LAYOUT_VALID */
#define CTX_NODEMASK           0x18u    /* R/W: bit n = node n may access (this node included) */
#define CTX_LAYOUT             0x20u    /* R/W: LightSABRes metadata (sec. 4.2) */
#define CTX_LAYOUT_VER_OFF_MASK 0xffffu /* byte offset of the 64-bit version word, 0..56, 8-aligned */
#define CTX_LAYOUT_VALID       (1u << 16)
#define CTX_CTRL               0x28u    /* R/W: CTX_CTRL_* */
#define CTX_CTRL_VALID         (1u << 0) /* set: validate and expose; clear: withdraw, orphan */
#define CTX_STATUS             0x30u    /* R: CTX_ST_* */
#define CTX_ST_CFG_ERR         (1u << 0)
#define CTX_KEY                0x38u    /* W (reads 0): access key; requests carry it, the destination
                                         * serves only those whose key equals its own (docs/sonuma.md) */

/* ---- Doorbell page of QP q: RMC_DB_REG(q, r) (user-mappable) ---- */
#define DB_WQ_TAIL             0x00u    /* W: producer index (free-running u32); R: last written */
#define DB_CQ_HEAD             0x08u    /* W: consumer index; R: last written */
#define DB_WQ_HEAD             0x10u    /* R: mirror of QP_WQ_HEAD */
#define DB_CQ_TAIL             0x18u    /* R: mirror of QP_CQ_TAIL */
#define DB_STATUS              0x20u    /* R: mirror of QP_STATUS */

/* ---- Counters: RMC_COUNTERS + RMC_CNT_* (R, 64-bit) ----
 * The one list of the RMC's counters, in register order (counter i at RMC_COUNTERS + 8 * i):
 * X(NAME, name, description). From it come the offsets RMC_CNT_NAME, RMC_CNT_COUNT, the guest's
 * names (RMC_CNT_NAMES: the driver's sysfs `counters`, `rmc counters`), the core's storage, and the
 * tables that the tests and the docs read (tests/e2e/qtest.py reads it through the compiler). */
#define RMC_COUNTER_TABLE(X) \
    X(WQE_FETCHED,    wqe_fetched,    "WQEs fetched from the work queues") \
    X(CQE_WRITTEN,    cqe_written,    "CQEs written to the completion queues") \
    X(OP_READ,        op_read,        "requests issued by this node, per opcode: read") \
    X(OP_WRITE,       op_write,       "requests issued: write") \
    X(OP_CAS,         op_cas,         "requests issued: compare-and-swap") \
    X(OP_FAA,         op_faa,         "requests issued: fetch-and-add") \
    X(OP_SABRE,       op_sabre,       "requests issued: SABRe") \
    X(ST_OK,          st_ok,          "completions, per status: OK") \
    X(ST_ABORT,       st_abort,       "completions: SABRe aborted") \
    X(ST_REMOTE,      st_remote,      "completions: remote access error") \
    X(ST_BAD,         st_bad,         "completions: bad request") \
    X(ST_UNREACH,     st_unreach,     "completions: UNREACHABLE and UNCERTAIN") \
    X(TIMEOUTS,       timeouts,       "requests that timed out") \
    X(REQ_FRAMES,     req_frames,     "request frames sent") \
    X(REQ_BLOCKS,     req_blocks,     "64-byte block requests sent (per-block semantics)") \
    X(REPLY_BLOCKS,   reply_blocks,   "64-byte block replies received") \
    X(STRAY,          stray,          "frames for no pending request (late, orphaned) or from another node " \
                                      "than the request's destination (dropped)") \
    X(SRV_RD_BLOCKS,  srv_rd_blocks,  "R2P2: blocks read for other nodes") \
    X(SRV_WR_BLOCKS,  srv_wr_blocks,  "R2P2: blocks written for other nodes") \
    X(SRV_ATOMICS,    srv_atomics,    "R2P2: atomics executed for other nodes") \
    X(SRV_REFUSED,    srv_refused,    "R2P2: remote access errors answered") \
    X(SRV_MALFORMED,  srv_malformed,  "R2P2: malformed requests answered") \
    X(SABRE_REG,      sabre_reg,      "R2P2: SABRes registered in the ATT") \
    X(SABRE_OK,       sabre_ok,       "R2P2: SABRes completed without conflict") \
    X(ABORT_LOCKED,   abort_locked,   "SABRe aborts: version odd when read") \
    X(ABORT_WINDOW,   abort_window,   "SABRe aborts: invalidation of a read block inside the window") \
    X(ABORT_VALIDATE, abort_validate, "SABRe aborts: validate stage read another version") \
    X(VALIDATE_STAGE, validate_stage, "base-block invalidations that led to the validate stage") \
    X(INVAL_IGNORED,  inval_ignored,  "invalidations after the version was read (not base)") \
    X(ATT_STALLS,     att_stalls,     "registrations that waited for a free ATT entry") \
    X(SB_STALLS,      sb_stalls,      "unroll stopped: stream buffer full in the window") \
    X(SPEC_BLOCKS,    spec_blocks,    "blocks read speculatively (inside the window)") \
    X(MODELED_NS,     modeled_ns,     "sum of CQE modeled_ns") \
    X(GUEST_ERRORS,   guest_errors,   "guest errors logged") \
    X(DIRECT_REQS,    direct_reqs,    "requests to other nodes completed on the direct path (the owner's " \
                                      "RAM read in place, no frame)") \
    X(FABRIC_REQS,    fabric_reqs,    "requests to other nodes sent over the fabric")

#define RMC_CNT_X_INDEX_(N, n, d) RMC_CNT_INDEX_##N,
#define RMC_CNT_X_OFFSET_(N, n, d) RMC_CNT_##N = 8 * RMC_CNT_INDEX_##N,
#define RMC_CNT_X_NAME_(N, n, d) #n,
enum rmc_counter_index { RMC_COUNTER_TABLE(RMC_CNT_X_INDEX_) RMC_CNT_COUNT };
enum rmc_counter_offset { RMC_COUNTER_TABLE(RMC_CNT_X_OFFSET_) };
/* The counters' names in register order, for an initializer: { RMC_CNT_NAMES } */
#define RMC_CNT_NAMES RMC_COUNTER_TABLE(RMC_CNT_X_NAME_)

/* ---- Work Queue entry (64 bytes, written by software) ---- */
#define RMC_OP_READ            1u       /* remote -> local buffer */
#define RMC_OP_WRITE           2u       /* local buffer -> remote */
#define RMC_OP_CAS             3u       /* 8-byte compare-and-swap on the remote word */
#define RMC_OP_FAA             4u       /* 8-byte fetch-and-add on the remote word */
#define RMC_OP_SABRE           5u       /* atomic object read (sec. 3-5) */
#define RMC_WQE_F_NOSPEC       (1u << 0) /* SABRe without speculation (sec. 7.1 variant) */
struct rmc_wqe {
    rk_u8  op;          /* 0x00 RMC_OP_* */
    rk_u8  flags;       /* 0x01 RMC_WQE_F_*; other bits must be 0 */
    rk_u16 node;        /* 0x02 destination node (this node allowed) */
    rk_u32 length;      /* 0x04 READ/WRITE 1..RMC_XFER_MAX, SABRE 8..RMC_SABRE_MAX, CAS/FAA 8 */
    rk_u64 wr_id;       /* 0x08 opaque, copied into the CQE */
    rk_u64 remote_off;  /* 0x10 offset in the destination's segment; SABRE 64-, CAS/FAA 8-aligned */
    rk_u64 local_off;   /* 0x18 offset in this node's segment of the same context (READ, WRITE, SABRE) */
    rk_u64 operand0;    /* 0x20 CAS: expected value; FAA: addend */
    rk_u64 operand1;    /* 0x28 CAS: new value */
    rk_u64 reserved[2]; /* 0x30 must be 0 */
};

/* ---- Completion Queue entry (32 bytes, written by the RCP; flags byte last) ---- */
#define RMC_ST_OK              0u
#define RMC_ST_SABRE_ABORT     1u       /* the object was not read atomically (sec. 5.2 success field) */
#define RMC_ST_REMOTE_ACCESS   2u       /* destination refused: context, bounds, permission */
#define RMC_ST_BAD_REQUEST     3u       /* malformed WQE; nothing was sent */
#define RMC_ST_UNREACHABLE     4u       /* node absent, died, link down, congested, timed out: not applied */
#define RMC_ST_UNCERTAIN       5u       /* WRITE/CAS/FAA failed as UNREACHABLE after a request frame left:
                                         * the destination may have applied it, wholly or partly */
#define RMC_INFO_NONE          0u
#define RMC_INFO_LOCKED        1u       /* SABRE_ABORT: version odd */
#define RMC_INFO_WINDOW        2u       /* SABRE_ABORT: a read block invalidated inside the window */
#define RMC_INFO_VALIDATE      3u       /* SABRE_ABORT: validate stage read another version */
#define RMC_INFO_NO_CTX        16u      /* REMOTE_ACCESS: context not valid on the destination */
#define RMC_INFO_BOUNDS        17u      /* REMOTE_ACCESS: beyond the destination's segment */
#define RMC_INFO_PERM          18u      /* REMOTE_ACCESS: operation not permitted */
#define RMC_INFO_DENIED        19u      /* REMOTE_ACCESS: source node not in CTX_NODEMASK */
#define RMC_INFO_NO_LAYOUT     20u      /* REMOTE_ACCESS: SABRe on a context without CTX_LAYOUT */
#define RMC_INFO_BAD_KEY       21u      /* REMOTE_ACCESS: the request's key is not the context's CTX_KEY */
#define RMC_INFO_BAD_OP        32u      /* BAD_REQUEST */
#define RMC_INFO_BAD_LEN       33u
#define RMC_INFO_UNALIGNED     34u
#define RMC_INFO_LOCAL_BOUNDS  35u      /* local buffer outside this node's segment */
#define RMC_INFO_BAD_NODE      36u
#define RMC_INFO_RESERVED      37u      /* reserved field or flag set */
#define RMC_INFO_NO_LOCAL_CTX  38u      /* the QP's context is not valid here */
#define RMC_INFO_NOROUTE       48u      /* UNREACHABLE */
#define RMC_INFO_NODE_GONE     49u
#define RMC_INFO_LINK_DOWN     50u
#define RMC_INFO_CONGESTED     51u
#define RMC_INFO_TIMEOUT       52u
#define RMC_INFO_BAD_REPLY     53u      /* the destination's answer did not add up */
#define RMC_CQE_F_PHASE        (1u << 0)
#define RMC_CQE_F_VALIDATED    (1u << 1) /* SABRe went through the validate stage */
#define RMC_CQE_F_NOSPEC       (1u << 2) /* SABRe was served without speculation */
struct rmc_cqe {
    rk_u64 wr_id;       /* 0x00 from the WQE */
    rk_u64 value;       /* 0x08 CAS/FAA: old value; SABRE: version read at the window close */
    rk_u32 modeled_ns;  /* 0x10 timing model latency, issue to completion (saturating) */
    rk_u32 wall_ns;     /* 0x14 VM time WQE fetch -> CQE write (saturating) */
    rk_u16 wq_index;    /* 0x18 WQ slot of the request */
    rk_u8  op;          /* 0x1a RMC_OP_* of the request */
    rk_u8  status;      /* 0x1b RMC_ST_* */
    rk_u8  info;        /* 0x1c RMC_INFO_* */
    rk_u8  reserved[2]; /* 0x1d */
    rk_u8  flags;       /* 0x1f RMC_CQE_F_*; written last, release */
};

/* ---- Timing defaults (Table 2, sec. 5.1; device properties) ---- */
#define RMC_DEF_RMC_MHZ        1000u
#define RMC_DEF_MEM_NS         90u      /* 50 ns DRAM + on-chip traversal: sec. 5.1's 90 ns */
#define RMC_DEF_LLC_NS         10u
#define RMC_DEF_HOP_NS         35u
#define RMC_DEF_HOPS           1u
#define RMC_DEF_LINK_GBPS      100u
#define RMC_DEF_R2P2_GBPS      20u
#define RMC_DEF_R2P2_COUNT     4u
#define RMC_DEF_ISSUE_CYC      1u
#define RMC_DEF_PKT_HDR        16u      /* bytes of header per block packet (serialisation) */
#define RMC_DEF_ATT_ENTRIES    16u
#define RMC_DEF_SB_DEPTH       32u
#define RMC_DEF_WINDOW_BLOCKS  1024u

/* ---- Fabric service RKF_SVC_RMC (payloads; frame header in fabric_proto.h) ----
 * A REQ frame carries one request batch and is answered by zero or more MSG frames
 * (RKF_OP_RMC_DATA, same tag) and then exactly one REPLY (rkf_rmc_done). */
#define RKF_OP_RMC_READ        1u       /* REQ: rkf_rmc_req, len <= RMC_WIRE_READ_MAX */
#define RKF_OP_RMC_WRITE       2u       /* REQ: rkf_rmc_req + len data bytes, len <= RMC_WIRE_DATA_MAX */
#define RKF_OP_RMC_CAS         3u       /* REQ: rkf_rmc_req + rkf_rmc_atomic, len 8 */
#define RKF_OP_RMC_FAA         4u       /* REQ: rkf_rmc_req + rkf_rmc_atomic, len 8 */
#define RKF_OP_RMC_SABRE       5u       /* REQ: registration + all block requests of one SABRe */
#define RKF_OP_RMC_DATA        6u       /* MSG destination -> source: rkf_rmc_data + data */
#define RMC_WIRE_DATA_MAX      192u     /* data bytes per frame: 3 blocks */
#define RMC_WIRE_READ_MAX      8192u    /* bytes requested by one READ frame: 128 blocks */
#define RKF_RMC_F_REG          (1u << 0) /* SABRe registration packet precedes the block requests */
#define RKF_RMC_F_NOSPEC       (1u << 1) /* serve this SABRe without speculation */
struct rkf_rmc_req {
    rk_u16 ctx;         /* context on the destination */
    rk_u16 qp;          /* source QP: the paper's RGP id */
    rk_u32 xfer;        /* source transfer id; (src node, qp, xfer) is the SABRe id (sec. 5.1) */
    rk_u64 off;         /* byte offset in the destination's segment */
    rk_u32 len;         /* bytes covered by this frame */
    rk_u16 nblocks;     /* 64-byte block requests carried (= blocks covered by [off, off+len)) */
    rk_u16 flags;       /* RKF_RMC_F_* */
    rk_u64 key;         /* the source's CTX_KEY of ctx: the destination serves it only if equal */
};
struct rkf_rmc_atomic {
    rk_u64 operand0;    /* CAS expected / FAA addend */
    rk_u64 operand1;    /* CAS new value */
};
#define RKF_RMC_DF_ABORTED     (1u << 0) /* blocks answered without data after a SABRe abort */
struct rkf_rmc_data {
    rk_u32 off;         /* offset of the chunk within the request frame's range */
    rk_u16 len;         /* data bytes that follow, 0..RMC_WIRE_DATA_MAX (0 if ABORTED) */
    rk_u16 nblocks;     /* block replies this chunk stands for */
    rk_u32 flags;       /* RKF_RMC_DF_* */
    rk_u32 reserved;
};
#define RKF_RMC_RF_VALIDATED   (1u << 0)
#define RKF_RMC_RF_NOSPEC      (1u << 1)
#define RKF_RMC_RF_LLC         (1u << 2) /* the destination's data is LLC-resident: the source's model */
struct rkf_rmc_done {
    rk_u8  status;      /* RMC_ST_OK, SABRE_ABORT, REMOTE_ACCESS, BAD_REQUEST */
    rk_u8  info;        /* RMC_INFO_* */
    rk_u16 flags;       /* RKF_RMC_RF_* */
    rk_u32 nblocks;     /* block replies of this frame in total (data chunks + this reply) */
    rk_u64 value;       /* CAS/FAA old value; SABRe version */
    rk_u32 r2p2_ns;     /* SABRe: modeled time at the destination, registration -> validation */
    rk_u32 abort_block; /* SABRe abort: block index of the abort */
    rk_u64 reserved;
};

/* ---- device-tree binding (where the board puts the device: rackemu/board.h) ---- */
#define RACKEMU_RMC_COMPAT     "rackemu,sonuma-rmc"
#define RACKEMU_RMC_SEG_COMPAT "rackemu,rmc-segment"

#ifdef __cplusplus
static_assert(RMC_CNT_COUNT == 36, "RMC_IOC_COUNTERS (sonuma_uapi.h) carries 36 counters");
static_assert(sizeof(struct rmc_wqe) == RMC_WQE_SIZE, "WQE is 64 bytes");
static_assert(sizeof(struct rmc_cqe) == RMC_CQE_SIZE, "CQE is 32 bytes");
static_assert(sizeof(struct rkf_rmc_req) == 32 && sizeof(struct rkf_rmc_done) == 32, "wire");
static_assert(sizeof(struct rkf_rmc_data) + RMC_WIRE_DATA_MAX <= 224, "a data chunk fits a slot");
#elif !defined(__KERNEL__)
_Static_assert(RMC_CNT_COUNT == 36, "RMC_IOC_COUNTERS (sonuma_uapi.h) carries 36 counters");
_Static_assert(sizeof(struct rmc_wqe) == RMC_WQE_SIZE, "WQE is 64 bytes");
_Static_assert(sizeof(struct rmc_cqe) == RMC_CQE_SIZE, "CQE is 32 bytes");
#endif

/* clang-format on */
#endif /* RACKEMU_SONUMA_REGS_H */
