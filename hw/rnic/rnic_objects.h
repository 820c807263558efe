// SPDX-License-Identifier: MIT
// The RNIC core's internal types (rnic.h): the verbs objects, whose state rnic_state.h
// describes, the atomic unit's host, and the helpers
// the core's files (rnic*.cc, one per concern: rnic.cc lists them) share. Internal to hw/rnic.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
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

// A ring's depth_log2 (CQ, QP rings, the event queue): RNIC_DEPTH_LOG2_MIN..MAX.
inline bool valid_depth(uint8_t l)
{
    return l >= RNIC_DEPTH_LOG2_MIN && l <= RNIC_DEPTH_LOG2_MAX;
}

// A path MTU the device accepts (IBA's 256..4096).
inline bool valid_mtu(uint32_t m)
{
    return m == 256 || m == 512 || m == 1024 || m == 2048 || m == 4096;
}

// The CQE status (RNIC_WC_*) of an engine status.
inline uint8_t wc_status(WcStatus s)
{
    switch (s) {
    case WcStatus::Success:
        return RNIC_WC_SUCCESS;
    case WcStatus::LocLenErr:
        return RNIC_WC_LOC_LEN_ERR;
    case WcStatus::LocQpOpErr:
        return RNIC_WC_LOC_QP_OP_ERR;
    case WcStatus::LocProtErr:
        return RNIC_WC_LOC_PROT_ERR;
    case WcStatus::WrFlushErr:
        return RNIC_WC_WR_FLUSH_ERR;
    case WcStatus::BadRespErr:
        return RNIC_WC_BAD_RESP_ERR;
    case WcStatus::RemInvReqErr:
        return RNIC_WC_REM_INV_REQ_ERR;
    case WcStatus::RemAccessErr:
        return RNIC_WC_REM_ACCESS_ERR;
    case WcStatus::RemOpErr:
        return RNIC_WC_REM_OP_ERR;
    case WcStatus::RetryExcErr:
        return RNIC_WC_RETRY_EXC_ERR;
    case WcStatus::RnrRetryExcErr:
        return RNIC_WC_RNR_RETRY_EXC_ERR;
    }
    return RNIC_WC_LOC_QP_OP_ERR;
}

struct Rnic::Pending {
    bool exec = false;
};

// The verbs objects: their state is rnic_state.h's (one list each), the rest is bookkeeping.
struct Rnic::Mr : MrArch {
    mutable int8_t nvm = -1; // a page in persistent memory (nvm_mr): 1, 0, -1 not asked yet
};

struct Rnic::Cq : CqArch {
    uint32_t users = 0;
};

struct Rnic::Qp : QpArch {
    uint32_t qpn = 0;
    QpAttr attr; // the engine's, as last modified
    struct Wr : WrArch {};
    std::map<uint64_t, Wr> wrs; // by sequence number (the engine's wr_id)
    Wr bad;                     // bad_held: the WQE that failed its checks
    uint64_t ceil_free_ns = 0;  // the QP's message-rate ceiling: when it takes the next request (model)
};

// Rnic::mr_walk (rnic.h): the pieces of [va, va + len) by the MR's page list.
template <typename F> bool Rnic::mr_walk(const Mr &m, uint64_t va, uint64_t len, F &&piece)
{
    if (m.phys) return piece(va, len);
    const uint64_t ps = 1ull << m.page_shift;
    const uint64_t base = m.iova & ~(ps - 1);
    while (len) {
        const uint64_t rel = va - base;
        const uint64_t pg = rel >> m.page_shift, in = rel & (ps - 1);
        if (pg >= m.pages.size()) return false;
        const uint64_t n = std::min(len, ps - in);
        if (!piece(m.pages[pg] + in, n)) return false;
        va += n;
        len -= n;
    }
    return true;
}

// The unit's host: guest RAM by guest-physical address. amo() maps the word and performs one
// host atomic on it (atomic with the guest CPUs' own atomics: TCG executes those as host
// atomics); a word that cannot be mapped (not plain RAM) is read, computed and written through
// DMA, which is atomic only among the device's own atomics, and counted as a guest error.
class Rnic::AmuDev : public AmuHost {
public:
    explicit AmuDev(Rnic &d) : d_(d) {}
    bool valid(uint64_t addr, uint32_t len) override { return d_.probe_ram(addr, len); }
    uint64_t amo(uint64_t addr, uint8_t size, uint8_t op, uint64_t operand, uint64_t compare,
                 uint64_t mask) override
    {
        uint64_t maplen = size;
        void *p = d_.host_.dma_map(addr, maplen, true);
        if (p && maplen >= size && (reinterpret_cast<uintptr_t>(p) & (size - 1)) == 0) {
            const uint64_t old = amo_host_atomic(p, size, op, operand, compare, mask);
            d_.host_.dma_unmap(p, maplen, true, size);
            return old;
        }
        if (p) d_.host_.dma_unmap(p, maplen, true, 0);
        d_.guest_error(
            "atomic unit: the word at 0x%llx cannot be mapped: executed through DMA, not "
            "atomic with the CPUs' atomics",
            (unsigned long long)addr);
        uint64_t old = 0;
        d_.dma(addr, &old, size, false);
        uint64_t nv = amo_alu(op, size, old, operand, compare, mask);
        d_.dma(addr, &nv, size, true);
        return old;
    }
    uint64_t read_word(uint64_t addr) override
    {
        uint64_t v = 0;
        d_.nvm_rw(addr, reinterpret_cast<uint8_t *>(&v), 8, false);
        return v;
    }
    void write_word(uint64_t addr, uint64_t value) override
    {
        d_.nvm_rw(addr, reinterpret_cast<uint8_t *>(&value), 8, true);
    }
    // The model reached an operation's execution (amu_exec executed its value at arrival).
    void complete(const AmoResult &r) override
    {
        d_.ctr_.amu_modeled_ns += (std::max(r.done_ps, r.arrival_ps) - r.arrival_ps) / 1000;
    }
    void guest_error(const std::string &msg) override { d_.guest_error("%s", msg.c_str()); }

private:
    Rnic &d_;
};

} // namespace rackemu::rnic
