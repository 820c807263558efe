// SPDX-License-Identifier: MIT
//
// The RNIC's timing model (docs/rnic.md "Timing model"): the latency a CQE carries (modeled_ns)
// and the modeled_* counters, from the glue's properties (RnicTiming: PCIe latency and
// bandwidth, the NIC clock, link bandwidth, hop latency) and the fixed costs of rnic.h
// (kCyclesPerWqe, kCyclesPerPacket, kWireOverhead). A send WR: doorbell, WQE read, the pipeline,
// the message streaming (the longest of PCIe, link and pipeline), the hops, the target's work
// (an atomic: the atomic unit's unloaded time, amu_reset), the response, the CQE write. A
// receive: from the first packet to the CQE.
//
// Threading: const functions of the configuration, called with mu_ held.
//
// Caveat: the model is analytic and delays nothing: it does not add retransmissions, RNR waits
// or queueing (the target unit's queueing is its amu_modeled_ns counter).
#include <algorithm>

#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

uint64_t Rnic::ser_ns(uint64_t bytes) const
{
    return bytes * 8000 / cfg_.timing.link_mbps;
}

uint64_t Rnic::pcie_ns(uint64_t bytes) const
{
    return bytes * 1000 / cfg_.timing.pcie_mbps;
}

uint64_t Rnic::nic_ns(uint64_t cycles) const
{
    return cycles * 1000 / cfg_.timing.nic_mhz;
}

// The modeled latency of one send WR without loss, doorbell to CQE (docs/rnic.md "Timing
// model"): PCIe doorbell write and WQE read; the NIC pipeline (kCyclesPerWqe per WR,
// kCyclesPerPacket per packet); a message's packets stream, so its data phase takes the longest
// of the PCIe transfer, the link serialization and the pipeline; 2 hops each way; the target's
// PCIe access; the response; the CQE write.
uint64_t Rnic::model_wr_ns(uint8_t op, uint64_t len, uint32_t mtu) const
{
    const RnicTiming &t = cfg_.timing;
    if (!valid_mtu(mtu)) mtu = ROCE_MTU_MIN;
    const uint64_t n = std::max<uint64_t>(1, (len + mtu - 1) / mtu);
    const uint64_t last = len - (n - 1) * mtu;
    auto frames = [&](uint8_t middle_op, uint8_t only_op) {
        // the frames of a message: n - 1 full ones and the last
        if (n == 1) return uint64_t(frame_len(only_op, uint32_t(len))) + kWireOverhead;
        return (n - 1) * (frame_len(middle_op, mtu) + kWireOverhead) + frame_len(middle_op, uint32_t(last)) +
               kWireOverhead;
    };
    auto stream = [&](uint64_t wire_bytes) {
        return std::max({pcie_ns(len), ser_ns(wire_bytes), nic_ns(kCyclesPerPacket * n)});
    };
    const uint64_t hops = 2 * uint64_t(t.hop_ns);
    const uint64_t one = ser_ns(frame_len(ROCE_OP_ACK, 0) + kWireOverhead);
    uint64_t ns = t.pcie_ns;                                               // doorbell write
    ns += 2 * uint64_t(t.pcie_ns) + pcie_ns(sizeof(struct rnic_send_wqe)); // WQE read
    ns += nic_ns(kCyclesPerWqe);
    switch (op) {
    case RNIC_WR_SEND:
    case RNIC_WR_SEND_IMM:
    case RNIC_WR_WRITE:
    case RNIC_WR_WRITE_IMM:
        ns += 2 * uint64_t(t.pcie_ns) + stream(frames(ROCE_OP_WRITE_MIDDLE, ROCE_OP_WRITE_ONLY)) + hops;
        ns += nic_ns(kCyclesPerPacket) + t.pcie_ns + pcie_ns(std::min<uint64_t>(len, mtu)); // last placed
        ns += nic_ns(kCyclesPerPacket) + one + hops;                                        // ACK
        break;
    case RNIC_WR_READ:
        ns += nic_ns(kCyclesPerPacket) + ser_ns(frame_len(ROCE_OP_READ_REQUEST, 0) + kWireOverhead) + hops;
        ns += nic_ns(kCyclesPerPacket) + 2 * uint64_t(t.pcie_ns); // the target's first read
        ns += stream(frames(ROCE_OP_READ_RESP_MIDDLE, ROCE_OP_READ_RESP_ONLY)) + hops;
        ns += nic_ns(kCyclesPerPacket) + t.pcie_ns + pcie_ns(std::min<uint64_t>(len, mtu)); // last scattered
        break;
    case RNIC_WR_CMP_SWAP:
    case RNIC_WR_FETCH_ADD:
    case RNIC_WR_XATOMIC:
    case RNIC_WR_XATOMIC_POST: {
        // the target's atomic unit: its unloaded time for an operation that misses (amu_reset)
        const bool x = op == RNIC_WR_XATOMIC || op == RNIC_WR_XATOMIC_POST;
        ns += nic_ns(kCyclesPerPacket) +
              ser_ns(frame_len(x ? ROCE_OP_XATOMIC : ROCE_OP_CMP_SWAP, 0) + kWireOverhead) + hops;
        ns += nic_ns(kCyclesPerPacket) + amu_unloaded_ns_;
        if (op == RNIC_WR_XATOMIC_POST) {
            ns += one + hops; // ACK
            break;
        }
        ns += ser_ns(frame_len(x ? ROCE_OP_XATOMIC_ACK : ROCE_OP_ATOMIC_ACK, 0) + kWireOverhead) + hops;
        ns += nic_ns(kCyclesPerPacket) + t.pcie_ns + pcie_ns(8); // the result into the local SGE
        break;
    }
    default: // FLUSH, ATOMIC WRITE
        ns += nic_ns(kCyclesPerPacket) +
              ser_ns(frame_len(op == RNIC_WR_FLUSH ? ROCE_OP_FLUSH : ROCE_OP_ATOMIC_WRITE,
                               op == RNIC_WR_FLUSH ? 0 : 8) +
                     kWireOverhead) +
              hops;
        ns += nic_ns(kCyclesPerPacket) + t.pcie_ns + pcie_ns(8);
        ns += ser_ns(frame_len(ROCE_OP_READ_RESP_ONLY, 0) + kWireOverhead) + hops;
        break;
    }
    ns += t.pcie_ns + pcie_ns(sizeof(struct rnic_cqe)); // CQE write
    return ns;
}

// A receive: from the first packet's arrival, receive WQE read, the message streaming in,
// the last packet placed, the CQE write.
uint64_t Rnic::model_recv_ns(uint64_t len, uint32_t mtu) const
{
    if (!valid_mtu(mtu)) mtu = ROCE_MTU_MIN;
    const uint64_t n = std::max<uint64_t>(1, (len + mtu - 1) / mtu);
    const uint64_t wire = n * (frame_len(ROCE_OP_SEND_MIDDLE, 0) + kWireOverhead) + len;
    return nic_ns(kCyclesPerWqe) + 2 * uint64_t(cfg_.timing.pcie_ns) + pcie_ns(sizeof(struct rnic_recv_wqe)) +
           std::max({pcie_ns(len), ser_ns(wire), nic_ns(kCyclesPerPacket * n)}) + cfg_.timing.pcie_ns +
           pcie_ns(sizeof(struct rnic_cqe));
}

} // namespace rackemu::rnic
