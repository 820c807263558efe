// SPDX-License-Identifier: MIT
// The soNUMA RMC device core; see rmc.h and docs/sonuma.md.
#include "rmc.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "regbank.h"
#include "seqlock.h"

namespace rackemu::sonuma {

namespace {

uint32_t blocks_touched(uint64_t off, uint64_t len)
{
    if (!len) return 0;
    return uint32_t(((off % RMC_BLOCK_SIZE) + len + RMC_BLOCK_SIZE - 1) / RMC_BLOCK_SIZE);
}

// Guest memory as the R2P2 and RCP see it, on a host mapping (Rmc::mem_read/mem_write): every
// aligned 8-byte word is one single-copy atomic access, and the words of a range are accessed in
// ascending address order (docs/sonuma.md, "What differs from the hardware"). Loads are acquire
// loads.
void mem_load(uint8_t *dst, const uint8_t *src, size_t len)
{
    size_t i = 0;
    for (; i < len && (reinterpret_cast<uintptr_t>(src + i) & 7); i++)
        dst[i] = __atomic_load_n(src + i, __ATOMIC_ACQUIRE);
    for (; i + 8 <= len; i += 8) {
        uint64_t v = __atomic_load_n(reinterpret_cast<const uint64_t *>(src + i), __ATOMIC_ACQUIRE);
        std::memcpy(dst + i, &v, 8);
    }
    for (; i < len; i++)
        dst[i] = __atomic_load_n(src + i, __ATOMIC_ACQUIRE);
}

void mem_store(uint8_t *dst, const uint8_t *src, size_t len)
{
    size_t i = 0;
    for (; i < len && (reinterpret_cast<uintptr_t>(dst + i) & 7); i++)
        __atomic_store_n(dst + i, src[i], __ATOMIC_RELAXED);
    for (; i + 8 <= len; i += 8) {
        uint64_t v;
        std::memcpy(&v, src + i, 8);
        __atomic_store_n(reinterpret_cast<uint64_t *>(dst + i), v, __ATOMIC_RELAXED);
    }
    for (; i < len; i++)
        __atomic_store_n(dst + i, src[i], __ATOMIC_RELAXED);
}

uint8_t unreach_info(uint16_t fabric_status)
{
    switch (fabric_status) {
    case RKF_ST_NOROUTE:
        return RMC_INFO_NOROUTE;
    case RKF_ST_NODE_GONE:
        return RMC_INFO_NODE_GONE;
    case RKF_ST_CONGESTED:
        return RMC_INFO_CONGESTED;
    case RKF_ST_LINK_DOWN:
        return RMC_INFO_LINK_DOWN;
    default:
        return RMC_INFO_BAD_REPLY; // BAD_FRAME, REFUSED: the peer did not understand us
    }
}

unsigned status_counter(uint8_t st)
{
    switch (st) {
    case RMC_ST_OK:
        return RMC_CNT_ST_OK;
    case RMC_ST_SABRE_ABORT:
        return RMC_CNT_ST_ABORT;
    case RMC_ST_REMOTE_ACCESS:
        return RMC_CNT_ST_REMOTE;
    case RMC_ST_BAD_REQUEST:
        return RMC_CNT_ST_BAD;
    default:
        return RMC_CNT_ST_UNREACH; // UNREACHABLE, UNCERTAIN
    }
}

constexpr uint32_t kFramesPerRound = 64; // frames one RGP round sends before it looks again
constexpr uint32_t kFetchPerQp = 16;     // WQEs one QP may have fetched per round (fairness)

} // namespace

RmcFabric RmcFabric::from_endpoint(RkFabricEndpoint *ep)
{
    RmcFabric fab;
    if (!ep) return fab;
    fab.send = [ep](rkf_frame_hdr &h, const void *p) { return rk_fabric_endpoint_send(ep, &h, p); };
    fab.reply = [ep](const rkf_frame_hdr &req, uint16_t st, const void *p, uint16_t len) {
        return rk_fabric_endpoint_reply(ep, &req, st, p, len);
    };
    fab.up = [ep] { return rk_fabric_endpoint_up(ep) != 0; };
    return fab;
}

// The direct path over the node's remote memory (its peers' RAM files, docs/sonuma.md "Direct
// path"): on when the machine turned it on there (ram-dir), and RmcConfig::direct.
RmcDirect RmcDirect::from_rmem(RkRemoteMem *m)
{
    RmcDirect direct;
    if (!m) return direct;
    direct.own = static_cast<rmc_pub *>(rk_rmem_tail_area(m, RK_RMEM_TAIL_RMC_OFF, RK_RMEM_TAIL_RMC_SIZE));
    if (direct.own) {
        direct.run = [m](unsigned node, rk_rmem_direct_fn fn, void *opaque, int *ret) {
            return rk_rmem_direct_run(m, node, fn, opaque, ret);
        };
    }
    return direct;
}

Rmc::Rmc(const RmcConfig &cfg, Host host, RmcFabric fabric, RmcDirect direct)
    : cfg_(cfg), host_(host), fab_(fabric.send ? std::move(fabric) : RmcFabric::from_endpoint(host.ep())),
      direct_(direct.run || direct.own ? std::move(direct) : RmcDirect::from_rmem(host.rmem())),
      node_id_(host.node_id()), node_count_(std::max(1u, host.node_count())),
      sabre_(cfg.timing.att_entries, cfg.timing.sb_depth), window_(node_count_, 0),
      bank_(std::make_unique<Bank>())
{
    if (!cfg_.direct) direct_.run = nullptr; // this node reads over the fabric (and says so: below)
    if (direct_.own) {
        std::lock_guard lk(mu_);
        pub_rd_base_ = __atomic_load_n(&direct_.own->srv_rd_blocks, __ATOMIC_RELAXED);
        publish_locked();
        fabric::publish_table(direct_.own->magic, RMC_PUB_MAGIC);
    }
    rgp_ = std::thread([this] {
        host_.thread(true); // QEMU: an RCU reader (the RGP maps and reads guest memory)
        rgp_main();
        host_.thread(false);
    });
}

// The table peers read before they read this node's memory directly (rmc_pub.h): this thread is
// its seqlock's only writer (mu_ held; hw/fabric/seqlock.h). Called after every change of
// CTRL.EN, a context, the run state (pause), reset and load. A reader that saw the old table
// and copied data discards the copy unless copy_valid says no write section began before the
// copy ended, so a context withdrawn (or re-keyed, or the RMC disabled, or the VM stopped)
// serves no direct read after the register write that changed it returned.
void Rmc::publish_locked()
{
    rmc_pub *p = direct_.own;
    if (!p) return;
    fabric::Seqlock lock(p->seq);
    lock.write_begin();
    const bool serving = cfg_.direct && (ctrl_ & RMC_CTRL_EN) && !paused_;
    fabric::shared_store(p->flags, (serving ? RMC_PUB_F_SERVING : 0u) |
                                       (cfg_.timing.llc_resident ? RMC_PUB_F_LLC : 0u));
    for (unsigned c = 0; c < RMC_CTX_COUNT; c++) {
        const Ctx &x = ctxs_[c];
        const rmc_pub_ctx e{
            x.valid() ? uint64_t(CTX_CTRL_VALID) : 0, x.base, x.size, x.perm, x.nodemask, x.key};
        fabric::shared_store(p->ctx[c], e);
    }
    lock.write_end();
}

Rmc::~Rmc()
{
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    idle_cv_.notify_all();
    rgp_.join();
}

void Rmc::gerr(const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    count(RMC_CNT_GUEST_ERRORS);
    host_.guest_error(buf); // the host prefixes the device's name and node
}

// ---------------------------------------------------------------------------------------------
// Guest memory through the host: a mapping for the duration of one access, else DMA.

Status Rmc::mem_read(uint64_t addr, void *dst, uint64_t len) const
{
    auto *d = static_cast<uint8_t *>(dst);
    while (len) {
        uint64_t n = len;
        void *p = host_.dma_map(addr, n, false);
        if (!p || n == 0 || n > len) {
            host_.dma_unmap(p, n, false, 0);
            return host_.dma_read(addr, d, len);
        }
        mem_load(d, static_cast<const uint8_t *>(p), size_t(n));
        host_.dma_unmap(p, n, false, n);
        addr += n;
        d += n;
        len -= n;
    }
    return RK_OK;
}

Status Rmc::mem_write(uint64_t addr, const void *src, uint64_t len) const
{
    const auto *s = static_cast<const uint8_t *>(src);
    while (len) {
        uint64_t n = len;
        void *p = host_.dma_map(addr, n, true);
        if (!p || n == 0 || n > len) {
            host_.dma_unmap(p, n, true, 0);
            return host_.dma_write(addr, s, len);
        }
        mem_store(static_cast<uint8_t *>(p), s, size_t(n));
        host_.dma_unmap(p, n, true, n);
        addr += n;
        s += n;
        len -= n;
    }
    return RK_OK;
}

// What "entirely in RAM" means now: the host maps every byte of it for writing (RAM, not a
// device, not the global address space window). Nothing is accessed.
bool Rmc::mappable(uint64_t addr, uint64_t len) const
{
    if (addr > UINT64_MAX - len) return false;
    while (len) {
        uint64_t n = len;
        void *p = host_.dma_map(addr, n, true);
        if (!p) return false;
        host_.dma_unmap(p, n, true, 0);
        if (n == 0 || n > len) return false;
        addr += n;
        len -= n;
    }
    return true;
}

void Rmc::kick()
{
    {
        std::lock_guard lk(mu_);
        kicked_ = true;
    }
    cv_.notify_one();
}

void Rmc::notify_irq()
{
    std::lock_guard lk(mu_);
    host_.set_irq(0, irq_level_locked());
}

uint64_t Rmc::counter(unsigned off) const
{
    std::lock_guard lk(mu_);
    return counter_locked(off);
}

uint64_t Rmc::counter_locked(unsigned off) const
{
    // The R2P2's SABRe counters live in the ATT model; the rest here.
    R2p2Counters c = sabre_.counters(), b = sabre_base_;
    switch (off) {
    case RMC_CNT_SABRE_REG:
        return c.sabre_reg - b.sabre_reg;
    case RMC_CNT_SABRE_OK:
        return c.sabre_ok - b.sabre_ok;
    case RMC_CNT_ABORT_LOCKED:
        return c.abort_locked - b.abort_locked;
    case RMC_CNT_ABORT_WINDOW:
        return c.abort_window - b.abort_window;
    case RMC_CNT_ABORT_VALIDATE:
        return c.abort_validate - b.abort_validate;
    case RMC_CNT_VALIDATE_STAGE:
        return c.validate_stage - b.validate_stage;
    case RMC_CNT_INVAL_IGNORED:
        return c.inval_ignored - b.inval_ignored;
    case RMC_CNT_ATT_STALLS:
        return c.att_stalls - b.att_stalls;
    case RMC_CNT_SB_STALLS:
        return c.sb_stalls - b.sb_stalls;
    case RMC_CNT_SPEC_BLOCKS:
        return c.spec_blocks - b.spec_blocks;
    case RMC_CNT_SRV_RD_BLOCKS: // + the blocks that peers read directly (counted in the table)
        return cnt_[off / 8].load(std::memory_order_relaxed) +
               (direct_.own ? __atomic_load_n(&direct_.own->srv_rd_blocks, __ATOMIC_RELAXED) - pub_rd_base_
                            : 0);
    default:
        return off / 8 < RMC_CNT_COUNT ? cnt_[off / 8].load(std::memory_order_relaxed) : 0;
    }
}

bool Rmc::irq_level(unsigned line) const
{
    std::lock_guard lk(mu_);
    return line == 0 && irq_level_locked();
}

// ---------------------------------------------------------------------------------------------
// Registers

uint64_t Rmc::qp_status(const Qp &qp)
{
    return (qp.err ? QP_ST_ERR : 0) | (qp.cfg_err ? QP_ST_CFG_ERR : 0) | (qp.inflight ? QP_ST_BUSY : 0) |
           (uint64_t(qp.inflight) << 32);
}

// Forget the frames of transfer `id` still in flight: their late answers become strays.
void Rmc::cancel_pending_locked(uint64_t id)
{
    for (auto p = pending_.begin(); p != pending_.end();) {
        if (p->second.xfer == id) {
            window_[p->second.dst] -= std::min(window_[p->second.dst], p->second.blocks);
            p = pending_.erase(p);
        } else {
            ++p;
        }
    }
}

// The register bank: one table for the global registers, the QP and context tables (register
// arrays, the element index is the QP or context), the counters (one row per counter, from
// RMC_COUNTER_TABLE) and the doorbell pages. Hooks run with mu_ held (and srv_mu_ held
// exclusively for writes to CTRL and the context table, so no request of another node is being
// served meanwhile).
struct RmcWrite {
    bool wake = false; // kick the RGP
};

struct RmcRegs {
    using R = Reg<Rmc, RmcWrite>;
    static const R table[];
    static const size_t size;

    static uint64_t qp_cfg_read(Rmc &d, uint64_t Rmc::Qp::*f, unsigned q) { return d.qps_[q].*f; }
    static void qp_cfg_write(Rmc &d, const R &r, unsigned q, uint64_t Rmc::Qp::*f, uint64_t v)
    {
        Rmc::Qp &qp = d.qps_[q];
        if (qp.enabled()) {
            d.gerr("QP %u: %s is read-only while the QP is enabled; write ignored", q, r.name);
            return;
        }
        qp.*f = v;
    }
    static void ctx_cfg_write(Rmc &d, const R &r, unsigned c, uint64_t Rmc::Ctx::*f, uint64_t v)
    {
        Rmc::Ctx &cx = d.ctxs_[c];
        if (cx.valid()) {
            d.gerr("context %u: %s is read-only while the context is valid; write ignored", c, r.name);
            return;
        }
        cx.*f = v;
    }
    static void ctrl_write(Rmc &d, uint64_t v)
    {
        if (v & ~uint64_t(RMC_CTRL_EN | RMC_CTRL_CNT_CLEAR))
            d.gerr("CTRL: reserved bits 0x%llx ignored",
                   (unsigned long long)(v & ~uint64_t(RMC_CTRL_EN | RMC_CTRL_CNT_CLEAR)));
        if (v & RMC_CTRL_CNT_CLEAR) {
            for (auto &c : d.cnt_)
                c.store(0, std::memory_order_relaxed);
            d.sabre_base_ = d.sabre_.counters();
            if (d.direct_.own)
                d.pub_rd_base_ = __atomic_load_n(&d.direct_.own->srv_rd_blocks, __ATOMIC_RELAXED);
        }
        d.ctrl_ = v & RMC_CTRL_EN;
    }
    static void qp_ctrl_write(Rmc &d, unsigned q, uint64_t v)
    {
        Rmc::Qp &qp = d.qps_[q];
        if (v & ~uint64_t(QP_CTRL_EN | QP_CTRL_IRQ_EN))
            d.gerr("QP %u CTRL: reserved bits 0x%llx ignored", q,
                   (unsigned long long)(v & ~uint64_t(QP_CTRL_EN | QP_CTRL_IRQ_EN)));
        bool en = v & QP_CTRL_EN;
        if (en && !qp.enabled()) {
            const char *why = nullptr;
            uint64_t n = 1ull << std::min<uint64_t>(qp.depth_log2, 63);
            if (qp.depth_log2 < RMC_DEPTH_LOG2_MIN || qp.depth_log2 > RMC_DEPTH_LOG2_MAX)
                why = "DEPTH_LOG2 out of range 1..12";
            else if ((qp.wq_base | qp.cq_base) % 64)
                why = "WQ_BASE/CQ_BASE not 64-byte aligned";
            else if (!d.mappable(qp.wq_base, n * RMC_WQE_SIZE))
                why = "the WQ is not entirely in RAM";
            else if (!d.mappable(qp.cq_base, n * RMC_CQE_SIZE))
                why = "the CQ is not entirely in RAM";
            else if (qp.ctx >= RMC_CTX_COUNT || !d.ctxs_[qp.ctx].valid())
                why = "QP_CTX names no valid context";
            if (why) {
                d.gerr("QP %u: enable refused: %s", q, why);
                qp.cfg_err = true;
                qp.ctrl = v & QP_CTRL_IRQ_EN;
            } else {
                qp.cfg_err = qp.err = false;
                qp.wq_tail = qp.wq_head = qp.cq_head = qp.cq_tail = 0;
                qp.ctrl = v & (QP_CTRL_EN | QP_CTRL_IRQ_EN);
            }
        } else if (!en && qp.enabled()) {
            d.orphan_qp_locked(q);
            qp.ctrl = v & QP_CTRL_IRQ_EN;
            d.irq_status_ &= ~(1ull << q);
        } else {
            qp.ctrl = (qp.ctrl & QP_CTRL_EN) | (v & QP_CTRL_IRQ_EN);
        }
    }
    static void ctx_ctrl_write(Rmc &d, unsigned c, uint64_t v)
    {
        Rmc::Ctx &cx = d.ctxs_[c];
        if (v & ~uint64_t(CTX_CTRL_VALID))
            d.gerr("context %u CTRL: reserved bits 0x%llx ignored", c,
                   (unsigned long long)(v & ~uint64_t(CTX_CTRL_VALID)));
        bool valid = v & CTX_CTRL_VALID;
        if (valid && !cx.valid()) {
            const char *why = nullptr;
            unsigned vo = unsigned(cx.layout & CTX_LAYOUT_VER_OFF_MASK);
            if (cx.base % 64)
                why = "CTX_BASE not 64-byte aligned";
            else if (!cx.size || cx.size % 64)
                why = "CTX_SIZE not a non-zero multiple of 64";
            else if (!d.mappable(cx.base, cx.size))
                why = "the segment is not entirely in RAM";
            else if (cx.perm & ~uint64_t(CTX_PERM_READ | CTX_PERM_WRITE | CTX_PERM_ATOMIC | CTX_PERM_SABRE))
                why = "CTX_PERM has unknown bits";
            else if ((cx.layout & CTX_LAYOUT_VALID) && (vo % 8 || vo > 56))
                why = "CTX_LAYOUT version offset not a multiple of 8 in 0..56";
            else if (cx.layout & ~uint64_t(CTX_LAYOUT_VALID | CTX_LAYOUT_VER_OFF_MASK))
                why = "CTX_LAYOUT has unknown bits";
            if (why) {
                d.gerr("context %u: enable refused: %s", c, why);
                cx.cfg_err = true;
            } else {
                cx.cfg_err = false;
                cx.ctrl = CTX_CTRL_VALID;
            }
        } else if (!valid && cx.valid()) {
            d.orphan_ctx_locked(c);
            cx.ctrl = 0;
        }
    }
    static void db_write(Rmc &d, unsigned q, uint64_t v, bool wq_tail, RmcWrite &w)
    {
        Rmc::Qp &qp = d.qps_[q];
        uint32_t idx = uint32_t(v);
        if (!qp.enabled()) {
            d.gerr("doorbell of QP %u ignored: the QP is not enabled", q);
        } else if (wq_tail) {
            if (!(d.ctrl_ & RMC_CTRL_EN)) {
                d.gerr("doorbell of QP %u ignored: the RMC is disabled (CTRL.EN clear)", q);
            } else if (v > 0xffffffffull || uint32_t(idx - qp.wq_head) > qp.depth() ||
                       uint32_t(idx - qp.wq_head) < uint32_t(qp.wq_tail - qp.wq_head)) {
                d.gerr("QP %u: WQ tail %llu refused (head %u, tail %u, depth %u)", q, (unsigned long long)v,
                       qp.wq_head, qp.wq_tail, qp.depth());
            } else {
                qp.wq_tail = idx;
                w.wake = d.kicked_ = true;
            }
        } else if (v > 0xffffffffull || uint32_t(idx - qp.cq_head) > uint32_t(qp.cq_tail - qp.cq_head)) {
            d.gerr("QP %u: CQ head %llu refused (head %u, tail %u)", q, (unsigned long long)v, qp.cq_head,
                   qp.cq_tail);
        } else {
            qp.cq_head = idx;
            w.wake = d.kicked_ = true;
        }
    }
};

struct Rmc::Bank : RegBank<Rmc, RmcWrite> {
    Bank() : RegBank(std::span<const RmcRegs::R>(RmcRegs::table, RmcRegs::size)) {}
};

// Row builders (captureless lambdas become the hooks).
#define RMC_RO(name, off, expr) \
    RmcRegs::R \
    { \
        name, off, 8, RegAccess::RO, 0, 0, \
            [](Rmc &d, const RmcRegs::R &, unsigned, RmcWrite &) -> uint64_t { \
                (void)d; \
                return (expr); \
            } \
    }
#define RMC_QP_ROW(name, off, access, rd, wr) \
    RmcRegs::R \
    { \
        name, RMC_QP_TABLE + (off), 8, RegAccess::access, 0, ~0ull, rd, wr, RMC_QP_COUNT, RMC_QP_STRIDE \
    }
#define RMC_QP_CFG(name, off, field) \
    RMC_QP_ROW( \
        name, off, RW, \
        [](Rmc &d, const RmcRegs::R &, unsigned q, RmcWrite &) { \
            return RmcRegs::qp_cfg_read(d, &Rmc::Qp::field, q); \
        }, \
        [](Rmc &d, const RmcRegs::R &r, unsigned q, uint64_t, uint64_t v, RmcWrite &) { \
            RmcRegs::qp_cfg_write(d, r, q, &Rmc::Qp::field, v); \
        })
#define RMC_CTX_ROW(name, off, access, rd, wr) \
    RmcRegs::R \
    { \
        name, RMC_CTX_TABLE + (off), 8, RegAccess::access, 0, ~0ull, rd, wr, RMC_CTX_COUNT, RMC_CTX_STRIDE \
    }
#define RMC_CTX_CFG(name, off, field, rd) \
    RMC_CTX_ROW(name, off, RW, rd, \
                [](Rmc &d, const RmcRegs::R &r, unsigned c, uint64_t, uint64_t v, RmcWrite &) { \
                    RmcRegs::ctx_cfg_write(d, r, c, &Rmc::Ctx::field, v); \
                })
#define RMC_CTX_READ(field) \
    [](Rmc &d, const RmcRegs::R &, unsigned c, RmcWrite &) -> uint64_t { return d.ctxs_[c].field; }
#define RMC_DB_ROW(name, off, access, rd, wr) \
    RmcRegs::R \
    { \
        name, RMC_DB_BASE + (off), 8, RegAccess::access, 0, ~0ull, rd, wr, RMC_QP_COUNT, RMC_DB_STRIDE \
    }
#define RMC_QP_READ(expr) \
    [](Rmc &d, const RmcRegs::R &, unsigned q, RmcWrite &) -> uint64_t { return (expr); }
#define RMC_CNT_ROW(N, n, desc) \
    RmcRegs::R{"CNT_" #N, \
               RMC_COUNTERS + RMC_CNT_##N, \
               8, \
               RegAccess::RO, \
               0, \
               0, \
               [](Rmc &d, const RmcRegs::R &r, unsigned, RmcWrite &) -> uint64_t { \
                   return d.counter_locked(unsigned(r.offset - RMC_COUNTERS)); \
               }},

const RmcRegs::R RmcRegs::table[] = {
    RMC_RO("ID", RMC_REG_ID, RMC_ID_VALUE),
    RMC_RO("NODE_ID", RMC_REG_NODE_ID, d.node_id_),
    RMC_RO("NODE_COUNT", RMC_REG_NODE_COUNT, d.node_count_),
    RMC_RO("QP_COUNT", RMC_REG_QP_COUNT, RMC_QP_COUNT),
    RMC_RO("CTX_COUNT", RMC_REG_CTX_COUNT, RMC_CTX_COUNT),
    RMC_RO("ATT_ENTRIES", RMC_REG_ATT_ENTRIES, d.cfg_.timing.att_entries),
    RMC_RO("SB_DEPTH", RMC_REG_SB_DEPTH, d.cfg_.timing.sb_depth),
    R{"CTRL", RMC_REG_CTRL, 8, RegAccess::RW, 0, ~0ull,
      [](Rmc &d, const R &, unsigned, RmcWrite &) -> uint64_t { return d.ctrl_; },
      [](Rmc &d, const R &, unsigned, uint64_t, uint64_t v, RmcWrite &w) {
          ctrl_write(d, v);
          w.wake = d.kicked_ = true;
      }},
    RMC_RO("STATUS", RMC_REG_STATUS,
           (d.cfg_.speculation ? RMC_STATUS_SPEC : 0u) | (d.fabric_up() ? RMC_STATUS_FABRIC_UP : 0u) |
               (d.cfg_.timing.llc_resident ? RMC_STATUS_LLC : 0u)),
    R{"IRQ_STATUS", RMC_REG_IRQ_STATUS, 8, RegAccess::W1C, 0, ~0ull,
      [](Rmc &d, const R &, unsigned, RmcWrite &) -> uint64_t { return d.irq_status_; },
      [](Rmc &d, const R &, unsigned, uint64_t merged, uint64_t, RmcWrite &) { d.irq_status_ = merged; }},
    RMC_RO("SEG_BASE", RMC_REG_SEG_BASE, d.cfg_.seg_base),
    RMC_RO("SEG_SIZE", RMC_REG_SEG_SIZE, d.cfg_.seg_size),
    RMC_RO("T_RMC_MHZ", RMC_REG_T_RMC_MHZ, d.cfg_.timing.rmc_mhz),
    RMC_RO("T_MEM_NS", RMC_REG_T_MEM_NS, d.cfg_.timing.mem_ns),
    RMC_RO("T_LLC_NS", RMC_REG_T_LLC_NS, d.cfg_.timing.llc_ns),
    RMC_RO("T_HOP_NS", RMC_REG_T_HOP_NS, d.cfg_.timing.hop_ns),
    RMC_RO("T_HOPS", RMC_REG_T_HOPS, d.cfg_.timing.hops),
    RMC_RO("T_LINK_GBPS", RMC_REG_T_LINK_GBPS, d.cfg_.timing.link_gbps),
    RMC_RO("T_R2P2_GBPS", RMC_REG_T_R2P2_GBPS, d.cfg_.timing.r2p2_gbps),
    RMC_RO("T_R2P2_COUNT", RMC_REG_T_R2P2_COUNT, d.cfg_.timing.r2p2_count),
    RMC_RO("T_ISSUE_CYC", RMC_REG_T_ISSUE_CYC, d.cfg_.timing.issue_cycles),
    RMC_RO("TIMEOUT_MS", RMC_REG_TIMEOUT_MS, d.cfg_.timeout_ms),
    RMC_RO("WINDOW_BLOCKS", RMC_REG_WINDOW_BLOCKS, d.cfg_.window_blocks),

    RMC_QP_CFG("QP_WQ_BASE", QP_WQ_BASE, wq_base),
    RMC_QP_CFG("QP_CQ_BASE", QP_CQ_BASE, cq_base),
    RMC_QP_CFG("QP_DEPTH_LOG2", QP_DEPTH_LOG2, depth_log2),
    RMC_QP_CFG("QP_CTX", QP_CTX, ctx),
    RMC_QP_ROW(
        "QP_CTRL", QP_CTRL, RW, RMC_QP_READ(d.qps_[q].ctrl),
        [](Rmc &d, const R &, unsigned q, uint64_t, uint64_t v, RmcWrite &) { qp_ctrl_write(d, q, v); }),
    RMC_QP_ROW("QP_STATUS", QP_STATUS, RO, RMC_QP_READ(Rmc::qp_status(d.qps_[q])), nullptr),
    RMC_QP_ROW("QP_WQ_HEAD", QP_WQ_HEAD, RO, RMC_QP_READ(d.qps_[q].wq_head), nullptr),
    RMC_QP_ROW("QP_CQ_TAIL", QP_CQ_TAIL, RO, RMC_QP_READ(d.qps_[q].cq_tail), nullptr),

    RMC_CTX_CFG("CTX_BASE", CTX_BASE, base, RMC_CTX_READ(base)),
    RMC_CTX_CFG("CTX_SIZE", CTX_SIZE, size, RMC_CTX_READ(size)),
    RMC_CTX_CFG("CTX_PERM", CTX_PERM, perm, RMC_CTX_READ(perm)),
    RMC_CTX_CFG("CTX_NODEMASK", CTX_NODEMASK, nodemask, RMC_CTX_READ(nodemask)),
    RMC_CTX_CFG("CTX_LAYOUT", CTX_LAYOUT, layout, RMC_CTX_READ(layout)),
    RMC_CTX_ROW(
        "CTX_CTRL", CTX_CTRL, RW, RMC_CTX_READ(ctrl),
        [](Rmc &d, const R &, unsigned c, uint64_t, uint64_t v, RmcWrite &) { ctx_ctrl_write(d, c, v); }),
    RMC_CTX_ROW(
        "CTX_STATUS", CTX_STATUS, RO,
        [](Rmc &d, const R &, unsigned c,
           RmcWrite &) -> uint64_t { return d.ctxs_[c].cfg_err ? CTX_ST_CFG_ERR : 0; },
        nullptr),
    // write-only: reads 0
    RMC_CTX_CFG("CTX_KEY", CTX_KEY, key,
                [](Rmc &, const R &, unsigned, RmcWrite &) -> uint64_t { return 0; }),

    RMC_COUNTER_TABLE(RMC_CNT_ROW)

        RMC_DB_ROW("DB_WQ_TAIL", DB_WQ_TAIL, RW, RMC_QP_READ(d.qps_[q].wq_tail),
                   [](Rmc &d, const R &, unsigned q, uint64_t, uint64_t v, RmcWrite &w) {
                       db_write(d, q, v, true, w);
                   }),
    RMC_DB_ROW("DB_CQ_HEAD", DB_CQ_HEAD, RW, RMC_QP_READ(d.qps_[q].cq_head),
               [](Rmc &d, const R &, unsigned q, uint64_t, uint64_t v, RmcWrite &w) {
                   db_write(d, q, v, false, w);
               }),
    RMC_DB_ROW("DB_WQ_HEAD", DB_WQ_HEAD, RO, RMC_QP_READ(d.qps_[q].wq_head), nullptr),
    RMC_DB_ROW("DB_CQ_TAIL", DB_CQ_TAIL, RO, RMC_QP_READ(d.qps_[q].cq_tail), nullptr),
    RMC_DB_ROW("DB_STATUS", DB_STATUS, RO, RMC_QP_READ(Rmc::qp_status(d.qps_[q])), nullptr),
};
const size_t RmcRegs::size = sizeof(RmcRegs::table) / sizeof(RmcRegs::table[0]);

#undef RMC_RO
#undef RMC_QP_ROW
#undef RMC_QP_CFG
#undef RMC_CTX_ROW
#undef RMC_CTX_CFG
#undef RMC_CTX_READ
#undef RMC_DB_ROW
#undef RMC_QP_READ
#undef RMC_CNT_ROW

std::string Rmc::reg_name(uint64_t off) const
{
    return bank_->describe(off);
}

bool Rmc::fabric_up() const
{
    if (!fab_.send) return false;
    return fab_.up ? fab_.up() : true;
}

uint64_t Rmc::mmio_read(uint64_t off, unsigned size)
{
    if (size != 8 || (off & 7)) {
        gerr("%u-byte read at 0x%llx: registers are 64-bit, aligned (reads 0)", size,
             (unsigned long long)off);
        return 0;
    }
    RmcWrite w;
    uint64_t v = 0;
    std::lock_guard lk(mu_);
    (void)bank_->read(*this, off, size, w, v); // unmapped offsets read 0
    return v;
}

void Rmc::mmio_write(uint64_t off, uint64_t v, unsigned size)
{
    if (size != 8 || (off & 7)) {
        gerr("%u-byte write at 0x%llx ignored: registers are 64-bit, aligned", size, (unsigned long long)off);
        return;
    }
    RmcWrite w;
    RegResult res;
    {
        // CTRL (EN) and the context table change what the R2P2 serves: no request of another
        // node is being served meanwhile.
        std::unique_lock<std::shared_mutex> srv(srv_mu_, std::defer_lock);
        if (off == RMC_REG_CTRL ||
            (off >= RMC_CTX_TABLE && off < RMC_CTX_TABLE + RMC_CTX_COUNT * RMC_CTX_STRIDE))
            srv.lock();
        std::lock_guard lk(mu_);
        res = bank_->write(*this, off, v, size, w);
        if (srv.owns_lock()) publish_locked();
    }
    if (res == RegResult::ReadOnly)
        gerr("write of 0x%llx to read-only register %s ignored", (unsigned long long)v,
             reg_name(off).c_str());
    else if (res == RegResult::Unmapped)
        gerr("write of 0x%llx to unknown offset 0x%llx ignored", (unsigned long long)v,
             (unsigned long long)off);
    if (w.wake) rgp_inline(); // a doorbell: the request path runs here, on the writing thread
    notify_irq();             // IRQ_STATUS, CTRL.EN, a QP's IRQ_EN, completions (orphaned, inline)
}

void Rmc::reset()
{
    {
        std::unique_lock srv(srv_mu_);
        std::lock_guard lk(mu_);
        for (unsigned q = 0; q < RMC_QP_COUNT; q++) {
            if (qps_[q].enabled()) orphan_qp_locked(q);
            uint32_t gen = qps_[q].gen;
            qps_[q] = Qp{};
            qps_[q].gen = gen + 1;
        }
        for (unsigned c = 0; c < RMC_CTX_COUNT; c++) {
            if (ctxs_[c].valid()) orphan_ctx_locked(c);
            uint32_t gen = ctxs_[c].gen;
            ctxs_[c] = Ctx{};
            ctxs_[c].gen = gen + 1;
        }
        ctrl_ = 0;
        irq_status_ = 0;
        bank_->reset();
        publish_locked();
    }
    for (auto &c : cnt_)
        c.store(0, std::memory_order_relaxed);
    {
        std::lock_guard lk(mu_);
        sabre_base_ = sabre_.counters();
        if (direct_.own) pub_rd_base_ = __atomic_load_n(&direct_.own->srv_rd_blocks, __ATOMIC_RELAXED);
    }
    notify_irq();
}

// ---------------------------------------------------------------------------------------------
// Orphaning: a QP or context that goes away takes its transfers with it. Their frames stay in
// the pending table's past: late data and replies find no tag and are counted as strays.

void Rmc::orphan_qp_locked(unsigned q)
{
    Qp &qp = qps_[q];
    for (auto it = xfers_.begin(); it != xfers_.end();) {
        if (it->second.qp == q) {
            uint64_t id = it->first;
            cancel_pending_locked(id);
            it = xfers_.erase(it);
        } else {
            ++it;
        }
    }
    qp.inflight = 0;
    qp.gen++;
}

void Rmc::orphan_ctx_locked(unsigned c)
{
    for (unsigned q = 0; q < RMC_QP_COUNT; q++) {
        if (qps_[q].enabled() && qps_[q].ctx == c && qps_[q].inflight) {
            // The local buffers are gone: the QP's in-flight transfers complete as nothing. The QP
            // stays enabled; its next requests complete BAD_REQUEST/NO_LOCAL_CTX.
            for (auto it = xfers_.begin(); it != xfers_.end(); ++it) {
                if (it->second.qp != q) continue;
                uint64_t id = it->first;
                cancel_pending_locked(id);
                it->second.unsent.clear();
                it->second.outstanding = 0;
                if (it->second.status == RMC_ST_OK) {
                    it->second.status = RMC_ST_BAD_REQUEST;
                    it->second.info = RMC_INFO_NO_LOCAL_CTX;
                }
            }
            // complete them (CQEs are in the QP's own memory, which is still there)
            for (auto it = xfers_.begin(); it != xfers_.end();) {
                auto next = std::next(it);
                if (it->second.qp == q) finish_locked(it->second);
                it = next;
            }
        }
    }
    ctxs_[c].gen++;
}

// ---------------------------------------------------------------------------------------------
// RGP

void Rmc::rgp_main()
{
    Frames out;
    for (;;) {
        bool notify = false;
        {
            std::unique_lock lk(mu_);
            for (;;) {
                if (stop_) return;
                if (paused_) {
                    cv_.wait(lk, [this] { return stop_ || !paused_; });
                    continue;
                }
                check_timeouts_locked(host_.now_ns());
                out.clear();
                kicked_ = false;
                // Another thread (a doorbell's inline round) is sending: fetch now, send later
                // (the kick it leaves, or its own rounds, take the frames in order).
                bool work = false;
                if (sending_) {
                    fetch_round();
                } else {
                    work = rgp_round(out);
                }
                // Every CQE this thread wrote (timeouts, requests refused at fetch) notifies the
                // host like the RCP's do: an interrupt waiter must not sleep past its completion.
                if (cqe_seq_ != irq_seq_) {
                    irq_seq_ = cqe_seq_;
                    notify = true;
                }
                if (work) sending_ = true;
                if (work || notify) break;
                if (kicked_) continue;
                // Sleep until a doorbell, a completion or the next deadline.
                uint64_t next = UINT64_MAX;
                for (auto &[id, t] : xfers_)
                    next = std::min(next, t.deadline_ns);
                if (sending_) {
                    idle_cv_.wait(lk, [this] { return stop_ || kicked_ || !sending_; });
                } else if (next == UINT64_MAX) {
                    rgp_sleeps_forever_ = true;
                    cv_.wait(lk, [this] { return stop_ || kicked_; });
                    rgp_sleeps_forever_ = false;
                } else {
                    // a host timer only: the deadline is checked against host.now_ns() again (the
                    // VM's clock runs at host speed while the VM runs; under qtest it moves only
                    // when the test steps it, so this re-checks every deadline's distance)
                    uint64_t now = host_.now_ns();
                    auto d =
                        std::chrono::nanoseconds(next > now ? next - now : 0) + std::chrono::milliseconds(1);
                    cv_.wait_for(lk, d, [this] { return stop_ || kicked_; });
                }
            }
        }
        if (notify) notify_irq();
        if (!out.empty()) send_frames(out);
    }
}

// Send the frames a round took (no lock held; this thread set sending_), then clear sending_.
void Rmc::send_frames(Frames &out)
{
    for (auto &[f, local] : out) {
        if (local) {
            // This node's own R2P2 answers straight into this node's RCP.
            Sink sink;
            sink.msg = [this](rkf_frame_hdr &h, const void *p) {
                h.src = uint16_t(node_id_);
                rcp_data(h, static_cast<const uint8_t *>(p), true);
            };
            const rkf_frame_hdr req = f.hdr;
            sink.reply = [this, &req](uint16_t st, const void *p, uint16_t len) {
                rkf_frame_hdr h = req;
                h.src = uint16_t(node_id_);
                h.type = RKF_T_REPLY;
                h.status = st;
                h.len = len;
                rcp_reply(h, static_cast<const uint8_t *>(p), true);
            };
            serve(f.hdr, f.payload.data(), sink, true);
        } else {
            int rc = fab_.send ? fab_.send(f.hdr, f.payload.data()) : -ENOTCONN;
            if (rc) {
                frame_failed(f.hdr.tag, RMC_ST_UNREACHABLE,
                             rc == -EAGAIN ? RMC_INFO_CONGESTED : RMC_INFO_LINK_DOWN);
            }
        }
    }
    out.clear();
    {
        std::lock_guard lk(mu_);
        sending_ = false;
    }
    idle_cv_.notify_all();
}

// A doorbell (WQ tail or CQ head) runs the RGP's round on the writing thread (a vCPU in its MMIO
// store, with QEMU's big lock held): WQE fetch, checks, direct reads completed at once, frames
// unrolled and sent. The RGP thread keeps the rest: timeouts, frames beyond a round or a full
// window, and rounds while another thread is sending.
void Rmc::rgp_inline()
{
    Frames out;
    bool kick = false;
    {
        std::lock_guard lk(mu_);
        if (paused_ || stop_) return;
        const size_t before = xfers_.size();
        if (sending_) {
            fetch_round();
            kick = !xfers_.empty(); // the sender's next round (or the RGP's) takes the frames
        } else {
            sending_ = rgp_round(out);
            // The RGP must know of new transfers if it sleeps without a deadline (their
            // timeouts), and must send what this round left.
            for (auto &[id, t] : xfers_) {
                if (!t.unsent.empty()) kick = true;
            }
            for (const Qp &qp : qps_) { // WQEs beyond a round's share of a QP
                if (qp.enabled() && !qp.err && qp.wq_head != qp.wq_tail &&
                    uint32_t(qp.wq_head - qp.cq_head) < qp.depth())
                    kick = true;
            }
            if (xfers_.size() > before && rgp_sleeps_forever_) kick = true;
        }
        if (cqe_seq_ != irq_seq_) irq_seq_ = cqe_seq_; // the caller notifies (mmio_write)
        if (kick) kicked_ = true;
    }
    if (kick) cv_.notify_one();
    if (!out.empty()) send_frames(out);
}

// One round: fetch WQEs from the QPs (round robin), then move frames into `out` within the
// destinations' windows, registering their tags first (a reply may overtake the send).
bool Rmc::rgp_round(Frames &out)
{
    fetch_round();
    return take_frames(out);
}

void Rmc::fetch_round()
{
    if (ctrl_ & RMC_CTRL_EN) {
        for (unsigned i = 0; i < RMC_QP_COUNT; i++) {
            unsigned q = (rr_qp_ + i) % RMC_QP_COUNT;
            for (uint32_t k = 0; k < kFetchPerQp && fetch_one(q); k++) {
            }
        }
        rr_qp_ = (rr_qp_ + 1) % RMC_QP_COUNT;
    }
}

bool Rmc::take_frames(Frames &out)
{
    for (auto &[id, t] : xfers_) {
        while (!t.unsent.empty() && out.size() < kFramesPerRound) {
            Frame &f = t.unsent.front();
            uint16_t dst = f.hdr.dst;
            if (window_[dst] && window_[dst] + f.blocks > cfg_.window_blocks) break;
            uint64_t tag = next_tag_++;
            f.hdr.tag = tag;
            bool modifies = dst != node_id_ && f.hdr.op >= RKF_OP_RMC_WRITE && f.hdr.op <= RKF_OP_RMC_FAA;
            pending_[tag] = Pending{id, f.xoff, f.len, f.blocks, 0, dst, modifies};
            if (modifies) t.maybe_applied++;
            t.frames_sent++;
            window_[dst] += f.blocks;
            t.outstanding++;
            count(RMC_CNT_REQ_FRAMES);
            count(RMC_CNT_REQ_BLOCKS, f.blocks);
            out.emplace_back(std::move(f), dst == node_id_);
            t.unsent.pop_front();
        }
        if (out.size() >= kFramesPerRound) break;
    }
    return !out.empty();
}

bool Rmc::fetch_one(unsigned q)
{
    Qp &qp = qps_[q];
    if (!qp.enabled() || qp.err || qp.wq_head == qp.wq_tail) return false;
    if (uint32_t(qp.wq_head - qp.cq_head) >= qp.depth()) return false; // every request owns a CQ slot
    uint32_t idx = qp.wq_head;
    rmc_wqe w;
    std::atomic_thread_fence(std::memory_order_acquire);
    Status st = mem_read(qp.wq_base + uint64_t(idx & (qp.depth() - 1)) * RMC_WQE_SIZE, &w, sizeof w);
    if (st != RK_OK) {
        // cannot happen once validated (the WQ was RAM at enable): the QP stops
        gerr("QP %u: WQE %u unreadable (%s): the QP stops (QP_ST_ERR)", q, idx, rk_status_name(st));
        qp.err = true;
        return false;
    }
    qp.wq_head++;
    count(RMC_CNT_WQE_FETCHED);

    const Ctx &cx = ctxs_[qp.ctx];
    uint8_t info = RMC_INFO_NONE;
    bool local_buf = w.op == RMC_OP_READ || w.op == RMC_OP_WRITE || w.op == RMC_OP_SABRE;
    if (w.op < RMC_OP_READ || w.op > RMC_OP_SABRE)
        info = RMC_INFO_BAD_OP;
    else if ((w.flags & ~RMC_WQE_F_NOSPEC) || ((w.flags & RMC_WQE_F_NOSPEC) && w.op != RMC_OP_SABRE) ||
             w.reserved[0] || w.reserved[1])
        info = RMC_INFO_RESERVED;
    else if (w.node >= node_count_)
        info = RMC_INFO_BAD_NODE;
    else if ((w.op == RMC_OP_READ || w.op == RMC_OP_WRITE) && (w.length < 1 || w.length > RMC_XFER_MAX))
        info = RMC_INFO_BAD_LEN;
    else if ((w.op == RMC_OP_CAS || w.op == RMC_OP_FAA) && w.length != 8)
        info = RMC_INFO_BAD_LEN;
    else if (w.op == RMC_OP_SABRE && (w.length < 8 || w.length > RMC_SABRE_MAX))
        info = RMC_INFO_BAD_LEN;
    else if (w.remote_off > UINT64_MAX - w.length)
        info = RMC_INFO_BAD_LEN;
    else if (((w.op == RMC_OP_CAS || w.op == RMC_OP_FAA) && w.remote_off % 8) ||
             (w.op == RMC_OP_SABRE && w.remote_off % RMC_BLOCK_SIZE))
        info = RMC_INFO_UNALIGNED;
    else if (!cx.valid())
        info = RMC_INFO_NO_LOCAL_CTX;
    else if (local_buf && (w.local_off > cx.size || w.length > cx.size - w.local_off))
        info = RMC_INFO_LOCAL_BOUNDS;
    if (info != RMC_INFO_NONE) {
        gerr("QP %u WQE %u (op %u, node %u, length %u): bad request, info %u", q, idx, w.op, w.node, w.length,
             info);
        complete_now_locked(q, w, uint16_t(idx), RMC_ST_BAD_REQUEST, info);
        return true;
    }
    static const unsigned op_cnt[] = {
        0, RMC_CNT_OP_READ, RMC_CNT_OP_WRITE, RMC_CNT_OP_CAS, RMC_CNT_OP_FAA, RMC_CNT_OP_SABRE};
    count(op_cnt[w.op]);
    if (w.node != node_id_ && !fabric_up()) {
        complete_now_locked(q, w, uint16_t(idx), RMC_ST_UNREACHABLE,
                            fab_.send ? RMC_INFO_LINK_DOWN : RMC_INFO_NOROUTE);
        return true;
    }
    // The direct path: a READ of another node whose QP has nothing in flight (so it cannot
    // overtake an earlier request of the QP, e.g. a WRITE to the same place) and that fits one
    // wire frame. Anything it cannot complete OK goes over the fabric as before.
    if (w.op == RMC_OP_READ && w.node != node_id_ && direct_.run && qp.inflight == 0 &&
        w.length <= RMC_WIRE_READ_MAX && direct_read_locked(q, w, idx, cx))
        return true;
    if (w.node != node_id_) count(RMC_CNT_FABRIC_REQS);
    uint64_t id = next_xfer_++;
    Transfer &t = xfers_[id];
    t.id = id;
    t.qp = q;
    t.qp_gen = qp.gen;
    t.ctx_gen = cx.gen;
    t.wqe = w;
    t.wq_index = uint16_t(idx);
    t.local_addr = cx.base + w.local_off;
    t.start_ns = host_.now_ns();
    t.deadline_ns = t.start_ns + uint64_t(cfg_.timeout_ms) * 1000000ull;
    build_frames(t);
    qp.inflight++;
    return true;
}

namespace {

// A direct READ as rk_rmem_direct_fn sees it: the request, and the bounce buffer the data goes to
// (never straight into guest memory: a copy the checks below void must leave no trace).
struct DirectRead {
    unsigned src;      // this node (the owner's CTX_NODEMASK bit)
    unsigned ctx;      // the QP's context
    uint64_t key;      // this node's CTX_KEY of it (the request's key)
    uint64_t off, len; // remote_off, length
    uint8_t *buf;      // len bytes
    uint32_t blocks;   // block requests it stands for (the owner's SRV_RD_BLOCKS)
    bool llc = false;  // the owner's RMC_PUB_F_LLC (the timing model)
};
enum : int { kDirectNo = 0, kDirectDone = 1 };

// Runs on the requester's thread against the owner's mapped RAM file, under rk_rmem_direct_run's
// guard (no resources owned here). The owner's published entry must show every check its R2P2
// makes passing (RMC enabled, VM running, context valid, node mask, key, READ permission,
// bounds); then the data is copied (8-byte words single-copy atomic, ascending, as the R2P2's
// own reads) and kept only if the table did not change meanwhile. Anything else: kDirectNo, and
// the request goes over the fabric, where the owner's R2P2 gives the exact answer (a refusal,
// NOROUTE for a dead owner, a held frame for a stopped VM).
int direct_read_fn(void *opaque, const rk_rmem_view *v)
{
    auto &d = *static_cast<DirectRead *>(opaque);
    auto *pub = reinterpret_cast<rmc_pub *>(v->tail + RK_RMEM_TAIL_RMC_OFF);
    if (!fabric::table_published(pub->magic, RMC_PUB_MAGIC) || d.ctx >= RMC_CTX_COUNT) return kDirectNo;
    const fabric::Seqlock lock(pub->seq);
    for (int tries = 0; tries < 4; tries++) {
        uint64_t seq;
        if (!lock.read_begin(seq)) continue; // the owner is changing it (a few stores): look again
        const uint32_t flags = fabric::shared_load(pub->flags);
        const rmc_pub_ctx e = fabric::shared_load(pub->ctx[d.ctx]);
        if (!lock.read_valid(seq)) continue;
        if (!(flags & RMC_PUB_F_SERVING) || !(e.valid & CTX_CTRL_VALID) || d.src >= 64 ||
            !((e.nodemask >> d.src) & 1) || e.key != d.key || !(e.perm & CTX_PERM_READ) || d.off > e.size ||
            d.len > e.size - d.off)
            return kDirectNo;
        // the segment as this process maps it: within the owner's RAM (checked at its enable)
        if (e.base > UINT64_MAX - d.off) return kDirectNo;
        const uint64_t a = e.base + d.off;
        if (a < v->ram_base || a - v->ram_base > v->ram_size || d.len > v->ram_size - (a - v->ram_base))
            return kDirectNo;
        mem_load(d.buf, v->ram + (a - v->ram_base), size_t(d.len));
        if (!lock.copy_valid(seq)) continue; // changed during the copy
        d.llc = (flags & RMC_PUB_F_LLC) != 0;
        __atomic_add_fetch(&pub->srv_rd_blocks, uint64_t(d.blocks), __ATOMIC_RELAXED);
        return kDirectDone;
    }
    return kDirectNo;
}

} // namespace

// Try the direct path for READ WQE `idx` of QP q (fetched, checked, counted): on success the data
// is in the local buffer and the CQE written (true); false: nothing happened, use the fabric.
bool Rmc::direct_read_locked(unsigned q, const rmc_wqe &w, uint32_t idx, const Ctx &cx)
{
    alignas(8) uint8_t buf[RMC_WIRE_READ_MAX];
    DirectRead d{node_id_,
                 unsigned(qps_[q].ctx),
                 cx.key,
                 w.remote_off,
                 w.length,
                 buf,
                 blocks_touched(w.remote_off, w.length)};
    const uint64_t start = host_.now_ns();
    int done = kDirectNo;
    if (direct_.run(w.node, direct_read_fn, &d, &done) != RK_RMEM_OK || done != kDirectDone) return false;
    const uint64_t local = cx.base + w.local_off;
    if (mem_write(local, buf, w.length) != RK_OK)
        gerr("QP %u: read data to 0x%llx not written", q, (unsigned long long)local);
    Transfer t;
    t.qp = q;
    t.wqe = w;
    t.wq_index = uint16_t(idx);
    t.start_ns = start;
    t.llc = d.llc;
    write_cqe_locked(qps_[q], q, t);
    count(RMC_CNT_DIRECT_REQS);
    return true;
}

void Rmc::build_frames(Transfer &t)
{
    const rmc_wqe &w = t.wqe;
    auto frame = [&](uint16_t op, uint64_t xoff, uint32_t len, uint16_t flags, const void *extra,
                     size_t elen) {
        Frame f;
        f.hdr.type = RKF_T_REQ;
        f.hdr.svc = RKF_SVC_RMC;
        f.hdr.op = op;
        f.hdr.dst = w.node;
        f.hdr.src = uint16_t(node_id_); // the port sets it again for the fabric
        f.xoff = xoff;
        f.len = len;
        f.blocks = blocks_touched(w.remote_off + xoff, len);
        rkf_rmc_req r{};
        r.ctx = uint16_t(qps_[t.qp].ctx);
        r.qp = uint16_t(t.qp);
        r.xfer = uint32_t(t.id);
        r.off = w.remote_off + xoff;
        r.len = len;
        r.nblocks = uint16_t(f.blocks);
        r.flags = flags;
        r.key = ctxs_[qps_[t.qp].ctx].key;
        f.payload.resize(sizeof r + elen);
        std::memcpy(f.payload.data(), &r, sizeof r);
        if (elen) std::memcpy(f.payload.data() + sizeof r, extra, elen);
        f.hdr.len = uint16_t(f.payload.size());
        t.unsent.push_back(std::move(f));
    };
    switch (w.op) {
    case RMC_OP_READ:
        for (uint64_t x = 0; x < w.length; x += RMC_WIRE_READ_MAX)
            frame(RKF_OP_RMC_READ, x, uint32_t(std::min<uint64_t>(RMC_WIRE_READ_MAX, w.length - x)), 0,
                  nullptr, 0);
        break;
    case RMC_OP_WRITE: {
        uint8_t buf[RMC_WIRE_DATA_MAX];
        for (uint64_t x = 0; x < w.length; x += RMC_WIRE_DATA_MAX) {
            uint32_t n = uint32_t(std::min<uint64_t>(RMC_WIRE_DATA_MAX, w.length - x));
            // the data leaves when the RGP unrolls (the local buffer was checked RAM with its
            // context; a failure cannot happen, and would send what was read)
            if (mem_read(t.local_addr + x, buf, n) != RK_OK) std::memset(buf, 0, n);
            frame(RKF_OP_RMC_WRITE, x, n, 0, buf, n);
        }
        break;
    }
    case RMC_OP_CAS:
    case RMC_OP_FAA: {
        rkf_rmc_atomic a{w.operand0, w.operand1};
        frame(w.op == RMC_OP_CAS ? RKF_OP_RMC_CAS : RKF_OP_RMC_FAA, 0, 8, 0, &a, sizeof a);
        break;
    }
    case RMC_OP_SABRE:
        frame(RKF_OP_RMC_SABRE, 0, w.length,
              uint16_t(RKF_RMC_F_REG | ((w.flags & RMC_WQE_F_NOSPEC) ? RKF_RMC_F_NOSPEC : 0)), nullptr, 0);
        break;
    }
}

void Rmc::check_timeouts_locked(uint64_t now)
{
    for (auto it = xfers_.begin(); it != xfers_.end();) {
        auto next = std::next(it);
        Transfer &t = it->second;
        if (t.outstanding && now > t.deadline_ns) {
            count(RMC_CNT_TIMEOUTS);
            fail_locked(t, RMC_ST_UNREACHABLE, RMC_INFO_TIMEOUT);
        }
        it = next;
    }
}

void Rmc::frame_failed(uint64_t tag, uint8_t st, uint8_t info)
{
    {
        std::lock_guard lk(mu_);
        auto p = pending_.find(tag);
        if (p == pending_.end()) return;
        auto t = xfers_.find(p->second.xfer);
        if (t == xfers_.end()) return;
        not_applied_locked(p->second); // the frame never left this node
        fail_locked(t->second, st, info);
        kicked_ = true;
    }
    cv_.notify_one();
    notify_irq();
}

// The first failure decides the status; the transfer's other frames are cancelled (their late
// answers become strays) and its unsent frames are dropped.
// A WRITE/CAS/FAA that fails UNREACHABLE after one of its frames left may still be applied by the
// destination (a stopped owner resumes, a reply is lost): it completes UNCERTAIN, like an
// InfiniBand work request in error whose effect is unknown (docs/sonuma.md).
void Rmc::fail_locked(Transfer &t, uint8_t st, uint8_t info)
{
    if (t.status == RMC_ST_OK || t.status == RMC_ST_SABRE_ABORT) {
        t.status = (st == RMC_ST_UNREACHABLE && t.maybe_applied) ? uint8_t(RMC_ST_UNCERTAIN) : st;
        t.info = info;
    }
    cancel_pending_locked(t.id);
    t.unsent.clear();
    t.outstanding = 0;
    finish_locked(t);
}

// The frame of `pd` certainly did not reach its destination (send failed, bridge NOROUTE or
// CONGESTED): it no longer makes its transfer's outcome uncertain.
void Rmc::not_applied_locked(const Pending &pd)
{
    if (!pd.modifies) return;
    auto t = xfers_.find(pd.xfer);
    if (t != xfers_.end() && t->second.maybe_applied) t->second.maybe_applied--;
}

// Write the CQE of a transfer whose frames are all answered; erases the transfer.
void Rmc::finish_locked(Transfer &t)
{
    if (t.outstanding || !t.unsent.empty()) return;
    Qp &qp = qps_[t.qp];
    if (qp.gen == t.qp_gen) {
        write_cqe_locked(qp, t.qp, t);
        qp.inflight -= std::min(qp.inflight, 1u);
    }
    xfers_.erase(t.id);
}

void Rmc::complete_now_locked(unsigned q, const rmc_wqe &w, uint16_t idx, uint8_t st, uint8_t info)
{
    Transfer t;
    t.qp = q;
    t.wqe = w;
    t.wq_index = idx;
    t.status = st;
    t.info = info;
    t.start_ns = host_.now_ns();
    write_cqe_locked(qps_[q], q, t);
}

void Rmc::write_cqe_locked(Qp &qp, unsigned q, const Transfer &t)
{
    bool local = t.wqe.node == node_id_;
    const Timing &tm = cfg_.timing;
    double model = 0;
    if (t.status != RMC_ST_BAD_REQUEST && t.status != RMC_ST_UNREACHABLE && t.status != RMC_ST_UNCERTAIN) {
        switch (t.wqe.op) {
        case RMC_OP_READ:
            model = model_read_ns(tm, t.wqe.remote_off, t.wqe.length, local, t.llc);
            break;
        case RMC_OP_WRITE:
            model = model_write_ns(tm, t.wqe.remote_off, t.wqe.length, local);
            break;
        case RMC_OP_CAS:
        case RMC_OP_FAA:
            model = model_atomic_ns(tm, local, t.llc);
            break;
        case RMC_OP_SABRE:
            model = model_sabre_ns(tm, t.r2p2_ns, local);
            break;
        }
    }
    rmc_cqe c{};
    c.wr_id = t.wqe.wr_id;
    c.value = t.value;
    uint64_t m = uint64_t(std::llround(model));
    c.modeled_ns = uint32_t(std::min<uint64_t>(m, UINT32_MAX));
    const uint64_t now = host_.now_ns();
    uint64_t wall = now > t.start_ns ? now - t.start_ns : 0;
    c.wall_ns = uint32_t(std::min<uint64_t>(wall, UINT32_MAX));
    c.wq_index = t.wq_index;
    c.op = t.wqe.op;
    c.status = t.status;
    c.info = t.info;
    uint32_t k = qp.cq_tail;
    uint8_t phase = uint8_t(1 ^ ((k >> qp.depth_log2) & 1));
    c.flags = uint8_t(t.cqe_flags | phase);
    const uint64_t addr = qp.cq_base + uint64_t(k & (qp.depth() - 1)) * RMC_CQE_SIZE;
    // The entry, then its flags byte with release semantics: software that sees the phase sees
    // the entry.
    uint64_t n = RMC_CQE_SIZE;
    Status st = RK_OK;
    if (void *p = host_.dma_map(addr, n, true); p && n == RMC_CQE_SIZE) {
        auto *dst = static_cast<uint8_t *>(p);
        mem_store(dst, reinterpret_cast<const uint8_t *>(&c), offsetof(rmc_cqe, flags));
        __atomic_store_n(dst + offsetof(rmc_cqe, flags), c.flags, __ATOMIC_RELEASE);
        host_.dma_unmap(p, n, true, n);
    } else {
        host_.dma_unmap(p, n, true, 0);
        st = host_.dma_write(addr, &c, offsetof(rmc_cqe, flags));
        std::atomic_thread_fence(std::memory_order_release);
        if (st == RK_OK) st = host_.dma_write(addr + offsetof(rmc_cqe, flags), &c.flags, 1);
    }
    if (st != RK_OK) {
        // cannot happen once validated (the CQ was RAM at enable): the QP stops
        gerr("QP %u: CQE %u unwritable (%s): the QP stops (QP_ST_ERR)", q, k, rk_status_name(st));
        qp.err = true;
    }
    qp.cq_tail++;
    cqe_seq_++;
    count(RMC_CNT_CQE_WRITTEN);
    count(status_counter(t.status));
    count(RMC_CNT_MODELED_NS, m);
    if (qp.ctrl & QP_CTRL_IRQ_EN) irq_status_ |= 1ull << q;
}

// ---------------------------------------------------------------------------------------------
// Fabric callbacks

void Rmc::on_frame(const rkf_frame_hdr &h, const void *payload)
{
    const uint8_t *p = static_cast<const uint8_t *>(payload);
    if (h.type == RKF_T_MSG && h.op == RKF_OP_RMC_DATA) {
        rcp_data(h, p, false);
        return;
    }
    if (h.type != RKF_T_REQ) {
        count(RMC_CNT_SRV_MALFORMED);
        return;
    }
    serve(h, p, fabric_sink(h), false);
}

void Rmc::on_reply(const rkf_frame_hdr &h, const void *payload)
{
    rcp_reply(h, static_cast<const uint8_t *>(payload), false);
}

Rmc::Sink Rmc::fabric_sink(const rkf_frame_hdr &h)
{
    Sink sink;
    sink.msg = [this](rkf_frame_hdr &m, const void *d) {
        if (fab_.send) (void)fab_.send(m, d);
    };
    sink.reply = [this, h](uint16_t st, const void *d, uint16_t len) {
        if (fab_.reply) (void)fab_.reply(h, st, d, len);
    };
    return sink;
}

// A frame that arrived while paused (mu_ held): kept for pause(false), in arrival order.
bool Rmc::hold_locked(const rkf_frame_hdr &h, const uint8_t *p, Held::Kind kind)
{
    if (held_.size() >= kPausedFrames) return false;
    Held f{h, std::vector<uint8_t>(p, p + (p ? h.len : 0)), kind};
    held_.push_back(std::move(f));
    return true;
}

void Rmc::pause(bool on)
{
    if (on) {
        {
            std::unique_lock srv(srv_mu_); // no request of another node is being served
            std::lock_guard lk(mu_);
            paused_ = true;
            publish_locked(); // peers read this node over the fabric (held) until it runs again
        }
        std::unique_lock lk(mu_);
        idle_cv_.wait(lk, [this] { return !sending_; }); // the last round's frames have left
        return;
    }
    // Resume: the frames held meanwhile first, in order; frames arriving during that are
    // appended and handled here too, so none overtakes another.
    for (;;) {
        Held f;
        {
            std::lock_guard lk(mu_);
            if (!paused_) return;
            if (held_.empty()) {
                paused_ = false;
                kicked_ = true;
                publish_locked();
                break;
            }
            f = std::move(held_.front());
            held_.pop_front();
        }
        const uint8_t *p = f.payload.data();
        switch (f.kind) {
        case Held::Request:
            serve(f.h, p, fabric_sink(f.h), true);
            break;
        case Held::Data:
            rcp_data(f.h, p, true);
            break;
        case Held::Reply:
            rcp_reply(f.h, p, true);
            break;
        }
    }
    bool lost;
    {
        std::lock_guard lk(mu_);
        lost = link_lost_;
    }
    if (lost) on_link(false);
    cv_.notify_all();
    notify_irq();
}

void Rmc::on_link(bool up)
{
    if (up) return;
    {
        std::lock_guard lk(mu_);
        if (paused_) { // no CQE is written while paused: pause(false) fails them
            link_lost_ = true;
            return;
        }
        link_lost_ = false;
        for (auto it = xfers_.begin(); it != xfers_.end();) {
            auto next = std::next(it);
            if (it->second.wqe.node != node_id_)
                fail_locked(it->second, RMC_ST_UNREACHABLE, RMC_INFO_LINK_DOWN);
            it = next;
        }
        kicked_ = true;
    }
    cv_.notify_one();
    notify_irq();
}

// ---------------------------------------------------------------------------------------------
// R2P2: serve a request frame against this node's memory.

void Rmc::serve(const rkf_frame_hdr &h, const uint8_t *p, const Sink &sink, bool now)
{
    // The tables change only under srv_mu_ held exclusively: reading them below is safe, and
    // pause() cannot begin while a request is being served.
    std::shared_lock srv(srv_mu_);
    if (!now) {
        // While paused (VM stopped, state being saved) nothing touches guest memory: the request
        // waits for pause(false), or is answered CONGESTED (not applied) if too many wait.
        bool held = false, full = false;
        {
            std::lock_guard lk(mu_);
            if (paused_) {
                held = true;
                full = !hold_locked(h, p, Held::Request);
            }
        }
        if (full) sink.reply(RKF_ST_CONGESTED, nullptr, 0);
        if (held) return;
    }
    rkf_rmc_req r{};
    auto malformed = [&](const char *why) {
        count(RMC_CNT_SRV_MALFORMED);
        gerr("malformed request frame from node %u (op %u): %s", h.src, h.op, why);
        sink.reply(RKF_ST_BAD_FRAME, nullptr, 0);
    };
    if (h.len < sizeof r) return malformed("shorter than its header");
    std::memcpy(&r, p, sizeof r);
    size_t want = sizeof r;
    const char *bad = nullptr;
    switch (h.op) {
    case RKF_OP_RMC_READ:
        if (r.len < 1 || r.len > RMC_WIRE_READ_MAX) bad = "READ length out of range";
        break;
    case RKF_OP_RMC_WRITE:
        want += r.len;
        if (r.len < 1 || r.len > RMC_WIRE_DATA_MAX) bad = "WRITE length out of range";
        break;
    case RKF_OP_RMC_CAS:
    case RKF_OP_RMC_FAA:
        want += sizeof(rkf_rmc_atomic);
        if (r.len != 8) bad = "atomic length is not 8";
        break;
    case RKF_OP_RMC_SABRE:
        if (!(r.flags & RKF_RMC_F_REG))
            bad = "SABRe without its registration packet";
        else if (r.len < 8 || r.len > RMC_SABRE_MAX)
            bad = "SABRe length out of range";
        break;
    default:
        bad = "unknown operation";
    }
    if (bad) return malformed(bad);
    if (h.len != want) return malformed("payload length does not match the request");
    if (r.off > UINT64_MAX - r.len || r.nblocks != blocks_touched(r.off, r.len))
        return malformed("block count does not match the range");
    if (r.flags & ~uint16_t(RKF_RMC_F_REG | RKF_RMC_F_NOSPEC)) return malformed("unknown flags");

    rkf_rmc_done d{};
    d.nblocks = r.nblocks;
    if (cfg_.timing.llc_resident) d.flags = RKF_RMC_RF_LLC; // for the source's timing model
    auto refuse = [&](uint8_t st, uint8_t info) {
        count(RMC_CNT_SRV_REFUSED);
        d.status = st;
        d.info = info;
        sink.reply(RKF_ST_OK, &d, sizeof d);
    };
    static const uint64_t need[] = {
        0, CTX_PERM_READ, CTX_PERM_WRITE, CTX_PERM_ATOMIC, CTX_PERM_ATOMIC, CTX_PERM_SABRE};
    if (!(ctrl_ & RMC_CTRL_EN) || r.ctx >= RMC_CTX_COUNT || !ctxs_[r.ctx].valid())
        return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_NO_CTX);
    const Ctx &cx = ctxs_[r.ctx];
    if (h.src >= 64 || !((cx.nodemask >> h.src) & 1)) return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_DENIED);
    if (r.key != cx.key) return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_BAD_KEY);
    if (!(cx.perm & need[h.op])) return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_PERM);
    if (r.off > cx.size || r.len > cx.size - r.off) return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_BOUNDS);
    const uint64_t mem = cx.base + r.off; // guest physical: checked RAM when the context became valid
    const uint8_t *data = p + sizeof r;

    switch (h.op) {
    case RKF_OP_RMC_READ: {
        uint8_t buf[sizeof(rkf_rmc_data) + RMC_WIRE_DATA_MAX];
        for (uint32_t x = 0; x < r.len; x += RMC_WIRE_DATA_MAX) {
            uint32_t n = std::min<uint32_t>(RMC_WIRE_DATA_MAX, r.len - x);
            rkf_rmc_data dd{};
            dd.off = x;
            dd.len = uint16_t(n);
            dd.nblocks = uint16_t(blocks_touched(r.off + x, n));
            std::memcpy(buf, &dd, sizeof dd);
            if (mem_read(mem + x, buf + sizeof dd, n) != RK_OK) {
                gerr("context %u: read of 0x%llx for node %u failed", r.ctx, (unsigned long long)(mem + x),
                     h.src);
                return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_BOUNDS);
            }
            rkf_frame_hdr m{};
            m.type = RKF_T_MSG;
            m.svc = RKF_SVC_RMC;
            m.op = RKF_OP_RMC_DATA;
            m.dst = h.src;
            m.tag = h.tag;
            m.len = uint16_t(sizeof dd + n);
            sink.msg(m, buf);
        }
        count(RMC_CNT_SRV_RD_BLOCKS, r.nblocks);
        break;
    }
    case RKF_OP_RMC_WRITE:
        if (mem_write(mem, data, r.len) != RK_OK) {
            gerr("context %u: write of 0x%llx for node %u failed", r.ctx, (unsigned long long)mem, h.src);
            return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_BOUNDS);
        }
        count(RMC_CNT_SRV_WR_BLOCKS, r.nblocks);
        break;
    case RKF_OP_RMC_CAS:
    case RKF_OP_RMC_FAA: {
        if (r.off % 8) return refuse(RMC_ST_BAD_REQUEST, RMC_INFO_UNALIGNED);
        rkf_rmc_atomic a;
        std::memcpy(&a, data, sizeof a);
        // The word is mapped and the host's atomic instruction runs on it: atomic with respect to
        // the vCPUs (TCG's atomics are host atomics on the same RAM) and to every other request.
        uint64_t n = 8;
        void *pw = host_.dma_map(mem, n, true);
        if (!pw || n < 8) {
            host_.dma_unmap(pw, n, true, 0);
            gerr("context %u: atomic at 0x%llx for node %u: not mappable RAM", r.ctx, (unsigned long long)mem,
                 h.src);
            return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_BOUNDS);
        }
        auto *w = static_cast<uint64_t *>(pw);
        if (h.op == RKF_OP_RMC_CAS) {
            uint64_t expect = a.operand0;
            __atomic_compare_exchange_n(w, &expect, a.operand1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            d.value = expect; // the old value either way
        } else {
            d.value = __atomic_fetch_add(w, a.operand0, __ATOMIC_SEQ_CST);
        }
        host_.dma_unmap(pw, n, true, 8);
        count(RMC_CNT_SRV_ATOMICS);
        break;
    }
    case RKF_OP_RMC_SABRE: {
        if (!(cx.layout & CTX_LAYOUT_VALID)) return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_NO_LAYOUT);
        unsigned vo = unsigned(cx.layout & CTX_LAYOUT_VER_OFF_MASK);
        if (r.off % RMC_BLOCK_SIZE) return refuse(RMC_ST_BAD_REQUEST, RMC_INFO_UNALIGNED);
        if (r.len < vo + 8) return refuse(RMC_ST_BAD_REQUEST, RMC_INFO_BAD_LEN);
        // whole blocks are read: the last one may reach past len, never past the segment
        // (the segment is a multiple of 64 and off is 64-aligned)
        return serve_sabre(h, r, mem, vo, sink);
    }
    }
    sink.reply(RKF_ST_OK, &d, sizeof d);
}

void Rmc::serve_sabre(const rkf_frame_hdr &h, const rkf_rmc_req &r, uint64_t addr, unsigned ver_off,
                      const Sink &sink)
{
    uint32_t n = r.nblocks;
    // The whole object stays mapped while it is served: the emulated coherence compares live
    // memory with what was read (r2p2.h). Whole blocks: within the segment (64-byte multiple).
    const uint64_t span = uint64_t(n) * RMC_BLOCK_SIZE;
    uint64_t mlen = span;
    void *map = host_.dma_map(addr, mlen, false);
    if (!map || mlen < span) {
        host_.dma_unmap(map, mlen, false, 0);
        gerr("context %u: SABRe object at 0x%llx for node %u: not mappable RAM", r.ctx,
             (unsigned long long)addr, h.src);
        count(RMC_CNT_SRV_REFUSED);
        rkf_rmc_done d{};
        d.nblocks = n;
        d.status = RMC_ST_REMOTE_ACCESS;
        d.info = RMC_INFO_BOUNDS;
        sink.reply(RKF_ST_OK, &d, sizeof d);
        return;
    }
    uint8_t *obj = static_cast<uint8_t *>(map);
    std::vector<uint8_t> buf(size_t(n) * RMC_BLOCK_SIZE);
    std::vector<uint8_t> have(n, 0);
    SabreRequest sr;
    sr.id = SabreId{h.src, r.qp, r.xfer};
    sr.obj = obj;
    sr.nblocks = n;
    sr.ver_off = ver_off;
    sr.spec = cfg_.speculation && !(r.flags & RKF_RMC_F_NOSPEC);
    sr.window_delay_ns = cfg_.window_delay_ns;
    SabreOutcome o = sabre_.serve(sr, [&](uint32_t blk, const uint8_t *data) {
        if (blk >= n) return;
        if (data) {
            std::memcpy(&buf[size_t(blk) * RMC_BLOCK_SIZE], data, RMC_BLOCK_SIZE);
            have[blk] = 1;
        }
    });
    host_.dma_unmap(map, mlen, false, mlen);
    count(RMC_CNT_SRV_RD_BLOCKS, n);
    // Block replies, coalesced: runs of data blocks 3 per DATA message, runs of blocks answered
    // without data after an abort one message per run.
    uint8_t msgbuf[sizeof(rkf_rmc_data) + RMC_WIRE_DATA_MAX];
    for (uint32_t j = 0; j < n;) {
        rkf_rmc_data dd{};
        dd.off = j * RMC_BLOCK_SIZE;
        uint32_t k = j;
        if (have[j]) {
            while (k < n && have[k] && k - j < RMC_WIRE_DATA_MAX / RMC_BLOCK_SIZE)
                k++;
            uint32_t end = std::min<uint32_t>(k * RMC_BLOCK_SIZE, r.len);
            dd.len = uint16_t(end - dd.off);
            std::memcpy(msgbuf + sizeof dd, &buf[dd.off], dd.len);
        } else {
            while (k < n && !have[k] && k - j < 0xffff)
                k++;
            dd.flags = RKF_RMC_DF_ABORTED;
        }
        dd.nblocks = uint16_t(k - j);
        std::memcpy(msgbuf, &dd, sizeof dd);
        rkf_frame_hdr m{};
        m.type = RKF_T_MSG;
        m.svc = RKF_SVC_RMC;
        m.op = RKF_OP_RMC_DATA;
        m.dst = h.src;
        m.tag = h.tag;
        m.len = uint16_t(sizeof dd + dd.len);
        sink.msg(m, msgbuf);
        j = k;
    }
    rkf_rmc_done d{};
    d.nblocks = n;
    d.status = o.abort == Abort::None ? RMC_ST_OK : RMC_ST_SABRE_ABORT;
    d.info = uint8_t(o.abort);
    d.flags = uint16_t((o.validated ? RKF_RMC_RF_VALIDATED : 0) | (sr.spec ? 0 : RKF_RMC_RF_NOSPEC) |
                       (cfg_.timing.llc_resident ? RKF_RMC_RF_LLC : 0));
    d.value = o.version;
    SabreTrace tr = o.trace;
    tr.llc = cfg_.timing.llc_resident;
    d.r2p2_ns = uint32_t(std::llround(std::min(model_r2p2_sabre_ns(cfg_.timing, tr), 4e9)));
    d.abort_block = o.abort_block;
    sink.reply(RKF_ST_OK, &d, sizeof d);
}

// ---------------------------------------------------------------------------------------------
// RCP

void Rmc::rcp_data(const rkf_frame_hdr &h, const uint8_t *p, bool now)
{
    std::unique_lock lk(mu_);
    if (paused_ && !now) {
        (void)hold_locked(h, p, Held::Data); // dropped if too many wait: its transfer times out
        return;
    }
    auto pit = pending_.find(h.tag);
    if (pit == pending_.end() || pit->second.dst != h.src) {
        count(RMC_CNT_STRAY);
        return;
    }
    Pending &pd = pit->second;
    auto tit = xfers_.find(pd.xfer);
    if (tit == xfers_.end()) {
        count(RMC_CNT_STRAY);
        return;
    }
    Transfer &t = tit->second;
    rkf_rmc_data d{};
    bool ok = h.len >= sizeof d;
    if (ok) {
        std::memcpy(&d, p, sizeof d);
        uint64_t span = (d.flags & RKF_RMC_DF_ABORTED)
                            ? std::min<uint64_t>(uint64_t(d.nblocks) * RMC_BLOCK_SIZE,
                                                 pd.len > d.off ? pd.len - d.off : 0)
                            : d.len;
        ok = d.len <= RMC_WIRE_DATA_MAX && h.len == sizeof d + d.len && d.off == pd.next && span &&
             d.off + span <= pd.len && !((d.flags & RKF_RMC_DF_ABORTED) && d.len) &&
             (t.wqe.op == RMC_OP_READ || t.wqe.op == RMC_OP_SABRE);
        if (ok) {
            // the local buffer was checked RAM with its context
            if (d.len && mem_write(t.local_addr + pd.xoff + d.off, p + sizeof d, d.len) != RK_OK)
                gerr("QP %u: reply data to 0x%llx not written", t.qp,
                     (unsigned long long)(t.local_addr + pd.xoff + d.off));
            pd.next += uint32_t(span);
            count(RMC_CNT_REPLY_BLOCKS, d.nblocks);
        }
    }
    if (!ok) {
        gerr("node %u sent a data chunk that does not fit its request; transfer failed", h.src);
        fail_locked(t, RMC_ST_UNREACHABLE, RMC_INFO_BAD_REPLY);
        kicked_ = true;
        cv_.notify_one();
        lk.unlock();
        notify_irq();
    }
}

void Rmc::rcp_reply(const rkf_frame_hdr &h, const uint8_t *p, bool now)
{
    {
        std::lock_guard lk(mu_);
        if (paused_ && !now) {
            (void)hold_locked(h, p, Held::Reply); // dropped if too many wait: its transfer times out
            return;
        }
        auto pit = pending_.find(h.tag);
        // Every reply, OK or error, must come from the node the frame went to: the bridge answers
        // for an unreachable node with src = that node (fabric_proto.h, error_reply_locked), and
        // it stamps the source of every frame a node sends. Anything else is dropped and counted.
        if (pit == pending_.end() || pit->second.dst != h.src) {
            if (pit != pending_.end())
                gerr("reply (status %u) for a request to node %u came from node %u: dropped", h.status,
                     pit->second.dst, h.src);
            count(RMC_CNT_STRAY);
            return;
        }
        Pending pd = pit->second;
        pending_.erase(pit);
        window_[pd.dst] -= std::min(window_[pd.dst], pd.blocks);
        auto tit = xfers_.find(pd.xfer);
        if (tit == xfers_.end()) {
            count(RMC_CNT_STRAY);
            return;
        }
        Transfer &t = tit->second;
        t.outstanding--;
        rkf_rmc_done d{};
        if (h.status != RKF_ST_OK) {
            if (h.status == RKF_ST_NOROUTE || h.status == RKF_ST_CONGESTED) not_applied_locked(pd);
            fail_locked(t, RMC_ST_UNREACHABLE, unreach_info(h.status));
        } else if (h.len != sizeof d) {
            gerr("node %u sent a malformed reply; transfer failed", h.src);
            fail_locked(t, RMC_ST_UNREACHABLE, RMC_INFO_BAD_REPLY);
        } else {
            std::memcpy(&d, p, sizeof d);
            count(RMC_CNT_REPLY_BLOCKS, 1);
            bool data_op = t.wqe.op == RMC_OP_READ || t.wqe.op == RMC_OP_SABRE;
            if (d.status == RMC_ST_OK && data_op && pd.next != pd.len) {
                // data messages were lost (a bridge queue overflowed) or the peer sent too few
                fail_locked(t, RMC_ST_UNREACHABLE, RMC_INFO_BAD_REPLY);
            } else if (d.status == RMC_ST_REMOTE_ACCESS || d.status == RMC_ST_BAD_REQUEST) {
                fail_locked(t, d.status, d.info);
            } else if (d.status == RMC_ST_OK || d.status == RMC_ST_SABRE_ABORT) {
                if (d.status == RMC_ST_SABRE_ABORT && t.status == RMC_ST_OK) {
                    t.status = d.status;
                    t.info = d.info;
                }
                t.value = d.value;
                t.llc = (d.flags & RKF_RMC_RF_LLC) != 0;
                if (t.wqe.op == RMC_OP_SABRE) {
                    t.r2p2_ns = d.r2p2_ns;
                    t.cqe_flags = uint8_t(((d.flags & RKF_RMC_RF_VALIDATED) ? RMC_CQE_F_VALIDATED : 0) |
                                          ((d.flags & RKF_RMC_RF_NOSPEC) ? RMC_CQE_F_NOSPEC : 0));
                }
                finish_locked(t);
            } else {
                fail_locked(t, RMC_ST_UNREACHABLE, RMC_INFO_BAD_REPLY);
            }
        }
        kicked_ = true;
    }
    cv_.notify_one();
    notify_irq();
}

// ---------------------------------------------------------------------------------------------
// Migration

namespace {

// The SABRe counters, which live in the R2P2 model (counter_locked), as a table.
struct SabreCnt {
    unsigned off;
    uint64_t R2p2Counters::*f;
};
const SabreCnt kSabreCnt[] = {
    {RMC_CNT_SABRE_REG, &R2p2Counters::sabre_reg},
    {RMC_CNT_SABRE_OK, &R2p2Counters::sabre_ok},
    {RMC_CNT_ABORT_LOCKED, &R2p2Counters::abort_locked},
    {RMC_CNT_ABORT_WINDOW, &R2p2Counters::abort_window},
    {RMC_CNT_ABORT_VALIDATE, &R2p2Counters::abort_validate},
    {RMC_CNT_VALIDATE_STAGE, &R2p2Counters::validate_stage},
    {RMC_CNT_INVAL_IGNORED, &R2p2Counters::inval_ignored},
    {RMC_CNT_ATT_STALLS, &R2p2Counters::att_stalls},
    {RMC_CNT_SB_STALLS, &R2p2Counters::sb_stalls},
    {RMC_CNT_SPEC_BLOCKS, &R2p2Counters::spec_blocks},
};

bool modifying(uint8_t op)
{
    return op == RMC_OP_WRITE || op == RMC_OP_CAS || op == RMC_OP_FAA;
}

} // namespace

RmcState Rmc::save() const
{
    RmcState st;
    std::lock_guard lk(mu_);
    st.ctrl = ctrl_;
    st.irq_status = irq_status_;
    for (unsigned q = 0; q < RMC_QP_COUNT; q++)
        st.qp[q] = qps_[q];
    for (unsigned c = 0; c < RMC_CTX_COUNT; c++)
        st.ctx[c] = ctxs_[c];
    for (unsigned i = 0; i < RMC_CNT_COUNT; i++)
        st.counters[i] = counter_locked(8 * i);
    for (const auto &[id, t] : xfers_) {
        if (qps_[t.qp].gen != t.qp_gen) continue; // orphaned: completes as nothing
        // A WRITE/CAS/FAA of which a frame was served here or left for another node may have
        // been applied: UNCERTAIN; anything else certainly was not: UNREACHABLE.
        const bool maybe =
            modifying(t.wqe.op) && (t.maybe_applied || (t.wqe.node == node_id_ && t.frames_sent));
        st.xfer.push_back(RmcXferState{t.wqe.wr_id, t.start_ns, t.qp, t.wq_index, t.wqe.op,
                                       uint8_t(maybe ? RMC_ST_UNCERTAIN : RMC_ST_UNREACHABLE)});
    }
    return st;
}

void Rmc::save(StateOut &out) const
{
    out.put(save());
}

bool Rmc::load(StateIn &in, std::string *why)
{
    RmcState s;
    in.get(s);
    if (!in.finish()) return false; // the reader says which field
    return load(s, why);
}

namespace {

__attribute__((format(printf, 2, 3))) bool refuse(std::string *why, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (why) *why = buf;
    return false;
}

} // namespace

bool Rmc::load(const RmcState &s, std::string *why)
{
    if (s.ctrl & ~uint64_t(RMC_CTRL_EN))
        return refuse(why, "ctrl: 0x%llx has bits other than EN", (unsigned long long)s.ctrl);
    for (unsigned c = 0; c < RMC_CTX_COUNT; c++) {
        const RmcCtxState &x = s.ctx[c];
        const unsigned vo = unsigned(x.layout & CTX_LAYOUT_VER_OFF_MASK);
        if (x.ctrl & ~uint64_t(CTX_CTRL_VALID))
            return refuse(why, "ctx[%u].ctrl: 0x%llx has bits other than VALID", c,
                          (unsigned long long)x.ctrl);
        if (!(x.ctrl & CTX_CTRL_VALID)) continue;
        if (x.base % 64 || !x.size || x.size % 64 || !mappable(x.base, x.size))
            return refuse(why, "ctx[%u].base/size: 0x%llx + 0x%llx is not a 64-byte aligned segment in RAM",
                          c, (unsigned long long)x.base, (unsigned long long)x.size);
        if (x.perm & ~uint64_t(CTX_PERM_READ | CTX_PERM_WRITE | CTX_PERM_ATOMIC | CTX_PERM_SABRE))
            return refuse(why, "ctx[%u].perm: 0x%llx has unknown bits", c, (unsigned long long)x.perm);
        if ((x.layout & ~uint64_t(CTX_LAYOUT_VALID | CTX_LAYOUT_VER_OFF_MASK)) ||
            ((x.layout & CTX_LAYOUT_VALID) && (vo % 8 || vo > 56)))
            return refuse(why, "ctx[%u].layout: 0x%llx has unknown bits or a version offset not in 0..56", c,
                          (unsigned long long)x.layout);
    }
    std::array<uint32_t, RMC_QP_COUNT> recs{};
    if (s.xfer.size() > RmcState::kMaxXfers)
        return refuse(why, "xfer: %zu records, at most %u", s.xfer.size(), RmcState::kMaxXfers);
    for (size_t i = 0; i < s.xfer.size(); i++) {
        const RmcXferState &x = s.xfer[i];
        if (x.qp >= RMC_QP_COUNT) return refuse(why, "xfer[%zu].qp: %u out of range", i, x.qp);
        if (x.op < RMC_OP_READ || x.op > RMC_OP_SABRE)
            return refuse(why, "xfer[%zu].op: %u unknown", i, x.op);
        if (x.wq_index > 0xffff) return refuse(why, "xfer[%zu].wq_index: %u above 65535", i, x.wq_index);
        if (x.status != RMC_ST_UNREACHABLE && x.status != RMC_ST_UNCERTAIN)
            return refuse(why, "xfer[%zu].status: %u is neither UNREACHABLE nor UNCERTAIN", i, x.status);
        recs[x.qp]++;
    }
    for (unsigned q = 0; q < RMC_QP_COUNT; q++) {
        const RmcQpState &x = s.qp[q];
        if (x.ctrl & ~uint64_t(QP_CTRL_EN | QP_CTRL_IRQ_EN))
            return refuse(why, "qp[%u].ctrl: 0x%llx has unknown bits", q, (unsigned long long)x.ctrl);
        if (x.inflight != recs[q])
            return refuse(why, "qp[%u].inflight: %u, but %u transfer records", q, x.inflight, recs[q]);
        if (!(x.ctrl & QP_CTRL_EN)) {
            if (x.inflight) return refuse(why, "qp[%u].inflight: %u on a disabled QP", q, x.inflight);
            continue;
        }
        if (x.depth_log2 < RMC_DEPTH_LOG2_MIN || x.depth_log2 > RMC_DEPTH_LOG2_MAX)
            return refuse(why, "qp[%u].depth_log2: %llu out of range %u..%u", q,
                          (unsigned long long)x.depth_log2, RMC_DEPTH_LOG2_MIN, RMC_DEPTH_LOG2_MAX);
        const uint32_t n = 1u << x.depth_log2;
        if ((x.wq_base | x.cq_base) % 64 || !mappable(x.wq_base, uint64_t(n) * RMC_WQE_SIZE) ||
            !mappable(x.cq_base, uint64_t(n) * RMC_CQE_SIZE))
            return refuse(why, "qp[%u].wq_base/cq_base: 0x%llx/0x%llx not 64-byte aligned queues in RAM", q,
                          (unsigned long long)x.wq_base, (unsigned long long)x.cq_base);
        if (x.ctx >= RMC_CTX_COUNT) // (a withdrawn context leaves its QPs enabled)
            return refuse(why, "qp[%u].ctx: %llu out of range", q, (unsigned long long)x.ctx);
        // cq_head <= cq_tail <= wq_head <= wq_tail (free-running), every fetched request owns a
        // CQ slot, and the requests fetched but not completed are the transfers in flight
        if (uint32_t(x.cq_tail - x.cq_head) > uint32_t(x.wq_head - x.cq_head) ||
            uint32_t(x.wq_head - x.cq_head) > n || uint32_t(x.wq_tail - x.wq_head) > n ||
            uint32_t(x.wq_head - x.cq_tail) != x.inflight)
            return refuse(
                why,
                "qp[%u].wq_tail/wq_head/cq_head/cq_tail: %u/%u/%u/%u inconsistent with depth %u and "
                "%u in flight",
                q, x.wq_tail, x.wq_head, x.cq_head, x.cq_tail, n, x.inflight);
    }

    {
        std::unique_lock srv(srv_mu_);
        std::lock_guard lk(mu_);
        xfers_.clear();
        pending_.clear();
        held_.clear();
        link_lost_ = false;
        std::fill(window_.begin(), window_.end(), 0);
        ctrl_ = s.ctrl;
        irq_status_ = s.irq_status;
        for (unsigned q = 0; q < RMC_QP_COUNT; q++) {
            Qp &a = qps_[q];
            static_cast<RmcQpState &>(a) = s.qp[q];
            a.gen++;
        }
        for (unsigned c = 0; c < RMC_CTX_COUNT; c++) {
            Ctx &a = ctxs_[c];
            static_cast<RmcCtxState &>(a) = s.ctx[c];
            a.gen++;
        }
        for (unsigned i = 0; i < RMC_CNT_COUNT; i++)
            cnt_[i].store(s.counters[i], std::memory_order_relaxed);
        const R2p2Counters now = sabre_.counters();
        for (const SabreCnt &k : kSabreCnt)
            sabre_base_.*k.f = now.*k.f - s.counters[k.off / 8];
        if (direct_.own) pub_rd_base_ = __atomic_load_n(&direct_.own->srv_rd_blocks, __ATOMIC_RELAXED);
        publish_locked();
        // The transfers in flight at save complete now: their requests and answers are lost.
        for (const RmcXferState &x : s.xfer) {
            Transfer t;
            t.qp = x.qp;
            t.wqe.op = x.op;
            t.wqe.wr_id = x.wr_id;
            t.wqe.node = uint16_t(node_id_);
            t.wq_index = uint16_t(x.wq_index);
            t.status = x.status;
            t.info = RMC_INFO_LINK_DOWN;
            t.start_ns = x.start_ns;
            Qp &qp = qps_[x.qp];
            write_cqe_locked(qp, x.qp, t);
            qp.inflight--;
        }
        kicked_ = true;
    }
    cv_.notify_one();
    notify_irq();
    return true;
}

} // namespace rackemu::sonuma
