// SPDX-License-Identifier: MIT
// The RNIC core's verbs objects (rnic.h), shared by the device (rnic.cc) and its migration code
// (rnic_state.cc), which saves and validates them field by field. Internal to hw/rnic.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "rnic.h"

namespace rackemu::rnic {

// The register value of an engine QP state (RNIC_QPS_*), and the engine state of a register
// value (false: not a state the device models).
inline uint8_t engine_state(QpState s)
{
    switch (s) {
    case QpState::Reset:
        return RNIC_QPS_RESET;
    case QpState::Init:
        return RNIC_QPS_INIT;
    case QpState::Rtr:
        return RNIC_QPS_RTR;
    case QpState::Rts:
        return RNIC_QPS_RTS;
    case QpState::Error:
        return RNIC_QPS_ERR;
    }
    return RNIC_QPS_ERR;
}

inline bool qp_state_of(uint8_t v, QpState *s)
{
    switch (v) {
    case RNIC_QPS_RESET:
        *s = QpState::Reset;
        return true;
    case RNIC_QPS_INIT:
        *s = QpState::Init;
        return true;
    case RNIC_QPS_RTR:
        *s = QpState::Rtr;
        return true;
    case RNIC_QPS_RTS:
        *s = QpState::Rts;
        return true;
    case RNIC_QPS_ERR:
        *s = QpState::Error;
        return true;
    default:
        return false;
    }
}

struct Rnic::Pending {
    bool exec = false;
};

struct Rnic::Mr {
    uint32_t pdn = 0;
    uint64_t iova = 0, length = 0;
    uint32_t access = 0;
    bool phys = false;
    uint8_t page_shift = 12;
    std::vector<uint64_t> pages;
};

struct Rnic::Cq {
    uint64_t ring = 0;
    uint8_t depth_log2 = 0, vector = 0;
    uint32_t pi = 0, ci = 0, arm = 0;
    bool error = false;
    uint32_t users = 0;
};

struct Rnic::Qp {
    uint32_t index = 0, qpn = 0, pdn = 0, send_cqn = 0, recv_cqn = 0;
    uint64_t sq_ring = 0, rq_ring = 0;
    uint8_t sq_log2 = 0, rq_log2 = 0;
    uint32_t sq_pi = 0, sq_ci = 0, rq_pi = 0, rq_ci = 0;
    uint8_t state = RNIC_QPS_RESET; // as last seen (detects transport errors)
    QpAttr attr;
    uint32_t dest_node = RNIC_DEST_NODE_EXPLICIT;
    struct Wr {
        struct rnic_send_wqe wqe;
        uint64_t len = 0;
        uint64_t posted_ns = 0;
        uint32_t lerr = RNIC_LERR_NONE;
    };
    std::map<uint64_t, Wr> wrs; // by sequence number (the engine's wr_id)
    // a fetched WQE that failed its checks, waiting for earlier WRs to complete
    bool bad_held = false;
    Wr bad;
    uint32_t bad_lerr = 0;
    // the receive WQE in use (fetched on demand)
    bool rwqe_valid = false;
    struct rnic_recv_wqe rwqe;
    uint64_t rlen = 0;
    uint64_t rfirst_ns = 0;
    uint32_t rlerr = 0;
};

} // namespace rackemu::rnic
