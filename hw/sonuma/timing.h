// SPDX-License-Identifier: MIT
// The RMC timing model (seed 000 Table 2, sec. 5.1; docs/sonuma.md "Timing model"): the modeled
// latency of every request, from which a CQE's modeled_ns comes. Closed forms for reads, writes
// and atomics; for SABRes the R2P2 recurrence over the stream buffer, evaluated for what actually
// happened (speculation or not, the abort point, the validate stage).
#ifndef RACKEMU_SONUMA_TIMING_H
#define RACKEMU_SONUMA_TIMING_H

#include <cstdint>

#include "rackemu/sonuma_regs.h"

namespace rackemu::sonuma {

struct Timing { // device properties; defaults from sonuma_regs.h (RMC_DEF_*)
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
double model_read_ns(const Timing &, uint64_t off, uint32_t len, bool local);
double model_write_ns(const Timing &, uint64_t off, uint32_t len, bool local);
double model_atomic_ns(const Timing &, bool local);

// What happened to one SABRe in the R2P2.
struct SabreTrace {
    uint32_t nblocks = 1;
    bool spec = true; // served with speculation
    Abort abort = Abort::None;
    uint32_t issued_at_abort = 0; // block loads issued when the abort was decided
    bool validated = false;       // went through the validate stage
};
// R(n): registration to validation packet at the destination.
double model_r2p2_sabre_ns(const Timing &, const SabreTrace &);
// The whole SABRe at the source: F + c (registration packet) + R.
double model_sabre_ns(const Timing &, double r2p2_ns, bool local);

} // namespace rackemu::sonuma

#endif
