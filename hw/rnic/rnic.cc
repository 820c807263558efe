// SPDX-License-Identifier: MIT
//
// The rackemu RNIC device core (rnic.h, docs/rnic.md): construction and reset, the registers
// (BAR0: one declarative table on the register bank; BAR2: the doorbell pages), the counters, the
// interrupts, guest memory (dma, probe_ram), and after_engine, the step every entry point ends
// with. The core's other concerns, one file each (their shared types: rnic_objects.h):
//   rnic_verbs.cc     the commands; the PD, MR, CQ and QP tables; the lkey and rkey checks
//   rnic_pipeline.cc  the send queue pump (one table of the WQE opcodes), the receive queue, the
//                     completions and CQEs
//   rnic_target.cc    remote accesses on guest RAM: WRITE, READ, ATOMIC WRITE, FLUSH, and the
//                     atomics through the atomic unit
//   rnic_events.cc    the asynchronous event queue
//   rnic_link.cc      frames in and out, backpressure (held frames), the timers, the link state
//   rnic_timing.cc    the timing model
//   rnic_direct.cc    the direct path: the published table, direct READs and WRITEs
//   rnic_state.cc     migration: pause, save, load
// A BAR access: the lock -> the access checked (size, alignment, a register or doorbell that
// exists) -> the register's row (or the doorbell) acts: a command (rnic_verbs.cc), a doorbell
// (rnic_pipeline.cc), an EQ register (rnic_events.cc) -> after_engine: frames looped back to this
// node delivered, QPs the transport moved to Error noticed (QP_ERRORS, vector 0), send queues
// pumped, the timer re-armed, the direct path's table republished.
//
// Threading (rnic.h "Threading"): ctrl_read/ctrl_write/db_read/db_write (a vCPU), reset,
// int_status and irq_level take mu_ for their whole run, as do the link's entry points
// (rnic_link.cc) and migration's (rnic_state.cc); every other function of the core runs with mu_
// held and never takes it.
//
// Specification: the register interface is the device's own (rackemu/rnic_regs.h; docs/rnic.md
// "Registers", "Doorbells", "Interrupts"): line v is MSI-X vector v, its level INT_STATUS bit v &
// INT_ENABLE bit v.
//
// Caveat: a guest error (a bad access, a refused command or doorbell) is logged and counted
// (guest_errors) and has a defined, harmless result; nothing the guest does stops the device.
#include "rnic.h"
#include "rnic_objects.h"

#include "rackemu/fabric_proto.h"

#include <algorithm>
#include <bit>
#include <cstdarg>
#include <cstdio>

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
        {"DM_SIZE", RNIC_REG_DM_SIZE, 4, A::RO, 0, 0,
         [](Rnic &d, const R &, unsigned, Pending &) -> uint64_t { return d.cfg_.dm_size; }},
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

Rnic::Rnic(Host host, RnicConfig cfg) : host_(host), cfg_(std::move(cfg)), bank_(reg_table())
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
    dm_clear();
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
    ceil_reset();
    dm_clear();
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

// ---- interrupts ----

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

// ---- the end of every entry point ----

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
    host_.timer_arm(0, rc_->next_deadline_ns());
}

// ---- the engine's clock ----

uint64_t Rnic::now_ns()
{
    return host_.now_ns();
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

} // namespace rackemu::rnic
