// SPDX-License-Identifier: MIT
//
// The responder's rate ceilings (docs/rnic.md "Rate ceilings"): part of the timing model, so
// nothing here changes what the device does or when; it accounts how long a hardware responder
// would have delayed each response or ACK, in the CEIL_* counters.
//   - the atomic serializer: the atomics a responder executes (COMPARE_SWAP, FETCH_ADD, the
//     extended XATOMIC/XATOMIC_POST) are serialized per device, each occupying it for its
//     service time: `atomic-host-ns` for a word in host memory, `atomic-dm-ns` for one in the
//     NIC's device memory (ConnectX-5, per the SwordBox measurements: about 2.9 M and 9 M
//     serialized CAS/s);
//   - the per-QP message-rate ceiling: every request message a QP executes occupies that QP's
//     responder for `qp-msg-ns` (about 18 M messages/s on one RC QP).
// A request arrives at the start of the receive pass that delivered it (kRxPassGapNs, as the
// atomic unit's arrivals), else at the device's current time. It starts on its QP at
// max(arrival, the QP's clock); an atomic then starts on the serializer at max(that, the
// serializer's clock); the waits are what its response is delayed beyond the unloaded model.
//
// Threading: with mu_ held (called by the engine inside on_frame / poll / a doorbell).
//
// Caveat: the delays are not carried back to the requester's CQE (modeled_ns is the unloaded
// latency); a migrated or reset device restarts the clocks idle.
#include <algorithm>

#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

uint64_t Rnic::arrival_ns()
{
    const uint64_t now = host_.now_ns();
    return in_rx_ ? std::min(rx_pass_ns_, now) : now;
}

void Rnic::ceil_reset()
{
    ceil_atomic_free_ns_ = 0;
    ceil_atomic_dm_ = false;
    for (auto &q : qps_)
        if (q) q->ceil_free_ns = 0;
}

void Rnic::request_executed(uint32_t qpn, uint8_t opcode)
{
    const RnicTiming &t = cfg_.timing;
    const bool atomic = opcode == ROCE_OP_CMP_SWAP || opcode == ROCE_OP_FETCH_ADD ||
                        opcode == ROCE_OP_XATOMIC || opcode == ROCE_OP_XATOMIC_POST;
    const bool dm = ceil_atomic_dm_;
    ceil_atomic_dm_ = false;
    const uint64_t arrival = arrival_ns();
    uint64_t start = arrival;
    if (Qp *q = t.qp_msg_ns ? qp_by_qpn(qpn) : nullptr) {
        start = std::max(arrival, q->ceil_free_ns);
        q->ceil_free_ns = start + t.qp_msg_ns;
        if (start > arrival) {
            ctr_.ceil_msgs_delayed++;
            ctr_.ceil_msg_wait_ns += start - arrival;
        }
    }
    uint64_t atomic_wait = 0;
    if (atomic) {
        const uint64_t service = dm ? t.atomic_dm_ns : t.atomic_host_ns;
        ctr_.ceil_atomics++;
        if (service) {
            const uint64_t astart = std::max(start, ceil_atomic_free_ns_);
            ceil_atomic_free_ns_ = astart + service;
            atomic_wait = astart - start;
            if (atomic_wait) ctr_.ceil_atomics_delayed++;
            ctr_.ceil_atomic_wait_ns += atomic_wait;
            ctr_.ceil_atomic_ns += atomic_wait + service;
            ctr_.ceil_atomic_busy_ns += service;
        }
    }
    ctr_.ceil_ack_delay_ns += (start - arrival) + atomic_wait;
}

} // namespace rackemu::rnic
