// SPDX-License-Identifier: MIT
//
// The RNIC's architectural state for migration (docs/rnic.md "Migration"), described once
// (hw/core/state.h): the device's verbs objects below and the RC engine's QP
// (rc_qp.h: RC_QP_STATE, RC_SEND_ENTRY_STATE, RC_RESOURCE_STATE; rc.h: RC_QP_ATTR_STATE,
// RC_SEND_WR_STATE) are these structs, so a new field is one line of its list. The saved state
// (RnicSnapshot) is the fixed part (registers, bitmaps, counters, the event queue) and lists of
// records, each naming the object it belongs to (an MR, CQ or QP index) beside the object's
// state; the core's save() fills it, load() validates all of it before anything changes
// (rnic_state.cc). Byte order and bounds are StateOut/StateIn's.
//
// Not here, by design: frames on the wire or held for backpressure, READ responses paused by
// backpressure and the requests queued behind them, the timers' deadlines (re-armed at load),
// the atomic unit's cache (write-through: invalidated at load) and the device's properties
// (configuration, not state).
#pragma once

#include <cstdint>
#include <vector>

#include "rackemu/rnic_regs.h"
#include "rnic_capi.h"
#include "rc_qp.h"
#include "state.h"

namespace rackemu::rnic {

// Bump RK_RNIC_STATE_VERSION (rnic_capi.h) with every change of the saved state.
constexpr uint32_t kRnicStateVersion = RK_RNIC_STATE_VERSION;

// A memory region (its page list: none for a physical MR).
#define RNIC_MR_STATE(X) \
    X(uint32_t, pdn, 0) \
    X(uint64_t, iova, 0) \
    X(uint64_t, length, 0) \
    X(uint32_t, access, 0) \
    X(bool, phys, false) \
    X(uint8_t, page_shift, 12) \
    X(std::vector<uint64_t>, pages, {}) \
    X(uint32_t, dm, 0)     /* over device memory: the allocation's id (1..RNIC_MAX_DM), else 0 */ \
    X(uint64_t, dm_off, 0) /* device-memory offset of byte iova (dm != 0) */
struct MrArch {
    RK_STATE_FIELDS_INIT(RNIC_MR_STATE)
};

#define RNIC_CQ_STATE(X) \
    X(uint64_t, ring, 0) \
    X(uint8_t, depth_log2, 0) \
    X(uint8_t, vector, 0) \
    X(uint32_t, pi, 0) \
    X(uint32_t, ci, 0) \
    X(uint32_t, arm, 0) \
    X(bool, error, false)
struct CqArch {
    RK_STATE_FIELDS_INIT(RNIC_CQ_STATE)
};

// The device's half of a QP (the engine's: RcQpArch; its attributes are the engine's).
#define RNIC_QP_STATE(X) \
    X(uint32_t, index, 0) \
    X(uint32_t, pdn, 0) \
    X(uint32_t, send_cqn, 0) \
    X(uint32_t, recv_cqn, 0) \
    X(uint64_t, sq_ring, 0) \
    X(uint64_t, rq_ring, 0) \
    X(uint8_t, sq_log2, 0) \
    X(uint8_t, rq_log2, 0) \
    X(uint32_t, sq_pi, 0) \
    X(uint32_t, sq_ci, 0) \
    X(uint32_t, rq_pi, 0) \
    X(uint32_t, rq_ci, 0) \
    X(uint8_t, state, RNIC_QPS_RESET) /* as last seen (detects transport errors) */ \
    X(uint32_t, dest_node, RNIC_DEST_NODE_EXPLICIT) \
    X(bool, bad_held, false) /* a fetched WQE failed its checks, waits for earlier WRs */ \
    X(uint32_t, bad_lerr, 0) \
    X(bool, rwqe_valid, false) /* the receive WQE in use (fetched on demand) */ \
    X(StatePod<struct rnic_recv_wqe>, rwqe, {}) \
    X(uint64_t, rlen, 0) \
    X(uint64_t, rfirst_ns, 0) \
    X(uint32_t, rlerr, 0)
struct QpArch {
    RK_STATE_FIELDS_INIT(RNIC_QP_STATE)
};

// A send WR the device fetched and has not completed.
#define RNIC_WR_STATE(X) \
    X(StatePod<struct rnic_send_wqe>, wqe, {}) \
    X(uint64_t, len, 0) \
    X(uint64_t, posted_ns, 0) \
    X(uint32_t, lerr, RNIC_LERR_NONE)
struct WrArch {
    RK_STATE_FIELDS_INIT(RNIC_WR_STATE)
};

// ---- the saved state: the fixed part and the records ----

// The fixed part: registers, bitmaps, counters (the engine's then the device's,
// RNIC_COUNTER_TABLE order; what the guest reads is counter - cnt_base), the event queue
// (RNIC_REG_EQ_*) and the port state its events report.
#define RNIC_FIXED_STATE(X) \
    X(uint32_t, ctrl, 0) \
    X(uint32_t, cmd_addr_lo, 0) \
    X(uint32_t, cmd_addr_hi, 0) \
    X(uint32_t, cmd_status, 0) \
    X(uint32_t, cmd_count, 0) \
    X(uint32_t, int_status, 0) \
    X(uint32_t, int_enable, 0) \
    X(uint32_t, model_hi_latch, 0) \
    X(uint32_t, irq_lines, 0) /* bit v: interrupt line v's level */ \
    X(Words<RNIC_BITMAP_WORDS(RNIC_MAX_CQ)>, cq_events, {}) \
    X(Words<RNIC_BITMAP_WORDS(RNIC_MAX_QP)>, qp_errors, {}) \
    X(Words<RNIC_BITMAP_WORDS(RNIC_MAX_CQ)>, cq_errors, {}) \
    X(Words<RNIC_BITMAP_WORDS(RNIC_MAX_PD)>, pd_valid, {}) \
    X(Bytes<RNIC_MAX_MR>, mr_tag, {}) /* key byte of every MR slot (the next MR's key follows it) */ \
    X(Words<RNIC_CNT_COUNT>, counters, {}) \
    X(Words<RNIC_CNT_COUNT>, cnt_base, {}) \
    X(uint64_t, next_seq, 1) /* the next send WR's sequence number */ \
    X(uint64_t, eq_base, 0) \
    X(uint32_t, eq_ctrl, 0) \
    X(uint32_t, eq_pi, 0) \
    X(uint32_t, eq_ci, 0) \
    X(uint32_t, eq_seq, 0) \
    X(uint32_t, eq_status, 0) \
    X(bool, eq_armed, false) \
    X(bool, link_up, true)
struct RnicFixed {
    RK_STATE_FIELDS_INIT(RNIC_FIXED_STATE)
};

#define RNIC_MR_REC(X) X(uint32_t, index, 0) X(MrArch, mr, {})
struct MrRec {
    RK_STATE_FIELDS_INIT(RNIC_MR_REC)
};
// A device-memory allocation (ALLOC_DM): its id is index + 1.
#define RNIC_DM_REC(X) X(uint32_t, index, 0) X(uint64_t, off, 0) X(uint64_t, len, 0)
struct DmRec {
    RK_STATE_FIELDS_INIT(RNIC_DM_REC)
};
#define RNIC_CQ_REC(X) X(uint32_t, index, 0) X(CqArch, cq, {})
struct CqRec {
    RK_STATE_FIELDS_INIT(RNIC_CQ_REC)
};
// A QP: the device's half, the engine's, and how many responder resources it has.
#define RNIC_QP_REC(X) X(QpArch, dev, {}) X(RcQpArch, rc, {}) X(uint32_t, n_res, 0)
struct QpRec {
    RK_STATE_FIELDS_INIT(RNIC_QP_REC)
};
// A device WR: seq is the engine's wr_id; bad: the QP's held failed WQE (seq 0).
#define RNIC_WR_REC(X) X(uint32_t, qp_index, 0) X(uint64_t, seq, 0) X(bool, bad, false) X(WrArch, wr, {})
struct WrRec {
    RK_STATE_FIELDS_INIT(RNIC_WR_REC)
};
// An entry of a QP's send queue in the engine (posted, not completed), in queue order.
#define RNIC_SQE_REC(X) X(uint32_t, qp_index, 0) X(SendEntry, e, {})
struct SqeRec {
    RK_STATE_FIELDS_INIT(RNIC_SQE_REC)
};
// A responder resource (slot of the QP's max_dest_rd_atomic ring): what answers a duplicate
// READ, atomic, FLUSH or ATOMIC WRITE (an atomic's saved original value).
#define RNIC_RES_REC(X) X(uint32_t, qp_index, 0) X(uint32_t, slot, 0) X(Resource, r, {})
struct ResRec {
    RK_STATE_FIELDS_INIT(RNIC_RES_REC)
};

// The whole state, as saved (one string: StateOut) and loaded (StateIn, bounded by kListMax).
#define RNIC_SNAPSHOT(X) \
    X(RnicFixed, st, {}) \
    X(std::vector<MrRec>, mr, {}) \
    X(std::vector<CqRec>, cq, {}) \
    X(std::vector<QpRec>, qp, {}) \
    X(std::vector<WrRec>, wr, {}) \
    X(std::vector<SqeRec>, sqe, {}) \
    X(std::vector<ResRec>, res, {}) \
    X(std::vector<DmRec>, dm, {}) \
    X(std::vector<uint64_t>, dm_mem, {}) /* the device memory's contents, dm-size / 8 words */
struct RnicSnapshot {
    RK_STATE_FIELDS_INIT(RNIC_SNAPSHOT)
};

// The longest list a state may hold: the page lists of all MRs together (REG_MR enforces it,
// so every state that saves restores); every other list is shorter (WRs: at most one per SQ
// slot, RNIC_MAX_QP << RNIC_DEPTH_LOG2_MAX == RNIC_MR_TOTAL_PAGES).
constexpr uint32_t kListMax = RNIC_MR_TOTAL_PAGES;
static_assert((uint64_t(RNIC_MAX_QP) << RNIC_DEPTH_LOG2_MAX) <= kListMax, "WR records beyond the list bound");
static_assert(RNIC_DM_SIZE_MAX / 8 <= kListMax, "device memory beyond the list bound");
// The largest state of a full device (every object, every list at its bound; a struct's size
// bounds what it saves): what the adapter accepts to load.
constexpr uint64_t kWrMax = uint64_t(RNIC_MAX_QP) << RNIC_DEPTH_LOG2_MAX;
constexpr uint64_t kStateMax = sizeof(RnicFixed) + 7 * 4 + uint64_t(RNIC_MAX_MR) * sizeof(MrRec) +
                               uint64_t(RNIC_MR_TOTAL_PAGES) * 8 + uint64_t(RNIC_MAX_CQ) * sizeof(CqRec) +
                               uint64_t(RNIC_MAX_QP) * sizeof(QpRec) + kWrMax * sizeof(WrRec) +
                               kWrMax * sizeof(SqeRec) + uint64_t(RNIC_MAX_QP) * 64 * sizeof(ResRec) +
                               uint64_t(RNIC_MAX_DM) * sizeof(DmRec) + RNIC_DM_SIZE_MAX + 2 * 4;

} // namespace rackemu::rnic
