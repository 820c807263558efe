// SPDX-License-Identifier: MIT
//
// The RNIC's asynchronous event queue (docs/rnic.md "Async events"; RNIC_REG_EQ_* and struct
// rnic_eqe in rackemu/rnic_regs.h): events that belong to no work request, as verbs report them
// through ibv_get_async_event, written into one ring in guest RAM.
//   EQ_BASE, EQ_CTRL.ENABLE -> eq_write_ctrl checks the ring (depth, RAM) -> ENABLED (PI = CI =
//   seq = 0) -> eq_event writes an entry, then its owner byte last (as a CQE), and raises the
//   EQ's vector if EQ_ARM armed it -> the driver consumes by the owner bit, writes EQ_CI.
// Sources: the engine's QP events (qp_event: QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST, IBA
// Vol 1 11.6.3 for COMM_EST), a bad doorbell or WQE (qp_fail, rnic_pipeline.cc), a CQ in error
// (write_cqe), the port's link (set_link, rnic_link.cc). The EQ's registers are rows of the
// register table (rnic.cc); its whole state is RnicEq (rnic.h), which migration carries.
//
// Threading: everything here runs with mu_ held, inside one of the device's entry points.
//
// Caveat: a full ring keeps the oldest events and drops the newest (counted in eq_overflows,
// EQ_STATUS.OVERFLOW, a gap in seq): the device's own policy, documented with the EQ.
#include <cstddef>

#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

void Rnic::qp_event(uint32_t qpn, RcEvent ev, WcStatus why, uint8_t syndrome)
{
    switch (ev) {
    case RcEvent::QpFatal:
        return eq_event(RNIC_EV_QP_FATAL, qpn, wc_status(why));
    case RcEvent::QpReqErr:
        return eq_event(RNIC_EV_QP_REQ_ERR, qpn, syndrome);
    case RcEvent::QpAccessErr:
        return eq_event(RNIC_EV_QP_ACCESS_ERR, qpn, syndrome);
    case RcEvent::CommEst:
        return eq_event(RNIC_EV_COMM_EST, qpn, 0);
    case RcEvent::None:
        return;
    }
}

// Write one event; a full ring drops it (the oldest are kept) and counts it.
void Rnic::eq_event(uint8_t type, uint32_t element, uint32_t detail)
{
    if (!(eq_.ctrl & RNIC_EQ_CTRL_ENABLE)) return;
    const uint8_t log2 = uint8_t((eq_.ctrl & RNIC_EQ_CTRL_DEPTH_MASK) >> RNIC_EQ_CTRL_DEPTH_SHIFT);
    const uint32_t depth = 1u << log2;
    const uint32_t seq = eq_.seq++;
    if (eq_.pi - eq_.ci >= depth) {
        ctr_.eq_overflows++;
        if (!(eq_.status & RNIC_EQ_ST_OVERFLOW))
            guest_error(
                "event queue full (%u entries, consumer index %u): event %u for 0x%x dropped, "
                "and the next ones until the driver consumes entries",
                depth, eq_.ci, type, element);
        eq_.status |= RNIC_EQ_ST_OVERFLOW;
        return;
    }
    struct rnic_eqe e = {};
    e.type = type;
    e.element = element;
    e.detail = detail;
    e.seq = seq;
    e.modeled_at_ns = host_.now_ns();
    const uint8_t owner = uint8_t(((eq_.pi >> log2) & 1) ^ 1);
    const uint64_t at = eq_.base + uint64_t(eq_.pi & (depth - 1)) * sizeof(e);
    e.owner = uint8_t(owner ^ 1); // the entry, then the owner byte last
    bool ok = dma(at, &e, sizeof(e), true);
    e.owner = owner;
    ok = ok && dma(at + offsetof(struct rnic_eqe, owner), &e.owner, 1, true);
    if (!ok) {
        ctr_.dma_errors++;
        guest_error("event queue: write at 0x%llx failed: event %u for 0x%x lost", (unsigned long long)at,
                    type, element);
        return;
    }
    eq_.pi++;
    ctr_.eq_events++;
    if (eq_.armed) {
        eq_.armed = false;
        raise((eq_.ctrl & RNIC_EQ_CTRL_VECTOR_MASK) >> RNIC_EQ_CTRL_VECTOR_SHIFT);
    }
}

void Rnic::eq_write_ctrl(uint32_t m)
{
    const bool was = eq_.ctrl & RNIC_EQ_CTRL_ENABLE, on = m & RNIC_EQ_CTRL_ENABLE;
    if (was) {
        if ((m ^ eq_.ctrl) & ~RNIC_EQ_CTRL_ENABLE)
            guest_error("EQ_CTRL: depth and vector cannot change while the event queue is enabled: kept");
        if (!on) {
            eq_.ctrl &= ~RNIC_EQ_CTRL_ENABLE;
            eq_.armed = false;
        }
        return;
    }
    eq_.ctrl = m & ~RNIC_EQ_CTRL_ENABLE;
    if (!on) return;
    const uint8_t log2 = uint8_t((m & RNIC_EQ_CTRL_DEPTH_MASK) >> RNIC_EQ_CTRL_DEPTH_SHIFT);
    if (!valid_depth(log2) || !probe_ram(eq_.base, uint64_t(sizeof(struct rnic_eqe)) << log2)) {
        eq_.status |= RNIC_EQ_ST_BAD_CONFIG;
        guest_error("EQ_CTRL: enable refused: %s (ring 0x%llx, depth_log2 %u)",
                    valid_depth(log2) ? "the ring is not in RAM" : "depth_log2 outside 1..12",
                    (unsigned long long)eq_.base, log2);
        return;
    }
    eq_.ctrl = m;
    eq_.pi = eq_.ci = eq_.seq = 0;
    eq_.armed = false;
}

} // namespace rackemu::rnic
