// SPDX-License-Identifier: MIT
// The RMC timing model; see timing.h. Notation of docs/design/sonuma-rmc.md sec. 5:
//   c = one RMC cycle, M = memory latency, L = LLC latency, H = network latency one way,
//   s = serialisation of one block packet, g = one R2P2's block pace, g_r = the pace of a read
//   spread over the R2P2s, n = blocks touched, D = stream-buffer depth.
#include "timing.h"

#include <algorithm>
#include <vector>

namespace rackemu::sonuma {

namespace {

struct P {
    double c, M, L, H, s, g, g_r;
    uint32_t D;
};

P params(const Timing &t, bool local)
{
    P p;
    p.c = 1000.0 / std::max(1u, t.rmc_mhz);
    p.M = t.mem_ns;
    p.L = t.llc_ns;
    p.H = local ? 0.0 : double(t.hop_ns) * t.hops;
    p.s = double(RMC_BLOCK_SIZE + t.pkt_hdr) / std::max(1u, t.link_gbps); // GB/s = bytes/ns
    p.g = std::max(p.c * t.issue_cycles, p.s);
    p.g_r = std::max({p.c, p.c * t.issue_cycles / std::max(1u, t.r2p2_count), p.s});
    p.D = std::max(1u, t.sb_depth);
    return p;
}

uint32_t blocks(uint64_t off, uint32_t len)
{
    return len ? uint32_t((off % RMC_BLOCK_SIZE + len + RMC_BLOCK_SIZE - 1) / RMC_BLOCK_SIZE) : 1;
}

// F: WQE fetch, RGP, the request's and the reply's network traversals, serialisation, RCP, CQE write.
double source_ns(const P &p)
{
    return p.L + p.c + 2 * p.H + p.s + p.c + p.L;
}

} // namespace

double model_read_ns(const Timing &t, uint64_t off, uint32_t len, bool local)
{
    P p = params(t, local);
    return source_ns(p) + p.c + p.M + (blocks(off, len) - 1) * p.g_r;
}

double model_write_ns(const Timing &t, uint64_t off, uint32_t len, bool local)
{
    P p = params(t, local);
    return source_ns(p) + p.L + (blocks(off, len) - 1) * std::max(p.c, p.s) + p.c + p.L;
}

double model_atomic_ns(const Timing &t, bool local)
{
    P p = params(t, local);
    return source_ns(p) + p.c + p.M + p.c;
}

double model_r2p2_sabre_ns(const Timing &t, const SabreTrace &tr)
{
    P p = params(t, true);
    const uint32_t n = std::max(1u, tr.nblocks);
    const double t0 = 2 * p.c;  // registration + issue of block 0
    const double tv = t0 + p.M; // the version is known
    auto issue = [&](uint32_t j) {
        if (j == 0) return t0;
        if (!tr.spec) return tv + j * p.c;
        if (j < p.D) return t0 + j * p.c;
        return std::max(t0 + j * p.c, tv + (j - p.D + 1) * p.c); // a full stream buffer waits for the version
    };
    uint32_t upto = n;
    if (tr.abort != Abort::None) upto = std::min(n, std::max(1u, tr.issued_at_abort));
    double dep = 0, confirm = 0;
    for (uint32_t j = 0; j < upto; j++) {
        double ready = issue(j) + p.M;
        dep = j ? std::max(ready, dep + p.g) : ready;
        confirm = std::max(confirm, ready);
    }
    if (tr.abort != Abort::None) {
        double ta = tr.abort == Abort::Validate ? confirm + p.c + p.L : tv;
        return std::max(dep, ta) + (n - upto) * p.c + p.c;
    }
    if (tr.validated) confirm += p.c + p.L;
    return std::max(dep, confirm) + p.c; // the validation packet
}

double model_sabre_ns(const Timing &t, double r2p2_ns, bool local)
{
    P p = params(t, local);
    return source_ns(p) + p.c + r2p2_ns;
}

} // namespace rackemu::sonuma
