// SPDX-License-Identifier: MIT
// The network of the NIC-atomics paper's experiments (sec. IV, Table II), modeled at packet level for one
// question: in which order do the hot-spot benchmark's messages reach the target's NIC? Sec. V-A's
// Fig. 3 depends on it (docs/atomic-unit.md, "The arrival order"), and the paper gives the
// network, not the order. What is modeled, from Table II and sec. IV:
//   - a 3D torus of nodes, `pes_per_node` PEs each ("64 PE ... 32 dual-processor nodes"); the
//     dimensions are the factorisation of the node count closest to a cube (32 nodes: 4 x 4 x 2);
//   - dimension-order routing (x, then y, then z), minimal, a tie (half-way round) going +;
//   - links of `link_mbps` carrying a `msg_bytes` message in msg_bytes / link_mbps (48 B at 4 GB/s:
//     12 ns), a router latency of `router_ns` (50 ns) per router traversed;
//   - virtual channels: the request class's 2 VCs with a dateline per dimension (VC 0, VC 1 once
//     the packet crosses the dimension's wrap-around link); the reply class carries nothing here
//     (the benchmark's ADDs return no value);
//   - round-robin arbitration, per packet, among the (input port, VC) buffers whose head packet is
//     ready for the output; credit flow control with `vc_packets` packets per VC buffer (a credit
//     comes back when the packet leaves the downstream buffer);
//   - each node's NIC injects its PEs' messages round-robin, one per link time, as fast as the
//     router takes them (the PEs issue their 1000 ADDs back to back; each PE's order is kept);
//   - the target's ejection port takes one message per link time.
// Not modeled: the flit level (a packet holds a link for its whole length, virtual cut-through),
// the target unit's back-pressure on the ejection port (under saturation the arbitration, not the
// drain rate, decides the order), the 15% link overhead (the 48-byte message is the unit's
// input-link quantum too), and any traffic but the benchmark's.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace rackemu::rnic {

struct TorusNet {
    uint32_t pes_per_node = 2;
    uint32_t clock_mhz = 500;  // router clock (Table II): the model's time step
    uint32_t router_ns = 50;   // Table II
    uint32_t link_mbps = 4000; // Table II, per direction
    uint32_t msg_bytes = 48;   // one atomic (sec. V-A)
    // buffer per VC, in packets (not in the paper). 0: enough to cover the credit round trip
    // (link + router time: 6 packets at the defaults), so that one VC keeps a link busy, as the
    // paper's network keeps the target's link busy (Fig. 3, one address, at the network limit).
    // Shallower buffers leave the target's link idle part of the time (2 packets: 33%).
    uint32_t vc_packets = 0;
};

struct TorusOrder {
    bool ok = false;
    std::string error;
    std::array<uint32_t, 3> dims{}; // x, y, z
    std::vector<uint32_t> src;      // the source PE of each message, in arrival order at PE 0's NIC
    std::vector<uint64_t> at_cycle; // its arrival (the end of its ejection), router cycles
    uint64_t cycles = 0;            // the last arrival
    uint64_t ejection_busy = 0;     // cycles the ejection port carried a message
};

// The arrival order of the hot-spot benchmark: PEs 1..pes-1 each send ops_per_pe messages to PE 0
// (PE p on node p / pes_per_node). 2 <= pes <= 4096, 1 <= ops_per_pe <= 100000.
TorusOrder torus_hotspot_order(const TorusNet &, uint32_t pes, uint32_t ops_per_pe);

// The torus dimensions for `nodes` nodes: the factorisation x >= y >= z closest to a cube.
std::array<uint32_t, 3> torus_dims(uint32_t nodes);

} // namespace rackemu::rnic
