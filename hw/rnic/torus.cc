// SPDX-License-Identifier: MIT
// The hot-spot benchmark's arrival order through the NIC-atomics paper's 3D torus (torus.h).
#include "torus.h"

#include <algorithm>
#include <deque>

namespace rackemu::rnic {

std::array<uint32_t, 3> torus_dims(uint32_t nodes)
{
    std::array<uint32_t, 3> best{nodes ? nodes : 1, 1, 1};
    for (uint32_t z = 1; z * z * z <= nodes; z++) {
        if (nodes % z) continue;
        for (uint32_t y = z; y * y <= nodes / z; y++) {
            if ((nodes / z) % y) continue;
            const uint32_t x = nodes / z / y;
            if (x < best[0] || (x == best[0] && x - z < best[0] - best[2])) best = {x, y, z};
        }
    }
    return best;
}

namespace {

constexpr uint32_t kInject = 12; // buffers 0..11: link port d (0 +x, 1 -x, 2 +y, 3 -y, 4 +z, 5 -z) x 2 VCs
constexpr uint32_t kBuffers = 13;
constexpr uint64_t kMaxSteps = 4000000000ull;

struct Pkt {
    uint32_t pe;
    uint64_t ready; // arrival + router latency: when it may leave
};

struct Flight {
    uint64_t at;
    uint32_t node, buf;
    uint32_t pe;
};

struct Router {
    std::array<std::deque<Pkt>, kBuffers> buf;
    std::array<uint32_t, kBuffers> held{}; // packets in the buffer or on their way to it
    std::array<int32_t, kBuffers>
        down{};                // the downstream buffer for a packet leaving from here (-1: ejection)
    uint32_t next = 0, rr = 0; // the downstream node; round-robin pointer
    uint64_t out_free = 0;     // the output link is free from this cycle
};

} // namespace

TorusOrder torus_hotspot_order(const TorusNet &net, uint32_t pes, uint32_t ops_per_pe)
{
    TorusOrder o;
    if (pes < 2 || pes > 4096 || ops_per_pe < 1 || ops_per_pe > 100000 || net.pes_per_node < 1 ||
        net.pes_per_node > 64 || net.clock_mhz < 1 || net.clock_mhz > 10000 || net.link_mbps < 1 ||
        net.msg_bytes < 1 || net.msg_bytes > 4096 || net.vc_packets > 1024 || net.router_ns > 100000) {
        o.error =
            "torus: pes 2..4096, ops-per-pe 1..100000, pes-per-node 1..64, clock 1..10000 MHz, link >= 1 "
            "MB/s, msg-bytes 1..4096, vc-packets 0..1024, router 0..100000 ns";
        return o;
    }
    const uint32_t nodes = (pes + net.pes_per_node - 1) / net.pes_per_node;
    o.dims = torus_dims(nodes);
    const auto &dm = o.dims;
    const uint64_t link =
        std::max<uint64_t>(1, (uint64_t(net.msg_bytes) * net.clock_mhz + net.link_mbps - 1) / net.link_mbps);
    const uint64_t hop = uint64_t(net.router_ns) * net.clock_mhz / 1000;
    const uint32_t cap = net.vc_packets ? net.vc_packets : uint32_t((2 * link + hop - 1) / link);
    // The model steps every router every cycle: refuse a run that would take minutes (about 30 ns
    // a router-cycle; 64 PEs x 1000 messages are 12 M, 0.4 s) rather than look hung.
    const uint64_t steps = uint64_t(pes - 1) * ops_per_pe * link * nodes;
    if (steps > kMaxSteps) {
        o.error = "torus: " + std::to_string(pes) + " PEs x " + std::to_string(ops_per_pe) + " messages is " +
                  std::to_string(steps / 1000000) + " M router-cycles, more than the model's " +
                  std::to_string(kMaxSteps / 1000000) + " M (about 2 minutes): fewer PEs or messages, or " +
                  "another --order";
        return o;
    }
    auto coord = [&](uint32_t n, uint32_t d) {
        return d == 0 ? n % dm[0] : d == 1 ? (n / dm[0]) % dm[1] : n / (dm[0] * dm[1]);
    };
    auto node_at = [&](std::array<uint32_t, 3> c) { return c[0] + dm[0] * (c[1] + dm[1] * c[2]); };

    // Every packet goes to node 0, so a router's output is fixed: the first dimension whose
    // coordinate is not 0, the shorter way round (+ on a tie).
    std::vector<Router> r(nodes);
    for (uint32_t n = 0; n < nodes; n++) {
        int dir = -1;
        for (uint32_t d = 0; d < 3 && dir < 0; d++) {
            const uint32_t c = coord(n, d);
            if (c) dir = int(2 * d + (dm[d] - c <= c ? 0 : 1));
        }
        if (dir < 0) {
            r[n].down.fill(-1);
            continue;
        }
        const uint32_t d = uint32_t(dir) / 2;
        std::array<uint32_t, 3> c{coord(n, 0), coord(n, 1), coord(n, 2)};
        const bool plus = dir % 2 == 0, wrap = plus ? c[d] == dm[d] - 1 : c[d] == 0;
        c[d] = plus ? (c[d] + 1) % dm[d] : (c[d] + dm[d] - 1) % dm[d];
        r[n].next = node_at(c);
        for (uint32_t b = 0; b < kBuffers; b++) {
            // the dateline: VC 1 from the wrap-around link on, VC 0 again in a new dimension
            const bool same_dim = b < kInject && b / 4 == d;
            const uint32_t vc = wrap || (same_dim && b % 2) ? 1 : 0;
            r[n].down[b] = int32_t(uint32_t(dir) * 2 + vc);
        }
    }

    // the sources: PE p on node p / pes_per_node; PE 0 (the target) sends nothing
    std::vector<std::vector<uint32_t>> node_pes(nodes);
    for (uint32_t p = 1; p < pes; p++)
        node_pes[p / net.pes_per_node].push_back(p);
    std::vector<uint32_t> left(pes, ops_per_pe), nic_rr(nodes, 0);
    std::vector<uint64_t> nic_free(nodes, 0);
    left[0] = 0;

    const uint64_t total = uint64_t(pes - 1) * ops_per_pe;
    o.src.reserve(total);
    o.at_cycle.reserve(total);
    std::deque<Flight> flying; // every hop takes `link` cycles, so arrivals come in send order
    uint64_t last_progress = 0;
    for (uint64_t t = 0; o.src.size() < total; t++) {
        while (!flying.empty() && flying.front().at <= t) {
            const Flight &f = flying.front();
            r[f.node].buf[f.buf].push_back({f.pe, f.at + hop});
            flying.pop_front();
        }
        for (uint32_t n = 0; n < nodes; n++) {
            Router &x = r[n];
            if (x.out_free > t) continue;
            for (uint32_t k = 0; k < kBuffers; k++) {
                const uint32_t b = (x.rr + k) % kBuffers;
                if (x.buf[b].empty() || x.buf[b].front().ready > t) continue;
                const int32_t db = x.down[b];
                if (db >= 0 && r[x.next].held[uint32_t(db)] >= cap) continue; // no credit
                const Pkt p = x.buf[b].front();
                x.buf[b].pop_front();
                x.held[b]--;
                x.out_free = t + link;
                x.rr = (b + 1) % kBuffers;
                if (db < 0) {
                    o.src.push_back(p.pe);
                    o.at_cycle.push_back(t + link);
                    o.ejection_busy += link;
                } else {
                    r[x.next].held[uint32_t(db)]++;
                    flying.push_back({t + link, x.next, uint32_t(db), p.pe});
                }
                last_progress = t;
                break;
            }
        }
        for (uint32_t n = 0; n < nodes; n++) { // each NIC: its PEs in turn, one message per link time
            if (nic_free[n] > t || r[n].held[kInject] >= cap) continue;
            const auto &ps = node_pes[n];
            for (uint32_t k = 0; k < ps.size(); k++) {
                const uint32_t i = (nic_rr[n] + k) % uint32_t(ps.size()), pe = ps[i];
                if (!left[pe]) continue;
                left[pe]--;
                nic_rr[n] = (i + 1) % uint32_t(ps.size());
                nic_free[n] = t + link;
                r[n].held[kInject]++;
                flying.push_back({t + link, n, kInject, pe});
                last_progress = t;
                break;
            }
        }
        if (t - last_progress > 4 * (link + hop) + 1000) {
            o.error =
                "torus: no packet moved for " + std::to_string(t - last_progress) + " cycles (a deadlock)";
            return o;
        }
    }
    o.cycles = o.at_cycle.empty() ? 0 : o.at_cycle.back();
    o.ok = true;
    return o;
}

} // namespace rackemu::rnic
