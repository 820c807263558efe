// SPDX-License-Identifier: MIT
// The RMC timing model (the SABRes paper Table 2, sec. 5.1; docs/sonuma.md "Timing model"): the modeled
// latency of every request, from which a CQE's modeled_ns comes. Closed forms for reads, writes
// and atomics; for SABRes the R2P2 recurrence over the stream buffer, evaluated for what actually
// happened (speculation or not, the abort point, the validate stage). One R2P2 issues a block
// every max(r2p2-issue-cycles cycles, 64 B / r2p2-gbps); a read's blocks are spread over the
// r2p2-count R2P2s, a SABRe is served by one (sec. 5.1). The destination's data is memory- or
// LLC-resident (`llc`). model_load(): the contention model (R2P2 occupancy, ATT entries, links,
// RGP/RCP backends) for many requests in flight.
#ifndef RACKEMU_SONUMA_TIMING_H
#define RACKEMU_SONUMA_TIMING_H

#include <cstdint>
#include <string>

#include "rackemu/sonuma_regs.h"

namespace rackemu::sonuma {

struct Timing { // device properties; defaults from sonuma_regs.h (RMC_DEF_*)
    // llc_resident: the data this node serves is LLC-resident (property llc-resident; sec. 7.2's
    // 100 objects): its R2P2 accesses cost llc_ns, not mem_ns. The destination's choice: its
    // replies carry it (RKF_RMC_RF_LLC) for the source's model.
    bool llc_resident = false;
    uint32_t rmc_mhz = RMC_DEF_RMC_MHZ, mem_ns = RMC_DEF_MEM_NS, llc_ns = RMC_DEF_LLC_NS,
             hop_ns = RMC_DEF_HOP_NS, hops = RMC_DEF_HOPS, link_gbps = RMC_DEF_LINK_GBPS,
             r2p2_gbps = RMC_DEF_R2P2_GBPS, r2p2_count = RMC_DEF_R2P2_COUNT, issue_cycles = RMC_DEF_ISSUE_CYC,
             pkt_hdr = RMC_DEF_PKT_HDR, att_entries = RMC_DEF_ATT_ENTRIES, sb_depth = RMC_DEF_SB_DEPTH;
};

enum class Abort : uint8_t {
    None = 0,
    Locked = RMC_INFO_LOCKED,
    Window = RMC_INFO_WINDOW,
    Validate = RMC_INFO_VALIDATE
};

// `local`: the destination is the source node itself (no network hops). off/len: the remote range.
// `llc`: the destination's data is LLC-resident (its R2P2 accesses cost llc_ns instead of mem_ns;
// writes always go into the LLC).
double model_read_ns(const Timing &, uint64_t off, uint32_t len, bool local, bool llc = false);
double model_write_ns(const Timing &, uint64_t off, uint32_t len, bool local); // into the LLC
double model_atomic_ns(const Timing &, bool local, bool llc = false);

// The paces of the model, ns per 64-byte block (docs/design/sonuma-rmc.md sec. 5).
double r2p2_block_ns(const Timing &); // g: one R2P2, max(issue_cycles * c, 64 / r2p2_gbps)
double read_block_ns(const Timing &); // g_r: a read spread over the R2P2s, max(g / count, s, c)

// What happened to one SABRe in the R2P2.
struct SabreTrace {
    uint32_t nblocks = 1;
    bool spec = true; // served with speculation
    Abort abort = Abort::None;
    uint32_t issued_at_abort = 0; // block loads issued when the abort was decided
    bool validated = false;       // went through the validate stage
    bool llc = false;             // the object is LLC-resident at the destination
};
// R(n): registration to validation packet at the destination.
double model_r2p2_sabre_ns(const Timing &, const SabreTrace &);
// The whole SABRe at the source: F + c (registration packet) + R.
double model_sabre_ns(const Timing &, double r2p2_ns, bool local);

// The contention model: `threads` source threads (each on RGP/RCP backend thread % r2p2_count,
// Table 2's four backends) keep `window` requests each in flight against one destination, every
// request of op (RMC_OP_READ or RMC_OP_SABRE), `size` bytes, 64-byte aligned. Requests claim, in
// issue order and first come first served, the resources they use: their backend's RGP (one
// packet per cycle), the request and reply links (serialisation), the R2P2s (a read's blocks
// round-robin over all, a SABRe's on the one it is mapped to, g per block) and, for a SABRe, one
// of that R2P2's att_entries ATT entries from registration to validation. Unloaded, a request's
// latency is the closed form above; loaded, the queueing at each resource adds to it.
struct LoadMix {
    uint8_t op = RMC_OP_READ;
    bool spec = true; // SABRe with speculation
    bool llc = false; // the destination's data is LLC-resident
    uint32_t size = 64;
    uint32_t threads = 16, window = 16;
    uint32_t requests = 0; // per thread; 0: enough for a steady state (at least 64 and 20000 blocks)
    double think_ns = 0;   // software time a thread's core spends per request (after its completion,
                           // before the next issue; one request at a time per core) (0: none)
    // SABRe: the fraction of requests (spread evenly) that find the version odd, a LOCKED abort:
    // the R2P2 issues the blocks it can before the odd version returns, then answers the other
    // requests at once without data, a cycle each (sec. 5.1: one reply per request packet); the
    // source still unrolled every request (0: none; 0..0.99). Payload GB/s counts the others only.
    double abort_frac = 0;
};
struct LoadResult {
    bool ok = false;
    const char *error = nullptr; // why not ok (the mix is out of range)
    double gbps = 0;             // payload GB/s (= bytes/ns) in the steady state
    double mops = 0;             // requests per microsecond
    double mean_ns = 0;          // mean latency, issue to CQE
    double unloaded_ns = 0;      // the closed-form latency of one request alone
    // busy fraction of each resource class (the busiest instance) in the steady state
    double util_r2p2 = 0, util_att = 0, util_link = 0, util_rgp = 0, util_rcp = 0;
    uint64_t att_stalls = 0; // registrations that waited for an ATT entry
    // the resources that bound the throughput (util >= 0.95, '+'-joined: r2p2, att, link, rgp, rcp),
    // or "latency": too few requests in flight to fill any (Little's law)
    std::string bound = "latency";
};
LoadResult model_load(const Timing &, const LoadMix &);

} // namespace rackemu::sonuma

#endif
