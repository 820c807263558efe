// SPDX-License-Identifier: MIT
// The RNIC core's verbs objects (rnic.h), shared by the device (rnic.cc) and its migration code
// (rnic_state.cc), which saves and validates them field by field. Internal to hw/rnic.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "rnic.h"

namespace rackemu::rnic {

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
