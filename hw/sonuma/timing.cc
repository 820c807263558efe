// SPDX-License-Identifier: MIT
// The RMC timing model; see timing.h. Notation of docs/design/sonuma-rmc.md sec. 5:
//   c = one RMC cycle, M = the R2P2's access latency to the data (memory, or the LLC when the data
//   is LLC-resident), L = LLC latency, H = network latency one way, s = serialisation of one block
//   packet, g = one R2P2's block pace, g_r = the pace of a read spread over the R2P2s, n = blocks
//   touched, D = stream-buffer depth.
#include "timing.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <vector>

namespace rackemu::sonuma {

namespace {

struct P {
    double c, M, L, H, s, g, g_r;
    uint32_t D;
};

P params(const Timing &t, bool local, bool llc = false)
{
    P p;
    p.c = 1000.0 / std::max(1u, t.rmc_mhz);
    p.M = llc ? t.llc_ns : t.mem_ns;
    p.L = t.llc_ns;
    p.H = local ? 0.0 : double(t.hop_ns) * t.hops;
    p.s = double(RMC_BLOCK_SIZE + t.pkt_hdr) / std::max(1u, t.link_gbps); // GB/s = bytes/ns
    // One R2P2: its pipeline issues a block every issue_cycles cycles, and sustains r2p2_gbps
    // (sec. 5.1: 20 GB/s, i.e. a block every 3.2 ns): the slower of the two; never faster than
    // the link serialises the replies.
    p.g = std::max(
        {p.c * std::max(1u, t.issue_cycles), double(RMC_BLOCK_SIZE) / std::max(1u, t.r2p2_gbps), p.s});
    // A read's blocks are balanced over the r2p2_count R2P2s (sec. 7.1); its replies still pass one
    // link (s) and one RCP, one block per cycle (c; sec. 5.1: the RCP is the transfer's bottleneck).
    p.g_r = std::max({p.g / std::max(1u, t.r2p2_count), p.s, p.c});
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

double r2p2_block_ns(const Timing &t)
{
    return params(t, true).g;
}

double read_block_ns(const Timing &t)
{
    return params(t, true).g_r;
}

double model_read_ns(const Timing &t, uint64_t off, uint32_t len, bool local, bool llc)
{
    P p = params(t, local, llc);
    return source_ns(p) + p.c + p.M + (blocks(off, len) - 1) * p.g_r;
}

// A write's blocks are spread over the R2P2s like a read's and written into the LLC (L).
double model_write_ns(const Timing &t, uint64_t off, uint32_t len, bool local)
{
    P p = params(t, local);
    return source_ns(p) + p.L + (blocks(off, len) - 1) * p.g_r + p.c + p.L;
}

double model_atomic_ns(const Timing &t, bool local, bool llc)
{
    P p = params(t, local, llc);
    return source_ns(p) + p.c + p.M + p.c;
}

double model_r2p2_sabre_ns(const Timing &t, const SabreTrace &tr)
{
    P p = params(t, true, tr.llc);
    const uint32_t n = std::max(1u, tr.nblocks);
    const double t0 = 2 * p.c;  // registration + issue of block 0
    const double tv = t0 + p.M; // the version is known
    // one R2P2 serves the whole SABRe: its blocks are issued at its pace g
    auto issue = [&](uint32_t j) {
        if (j == 0) return t0;
        if (!tr.spec) return tv + j * p.g;
        if (j < p.D) return t0 + j * p.g;
        return std::max(t0 + j * p.g, tv + (j - p.D + 1) * p.g); // a full stream buffer waits for the version
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

// ---------------------------------------------------------------------------------------------
// The contention model (timing.h model_load). Each request is one pass through the pipeline of
// the closed forms; where that pass uses a shared resource it claims it first come first served
// (requests are taken in issue order), and waits for it when it is busy:
//   fetch (L) -> RGP of its backend (c per packet: a SABRe's registration + n block requests)
//   -> request link (pkt_hdr / link_gbps per packet) -> H -> destination:
//      read:  its blocks round-robin over the R2P2s, g per block on each;
//      SABRe: an ATT entry of the R2P2 it is mapped to (the one free first) from registration to
//             validation, and n * g of that R2P2's issue capacity; the R2P2 recurrence gives
//             its unloaded course;
//   -> reply link (s per block, + the validation packet) -> H -> RCP of its backend (c per
//   reply) -> CQE (L).
// A resource's `free` is when its last claim ends: a request that finds it busy starts when it
// frees (a FIFO server). Unloaded, the pass equals the closed form (the unit tests check it).

namespace {

struct Server {
    double free = 0, busy = 0;
    // claim `work` ns from `ready` on: returns the start
    double claim(double ready, double work)
    {
        double st = std::max(ready, free);
        free = st + work;
        busy += work;
        return st;
    }
};

} // namespace

LoadResult model_load(const Timing &t, const LoadMix &m)
{
    LoadResult r;
    if (m.op != RMC_OP_READ && m.op != RMC_OP_SABRE) {
        r.error = "op: READ or SABRE";
        return r;
    }
    const uint32_t max_size = m.op == RMC_OP_SABRE ? RMC_SABRE_MAX : RMC_XFER_MAX;
    if (m.size < 1 || m.size > max_size) {
        r.error = "size out of range (READ 1..16 MiB, SABRE 1..64 KiB)";
        return r;
    }
    if (m.threads < 1 || m.threads > 4096 || m.window < 1 || m.window > 4096 || m.requests > 1000000 ||
        !(m.think_ns >= 0 && m.think_ns < 1e9) || !(m.abort_frac >= 0 && m.abort_frac <= 0.99) ||
        (m.abort_frac > 0 && m.op != RMC_OP_SABRE)) {
        r.error =
            "threads, window 1..4096, requests <= 1000000, think_ns 0..1e9, abort_frac 0..0.99 (SABRE only)";
        return r;
    }
    if (t.r2p2_count > 256 || t.att_entries > RMC_ATT_MAX) {
        r.error = "r2p2-count above 256 or att-entries above 64";
        return r;
    }
    const P p = params(t, false, m.llc);
    const uint32_t n = blocks(0, m.size);
    const bool sabre = m.op == RMC_OP_SABRE;
    const uint32_t nr2p2 = std::max(1u, t.r2p2_count), natt = std::max(1u, t.att_entries);
    SabreTrace tr;
    tr.nblocks = n;
    tr.spec = m.spec;
    tr.llc = m.llc;
    const double R = sabre ? model_r2p2_sabre_ns(t, tr) : 0;
    // a LOCKED abort: the blocks issued before the odd version is known (speculation: one per g
    // while the stream buffer has room; without it, block 0 only), then the rest answered empty
    SabreTrace ta = tr;
    ta.abort = Abort::Locked;
    ta.issued_at_abort = m.spec ? std::min({n, p.D, uint32_t(p.M / p.g) + 1}) : 1;
    const double R_ab = sabre ? model_r2p2_sabre_ns(t, ta) : 0;
    r.unloaded_ns = sabre ? model_sabre_ns(t, R, false) : model_read_ns(t, 0, m.size, false, m.llc);
    const double s_req = double(t.pkt_hdr) / std::max(1u, t.link_gbps);
    uint32_t per_thread = m.requests;
    if (!per_thread) {
        uint64_t want = (20000 + uint64_t(m.threads) * n - 1) / (uint64_t(m.threads) * n);
        per_thread = uint32_t(std::clamp<uint64_t>(want, 64, 100000));
    }
    // bound the run (a few seconds at most): requests, and the ATT scan of each SABRe
    const uint64_t total_req = uint64_t(m.threads) * per_thread;
    if (total_req > 4000000 || total_req * (sabre ? uint64_t(nr2p2) * natt : nr2p2) > 500000000) {
        r.error = "too long a run: threads x requests above 4000000, or x r2p2-count x att-entries above 5e8";
        return r;
    }

    std::vector<Server> rgp(nr2p2), rcp(nr2p2), r2p2(nr2p2);
    std::vector<std::vector<Server>> att(nr2p2, std::vector<Server>(natt));
    Server req_link, rep_link;
    uint32_t rr = 0;                    // the next R2P2 of the round-robin of read blocks
    uint64_t idx = 0;                   // requests issued so far (which of them abort)
    double occ_r2p2 = 0, occ_reply = 0; // R2P2 and reply-link time claimed, summed over requests
    // (issue time, thread): every thread starts with `window` requests, each completion issues the next
    using Ev = std::pair<double, uint32_t>;
    std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> ready;
    std::vector<double> cpu_free(m.threads, 0.0); // when each thread's core is done with its software
    std::vector<uint32_t> left(m.threads, per_thread);
    for (uint32_t th = 0; th < m.threads; th++)
        for (uint32_t w = 0; w < std::min(m.window, per_thread); w++)
            ready.push({0.0, th});
    std::vector<double> done; // completion times
    done.reserve(size_t(m.threads) * per_thread);
    double lat_sum = 0;
    while (!ready.empty()) {
        auto [when, th] = ready.top();
        ready.pop();
        if (!left[th]) continue;
        left[th]--;
        // the thread's software time per request (think_ns): its core handles the completion (or,
        // for the first window, prepares the request) and builds the next, one request at a time,
        // before it issues; so a synchronous thread issues think_ns after each completion
        const double ti = std::max(when, cpu_free[th]) + m.think_ns;
        cpu_free[th] = ti;
        const uint32_t b = th % nr2p2; // the thread's RGP/RCP backend
        const uint32_t npkt = n + (sabre ? 1 : 0);
        const bool ab = m.abort_frac > 0 &&
                        std::floor(double(idx + 1) * m.abort_frac) > std::floor(double(idx) * m.abort_frac);
        idx++;
        const uint32_t up = ab ? ta.issued_at_abort : n; // blocks read with data
        // source: WQE fetch, RGP unroll, request packets on the link, the network
        const double u = rgp[b].claim(ti + p.L, npkt * p.c) + p.c; // the first packet leaves
        const double lq = req_link.claim(u, npkt * s_req);
        const double a = lq + p.H; // the first packet (registration or block 0) arrives
        double dest_done, first_ready;
        if (!sabre) {
            // unloaded: a + c + M + (n-1) g_r; each R2P2 serves its share at g per block
            dest_done = a + p.c + p.M + (n - 1) * p.g_r;
            first_ready = a + p.c + p.M;
            occ_r2p2 += n * p.g;
            for (uint32_t k = 0; k < std::min(n, nr2p2); k++) {
                const uint32_t which = (rr + k) % nr2p2;
                const uint32_t nk = n / nr2p2 + (k < n % nr2p2 ? 1 : 0);
                const double st = r2p2[which].claim(a + k * p.c, nk * p.g);
                dest_done = std::max(dest_done, st + (nk - 1) * p.g + p.c + p.M);
                if (k == 0) first_ready = std::max(first_ready, st + p.c + p.M);
            }
            rr = (rr + n) % nr2p2;
        } else {
            // the R2P2 whose ATT frees an entry first (ties: the least busy pipeline)
            uint32_t k = 0, e = 0;
            double best = -1, best_free = 0;
            for (uint32_t i = 0; i < nr2p2; i++)
                for (uint32_t j = 0; j < natt; j++) {
                    double f = std::max(att[i][j].free, a);
                    if (best < 0 || f < best || (f == best && r2p2[i].free < best_free)) {
                        best = f;
                        best_free = r2p2[i].free;
                        k = i;
                        e = j;
                    }
                }
            if (best > a) r.att_stalls++;
            const double reg = best;
            // block 0's request follows the registration by a cycle (the closed form's F + c + R);
            // an aborted SABRe answers its blocks after `up` at a cycle each, without data
            const double work = up * p.g + (n - up) * p.c;
            const double st = r2p2[k].claim(reg + p.c, work);
            occ_r2p2 += work;
            // unloaded: the last block or the decision at reg + c + R - c (R ends with the validation packet)
            dest_done = std::max(reg + (ab ? R_ab : R), st + (up - 1) * p.g + p.c + p.M + (n - up) * p.c);
            first_ready = std::max(reg, st - p.c) + 2 * p.c + p.M;
            att[k][e].claim(reg, dest_done + p.c - reg); // held until the validation packet leaves
        }
        // reply link: n block replies (+ the validation packet), the network, the RCP, the CQE
        const double tail = sabre ? p.c : 0.0; // the validation packet follows the last block
        // replies: `up` with a block of data, the others (an abort's) and the validation header-only
        const double rep = up * p.s + (n - up) * s_req + (sabre ? s_req : 0.0);
        occ_reply += rep;
        const double ls = rep_link.claim(first_ready, rep);
        const double dep_end = std::max(dest_done + tail + p.s, ls + rep);
        const double arr_first = ls + p.s + p.H, arr_last = dep_end + p.H;
        const double rs = rcp[b].claim(arr_first, (n + (sabre ? 1 : 0)) * p.c);
        const double rcp_end = std::max(arr_last + p.c, rs + (n + (sabre ? 1 : 0)) * p.c);
        const double fin = rcp_end + p.L;
        done.push_back(fin);
        lat_sum += fin - ti;
        ready.push({fin, th});
    }
    std::sort(done.begin(), done.end());
    const size_t total = done.size(), k0 = total / 10; // the first tenth warms the pipeline up
    const double t0 = done[k0], t1 = done.back();
    r.mean_ns = lat_sum / double(total);
    if (t1 > t0 && total - 1 > k0) {
        const double span = t1 - t0;
        r.mops = double(total - 1 - k0) / span * 1000.0;
    } else { // one request: its own latency
        r.mops = 1000.0 / r.mean_ns;
    }
    r.gbps = r.mops / 1000.0 * m.size * (1.0 - m.abort_frac); // aborted SABRes deliver no payload
    // utilisation: the steady-state request rate times each resource class's mean time per request,
    // over its instances
    const double rate = r.mops / 1000.0;            // requests per ns
    const double used = std::min(m.threads, nr2p2); // backends in use
    const double npk = n + (sabre ? 1 : 0);
    r.util_r2p2 = rate * (occ_r2p2 / double(total)) / nr2p2;
    r.util_link = rate * std::max(occ_reply / double(total), npk * s_req);
    r.util_rgp = rate * npk * p.c / used;
    r.util_rcp = rate * npk * p.c / used;
    if (sabre) {
        double held = 0; // mean ATT hold time of a SABRe
        for (auto &v : att)
            for (auto &x : v)
                held += x.busy;
        held /= double(total);
        r.util_att = rate * held / (double(nr2p2) * natt);
    }
    struct {
        double u;
        const char *name;
    } res[] = {{r.util_r2p2, "r2p2"},
               {r.util_att, "att"},
               {r.util_link, "link"},
               {r.util_rgp, "rgp"},
               {r.util_rcp, "rcp"}};
    std::string b;
    for (auto &x : res)
        if (x.u >= 0.95) b += (b.empty() ? "" : "+") + std::string(x.name);
    if (!b.empty()) r.bound = b;
    r.ok = true;
    return r;
}

} // namespace rackemu::sonuma
