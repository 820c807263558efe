// SPDX-License-Identifier: MIT
// The rackemu RNIC device core; see rnic.h and docs/rnic.md.
#include "rnic.h"
#include "rnic_objects.h"

#include "rackemu/fabric_proto.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <random>

#include <sys/random.h>

namespace rackemu::rnic {

static_assert(std::endian::native == std::endian::little, "guest memory and queue entries are little-endian");
static_assert(RNIC_ACCESS_LOCAL_WRITE == RC_ACCESS_LOCAL_WRITE &&
                  RNIC_ACCESS_REMOTE_WRITE == RC_ACCESS_REMOTE_WRITE &&
                  RNIC_ACCESS_REMOTE_READ == RC_ACCESS_REMOTE_READ &&
                  RNIC_ACCESS_REMOTE_ATOMIC == RC_ACCESS_REMOTE_ATOMIC &&
                  RNIC_ACCESS_FLUSH_GLOBAL == RC_ACCESS_FLUSH_GLOBAL &&
                  RNIC_ACCESS_FLUSH_PERSIST == RC_ACCESS_FLUSH_PERSIST,
              "the register header's access flags are the engine's");

namespace {

constexpr uint32_t kRcCount = 0
#define RNIC_CNT_X_ONE_(N, n, d) +1
    RNIC_RC_COUNTERS(RNIC_CNT_X_ONE_)
#undef RNIC_CNT_X_ONE_
    ;

uint8_t cqe_opcode(WrOp op)
{
    switch (op) {
    case WrOp::Send:
    case WrOp::SendImm:
        return RNIC_CQE_OP_SEND;
    case WrOp::Write:
    case WrOp::WriteImm:
        return RNIC_CQE_OP_WRITE;
    case WrOp::Read:
        return RNIC_CQE_OP_READ;
    case WrOp::CmpSwap:
        return RNIC_CQE_OP_CMP_SWAP;
    case WrOp::FetchAdd:
        return RNIC_CQE_OP_FETCH_ADD;
    case WrOp::Flush:
        return RNIC_CQE_OP_FLUSH;
    case WrOp::AtomicWrite:
        return RNIC_CQE_OP_ATOMIC_WRITE;
    case WrOp::XAtomic:
        return RNIC_CQE_OP_XATOMIC;
    case WrOp::XAtomicPost:
        return RNIC_CQE_OP_XATOMIC_POST;
    }
    return RNIC_CQE_OP_SEND;
}

// The AETH syndrome a remote error status came from (the CQE's vendor_err).
uint32_t nak_syndrome(WcStatus s)
{
    switch (s) {
    case WcStatus::RemInvReqErr:
        return ROCE_AETH_NAK(ROCE_NAK_INVALID_REQ);
    case WcStatus::RemAccessErr:
        return ROCE_AETH_NAK(ROCE_NAK_REMOTE_ACCESS);
    case WcStatus::RemOpErr:
        return ROCE_AETH_NAK(ROCE_NAK_REMOTE_OP);
    default:
        return 0;
    }
}

// The CQE opcode of a WQE opcode (0 for an unknown one).
uint8_t wr_cqe_opcode(uint8_t op)
{
    switch (op) {
    case RNIC_WR_WRITE:
    case RNIC_WR_WRITE_IMM:
        return RNIC_CQE_OP_WRITE;
    case RNIC_WR_READ:
        return RNIC_CQE_OP_READ;
    case RNIC_WR_CMP_SWAP:
        return RNIC_CQE_OP_CMP_SWAP;
    case RNIC_WR_FETCH_ADD:
        return RNIC_CQE_OP_FETCH_ADD;
    case RNIC_WR_FLUSH:
        return RNIC_CQE_OP_FLUSH;
    case RNIC_WR_ATOMIC_WRITE:
        return RNIC_CQE_OP_ATOMIC_WRITE;
    case RNIC_WR_XATOMIC:
        return RNIC_CQE_OP_XATOMIC;
    case RNIC_WR_XATOMIC_POST:
        return RNIC_CQE_OP_XATOMIC_POST;
    default:
        return RNIC_CQE_OP_SEND;
    }
}

} // namespace

bool rnic_default_peer_addr(uint32_t node, uint8_t mac[6], uint32_t *ip)
{
    if (node >= RKF_MAX_NODES) return false;
    rkf_eth_node_mac(node, mac);
    *ip = rkf_eth_node_ipv4(node);
    return true;
}

// ---- register table ----

std::span<const Rnic::RegRow> Rnic::reg_table()
{
    using R = RegRow;
    using A = RegAccess;
    constexpr uint32_t n_cq_words = RNIC_BITMAP_WORDS(RNIC_MAX_CQ),
                       n_qp_words = RNIC_BITMAP_WORDS(RNIC_MAX_QP);
    static const R rows[] = {
        {"ID", RNIC_REG_ID, 4, A::RO, RNIC_ID_VALUE, 0},
        {"VERSION", RNIC_REG_VERSION, 4, A::RO, RNIC_VERSION_VALUE, 0},
        {"CAPS", RNIC_REG_CAPS, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t {
             return RNIC_CAP_FLUSH | RNIC_CAP_ATOMIC_WRITE | RNIC_CAP_XATOMIC | RNIC_CAP_EQ |
                    (d.cfg_.link ? RNIC_CAP_LINK : 0);
         }},
        {"NODE_ID", RNIC_REG_NODE_ID, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.host_.node_id(); }},
        {"MAX_PD", RNIC_REG_MAX_PD, 4, A::RO, RNIC_MAX_PD, 0},
        {"MAX_MR", RNIC_REG_MAX_MR, 4, A::RO, RNIC_MAX_MR, 0},
        {"MAX_CQ", RNIC_REG_MAX_CQ, 4, A::RO, RNIC_MAX_CQ, 0},
        {"MAX_QP", RNIC_REG_MAX_QP, 4, A::RO, RNIC_MAX_QP, 0},
        {"MAC_LO", RNIC_REG_MAC_LO, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t {
             const uint8_t *m = d.cfg_.mac;
             return uint32_t(m[2]) << 24 | uint32_t(m[3]) << 16 | uint32_t(m[4]) << 8 | m[5];
         }},
        {"MAC_HI", RNIC_REG_MAC_HI, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t {
             return uint32_t(d.cfg_.mac[0]) << 8 | d.cfg_.mac[1];
         }},
        {"IPV4", RNIC_REG_IPV4, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cfg_.ip; }},
        {"CTRL", RNIC_REG_CTRL, 4, A::RW, 0, RNIC_CTRL_WRITABLE | RNIC_CTRL_CNT_CLEAR,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.ctrl_; },
         [](Rnic &d, const R &, unsigned, uint64_t merged, uint64_t, Pending &) {
             if (merged & RNIC_CTRL_CNT_CLEAR) {
                 for (unsigned i = 0; i < RNIC_CNT_COUNT; i++) {
                     d.cnt_base_[i] = 0;
                     if (i != RNIC_CNT_INDEX_AMU_MAX_OUTSTANDING)
                         d.cnt_base_[i] = d.counter(i); // a high-water mark
                 }
             }
             d.ctrl_ = uint32_t(merged) & RNIC_CTRL_WRITABLE;
             d.publish(); // CTRL.ENABLE: whether peers may read directly
         }},
        {"STATUS", RNIC_REG_STATUS, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t {
             return d.cfg_.link && d.eq_.link_up ? RNIC_STATUS_LINK_UP : 0;
         }},
        {"MODEL_NS_LO", RNIC_REG_MODEL_NS_LO, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t {
             const uint64_t t = d.host_.now_ns();
             d.model_hi_latch_ = uint32_t(t >> 32);
             return uint32_t(t);
         }},
        {"MODEL_NS_HI", RNIC_REG_MODEL_NS_HI, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.model_hi_latch_; }},
        {"CMD_ADDR_LO", RNIC_REG_CMD_ADDR_LO, 4, A::RW, 0, 0xffffffc0u,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cmd_addr_lo_; },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) { d.cmd_addr_lo_ = uint32_t(m); }},
        {"CMD_ADDR_HI", RNIC_REG_CMD_ADDR_HI, 4, A::RW, 0, 0xffffffffu,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cmd_addr_hi_; },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) { d.cmd_addr_hi_ = uint32_t(m); }},
        {"CMD_EXEC", RNIC_REG_CMD_EXEC, 4, A::RW, 0, 0xffffffffu,
         [](Rnic &, const R &, unsigned, Pending &) -> uint64_t { return 0; },
         [](Rnic &d, const R &, unsigned, uint64_t, uint64_t raw, Pending &p) {
             if (raw == RNIC_CMD_EXEC_GO)
                 p.exec = true;
             else
                 d.guest_error("CMD_EXEC: wrote 0x%llx, only %u starts a command", (unsigned long long)raw,
                               RNIC_CMD_EXEC_GO);
         }},
        {"CMD_STATUS", RNIC_REG_CMD_STATUS, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cmd_status_; }},
        {"CMD_COUNT", RNIC_REG_CMD_COUNT, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cmd_count_; }},
        {"INT_STATUS", RNIC_REG_INT_STATUS, 4, A::W1C, 0, RNIC_INT_ALL,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.int_status_; },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) {
             d.int_status_ = uint32_t(m);
             d.update_irq();
         }},
        {"INT_ENABLE", RNIC_REG_INT_ENABLE, 4, A::RW, 0, RNIC_INT_ALL,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.int_enable_; },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) {
             d.int_enable_ = uint32_t(m);
             d.update_irq();
         }},
        {"CQ_EVENTS", RNIC_REG_CQ_EVENTS, 8, A::W1C, 0, ~0ull,
         [](Rnic &d, const R &, unsigned i, Pending &) -> uint64_t { return d.cq_events_[i]; },
         [](Rnic &d, const R &, unsigned i, uint64_t m, uint64_t, Pending &) { d.cq_events_[i] = m; },
         n_cq_words, 8},
        {"QP_ERRORS", RNIC_REG_QP_ERRORS, 8, A::W1C, 0, ~0ull,
         [](Rnic &d, const R &, unsigned i, Pending &) -> uint64_t { return d.qp_errors_[i]; },
         [](Rnic &d, const R &, unsigned i, uint64_t m, uint64_t, Pending &) { d.qp_errors_[i] = m; },
         n_qp_words, 8},
        {"CQ_ERRORS", RNIC_REG_CQ_ERRORS, 8, A::W1C, 0, ~0ull,
         [](Rnic &d, const R &, unsigned i, Pending &) -> uint64_t { return d.cq_errors_[i]; },
         [](Rnic &d, const R &, unsigned i, uint64_t m, uint64_t, Pending &) { d.cq_errors_[i] = m; },
         n_cq_words, 8},
        {"LINK_MBPS", RNIC_REG_LINK_MBPS, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cfg_.timing.link_mbps; }},
        {"HOP_NS", RNIC_REG_HOP_NS, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cfg_.timing.hop_ns; }},
        {"NIC_MHZ", RNIC_REG_NIC_MHZ, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cfg_.timing.nic_mhz; }},
        {"PCIE_NS", RNIC_REG_PCIE_NS, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cfg_.timing.pcie_ns; }},
        {"PCIE_MBPS", RNIC_REG_PCIE_MBPS, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cfg_.timing.pcie_mbps; }},
        {"MAX_MTU", RNIC_REG_MAX_MTU, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cfg_.timing.max_mtu; }},
        {"EQ_BASE_LO", RNIC_REG_EQ_BASE_LO, 4, A::RW, 0, 0xffffffc0u,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return uint32_t(d.eq_.base); },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) {
             if (d.eq_.ctrl & RNIC_EQ_CTRL_ENABLE)
                 return d.guest_error("EQ_BASE_LO written while the event queue is enabled: ignored");
             d.eq_.base = (d.eq_.base & ~0xffffffffull) | uint32_t(m);
         }},
        {"EQ_BASE_HI", RNIC_REG_EQ_BASE_HI, 4, A::RW, 0, 0xffffffffu,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return uint32_t(d.eq_.base >> 32); },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) {
             if (d.eq_.ctrl & RNIC_EQ_CTRL_ENABLE)
                 return d.guest_error("EQ_BASE_HI written while the event queue is enabled: ignored");
             d.eq_.base = (d.eq_.base & 0xffffffffull) | uint64_t(uint32_t(m)) << 32;
         }},
        {"EQ_CTRL", RNIC_REG_EQ_CTRL, 4, A::RW, 0, RNIC_EQ_CTRL_WRITABLE,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.eq_.ctrl; },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) { d.eq_write_ctrl(uint32_t(m)); }},
        {"EQ_PI", RNIC_REG_EQ_PI, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.eq_.pi; }},
        {"EQ_CI", RNIC_REG_EQ_CI, 4, A::RW, 0, 0xffffffffu,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.eq_.ci; },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) {
             const uint32_t v = uint32_t(m);
             if (v - d.eq_.ci > d.eq_.pi - d.eq_.ci)
                 return d.guest_error("EQ_CI %u beyond the producer index %u (consumer was %u): ignored", v,
                                      d.eq_.pi, d.eq_.ci);
             d.eq_.ci = v;
         }},
        {"EQ_ARM", RNIC_REG_EQ_ARM, 4, A::RW, 0, 0xffffffffu,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.eq_.armed ? 1 : 0; },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) {
             if (m != 1) return d.guest_error("EQ_ARM: wrote %llu, only 1 arms", (unsigned long long)m);
             if (!(d.eq_.ctrl & RNIC_EQ_CTRL_ENABLE))
                 return d.guest_error("EQ_ARM while the event queue is disabled: ignored");
             const unsigned v = (d.eq_.ctrl & RNIC_EQ_CTRL_VECTOR_MASK) >> RNIC_EQ_CTRL_VECTOR_SHIFT;
             if (d.eq_.pi != d.eq_.ci) { // events already wait: interrupt now
                 d.eq_.armed = false;
                 d.raise(v);
             } else {
                 d.eq_.armed = true;
             }
         }},
        {"EQ_STATUS", RNIC_REG_EQ_STATUS, 4, A::W1C, 0, RNIC_EQ_ST_W1C,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.eq_.status; },
         [](Rnic &d, const R &, unsigned, uint64_t m, uint64_t, Pending &) { d.eq_.status = uint32_t(m); }},
        {"COUNTERS", RNIC_REG_COUNTERS, 8, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned i, Pending &) -> uint64_t { return d.counter(i); }, nullptr,
         RNIC_CNT_COUNT, 8},
    };
    return rows;
}

// ---- construction, reset ----

Rnic::Rnic(Host host, RnicConfig cfg, SendFn send, TimerFn timer, TxWaitFn tx_wait)
    : host_(host), cfg_(std::move(cfg)), send_(std::move(send)), timer_(std::move(timer)),
      tx_wait_(std::move(tx_wait)), bank_(reg_table())
{
    if (!cfg_.peer_addr) cfg_.peer_addr = rnic_default_peer_addr;
    if (!valid_mtu(cfg_.timing.max_mtu)) cfg_.timing.max_mtu = ROCE_MTU_MAX;
    cfg_.timing.link_mbps = std::max(cfg_.timing.link_mbps, 1u);
    cfg_.timing.pcie_mbps = std::max(cfg_.timing.pcie_mbps, 1u);
    cfg_.timing.nic_mhz = std::max(cfg_.timing.nic_mhz, 1u);
    cfg_.rc.xatomic = true; // the atomic unit is here
    cfg_.amu.atomicity = AmuAtomicity::Global;
    cfg_.amu.symmetric = false;
    eq_.link_up = cfg_.link;
    std::lock_guard lk(mu_);
    if (const char *e = amu_check_config(cfg_.amu)) { // the glue refuses these at realize
        guest_error("atomic unit properties refused (%s): the defaults are used", e);
        cfg_.amu = AmuConfig{};
    }
    amu_host_ = std::make_unique<AmuDev>(*this);
    amu_reset();
    pds_.resize(RNIC_MAX_PD);
    mrs_.resize(RNIC_MAX_MR);
    mr_tag_.assign(RNIC_MAX_MR, 0);
    cqs_.resize(RNIC_MAX_CQ);
    qps_.resize(RNIC_MAX_QP);
    rc_ = std::make_unique<RcEngine>(static_cast<RcEnv &>(*this), cfg_.rc);
    pub_init();
    publish();
}

Rnic::~Rnic() = default;

void Rnic::clear_objects()
{
    rc_ = std::make_unique<RcEngine>(static_cast<RcEnv &>(*this), cfg_.rc);
    amu_reset();
    rx_pass_ns_ = rx_end_ns_ = 0;
    for (auto &p : pds_)
        p = Pd{};
    for (auto &m : mrs_)
        m.reset();
    for (auto &c : cqs_)
        c.reset();
    for (auto &q : qps_)
        q.reset();
    pub_pages_used_ = 0;
    pub_unplaced_ = 0;
    pub_all_dirty();
}

void Rnic::reset()
{
    std::lock_guard lk(mu_);
    clear_objects();
    ctrl_ = cmd_addr_lo_ = cmd_addr_hi_ = cmd_status_ = cmd_count_ = 0;
    int_status_ = int_enable_ = model_hi_latch_ = 0;
    std::fill(std::begin(cq_events_), std::end(cq_events_), 0);
    std::fill(std::begin(qp_errors_), std::end(qp_errors_), 0);
    std::fill(std::begin(cq_errors_), std::end(cq_errors_), 0);
    ctr_ = RnicCounters{};
    amu_base_ = RnicCounters{};
    std::fill(std::begin(cnt_base_), std::end(cnt_base_), 0);
    rx_paused_.clear();
    loop_.clear();
    held_.clear();
    held_bytes_ = 0;
    tx_blocked_ = false;
    const bool link_up = eq_.link_up; // the port's state is not the device's to reset
    eq_ = RnicEq{};
    eq_.link_up = link_up;
    update_irq();
    arm_timer();
    publish();
}

void Rnic::guest_error(const char *fmt, ...)
{
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    ctr_.guest_errors++;
    host_.guest_errorf("rnic: %s", buf);
}

uint64_t Rnic::counter(unsigned i)
{
    if (i >= RNIC_CNT_COUNT) return 0;
    if (i >= RNIC_CNT_INDEX_AMU_OPS) amu_settle(); // the AMU_* counters are the table's last
    sync_served();
    uint64_t v = 0;
    if (i < kRcCount) {
        const RcCounters &c = rc_->counters();
        const uint64_t vals[] = {
#define RNIC_CNT_X_VAL_(N, n, d) c.n,
            RNIC_RC_COUNTERS(RNIC_CNT_X_VAL_)
#undef RNIC_CNT_X_VAL_
        };
        v = vals[i];
    } else {
        const uint64_t vals[] = {
#define RNIC_CNT_X_VAL_(N, n, d) ctr_.n,
            RNIC_DEV_COUNTERS(RNIC_CNT_X_VAL_)
#undef RNIC_CNT_X_VAL_
        };
        v = vals[i - kRcCount];
    }
    return v - cnt_base_[i];
}

uint32_t Rnic::int_status()
{
    std::lock_guard lk(mu_);
    return int_status_;
}

bool Rnic::irq_level(unsigned v)
{
    std::lock_guard lk(mu_);
    return v < RNIC_MSIX_VECTORS && irq_[v];
}

// ---- BAR0 ----

uint64_t Rnic::ctrl_read(uint64_t offset, unsigned size)
{
    std::lock_guard lk(mu_);
    Pending p;
    uint64_t v = 0;
    if ((size != 4 && size != 8) || (offset & (size - 1))) {
        guest_error("BAR0 read of %u bytes at 0x%llx: only aligned 4- and 8-byte accesses", size,
                    (unsigned long long)offset);
        return 0;
    }
    if (bank_.read(*this, offset, size, p, v) != RegResult::Ok) {
        guest_error("BAR0 read at 0x%llx (%s): no register", (unsigned long long)offset,
                    bank_.describe(offset).c_str());
        return 0;
    }
    return v;
}

void Rnic::ctrl_write(uint64_t offset, uint64_t value, unsigned size)
{
    std::lock_guard lk(mu_);
    Pending p;
    if ((size != 4 && size != 8) || (offset & (size - 1))) {
        guest_error("BAR0 write of %u bytes at 0x%llx: only aligned 4- and 8-byte accesses", size,
                    (unsigned long long)offset);
        return;
    }
    const RegResult r = bank_.write(*this, offset, value, size, p);
    if (r == RegResult::Unmapped)
        guest_error("BAR0 write at 0x%llx: no register", (unsigned long long)offset);
    else if (r == RegResult::ReadOnly)
        guest_error("BAR0 write to read-only %s", bank_.describe(offset).c_str());
    if (p.exec) exec_command();
    after_engine();
}

// ---- guest memory ----

bool Rnic::dma(uint64_t addr, void *buf, uint64_t len, bool write)
{
    const Status st = write ? host_.dma_write(addr, buf, len) : host_.dma_read(addr, buf, len);
    ctr_.modeled_pcie_ns += pcie_ns(len);
    if (st != RK_OK) {
        ctr_.dma_errors++;
        return false;
    }
    return true;
}

bool Rnic::probe_ram(uint64_t addr, uint64_t len)
{
    if (len == 0 || addr + len < addr) return false;
    uint8_t b;
    // one byte of every 4 KiB page and the last byte: RAM has no holes smaller than a page
    for (uint64_t a = addr; a < addr + len; a = (a & ~0xfffull) + 0x1000) {
        if (host_.dma_read(a, &b, 1) != RK_OK) return false;
        if ((a & ~0xfffull) + 0x1000 < a) break;
    }
    return host_.dma_read(addr + len - 1, &b, 1) == RK_OK;
}

// ---- BAR2: doorbells ----

uint64_t Rnic::db_read(uint64_t offset, unsigned size)
{
    std::lock_guard lk(mu_);
    if (size != 4 || (offset & 3) || offset >= RNIC_BAR_DB_SIZE) {
        guest_error("doorbell read of %u bytes at 0x%llx: 4-byte aligned accesses only", size,
                    (unsigned long long)offset);
        return 0;
    }
    const uint32_t reg = uint32_t(offset % RNIC_PAGE_SIZE);
    if (offset < RNIC_DB_CQ_BASE) {
        const Qp *q = qps_[offset / RNIC_PAGE_SIZE].get();
        if (!q) return 0;
        switch (reg) {
        case RNIC_QP_DB_SQ_PI:
            return q->sq_pi;
        case RNIC_QP_DB_RQ_PI:
            return q->rq_pi;
        case RNIC_QP_DB_SQ_CI:
            return q->sq_ci;
        case RNIC_QP_DB_RQ_CI:
            return q->rq_ci;
        case RNIC_QP_DB_STATE:
            return engine_state(rc_->qp_state(q->qpn));
        default:
            return 0;
        }
    }
    const Cq *c = cqs_[(offset - RNIC_DB_CQ_BASE) / RNIC_PAGE_SIZE].get();
    if (!c) return 0;
    switch (reg) {
    case RNIC_CQ_DB_CI:
        return c->ci;
    case RNIC_CQ_DB_ARM:
        return c->arm;
    case RNIC_CQ_DB_PI:
        return c->pi;
    case RNIC_CQ_DB_STATUS:
        return c->error ? RNIC_CQ_ST_ERROR : 0;
    default:
        return 0;
    }
}

void Rnic::db_write(uint64_t offset, uint64_t value, unsigned size)
{
    std::lock_guard lk(mu_);
    if (size != 4 || (offset & 3) || offset >= RNIC_BAR_DB_SIZE) {
        ctr_.doorbell_errors++;
        guest_error("doorbell write of %u bytes at 0x%llx: 4-byte aligned accesses only", size,
                    (unsigned long long)offset);
        return;
    }
    ctr_.doorbells++;
    const uint32_t reg = uint32_t(offset % RNIC_PAGE_SIZE), v = uint32_t(value);
    if (!(ctrl_ & RNIC_CTRL_ENABLE)) {
        ctr_.doorbell_errors++;
        guest_error("doorbell at 0x%llx while CTRL.ENABLE is 0: ignored", (unsigned long long)offset);
        return;
    }
    if (offset < RNIC_DB_CQ_BASE) {
        const uint32_t i = uint32_t(offset / RNIC_PAGE_SIZE);
        Qp *q = qps_[i].get();
        if (!q || (reg != RNIC_QP_DB_SQ_PI && reg != RNIC_QP_DB_RQ_PI)) {
            ctr_.doorbell_errors++;
            guest_error("doorbell write to QP page %u offset 0x%x: %s", i, reg,
                        q ? "not a doorbell register" : "no such QP");
            return;
        }
        if (reg == RNIC_QP_DB_SQ_PI)
            sq_doorbell(*q, v);
        else
            rq_doorbell(*q, v);
    } else {
        const uint32_t i = uint32_t((offset - RNIC_DB_CQ_BASE) / RNIC_PAGE_SIZE);
        Cq *c = cqs_[i].get();
        if (!c || (reg != RNIC_CQ_DB_CI && reg != RNIC_CQ_DB_ARM)) {
            ctr_.doorbell_errors++;
            guest_error("doorbell write to CQ page %u offset 0x%x: %s", i, reg,
                        c ? "not a doorbell register" : "no such CQ");
            return;
        }
        if (reg == RNIC_CQ_DB_CI) {
            if (v - c->ci > c->pi - c->ci) {
                ctr_.doorbell_errors++;
                guest_error("CQ %u: consumer index %u beyond the producer index %u (consumer was %u)", i, v,
                            c->pi, c->ci);
            } else {
                c->ci = v;
            }
        } else if (v != RNIC_CQ_ARM_NEXT && v != RNIC_CQ_ARM_SOLICITED) {
            ctr_.doorbell_errors++;
            guest_error("CQ %u: arm value %u (expected %u or %u)", i, v, RNIC_CQ_ARM_NEXT,
                        RNIC_CQ_ARM_SOLICITED);
        } else if (c->arm != RNIC_CQ_ARM_NEXT) {
            c->arm = v; // NEXT widens SOLICITED, never the reverse
        }
    }
    after_engine();
}

void Rnic::qp_fail(Qp &q, const char *why)
{
    guest_error("QP 0x%x: %s: the QP goes to the error state", q.qpn, why);
    qp_errors_[q.index / 64] |= 1ull << (q.index % 64);
    raise(0);
    const bool entered = rc_->qp_state(q.qpn) != QpState::Error;
    rc_->modify_qp(q.qpn, QpState::Error, q.attr);
    q.state = RNIC_QPS_ERR;
    pub_qp_changed(q.index);
    if (entered) eq_event(RNIC_EV_QP_FATAL, q.qpn, 0);
}

void Rnic::sq_doorbell(Qp &q, uint32_t pi)
{
    const uint32_t depth = 1u << q.sq_log2;
    if (q.state == RNIC_QPS_RESET) {
        ctr_.doorbell_errors++;
        guest_error("QP 0x%x: SQ doorbell in the RESET state: ignored", q.qpn);
        return;
    }
    if (pi - q.sq_ci > depth) {
        ctr_.doorbell_errors++;
        q.sq_pi = pi;
        q.sq_ci = pi; // nothing of the announced range is fetched
        return qp_fail(q, "SQ producer index more than the ring's depth ahead of the consumer index");
    }
    q.sq_pi = pi;
    pump_sq(q);
}

void Rnic::rq_doorbell(Qp &q, uint32_t pi)
{
    const uint32_t depth = 1u << q.rq_log2;
    if (q.state == RNIC_QPS_RESET) {
        ctr_.doorbell_errors++;
        guest_error("QP 0x%x: RQ doorbell in the RESET state: ignored", q.qpn);
        return;
    }
    if (pi - q.rq_ci > depth) {
        ctr_.doorbell_errors++;
        q.rq_pi = pi;
        q.rq_ci = pi;
        q.rwqe_valid = false;
        return qp_fail(q, "RQ producer index more than the ring's depth ahead of the consumer index");
    }
    q.rq_pi = pi;
    // a receive in the Error state completes at once (flushed)
    if (rc_->qp_state(q.qpn) == QpState::Error) flush_recv(q.qpn);
}

// Fetch send WQEs and post them to the engine while the engine has room. A WQE that fails its
// checks is held until every earlier WR has completed, then completes with its error (in order)
// and the QP goes to Error.
void Rnic::pump_sq(Qp &q)
{
    const uint32_t depth = 1u << q.sq_log2;
    for (;;) {
        const size_t outstanding = rc_->outstanding(q.qpn);
        // WRs the engine completed silently (unsignaled successes): everything older than the
        // engine's outstanding ones
        while (q.wrs.size() > outstanding)
            q.wrs.erase(q.wrs.begin());
        if (q.bad_held) {
            if (outstanding) return;
            q.bad_held = false;
            struct rnic_cqe e = {};
            e.wr_id = q.bad.wqe.wr_id;
            e.qpn = q.qpn;
            e.src_qpn = q.attr.dest_qpn;
            e.opcode = wr_cqe_opcode(q.bad.wqe.opcode);
            e.status = q.bad_lerr == RNIC_LERR_WQE_DMA || q.bad_lerr == RNIC_LERR_OPCODE ||
                               q.bad_lerr == RNIC_LERR_SGE_COUNT || q.bad_lerr == RNIC_LERR_LENGTH
                           ? RNIC_WC_LOC_QP_OP_ERR
                           : RNIC_WC_LOC_PROT_ERR;
            e.vendor_err = q.bad_lerr;
            ctr_.wqe_errors++;
            write_cqe(q.send_cqn, e, true);
            qp_fail(q, "send WQE failed its checks");
            continue;
        }
        const QpState st = rc_->qp_state(q.qpn);
        if (q.sq_ci == q.sq_pi || st == QpState::Reset) return;
        if (outstanding >= depth) return; // our copies of the WQEs are bounded by the ring
        Qp::Wr w;
        const uint64_t at = q.sq_ring + uint64_t(q.sq_ci & (depth - 1)) * sizeof(struct rnic_send_wqe);
        ctr_.wqes_fetched++;
        if (!dma(at, &w.wqe, sizeof(w.wqe), false)) {
            guest_error("QP 0x%x: send WQE %u at 0x%llx is not in RAM", q.qpn, q.sq_ci,
                        (unsigned long long)at);
            std::memset(&w.wqe, 0, sizeof(w.wqe));
            q.sq_ci++;
            q.bad_held = true;
            q.bad = w;
            q.bad_lerr = RNIC_LERR_WQE_DMA;
            continue;
        }
        q.sq_ci++;
        const struct rnic_send_wqe &x = w.wqe;
        SendWr wr;
        uint32_t lerr = RNIC_LERR_NONE;
        bool needs_local_write = false;
        switch (x.opcode) {
        case RNIC_WR_SEND:
            wr.op = WrOp::Send;
            break;
        case RNIC_WR_SEND_IMM:
            wr.op = WrOp::SendImm;
            break;
        case RNIC_WR_WRITE:
            wr.op = WrOp::Write;
            break;
        case RNIC_WR_WRITE_IMM:
            wr.op = WrOp::WriteImm;
            break;
        case RNIC_WR_READ:
            wr.op = WrOp::Read, needs_local_write = true;
            break;
        case RNIC_WR_CMP_SWAP:
            wr.op = WrOp::CmpSwap, needs_local_write = true;
            break;
        case RNIC_WR_FETCH_ADD:
            wr.op = WrOp::FetchAdd, needs_local_write = true;
            break;
        case RNIC_WR_FLUSH:
            wr.op = WrOp::Flush;
            break;
        case RNIC_WR_ATOMIC_WRITE:
            wr.op = WrOp::AtomicWrite;
            break;
        case RNIC_WR_XATOMIC:
            wr.op = WrOp::XAtomic, needs_local_write = true;
            break;
        case RNIC_WR_XATOMIC_POST:
            wr.op = WrOp::XAtomicPost;
            break;
        default:
            lerr = RNIC_LERR_OPCODE;
            break;
        }
        const bool xatomic = wr.op == WrOp::XAtomic || wr.op == WrOp::XAtomicPost;
        if (!lerr && xatomic &&
            (x.xop >= ROCE_XOP_COUNT || (x.xsize != ROCE_XATOMIC_SIZE32 && x.xsize != ROCE_XATOMIC_SIZE64)))
            lerr = RNIC_LERR_OPCODE;
        uint64_t len = 0;
        if (!lerr && x.num_sge > RNIC_MAX_SEND_SGE) lerr = RNIC_LERR_SGE_COUNT;
        if (!lerr && (wr.op == WrOp::Flush || wr.op == WrOp::AtomicWrite || wr.op == WrOp::XAtomicPost) &&
            x.num_sge)
            lerr = RNIC_LERR_SGE_COUNT;
        if (!lerr && wr.op == WrOp::XAtomic && (x.num_sge != 1 || x.sge[0].length != x.xsize))
            lerr = x.num_sge != 1 ? RNIC_LERR_SGE_COUNT : RNIC_LERR_LENGTH;
        if (!lerr && (wr.op == WrOp::CmpSwap || wr.op == WrOp::FetchAdd) &&
            (x.num_sge != 1 || x.sge[0].length != 8))
            lerr = x.num_sge != 1 ? RNIC_LERR_SGE_COUNT : RNIC_LERR_LENGTH;
        for (unsigned k = 0; !lerr && k < x.num_sge; k++) {
            len += x.sge[k].length;
            if (x.sge[k].length) lerr = check_local(q, x.sge[k], needs_local_write);
        }
        if (!lerr && len > RNIC_MAX_MSG) lerr = RNIC_LERR_LENGTH;
        if (lerr) {
            if (lerr != RNIC_LERR_OPCODE && lerr != RNIC_LERR_SGE_COUNT && lerr != RNIC_LERR_LENGTH)
                ctr_.local_prot_errors++;
            guest_error("QP 0x%x: send WQE %u (wr_id 0x%llx, opcode %u) refused: reason %u", q.qpn,
                        q.sq_ci - 1, (unsigned long long)x.wr_id, x.opcode, lerr);
            q.bad_held = true;
            q.bad = w;
            q.bad_lerr = lerr;
            continue;
        }
        const uint64_t seq = next_seq_++;
        wr.wr_id = seq;
        wr.local = seq;
        wr.length = wr.op == WrOp::Flush ? x.flush_len : wr.op == WrOp::AtomicWrite ? 8 : uint32_t(len);
        wr.remote_va = x.remote_addr;
        wr.rkey = x.rkey;
        wr.imm = x.imm;
        wr.swap_add = x.swap_add;
        wr.compare = x.compare;
        wr.mask = x.mask;
        wr.xop = x.xop;
        wr.xsize = x.xsize;
        wr.flush_placement = x.flush_type & ROCE_FETH_PLT_MASK;
        wr.flush_selectivity = (x.flush_type & ROCE_FETH_SEL_MASK) >> ROCE_FETH_SEL_SHIFT;
        wr.signaled = x.flags & RNIC_WQE_F_SIGNALED;
        wr.solicited = x.flags & RNIC_WQE_F_SOLICITED;
        wr.fence = x.flags & RNIC_WQE_F_FENCE;
        w.len = wr.length;
        w.posted_ns = host_.now_ns();
        q.wrs.emplace(seq, w);
        if (wr.op == WrOp::Send || wr.op == WrOp::SendImm || wr.op == WrOp::Write ||
            wr.op == WrOp::WriteImm || wr.op == WrOp::AtomicWrite)
            ctr_.payload_tx_bytes += wr.length;
        // a READ or WRITE alone on its QP, to a peer reachable directly: a copy, no frames
        // (rnic_direct.cc)
        if ((wr.op == WrOp::Read || wr.op == WrOp::Write) && direct_op(q, seq, wr)) continue;
        const RcResult r = rc_->post_send(q.qpn, wr);
        if (r != RcResult::Ok) {
            // the checks above make this unreachable; never lose the WR silently
            q.wrs.erase(seq);
            q.bad_held = true;
            q.bad = w;
            q.bad_lerr = RNIC_LERR_OPCODE;
        }
    }
}

// The local buffer of a send WR (its SGEs were checked at fetch).
WcStatus Rnic::read_local(uint32_t qpn, const SendWr &wr, uint64_t off, uint8_t *dst, uint32_t len)
{
    Qp *q = qp_by_qpn(qpn);
    auto it = q ? q->wrs.find(wr.local) : decltype(q->wrs.end()){};
    if (!q || it == q->wrs.end()) return WcStatus::LocQpOpErr;
    return sge_rw(*q, it->second.wqe.sge, it->second.wqe.num_sge, off, dst, len, false, &it->second.lerr);
}

WcStatus Rnic::write_local(uint32_t qpn, const SendWr &wr, uint64_t off, const uint8_t *src, uint32_t len)
{
    Qp *q = qp_by_qpn(qpn);
    auto it = q ? q->wrs.find(wr.local) : decltype(q->wrs.end()){};
    if (!q || it == q->wrs.end()) return WcStatus::LocQpOpErr;
    ctr_.payload_rx_bytes += len;
    return sge_rw(*q, it->second.wqe.sge, it->second.wqe.num_sge, off, const_cast<uint8_t *>(src), len, true,
                  &it->second.lerr);
}

// ---- receive queue ----

bool Rnic::fetch_rwqe(Qp &q)
{
    if (q.rwqe_valid) return true;
    if (q.rq_ci == q.rq_pi) return false;
    const uint32_t depth = 1u << q.rq_log2;
    const uint64_t at = q.rq_ring + uint64_t(q.rq_ci & (depth - 1)) * sizeof(struct rnic_recv_wqe);
    ctr_.wqes_fetched++;
    q.rlerr = RNIC_LERR_NONE;
    if (!dma(at, &q.rwqe, sizeof(q.rwqe), false)) {
        std::memset(&q.rwqe, 0, sizeof(q.rwqe));
        q.rlerr = RNIC_LERR_WQE_DMA;
        guest_error("QP 0x%x: receive WQE %u at 0x%llx is not in RAM", q.qpn, q.rq_ci,
                    (unsigned long long)at);
    } else if (q.rwqe.num_sge > RNIC_MAX_RECV_SGE) {
        q.rlerr = RNIC_LERR_SGE_COUNT;
        guest_error("QP 0x%x: receive WQE %u has %u SGEs (at most %u)", q.qpn, q.rq_ci, q.rwqe.num_sge,
                    RNIC_MAX_RECV_SGE);
    }
    q.rlen = 0;
    for (unsigned k = 0; !q.rlerr && k < q.rwqe.num_sge; k++)
        q.rlen += q.rwqe.sge[k].length;
    q.rfirst_ns = host_.now_ns();
    q.rwqe_valid = true;
    return true;
}

bool Rnic::recv_available(uint32_t qpn)
{
    Qp *q = qp_by_qpn(qpn);
    return q && fetch_rwqe(*q);
}

WcStatus Rnic::recv_write(uint32_t qpn, uint64_t off, const uint8_t *src, uint32_t len)
{
    Qp *q = qp_by_qpn(qpn);
    if (!q || !fetch_rwqe(*q) || q->rlerr) return WcStatus::LocQpOpErr;
    if (off + len > q->rlen) return WcStatus::LocLenErr;
    ctr_.payload_rx_bytes += len;
    return sge_rw(*q, q->rwqe.sge, q->rwqe.num_sge, off, const_cast<uint8_t *>(src), len, true, &q->rlerr);
}

void Rnic::flush_recv(uint32_t qpn)
{
    Qp *q = qp_by_qpn(qpn);
    if (!q) return;
    while (fetch_rwqe(*q)) {
        struct rnic_cqe e = {};
        e.wr_id = q->rwqe.wr_id;
        e.qpn = q->qpn;
        e.src_qpn = q->attr.dest_qpn;
        e.opcode = RNIC_CQE_OP_RECV;
        e.status = RNIC_WC_WR_FLUSH_ERR;
        e.flags = RNIC_CQE_F_RECV;
        q->rwqe_valid = false;
        q->rq_ci++;
        write_cqe(q->recv_cqn, e, true);
    }
}

// ---- completions ----

void Rnic::complete(const Completion &c)
{
    Qp *q = qp_by_qpn(c.qpn);
    if (!q) return;
    struct rnic_cqe e = {};
    e.qpn = q->qpn;
    e.src_qpn = q->attr.dest_qpn;
    e.status = wc_status(c.status);
    e.byte_len = c.byte_len;
    if (c.with_imm) {
        e.flags |= RNIC_CQE_F_WITH_IMM;
        e.imm = c.imm;
    }
    if (c.recv) {
        if (!fetch_rwqe(*q)) return; // the engine only completes a receive it was given
        e.wr_id = q->rwqe.wr_id;
        e.opcode = c.op == WrOp::WriteImm ? RNIC_CQE_OP_RECV_RDMA_IMM : RNIC_CQE_OP_RECV;
        e.flags |= RNIC_CQE_F_RECV | (c.solicited ? RNIC_CQE_F_SOLICITED : 0);
        if (c.status == WcStatus::LocProtErr || c.status == WcStatus::LocQpOpErr) e.vendor_err = q->rlerr;
        e.modeled_ns = model_recv_ns(c.byte_len, q->attr.path_mtu);
        q->rwqe_valid = false;
        q->rq_ci++;
        if (c.status != WcStatus::Success) ctr_.wqe_errors++;
        write_cqe(q->recv_cqn, e, c.solicited);
        return;
    }
    auto it = q->wrs.find(c.wr_id);
    if (it == q->wrs.end()) return;
    // WRs before this one completed silently (unsignaled, in order)
    q->wrs.erase(q->wrs.begin(), it);
    const Qp::Wr &w = it->second;
    e.wr_id = w.wqe.wr_id;
    e.opcode = cqe_opcode(c.op);
    if (c.status == WcStatus::Success) {
        e.modeled_ns = model_wr_ns(w.wqe.opcode, w.len, q->attr.path_mtu);
        if (c.op != WrOp::Read && c.op != WrOp::CmpSwap && c.op != WrOp::FetchAdd && c.op != WrOp::XAtomic)
            e.byte_len = uint32_t(w.len);
        ctr_.modeled_wr_ns += e.modeled_ns;
    } else {
        e.vendor_err = nak_syndrome(c.status) ? nak_syndrome(c.status) : w.lerr;
        if (c.status == WcStatus::LocProtErr) ctr_.wqe_errors++;
    }
    q->wrs.erase(it);
    write_cqe(q->send_cqn, e, true);
}

void Rnic::write_cqe(uint32_t cqn, struct rnic_cqe &e, bool solicited_event)
{
    Cq *c = cqn < RNIC_MAX_CQ ? cqs_[cqn].get() : nullptr;
    if (!c) return;
    const uint32_t depth = 1u << c->depth_log2;
    if (c->error) {
        ctr_.cq_overflows++;
        return;
    }
    if (c->pi - c->ci >= depth) {
        ctr_.cq_overflows++;
        c->error = true;
        cq_errors_[cqn / 64] |= 1ull << (cqn % 64);
        raise(0);
        guest_error("CQ %u overflowed (%u entries, consumer index %u): the CQ is in error", cqn, depth,
                    c->ci);
        eq_event(RNIC_EV_CQ_ERR, cqn, RNIC_EV_CQ_ERR_OVERFLOW);
        return;
    }
    e.owner = uint8_t(((c->pi >> c->depth_log2) & 1) ^ 1);
    e.modeled_at_ns = host_.now_ns();
    const uint64_t at = c->ring + uint64_t(c->pi & (depth - 1)) * sizeof(e);
    // the entry, then the owner byte last (the driver polls it)
    const uint8_t owner = e.owner;
    e.owner = uint8_t(owner ^ 1);
    bool ok = dma(at, &e, sizeof(e), true);
    e.owner = owner;
    ok = ok && dma(at + offsetof(struct rnic_cqe, owner), &e.owner, 1, true);
    if (!ok) {
        c->error = true;
        cq_errors_[cqn / 64] |= 1ull << (cqn % 64);
        raise(0);
        guest_error("CQ %u: CQE write at 0x%llx failed: the CQ is in error", cqn, (unsigned long long)at);
        eq_event(RNIC_EV_CQ_ERR, cqn, RNIC_EV_CQ_ERR_WRITE);
        return;
    }
    c->pi++;
    ctr_.cqes_written++;
    const bool fire = c->arm == RNIC_CQ_ARM_NEXT ||
                      (c->arm == RNIC_CQ_ARM_SOLICITED && (solicited_event || e.status != RNIC_WC_SUCCESS));
    if (fire) {
        c->arm = 0;
        ctr_.cq_events++;
        cq_events_[cqn / 64] |= 1ull << (cqn % 64);
        raise(c->vector);
    }
}

void Rnic::raise(unsigned v)
{
    if (!(int_status_ & (1u << v))) ctr_.irqs++;
    int_status_ |= 1u << v;
    update_irq();
}

void Rnic::update_irq()
{
    for (unsigned v = 0; v < RNIC_MSIX_VECTORS; v++) {
        const bool l = (int_status_ & int_enable_ & (1u << v)) != 0;
        if (l != irq_[v]) {
            irq_[v] = l;
            host_.set_irq(v, l);
        }
    }
}

// After any engine activity: deliver looped-back frames, detect QPs the transport moved to
// Error, keep send queues flowing, and re-arm the timer.
void Rnic::after_engine()
{
    for (int rounds = 0; rounds < 1 << 16; rounds++) {
        if (!loop_.empty()) {
            std::vector<uint8_t> f = std::move(loop_.front());
            loop_.pop_front();
            rc_->receive(f.data(), f.size());
            rc_->flush_acks();
        }
        for (auto &qp : qps_) {
            if (!qp) continue;
            Qp &q = *qp;
            const uint8_t s = engine_state(rc_->qp_state(q.qpn));
            if (s == RNIC_QPS_ERR && q.state != RNIC_QPS_ERR) {
                qp_errors_[q.index / 64] |= 1ull << (q.index % 64);
                raise(0);
            }
            if (s != q.state) pub_qp_changed(q.index);
            q.state = s;
            if (q.sq_ci != q.sq_pi || q.bad_held) pump_sq(q);
        }
        if (loop_.empty()) break;
    }
    arm_timer();
    publish();
}

void Rnic::arm_timer()
{
    if (timer_) timer_(rc_->next_deadline_ns());
}

// ---- the engine's clock ----

uint64_t Rnic::now_ns()
{
    return host_.now_ns();
}

} // namespace rackemu::rnic
