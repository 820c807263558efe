// SPDX-License-Identifier: MIT
// The soNUMA RMC device core; see rmc.h and docs/sonuma.md.
#include "rmc.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>

namespace rackemu::sonuma {

namespace {

uint64_t now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint32_t blocks_touched(uint64_t off, uint64_t len)
{
    if (!len) return 0;
    return uint32_t(((off % RMC_BLOCK_SIZE) + len + RMC_BLOCK_SIZE - 1) / RMC_BLOCK_SIZE);
}

// Guest memory as the R2P2 and RCP see it: every aligned 8-byte word is one single-copy atomic
// access, and the words of a range are accessed in ascending address order (docs/sonuma.md,
// "What differs from the hardware"). Loads are acquire loads.
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

Rmc::Rmc(const RmcConfig &cfg, RmcHost host)
    : cfg_(cfg), host_(std::move(host)), sabre_(cfg.timing.att_entries, cfg.timing.sb_depth),
      window_(std::max(1u, cfg.node_count), 0)
{
    rgp_ = std::thread([this] { rgp_main(); });
}

Rmc::~Rmc()
{
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
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
    if (host_.guest_error) host_.guest_error(std::string("rackemu-rmc: ") + buf);
}

bool Rmc::in_ram(uint64_t addr, uint64_t len) const
{
    return host_.ram && addr >= host_.ram_base && addr - host_.ram_base <= host_.ram_size &&
           len <= host_.ram_size - (addr - host_.ram_base);
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
    if (host_.irq_changed) host_.irq_changed();
}

uint64_t Rmc::counter(unsigned off) const
{
    // The R2P2's SABRe counters live in the ATT model; the rest here.
    R2p2Counters c = sabre_.counters(), b;
    {
        std::lock_guard lk(mu_);
        b = sabre_base_;
    }
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
    default:
        return off / 8 < RMC_CNT_COUNT ? cnt_[off / 8].load(std::memory_order_relaxed) : 0;
    }
}

bool Rmc::irq_level() const
{
    std::lock_guard lk(mu_);
    return irq_status_ != 0 && (ctrl_ & RMC_CTRL_EN);
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

uint64_t Rmc::mmio_read(uint64_t off, unsigned size)
{
    if (size != 8 || (off & 7)) {
        gerr("%u-byte read at 0x%llx: registers are 64-bit, aligned (reads 0)", size,
             (unsigned long long)off);
        return 0;
    }
    if (off >= RMC_DB_BASE && off < RMC_DB_BASE + RMC_QP_COUNT * RMC_DB_STRIDE) {
        unsigned q = unsigned((off - RMC_DB_BASE) / RMC_DB_STRIDE);
        uint64_t r = (off - RMC_DB_BASE) % RMC_DB_STRIDE;
        std::lock_guard lk(mu_);
        const Qp &qp = qps_[q];
        switch (r) {
        case DB_WQ_TAIL:
            return qp.wq_tail;
        case DB_CQ_HEAD:
            return qp.cq_head;
        case DB_WQ_HEAD:
            return qp.wq_head;
        case DB_CQ_TAIL:
            return qp.cq_tail;
        case DB_STATUS:
            return qp_status(qp);
        default:
            return 0;
        }
    }
    if (off >= RMC_QP_TABLE && off < RMC_QP_TABLE + RMC_QP_COUNT * RMC_QP_STRIDE) {
        unsigned q = unsigned((off - RMC_QP_TABLE) / RMC_QP_STRIDE);
        uint64_t r = (off - RMC_QP_TABLE) % RMC_QP_STRIDE;
        std::lock_guard lk(mu_);
        const Qp &qp = qps_[q];
        switch (r) {
        case QP_WQ_BASE:
            return qp.wq_base;
        case QP_CQ_BASE:
            return qp.cq_base;
        case QP_DEPTH_LOG2:
            return qp.depth_log2;
        case QP_CTX:
            return qp.ctx;
        case QP_CTRL:
            return qp.ctrl;
        case QP_STATUS:
            return qp_status(qp);
        case QP_WQ_HEAD:
            return qp.wq_head;
        case QP_CQ_TAIL:
            return qp.cq_tail;
        default:
            return 0;
        }
    }
    if (off >= RMC_CTX_TABLE && off < RMC_CTX_TABLE + RMC_CTX_COUNT * RMC_CTX_STRIDE) {
        unsigned c = unsigned((off - RMC_CTX_TABLE) / RMC_CTX_STRIDE);
        uint64_t r = (off - RMC_CTX_TABLE) % RMC_CTX_STRIDE;
        std::lock_guard lk(mu_);
        const Ctx &cx = ctxs_[c];
        switch (r) {
        case CTX_BASE:
            return cx.base;
        case CTX_SIZE:
            return cx.size;
        case CTX_PERM:
            return cx.perm;
        case CTX_NODEMASK:
            return cx.nodemask;
        case CTX_LAYOUT:
            return cx.layout;
        case CTX_CTRL:
            return cx.ctrl;
        case CTX_STATUS:
            return cx.cfg_err ? CTX_ST_CFG_ERR : 0;
        default:
            return 0;
        }
    }
    if (off >= RMC_COUNTERS && off < RMC_COUNTERS + RMC_CNT_COUNT * 8) {
        return counter(unsigned(off - RMC_COUNTERS));
    }
    if (off < RMC_QP_TABLE) return global_read(off);
    return 0;
}

uint64_t Rmc::global_read(uint64_t off)
{
    const Timing &t = cfg_.timing;
    switch (off) {
    case RMC_REG_ID:
        return RMC_ID_VALUE;
    case RMC_REG_NODE_ID:
        return cfg_.node_id;
    case RMC_REG_NODE_COUNT:
        return cfg_.node_count;
    case RMC_REG_QP_COUNT:
        return RMC_QP_COUNT;
    case RMC_REG_CTX_COUNT:
        return RMC_CTX_COUNT;
    case RMC_REG_ATT_ENTRIES:
        return t.att_entries;
    case RMC_REG_SB_DEPTH:
        return t.sb_depth;
    case RMC_REG_CTRL: {
        std::lock_guard lk(mu_);
        return ctrl_;
    }
    case RMC_REG_STATUS:
        return (cfg_.speculation ? RMC_STATUS_SPEC : 0) |
               (host_.fabric_up && host_.fabric_up() ? RMC_STATUS_FABRIC_UP : 0);
    case RMC_REG_IRQ_STATUS: {
        std::lock_guard lk(mu_);
        return irq_status_;
    }
    case RMC_REG_SEG_BASE:
        return cfg_.seg_base;
    case RMC_REG_SEG_SIZE:
        return cfg_.seg_size;
    case RMC_REG_T_RMC_MHZ:
        return t.rmc_mhz;
    case RMC_REG_T_MEM_NS:
        return t.mem_ns;
    case RMC_REG_T_LLC_NS:
        return t.llc_ns;
    case RMC_REG_T_HOP_NS:
        return t.hop_ns;
    case RMC_REG_T_HOPS:
        return t.hops;
    case RMC_REG_T_LINK_GBPS:
        return t.link_gbps;
    case RMC_REG_T_R2P2_GBPS:
        return t.r2p2_gbps;
    case RMC_REG_T_R2P2_COUNT:
        return t.r2p2_count;
    case RMC_REG_T_ISSUE_CYC:
        return t.issue_cycles;
    case RMC_REG_TIMEOUT_MS:
        return cfg_.timeout_ms;
    case RMC_REG_WINDOW_BLOCKS:
        return cfg_.window_blocks;
    default:
        return 0;
    }
}

void Rmc::global_write(uint64_t off, uint64_t v)
{
    switch (off) {
    case RMC_REG_CTRL: {
        if (v & ~uint64_t(RMC_CTRL_EN | RMC_CTRL_CNT_CLEAR))
            gerr("CTRL: reserved bits 0x%llx ignored",
                 (unsigned long long)(v & ~uint64_t(RMC_CTRL_EN | RMC_CTRL_CNT_CLEAR)));
        if (v & RMC_CTRL_CNT_CLEAR) {
            for (auto &c : cnt_)
                c.store(0, std::memory_order_relaxed);
            std::lock_guard lk(mu_);
            sabre_base_ = sabre_.counters();
        }
        {
            std::unique_lock srv(srv_mu_);
            std::lock_guard lk(mu_);
            ctrl_ = v & RMC_CTRL_EN;
            kicked_ = true;
        }
        cv_.notify_one();
        notify_irq();
        return;
    }
    case RMC_REG_IRQ_STATUS: {
        std::lock_guard lk(mu_);
        irq_status_ &= ~v;
        break;
    }
    default:
        gerr("write of 0x%llx to read-only or unknown register 0x%llx ignored", (unsigned long long)v,
             (unsigned long long)off);
        return;
    }
    notify_irq();
}

void Rmc::mmio_write(uint64_t off, uint64_t v, unsigned size)
{
    if (size != 8 || (off & 7)) {
        gerr("%u-byte write at 0x%llx ignored: registers are 64-bit, aligned", size, (unsigned long long)off);
        return;
    }
    if (off >= RMC_DB_BASE && off < RMC_DB_BASE + RMC_QP_COUNT * RMC_DB_STRIDE) {
        unsigned q = unsigned((off - RMC_DB_BASE) / RMC_DB_STRIDE);
        uint64_t r = (off - RMC_DB_BASE) % RMC_DB_STRIDE;
        bool wake = false;
        {
            std::lock_guard lk(mu_);
            Qp &qp = qps_[q];
            uint32_t idx = uint32_t(v);
            if (!qp.enabled()) {
                gerr("doorbell of QP %u ignored: the QP is not enabled", q);
            } else if (r == DB_WQ_TAIL) {
                if (!(ctrl_ & RMC_CTRL_EN)) {
                    gerr("doorbell of QP %u ignored: the RMC is disabled (CTRL.EN clear)", q);
                } else if (v > 0xffffffffull || uint32_t(idx - qp.wq_head) > qp.depth() ||
                           uint32_t(idx - qp.wq_head) < uint32_t(qp.wq_tail - qp.wq_head)) {
                    gerr("QP %u: WQ tail %llu refused (head %u, tail %u, depth %u)", q, (unsigned long long)v,
                         qp.wq_head, qp.wq_tail, qp.depth());
                } else {
                    qp.wq_tail = idx;
                    wake = kicked_ = true;
                }
            } else if (r == DB_CQ_HEAD) {
                if (v > 0xffffffffull || uint32_t(idx - qp.cq_head) > uint32_t(qp.cq_tail - qp.cq_head)) {
                    gerr("QP %u: CQ head %llu refused (head %u, tail %u)", q, (unsigned long long)v,
                         qp.cq_head, qp.cq_tail);
                } else {
                    qp.cq_head = idx;
                    wake = kicked_ = true;
                }
            } else {
                gerr("QP %u: write to read-only doorbell register 0x%llx ignored", q, (unsigned long long)r);
            }
        }
        if (wake) cv_.notify_one();
        return;
    }
    if (off >= RMC_QP_TABLE && off < RMC_QP_TABLE + RMC_QP_COUNT * RMC_QP_STRIDE) {
        unsigned q = unsigned((off - RMC_QP_TABLE) / RMC_QP_STRIDE);
        uint64_t r = (off - RMC_QP_TABLE) % RMC_QP_STRIDE;
        {
            std::lock_guard lk(mu_);
            Qp &qp = qps_[q];
            if (r == QP_CTRL) {
                if (v & ~uint64_t(QP_CTRL_EN | QP_CTRL_IRQ_EN))
                    gerr("QP %u CTRL: reserved bits 0x%llx ignored", q,
                         (unsigned long long)(v & ~uint64_t(QP_CTRL_EN | QP_CTRL_IRQ_EN)));
                bool en = v & QP_CTRL_EN;
                if (en && !qp.enabled()) {
                    const char *why = nullptr;
                    uint64_t n = 1ull << std::min<uint64_t>(qp.depth_log2, 63);
                    if (qp.depth_log2 < RMC_DEPTH_LOG2_MIN || qp.depth_log2 > RMC_DEPTH_LOG2_MAX)
                        why = "DEPTH_LOG2 out of range 1..12";
                    else if ((qp.wq_base | qp.cq_base) % 64)
                        why = "WQ_BASE/CQ_BASE not 64-byte aligned";
                    else if (!in_ram(qp.wq_base, n * RMC_WQE_SIZE))
                        why = "the WQ is not entirely in RAM";
                    else if (!in_ram(qp.cq_base, n * RMC_CQE_SIZE))
                        why = "the CQ is not entirely in RAM";
                    else if (qp.ctx >= RMC_CTX_COUNT || !ctxs_[qp.ctx].valid())
                        why = "QP_CTX names no valid context";
                    if (why) {
                        gerr("QP %u: enable refused: %s", q, why);
                        qp.cfg_err = true;
                        qp.ctrl = v & QP_CTRL_IRQ_EN;
                    } else {
                        qp.cfg_err = qp.err = false;
                        qp.wq_tail = qp.wq_head = qp.cq_head = qp.cq_tail = 0;
                        qp.ctrl = v & (QP_CTRL_EN | QP_CTRL_IRQ_EN);
                    }
                } else if (!en && qp.enabled()) {
                    orphan_qp_locked(q);
                    qp.ctrl = v & QP_CTRL_IRQ_EN;
                    irq_status_ &= ~(1ull << q);
                } else {
                    qp.ctrl = (qp.ctrl & QP_CTRL_EN) | (v & QP_CTRL_IRQ_EN);
                }
            } else if (qp.enabled() && r <= QP_CTX) {
                gerr("QP %u: register 0x%llx is read-only while the QP is enabled; write ignored", q,
                     (unsigned long long)r);
            } else {
                switch (r) {
                case QP_WQ_BASE:
                    qp.wq_base = v;
                    break;
                case QP_CQ_BASE:
                    qp.cq_base = v;
                    break;
                case QP_DEPTH_LOG2:
                    qp.depth_log2 = v;
                    break;
                case QP_CTX:
                    qp.ctx = v;
                    break;
                default:
                    gerr("QP %u: write to read-only register 0x%llx ignored", q, (unsigned long long)r);
                }
            }
        }
        notify_irq();
        return;
    }
    if (off >= RMC_CTX_TABLE && off < RMC_CTX_TABLE + RMC_CTX_COUNT * RMC_CTX_STRIDE) {
        unsigned c = unsigned((off - RMC_CTX_TABLE) / RMC_CTX_STRIDE);
        uint64_t r = (off - RMC_CTX_TABLE) % RMC_CTX_STRIDE;
        std::unique_lock srv(srv_mu_); // no request of another node is being served meanwhile
        std::unique_lock lk(mu_);
        Ctx &cx = ctxs_[c];
        if (r == CTX_CTRL) {
            if (v & ~uint64_t(CTX_CTRL_VALID))
                gerr("context %u CTRL: reserved bits 0x%llx ignored", c,
                     (unsigned long long)(v & ~uint64_t(CTX_CTRL_VALID)));
            bool valid = v & CTX_CTRL_VALID;
            if (valid && !cx.valid()) {
                const char *why = nullptr;
                unsigned vo = unsigned(cx.layout & CTX_LAYOUT_VER_OFF_MASK);
                if (cx.base % 64)
                    why = "CTX_BASE not 64-byte aligned";
                else if (!cx.size || cx.size % 64)
                    why = "CTX_SIZE not a non-zero multiple of 64";
                else if (!in_ram(cx.base, cx.size))
                    why = "the segment is not entirely in RAM";
                else if (cx.perm &
                         ~uint64_t(CTX_PERM_READ | CTX_PERM_WRITE | CTX_PERM_ATOMIC | CTX_PERM_SABRE))
                    why = "CTX_PERM has unknown bits";
                else if ((cx.layout & CTX_LAYOUT_VALID) && (vo % 8 || vo > 56))
                    why = "CTX_LAYOUT version offset not a multiple of 8 in 0..56";
                else if (cx.layout & ~uint64_t(CTX_LAYOUT_VALID | CTX_LAYOUT_VER_OFF_MASK))
                    why = "CTX_LAYOUT has unknown bits";
                if (why) {
                    gerr("context %u: enable refused: %s", c, why);
                    cx.cfg_err = true;
                } else {
                    cx.cfg_err = false;
                    cx.ctrl = CTX_CTRL_VALID;
                }
            } else if (!valid && cx.valid()) {
                orphan_ctx_locked(c);
                cx.ctrl = 0;
            }
        } else if (cx.valid() && (r <= CTX_LAYOUT || r == CTX_KEY)) {
            gerr("context %u: register 0x%llx is read-only while the context is valid; write ignored", c,
                 (unsigned long long)r);
        } else {
            switch (r) {
            case CTX_BASE:
                cx.base = v;
                break;
            case CTX_SIZE:
                cx.size = v;
                break;
            case CTX_PERM:
                cx.perm = v;
                break;
            case CTX_NODEMASK:
                cx.nodemask = v;
                break;
            case CTX_LAYOUT:
                cx.layout = v;
                break;
            case CTX_KEY:
                cx.key = v;
                break;
            default:
                gerr("context %u: write to read-only register 0x%llx ignored", c, (unsigned long long)r);
            }
        }
        lk.unlock();
        srv.unlock();
        notify_irq(); // withdrawing a context may have completed transfers
        return;
    }
    if (off < RMC_QP_TABLE) {
        global_write(off, v);
        return;
    }
    gerr("write of 0x%llx to read-only or unknown offset 0x%llx ignored", (unsigned long long)v,
         (unsigned long long)off);
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
    }
    for (auto &c : cnt_)
        c.store(0, std::memory_order_relaxed);
    {
        std::lock_guard lk(mu_);
        sabre_base_ = sabre_.counters();
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
    std::vector<std::pair<Frame, bool>> out;
    for (;;) {
        bool notify = false;
        {
            std::unique_lock lk(mu_);
            for (;;) {
                if (stop_) return;
                check_timeouts_locked(now_ns());
                out.clear();
                kicked_ = false;
                bool work = rgp_round(out);
                // Every CQE this thread wrote (timeouts, requests refused at fetch) notifies the
                // host like the RCP's do: an interrupt waiter must not sleep past its completion.
                if (cqe_seq_ != irq_seq_) {
                    irq_seq_ = cqe_seq_;
                    notify = true;
                }
                if (work || notify) break;
                if (kicked_) continue;
                // Sleep until a doorbell, a completion or the next deadline.
                uint64_t next = UINT64_MAX;
                for (auto &[id, t] : xfers_)
                    next = std::min(next, t.deadline_ns);
                if (next == UINT64_MAX) {
                    cv_.wait(lk, [this] { return stop_ || kicked_; });
                } else {
                    uint64_t now = now_ns();
                    auto d =
                        std::chrono::nanoseconds(next > now ? next - now : 0) + std::chrono::milliseconds(1);
                    cv_.wait_for(lk, d, [this] { return stop_ || kicked_; });
                }
            }
        }
        if (notify) notify_irq();
        for (auto &[f, local] : out) {
            if (local) {
                // This node's own R2P2 answers straight into this node's RCP.
                Sink sink;
                sink.msg = [this](rkf_frame_hdr &h, const void *p) {
                    h.src = uint16_t(cfg_.node_id);
                    rcp_data(h, static_cast<const uint8_t *>(p));
                };
                const rkf_frame_hdr req = f.hdr;
                sink.reply = [this, &req](uint16_t st, const void *p, uint16_t len) {
                    rkf_frame_hdr h = req;
                    h.src = uint16_t(cfg_.node_id);
                    h.type = RKF_T_REPLY;
                    h.status = st;
                    h.len = len;
                    rcp_reply(h, static_cast<const uint8_t *>(p));
                };
                serve(f.hdr, f.payload.data(), sink);
            } else {
                int rc = host_.send ? host_.send(f.hdr, f.payload.data()) : -ENOTCONN;
                if (rc) {
                    frame_failed(f.hdr.tag, RMC_ST_UNREACHABLE,
                                 rc == -EAGAIN ? RMC_INFO_CONGESTED : RMC_INFO_LINK_DOWN);
                }
            }
        }
    }
}

// One round: fetch WQEs from the QPs (round robin), then move frames into `out` within the
// destinations' windows, registering their tags first (a reply may overtake the send).
bool Rmc::rgp_round(std::vector<std::pair<Frame, bool>> &out)
{
    if (ctrl_ & RMC_CTRL_EN) {
        for (unsigned i = 0; i < RMC_QP_COUNT; i++) {
            unsigned q = (rr_qp_ + i) % RMC_QP_COUNT;
            for (uint32_t k = 0; k < kFetchPerQp && fetch_one(q); k++) {
            }
        }
        rr_qp_ = (rr_qp_ + 1) % RMC_QP_COUNT;
    }
    for (auto &[id, t] : xfers_) {
        while (!t.unsent.empty() && out.size() < kFramesPerRound) {
            Frame &f = t.unsent.front();
            uint16_t dst = f.hdr.dst;
            if (window_[dst] && window_[dst] + f.blocks > cfg_.window_blocks) break;
            uint64_t tag = next_tag_++;
            f.hdr.tag = tag;
            bool modifies = dst != cfg_.node_id && f.hdr.op >= RKF_OP_RMC_WRITE && f.hdr.op <= RKF_OP_RMC_FAA;
            pending_[tag] = Pending{id, f.xoff, f.len, f.blocks, 0, dst, modifies};
            if (modifies) t.maybe_applied++;
            window_[dst] += f.blocks;
            t.outstanding++;
            count(RMC_CNT_REQ_FRAMES);
            count(RMC_CNT_REQ_BLOCKS, f.blocks);
            out.emplace_back(std::move(f), dst == cfg_.node_id);
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
    mem_load(reinterpret_cast<uint8_t *>(&w),
             host(qp.wq_base + uint64_t(idx & (qp.depth() - 1)) * RMC_WQE_SIZE), sizeof w);
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
    else if (w.node >= cfg_.node_count)
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
    if (w.node != cfg_.node_id && (!host_.send || (host_.fabric_up && !host_.fabric_up()))) {
        complete_now_locked(q, w, uint16_t(idx), RMC_ST_UNREACHABLE,
                            host_.send ? RMC_INFO_LINK_DOWN : RMC_INFO_NOROUTE);
        return true;
    }
    uint64_t id = next_xfer_++;
    Transfer &t = xfers_[id];
    t.id = id;
    t.qp = q;
    t.qp_gen = qp.gen;
    t.ctx_gen = cx.gen;
    t.wqe = w;
    t.wq_index = uint16_t(idx);
    t.local_addr = cx.base + w.local_off;
    t.start_ns = now_ns();
    t.deadline_ns = t.start_ns + uint64_t(cfg_.timeout_ms) * 1000000ull;
    build_frames(t);
    qp.inflight++;
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
        f.hdr.src = uint16_t(cfg_.node_id); // the port sets it again for the fabric
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
            mem_load(buf, host(t.local_addr + x), n); // the data leaves when the RGP unrolls
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
    t.start_ns = now_ns();
    write_cqe_locked(qps_[q], q, t);
}

void Rmc::write_cqe_locked(Qp &qp, unsigned q, const Transfer &t)
{
    bool local = t.wqe.node == cfg_.node_id;
    const Timing &tm = cfg_.timing;
    double model = 0;
    if (t.status != RMC_ST_BAD_REQUEST && t.status != RMC_ST_UNREACHABLE && t.status != RMC_ST_UNCERTAIN) {
        switch (t.wqe.op) {
        case RMC_OP_READ:
            model = model_read_ns(tm, t.wqe.remote_off, t.wqe.length, local);
            break;
        case RMC_OP_WRITE:
            model = model_write_ns(tm, t.wqe.remote_off, t.wqe.length, local);
            break;
        case RMC_OP_CAS:
        case RMC_OP_FAA:
            model = model_atomic_ns(tm, local);
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
    uint64_t wall = now_ns() - t.start_ns;
    c.wall_ns = uint32_t(std::min<uint64_t>(wall, UINT32_MAX));
    c.wq_index = t.wq_index;
    c.op = t.wqe.op;
    c.status = t.status;
    c.info = t.info;
    uint32_t k = qp.cq_tail;
    uint8_t phase = uint8_t(1 ^ ((k >> qp.depth_log2) & 1));
    uint8_t *dst = host(qp.cq_base + uint64_t(k & (qp.depth() - 1)) * RMC_CQE_SIZE);
    mem_store(dst, reinterpret_cast<const uint8_t *>(&c), offsetof(rmc_cqe, flags));
    __atomic_store_n(dst + offsetof(rmc_cqe, flags), uint8_t(t.cqe_flags | phase), __ATOMIC_RELEASE);
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
        rcp_data(h, p);
        return;
    }
    if (h.type != RKF_T_REQ) {
        count(RMC_CNT_SRV_MALFORMED);
        return;
    }
    Sink sink;
    sink.msg = [this](rkf_frame_hdr &m, const void *d) {
        if (host_.send) (void)host_.send(m, d);
    };
    sink.reply = [this, &h](uint16_t st, const void *d, uint16_t len) {
        if (host_.reply) (void)host_.reply(h, st, d, len);
    };
    serve(h, p, sink);
}

void Rmc::on_reply(const rkf_frame_hdr &h, const void *payload)
{
    rcp_reply(h, static_cast<const uint8_t *>(payload));
}

void Rmc::on_link(bool up)
{
    if (up) return;
    {
        std::lock_guard lk(mu_);
        for (auto it = xfers_.begin(); it != xfers_.end();) {
            auto next = std::next(it);
            if (it->second.wqe.node != cfg_.node_id)
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

void Rmc::serve(const rkf_frame_hdr &h, const uint8_t *p, const Sink &sink)
{
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
    std::shared_lock srv(srv_mu_);
    auto refuse = [&](uint8_t st, uint8_t info) {
        count(RMC_CNT_SRV_REFUSED);
        d.status = st;
        d.info = info;
        sink.reply(RKF_ST_OK, &d, sizeof d);
    };
    static const uint64_t need[] = {
        0, CTX_PERM_READ, CTX_PERM_WRITE, CTX_PERM_ATOMIC, CTX_PERM_ATOMIC, CTX_PERM_SABRE};
    // The tables change only under srv_mu_ held exclusively: reading them here is safe.
    if (!(ctrl_ & RMC_CTRL_EN) || r.ctx >= RMC_CTX_COUNT || !ctxs_[r.ctx].valid())
        return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_NO_CTX);
    const Ctx &cx = ctxs_[r.ctx];
    if (h.src >= 64 || !((cx.nodemask >> h.src) & 1)) return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_DENIED);
    if (r.key != cx.key) return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_BAD_KEY);
    if (!(cx.perm & need[h.op])) return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_PERM);
    if (r.off > cx.size || r.len > cx.size - r.off) return refuse(RMC_ST_REMOTE_ACCESS, RMC_INFO_BOUNDS);
    uint8_t *mem = host(cx.base + r.off);
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
            mem_load(buf + sizeof dd, mem + x, n);
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
        mem_store(mem, data, r.len);
        count(RMC_CNT_SRV_WR_BLOCKS, r.nblocks);
        break;
    case RKF_OP_RMC_CAS:
    case RKF_OP_RMC_FAA: {
        if (r.off % 8) return refuse(RMC_ST_BAD_REQUEST, RMC_INFO_UNALIGNED);
        rkf_rmc_atomic a;
        std::memcpy(&a, data, sizeof a);
        auto *w = reinterpret_cast<uint64_t *>(mem);
        if (h.op == RKF_OP_RMC_CAS) {
            uint64_t expect = a.operand0;
            __atomic_compare_exchange_n(w, &expect, a.operand1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
            d.value = expect; // the old value either way
        } else {
            d.value = __atomic_fetch_add(w, a.operand0, __ATOMIC_SEQ_CST);
        }
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

void Rmc::serve_sabre(const rkf_frame_hdr &h, const rkf_rmc_req &r, uint8_t *obj, unsigned ver_off,
                      const Sink &sink)
{
    uint32_t n = r.nblocks;
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
    d.flags = uint16_t((o.validated ? RKF_RMC_RF_VALIDATED : 0) | (sr.spec ? 0 : RKF_RMC_RF_NOSPEC));
    d.value = o.version;
    d.r2p2_ns = uint32_t(std::llround(std::min(model_r2p2_sabre_ns(cfg_.timing, o.trace), 4e9)));
    d.abort_block = o.abort_block;
    sink.reply(RKF_ST_OK, &d, sizeof d);
}

// ---------------------------------------------------------------------------------------------
// RCP

void Rmc::rcp_data(const rkf_frame_hdr &h, const uint8_t *p)
{
    std::unique_lock lk(mu_);
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
            if (d.len) mem_store(host(t.local_addr + pd.xoff + d.off), p + sizeof d, d.len);
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

void Rmc::rcp_reply(const rkf_frame_hdr &h, const uint8_t *p)
{
    {
        std::lock_guard lk(mu_);
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

} // namespace rackemu::sonuma
