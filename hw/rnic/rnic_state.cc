// SPDX-License-Identifier: MIT
// The RNIC's migration: pause(), save() and load() of its architectural state (rnic_state.h,
// docs/rnic.md "Migration"). Everything load() takes is checked before anything changes: the
// stream is input like any other.
#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <set>

#include "rc_qp.h"
#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

namespace {

static_assert(RK_RNIC_STATE_COUNTERS == RNIC_CNT_COUNT,
              "the counter table changed: update RK_RNIC_STATE_COUNTERS and bump RK_RNIC_STATE_VERSION "
              "(and the glue's VMState version)");
static_assert(sizeof(struct rnic_send_wqe) == sizeof(rk_rnic_wr_state::wqe), "send WQE record");
static_assert(sizeof(struct rnic_recv_wqe) == sizeof(rk_rnic_qp_state::rwqe), "receive WQE record");

constexpr uint32_t kRcCount = 0
#define RNIC_ST_ONE_(N, n, d) +1
    RNIC_RC_COUNTERS(RNIC_ST_ONE_)
#undef RNIC_ST_ONE_
    ;

bool fail(std::string *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool fail(std::string *why, const char *fmt, ...)
{
    char buf[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (why) *why = buf;
    return false;
}

bool psn_ok(uint32_t p)
{
    return (p & ~ROCE_PSN_MASK) == 0;
}

bool bool_ok(uint8_t b)
{
    return b <= 1;
}

bool zeros(const uint8_t *p, size_t n)
{
    return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

bool qp_state_ok(uint8_t s)
{
    QpState e;
    return qp_state_of(s, &e);
}

} // namespace

// ---- pause ----

void Rnic::pause(bool on)
{
    std::lock_guard lk(mu_);
    if (paused_ == on) return;
    paused_ = on;
    publish(); // the VM's run state: whether peers may read directly
    if (on) return;
    // the VM runs again: the frames that waited, in order, then whatever timers are due
    while (!rx_paused_.empty()) {
        std::vector<uint8_t> f = std::move(rx_paused_.front());
        rx_paused_.pop_front();
        if (!(ctrl_ & RNIC_CTRL_ENABLE)) {
            ctr_.rx_disabled++;
            continue;
        }
        rc_->receive(f.data(), f.size());
    }
    if (link_pending_ >= 0) { // a link change while the VM was stopped
        const bool up = link_pending_ == 1;
        link_pending_ = -1;
        if (up != eq_.link_up) {
            eq_.link_up = up;
            eq_event(up ? RNIC_EV_PORT_ACTIVE : RNIC_EV_PORT_ERR, RNIC_PORT_NUM, 0);
        }
    }
    rc_->flush_acks();
    rc_->poll();
    if (tx_blocked_) {
        drain_held();
        if (tx_blocked_ && tx_wait_) tx_wait_(); // tx_resume() declined while paused
    } else {
        rc_->resume_tx();
    }
    after_engine();
}

// ---- save ----

RnicSnapshot Rnic::save()
{
    std::lock_guard lk(mu_);
    // every value was executed at arrival; the unit's model (its counters) runs behind: to the
    // end of what it holds, since the loading instance's unit starts empty
    amu_settle();
    sync_served();
    RnicSnapshot s;
    rk_rnic_state &st = s.st;
    st.version = RK_RNIC_STATE_VERSION;
    st.ctrl = ctrl_;
    st.cmd_addr_lo = cmd_addr_lo_;
    st.cmd_addr_hi = cmd_addr_hi_;
    st.cmd_status = cmd_status_;
    st.cmd_count = cmd_count_;
    st.int_status = int_status_;
    st.int_enable = int_enable_;
    st.model_hi_latch = model_hi_latch_;
    for (unsigned v = 0; v < RNIC_MSIX_VECTORS; v++)
        st.irq_lines |= uint32_t(irq_[v]) << v;
    std::memcpy(st.cq_events, cq_events_, sizeof(st.cq_events));
    std::memcpy(st.qp_errors, qp_errors_, sizeof(st.qp_errors));
    std::memcpy(st.cq_errors, cq_errors_, sizeof(st.cq_errors));
    for (uint32_t i = 0; i < RNIC_MAX_PD; i++)
        if (pds_[i].valid) st.pd_valid[i / 64] |= 1ull << (i % 64);
    std::memcpy(st.mr_tag, mr_tag_.data(), RNIC_MAX_MR);
    {
        const RcCounters &c = rc_->counters();
        const uint64_t vals[] = {
#define RNIC_ST_RC_(N, n, d) c.n,
            RNIC_RC_COUNTERS(RNIC_ST_RC_)
#undef RNIC_ST_RC_
#define RNIC_ST_DEV_(N, n, d) ctr_.n,
                RNIC_DEV_COUNTERS(RNIC_ST_DEV_)
#undef RNIC_ST_DEV_
        };
        static_assert(sizeof(vals) == sizeof(st.counters));
        std::memcpy(st.counters, vals, sizeof(vals));
    }
    std::memcpy(st.cnt_base, cnt_base_, sizeof(st.cnt_base));
    st.next_seq = next_seq_;
    st.eq_base = eq_.base;
    st.eq_ctrl = eq_.ctrl;
    st.eq_pi = eq_.pi;
    st.eq_ci = eq_.ci;
    st.eq_seq = eq_.seq;
    st.eq_status = eq_.status;
    st.eq_armed = eq_.armed;
    st.link_up = eq_.link_up;

    for (uint32_t i = 0; i < RNIC_MAX_MR; i++) {
        const Mr *m = mrs_[i].get();
        if (!m) continue;
        rk_rnic_mr_state r{};
        r.iova = m->iova;
        r.length = m->length;
        r.index = i;
        r.pdn = m->pdn;
        r.access = m->access;
        r.npages = uint32_t(m->pages.size());
        r.phys = m->phys;
        r.page_shift = m->page_shift;
        s.mr.push_back(r);
        s.pages.insert(s.pages.end(), m->pages.begin(), m->pages.end());
    }
    for (uint32_t i = 0; i < RNIC_MAX_CQ; i++) {
        const Cq *c = cqs_[i].get();
        if (!c) continue;
        rk_rnic_cq_state r{};
        r.ring = c->ring;
        r.index = i;
        r.pi = c->pi;
        r.ci = c->ci;
        r.arm = c->arm;
        r.depth_log2 = c->depth_log2;
        r.vector = c->vector;
        r.error = c->error;
        s.cq.push_back(r);
    }
    for (const auto &qp : qps_) {
        if (!qp) continue;
        const Qp &q = *qp;
        const RcEngine::Qp *e = rc_->find(q.qpn);
        if (!e) continue; // cannot happen: the device creates both halves together
        rk_rnic_qp_state r{};
        r.sq_ring = q.sq_ring;
        r.rq_ring = q.rq_ring;
        r.index = q.index;
        r.pdn = q.pdn;
        r.send_cqn = q.send_cqn;
        r.recv_cqn = q.recv_cqn;
        r.sq_pi = q.sq_pi;
        r.sq_ci = q.sq_ci;
        r.rq_pi = q.rq_pi;
        r.rq_ci = q.rq_ci;
        r.dest_node = q.dest_node;
        r.bad_lerr = q.bad_lerr;
        r.rlerr = q.rlerr;
        r.rlen = q.rlen;
        r.rfirst_ns = q.rfirst_ns;
        r.sq_log2 = q.sq_log2;
        r.rq_log2 = q.rq_log2;
        r.dev_state = q.state;
        r.bad_held = q.bad_held;
        r.rwqe_valid = q.rwqe_valid;
        std::memcpy(r.rwqe, &q.rwqe, sizeof(r.rwqe));
        const QpAttr &a = e->attr;
        r.state = engine_state(e->state);
        std::memcpy(r.dst_mac, a.path.dst_mac, 6);
        std::memcpy(r.src_mac, a.path.src_mac, 6);
        r.tos = a.path.tos;
        r.ttl = a.path.ttl;
        r.udp_sport = a.path.udp_sport;
        r.src_ip = a.path.src_ip;
        r.dst_ip = a.path.dst_ip;
        r.min_rnr_timer = a.min_rnr_timer;
        r.timeout = a.timeout;
        r.retry_cnt = a.retry_cnt;
        r.rnr_retry = a.rnr_retry;
        r.pkey = a.pkey;
        r.dest_qpn = a.dest_qpn;
        r.path_mtu = a.path_mtu;
        r.rq_psn = a.rq_psn;
        r.max_dest_rd_atomic = a.max_dest_rd_atomic;
        r.sq_psn = a.sq_psn;
        r.max_rd_atomic = a.max_rd_atomic;
        r.access = a.access;
        r.ip_id = e->ip_id;
        r.retry_left = uint8_t(e->retry_left);
        r.rnr_left = uint8_t(e->rnr_left);
        r.recovering = e->recovering;
        r.cursor = uint32_t(e->cursor);
        r.next_psn = e->next_psn;
        r.una = e->una;
        r.rd_outstanding = e->rd_outstanding;
        r.since_ackreq = e->since_ackreq;
        r.recover_end = e->recover_end;
        r.epsn = e->epsn;
        r.msn = e->msn;
        r.wr_rkey = e->wr_rkey;
        r.wr_len = e->wr_len;
        r.ack_psn = e->ack_psn;
        r.ack_requests = e->ack_requests;
        r.res_next = uint32_t(e->res_next);
        r.n_res = uint32_t(e->res.size());
        r.msg_off = e->msg_off;
        r.wr_va = e->wr_va;
        r.nak_sent = e->nak_sent;
        r.in_msg = e->in_msg;
        r.wqe_held = e->wqe_held;
        r.ack_owed = e->ack_owed;
        r.comm_est = e->comm_est;
        s.qp.push_back(r);

        auto wr_rec = [&](uint64_t seq, const Qp::Wr &w, bool bad) {
            rk_rnic_wr_state x{};
            x.seq = seq;
            x.len = w.len;
            x.posted_ns = w.posted_ns;
            x.qp_index = q.index;
            x.lerr = w.lerr;
            x.bad = bad;
            std::memcpy(x.wqe, &w.wqe, sizeof(x.wqe));
            s.wr.push_back(x);
        };
        for (const auto &[seq, w] : q.wrs)
            wr_rec(seq, w, false);
        if (q.bad_held) wr_rec(0, q.bad, true);
        for (const SendEntry &se : e->sq) {
            rk_rnic_sqe_state x{};
            const SendWr &w = se.wr;
            x.wr_id = w.wr_id;
            x.local = w.local;
            x.remote_va = w.remote_va;
            x.swap_add = w.swap_add;
            x.compare = w.compare;
            x.mask = w.mask;
            x.qp_index = q.index;
            x.length = w.length;
            x.rkey = w.rkey;
            x.imm = w.imm;
            x.first = se.first;
            x.last = se.last;
            x.npkts = se.npkts;
            x.resume = se.resume;
            x.read_next = se.read_next;
            x.op = uint8_t(w.op);
            x.xop = w.xop;
            x.xsize = w.xsize;
            x.flush_placement = w.flush_placement;
            x.flush_selectivity = w.flush_selectivity;
            x.signaled = w.signaled;
            x.solicited = w.solicited;
            x.fence = w.fence;
            x.assigned = se.assigned;
            s.sqe.push_back(x);
        }
        for (size_t k = 0; k < e->res.size(); k++) {
            const Resource &rs = e->res[k];
            if (!rs.valid) continue;
            rk_rnic_res_state x{};
            x.va = rs.va;
            x.orig = rs.orig;
            x.qp_index = q.index;
            x.slot = uint32_t(k);
            x.first = rs.first;
            x.last = rs.last;
            x.rkey = rs.rkey;
            x.len = rs.len;
            x.opcode = rs.opcode;
            s.res.push_back(x);
        }
    }
    st.n_mr = uint32_t(s.mr.size());
    st.n_pages = uint32_t(s.pages.size());
    st.n_cq = uint32_t(s.cq.size());
    st.n_qp = uint32_t(s.qp.size());
    st.n_wr = uint32_t(s.wr.size());
    st.n_sqe = uint32_t(s.sqe.size());
    st.n_res = uint32_t(s.res.size());
    return s;
}

// ---- load: the checks ----

bool Rnic::check_state(const RnicSnapshot &s, std::string *why)
{
    const rk_rnic_state &st = s.st;
    if (st.version != RK_RNIC_STATE_VERSION)
        return fail(why, "state version %u (this device reads %u)", st.version, RK_RNIC_STATE_VERSION);
    if (st.reserved) return fail(why, "reserved field set");
    if (st.ctrl & ~RNIC_CTRL_WRITABLE) return fail(why, "CTRL 0x%x has reserved bits", st.ctrl);
    if ((st.int_status | st.int_enable) & ~RNIC_INT_ALL)
        return fail(why, "INT_STATUS/INT_ENABLE 0x%x/0x%x beyond the %u vectors", st.int_status,
                    st.int_enable, RNIC_MSIX_VECTORS);
    if (st.irq_lines != (st.int_status & st.int_enable))
        return fail(why, "interrupt lines 0x%x do not match INT_STATUS & INT_ENABLE", st.irq_lines);
    if (st.cmd_status > 0xffff) return fail(why, "CMD_STATUS 0x%x out of range", st.cmd_status);
    if (st.n_mr > RNIC_MAX_MR || st.n_cq > RNIC_MAX_CQ || st.n_qp > RNIC_MAX_QP)
        return fail(why, "object counts %u MRs, %u CQs, %u QPs beyond the device's", st.n_mr, st.n_cq,
                    st.n_qp);
    if (s.mr.size() != st.n_mr || s.pages.size() != st.n_pages || s.cq.size() != st.n_cq ||
        s.qp.size() != st.n_qp || s.wr.size() != st.n_wr || s.sqe.size() != st.n_sqe ||
        s.res.size() != st.n_res)
        return fail(why, "record counts do not match the records");
    if (st.n_pages > RNIC_MR_TOTAL_PAGES)
        return fail(why, "%u page-list entries beyond the device's %u", st.n_pages,
                    unsigned(RNIC_MR_TOTAL_PAGES));
    for (uint32_t i = 0; i < RNIC_CNT_COUNT; i++)
        if (st.cnt_base[i] > st.counters[i]) return fail(why, "counter %u below its clear base", i);
    if (st.next_seq == 0) return fail(why, "next WR sequence number 0");
    // the event queue: as its registers accept it (an enabled ring passed the ENABLE checks)
    if ((st.eq_ctrl & ~RNIC_EQ_CTRL_WRITABLE) || (st.eq_status & ~RNIC_EQ_ST_W1C) || (st.eq_base & 63) ||
        !bool_ok(st.eq_armed) || !bool_ok(st.link_up) || !zeros(st.reserved_eq, sizeof(st.reserved_eq)))
        return fail(why, "event queue: reserved bits (CTRL 0x%x, STATUS 0x%x, base 0x%llx)", st.eq_ctrl,
                    st.eq_status, (unsigned long long)st.eq_base);
    if (st.eq_ctrl & RNIC_EQ_CTRL_ENABLE) {
        const unsigned log2 = (st.eq_ctrl & RNIC_EQ_CTRL_DEPTH_MASK) >> RNIC_EQ_CTRL_DEPTH_SHIFT;
        if (log2 < RNIC_DEPTH_LOG2_MIN || log2 > RNIC_DEPTH_LOG2_MAX ||
            !probe_ram(st.eq_base, uint64_t(sizeof(struct rnic_eqe)) << log2))
            return fail(why, "event queue: depth 2^%u or ring 0x%llx outside RAM", log2,
                        (unsigned long long)st.eq_base);
        if (st.eq_pi - st.eq_ci > (1u << log2))
            return fail(why, "event queue: indices %u/%u", st.eq_pi, st.eq_ci);
    } else if (st.eq_armed) {
        return fail(why, "event queue: armed while disabled");
    }
    if (!cfg_.link && !st.link_up) return fail(why, "link down on a device without a link");
    auto pd_ok = [&](uint32_t pdn) {
        return pdn >= 1 && pdn <= RNIC_MAX_PD && (st.pd_valid[(pdn - 1) / 64] >> ((pdn - 1) % 64) & 1);
    };

    // MRs
    std::vector<bool> seen(RNIC_MAX_MR);
    uint64_t page_at = 0;
    for (const rk_rnic_mr_state &m : s.mr) {
        if (m.index >= RNIC_MAX_MR || seen[m.index])
            return fail(why, "MR index %u out of range or twice", m.index);
        seen[m.index] = true;
        if (!zeros(m.reserved, sizeof(m.reserved)) || !bool_ok(m.phys))
            return fail(why, "MR %u: reserved bits", m.index);
        if (st.mr_tag[m.index] == 0) return fail(why, "MR %u: key byte 0", m.index);
        if (!pd_ok(m.pdn)) return fail(why, "MR %u: PD %u does not exist", m.index, m.pdn);
        if (m.access & ~RNIC_ACCESS_ALL) return fail(why, "MR %u: access 0x%x", m.index, m.access);
        if ((m.access & (RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_ATOMIC)) &&
            !(m.access & RNIC_ACCESS_LOCAL_WRITE))
            return fail(why, "MR %u: remote write/atomic without local write", m.index);
        if (m.length == 0 || m.iova + m.length < m.iova) return fail(why, "MR %u: bad range", m.index);
        if (m.phys) {
            if (m.npages) return fail(why, "MR %u: physical MR with a page list", m.index);
            if (!probe_ram(m.iova, m.length)) return fail(why, "MR %u: range outside RAM", m.index);
            continue;
        }
        if (m.page_shift < RNIC_MR_PAGE_SHIFT_MIN || m.page_shift > RNIC_MR_PAGE_SHIFT_MAX)
            return fail(why, "MR %u: page shift %u", m.index, m.page_shift);
        const uint64_t ps = 1ull << m.page_shift, base = m.iova & ~(ps - 1);
        const uint64_t need = (m.iova + m.length - base + ps - 1) >> m.page_shift;
        if (m.npages == 0 || m.npages > RNIC_MR_MAX_PAGES || m.npages != need)
            return fail(why, "MR %u: %u pages for %llu needed", m.index, m.npages, (unsigned long long)need);
        if (page_at + m.npages > s.pages.size())
            return fail(why, "MR %u: page list beyond the pages", m.index);
        for (uint64_t k = 0; k < m.npages; k++) {
            const uint64_t pa = s.pages[page_at + k];
            if ((pa & (ps - 1)) || !probe_ram(pa, ps))
                return fail(why, "MR %u: page 0x%llx unaligned or outside RAM", m.index,
                            (unsigned long long)pa);
        }
        page_at += m.npages;
    }
    if (page_at != s.pages.size()) return fail(why, "pages not claimed by any MR");

    // CQs
    std::vector<bool> cq_seen(RNIC_MAX_CQ);
    for (const rk_rnic_cq_state &c : s.cq) {
        if (c.index >= RNIC_MAX_CQ || cq_seen[c.index])
            return fail(why, "CQ index %u out of range or twice", c.index);
        cq_seen[c.index] = true;
        if (!zeros(c.reserved, sizeof(c.reserved)) || !bool_ok(c.error))
            return fail(why, "CQ %u: reserved bits", c.index);
        if (c.depth_log2 < RNIC_DEPTH_LOG2_MIN || c.depth_log2 > RNIC_DEPTH_LOG2_MAX ||
            c.vector >= RNIC_MSIX_VECTORS || (c.ring & 63))
            return fail(why, "CQ %u: depth, vector or ring alignment", c.index);
        if (!probe_ram(c.ring, uint64_t(sizeof(struct rnic_cqe)) << c.depth_log2))
            return fail(why, "CQ %u: ring outside RAM", c.index);
        if (c.pi - c.ci > (1u << c.depth_log2)) return fail(why, "CQ %u: indices %u/%u", c.index, c.pi, c.ci);
        if (c.arm != 0 && c.arm != RNIC_CQ_ARM_NEXT && c.arm != RNIC_CQ_ARM_SOLICITED)
            return fail(why, "CQ %u: arm %u", c.index, c.arm);
    }

    // QPs
    std::vector<const rk_rnic_qp_state *> qp_of(RNIC_MAX_QP);
    for (const rk_rnic_qp_state &q : s.qp) {
        if (q.index >= RNIC_MAX_QP || qp_of[q.index])
            return fail(why, "QP index %u out of range or twice", q.index);
        qp_of[q.index] = &q;
        const unsigned i = q.index;
        if (q.reserved0 || !zeros(q.reserved1, sizeof(q.reserved1)) ||
            !zeros(q.reserved2, sizeof(q.reserved2)) || !zeros(q.reserved3, sizeof(q.reserved3)) ||
            !zeros(q.reserved4, sizeof(q.reserved4)))
            return fail(why, "QP %u: reserved bits", i);
        if (!pd_ok(q.pdn)) return fail(why, "QP %u: PD %u does not exist", i, q.pdn);
        if (q.send_cqn >= RNIC_MAX_CQ || !cq_seen[q.send_cqn] || q.recv_cqn >= RNIC_MAX_CQ ||
            !cq_seen[q.recv_cqn])
            return fail(why, "QP %u: CQ %u/%u does not exist", i, q.send_cqn, q.recv_cqn);
        for (uint8_t l : {q.sq_log2, q.rq_log2})
            if (l < RNIC_DEPTH_LOG2_MIN || l > RNIC_DEPTH_LOG2_MAX)
                return fail(why, "QP %u: depth 2^%u", i, l);
        if ((q.sq_ring & 63) || (q.rq_ring & 63) ||
            !probe_ram(q.sq_ring, uint64_t(sizeof(struct rnic_send_wqe)) << q.sq_log2) ||
            !probe_ram(q.rq_ring, uint64_t(sizeof(struct rnic_recv_wqe)) << q.rq_log2))
            return fail(why, "QP %u: rings unaligned or outside RAM", i);
        if (q.sq_pi - q.sq_ci > (1u << q.sq_log2) || q.rq_pi - q.rq_ci > (1u << q.rq_log2))
            return fail(why, "QP %u: queue indices", i);
        if (!qp_state_ok(q.state) || !qp_state_ok(q.dev_state))
            return fail(why, "QP %u: state %u (device's %u)", i, q.state, q.dev_state);
        if (q.dest_node != RNIC_DEST_NODE_EXPLICIT) {
            uint8_t mac[6];
            uint32_t ip;
            if (!cfg_.peer_addr(q.dest_node, mac, &ip)) return fail(why, "QP %u: node %u", i, q.dest_node);
        }
        if (!bool_ok(q.bad_held) || !bool_ok(q.rwqe_valid) || !bool_ok(q.recovering) ||
            !bool_ok(q.nak_sent) || !bool_ok(q.wqe_held) || !bool_ok(q.ack_owed) || !bool_ok(q.comm_est))
            return fail(why, "QP %u: a flag is neither 0 nor 1", i);
        if (q.bad_lerr > RNIC_LERR_LENGTH || q.rlerr > RNIC_LERR_LENGTH)
            return fail(why, "QP %u: local error", i);
        if (q.rlen > RNIC_MAX_MSG) return fail(why, "QP %u: receive length", i);
        if (q.path_mtu < ROCE_MTU_MIN || q.path_mtu > cfg_.timing.max_mtu || (q.path_mtu & (q.path_mtu - 1)))
            return fail(why, "QP %u: path MTU %u (this device: up to %u)", i, q.path_mtu,
                        cfg_.timing.max_mtu);
        if (q.dest_qpn > ROCE_QPN_MASK) return fail(why, "QP %u: destination QPN", i);
        for (uint32_t p : {q.rq_psn, q.sq_psn, q.next_psn, q.una, q.recover_end, q.epsn, q.ack_psn})
            if (!psn_ok(p)) return fail(why, "QP %u: PSN 0x%x wider than 24 bits", i, p);
        if (q.msn > ROCE_PSN_MASK) return fail(why, "QP %u: MSN 0x%x wider than 24 bits", i, q.msn);
        if (q.max_dest_rd_atomic < 1 || q.max_dest_rd_atomic > RC_MAX_RD_ATOMIC || q.max_rd_atomic < 1 ||
            q.max_rd_atomic > RC_MAX_RD_ATOMIC)
            return fail(why, "QP %u: rd_atomic depths", i);
        if (q.n_res != 0 && q.n_res != q.max_dest_rd_atomic)
            return fail(why, "QP %u: responder resources", i);
        if (q.res_next >= std::max(q.n_res, 1u)) return fail(why, "QP %u: resource index", i);
        if (q.timeout > 31 || q.retry_cnt > 7 || q.rnr_retry > 7 || q.retry_left > 7 || q.rnr_left > 7 ||
            q.min_rnr_timer > 31)
            return fail(why, "QP %u: timeout or retry counts", i);
        if (q.access & ~(RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE)) return fail(why, "QP %u: access", i);
        if (q.in_msg > kMsgWrite || q.msg_off > RNIC_MAX_MSG)
            return fail(why, "QP %u: message in progress", i);
        if (((q.next_psn - q.una) & ROCE_PSN_MASK) > cfg_.rc.max_inflight_psn)
            return fail(why, "QP %u: %u PSNs outstanding", i, (q.next_psn - q.una) & ROCE_PSN_MASK);
        if (q.rd_outstanding > q.max_rd_atomic) return fail(why, "QP %u: reads outstanding", i);
        if (q.since_ackreq > cfg_.rc.ack_req_every) return fail(why, "QP %u: AckReq count", i);
    }

    // WRs of the device, the engine's send queues, the responder resources
    std::vector<uint32_t> n_wr(RNIC_MAX_QP), n_bad(RNIC_MAX_QP), n_sqe(RNIC_MAX_QP), n_assigned(RNIC_MAX_QP);
    std::set<std::pair<uint32_t, uint64_t>> seqs;
    for (const rk_rnic_wr_state &w : s.wr) {
        if (w.qp_index >= RNIC_MAX_QP || !qp_of[w.qp_index])
            return fail(why, "WR of QP %u: no such QP", w.qp_index);
        if (!bool_ok(w.bad) || !zeros(w.reserved, sizeof(w.reserved)) || w.lerr > RNIC_LERR_LENGTH ||
            w.len > RNIC_MAX_MSG)
            return fail(why, "WR of QP %u: bad fields", w.qp_index);
        if (w.bad) {
            if (!qp_of[w.qp_index]->bad_held || ++n_bad[w.qp_index] > 1)
                return fail(why, "QP %u: held failed WQE without the flag, or twice", w.qp_index);
            continue;
        }
        if (w.seq == 0 || w.seq >= st.next_seq || !seqs.insert({w.qp_index, w.seq}).second)
            return fail(why, "WR of QP %u: sequence number %llu", w.qp_index, (unsigned long long)w.seq);
        if (++n_wr[w.qp_index] > (1u << qp_of[w.qp_index]->sq_log2))
            return fail(why, "QP %u: more WRs than SQ slots", w.qp_index);
    }
    for (const rk_rnic_sqe_state &e : s.sqe) {
        const unsigned i = e.qp_index;
        if (i >= RNIC_MAX_QP || !qp_of[i]) return fail(why, "send queue entry of QP %u: no such QP", i);
        if (e.op > uint8_t(WrOp::XAtomicPost) || !zeros(e.reserved, sizeof(e.reserved)) ||
            !bool_ok(e.signaled) || !bool_ok(e.solicited) || !bool_ok(e.fence) || !bool_ok(e.assigned) ||
            e.length > RNIC_MAX_MSG)
            return fail(why, "send queue entry of QP %u: bad fields", i);
        if (!seqs.count({i, e.local}) || e.wr_id != e.local)
            return fail(why, "send queue entry of QP %u: no device WR %llu", i, (unsigned long long)e.local);
        for (uint32_t p : {e.first, e.last, e.resume, e.read_next})
            if (!psn_ok(p)) return fail(why, "send queue entry of QP %u: PSN 0x%x", i, p);
        if (e.npkts == 0 || e.npkts > ROCE_PSN_MASK)
            return fail(why, "send queue entry of QP %u: packets", i);
        if (e.assigned && n_assigned[i] != n_sqe[i])
            return fail(why, "QP %u: a send queue entry with PSNs after one without", i);
        n_assigned[i] += e.assigned;
        if (++n_sqe[i] > cfg_.rc.sq_depth) return fail(why, "QP %u: send queue deeper than the engine's", i);
    }
    std::set<std::pair<uint32_t, uint32_t>> slots;
    for (const rk_rnic_res_state &r : s.res) {
        const unsigned i = r.qp_index;
        if (i >= RNIC_MAX_QP || !qp_of[i] || r.slot >= qp_of[i]->n_res || !slots.insert({i, r.slot}).second)
            return fail(why, "responder resource of QP %u slot %u", i, r.slot);
        if (!psn_ok(r.first) || !psn_ok(r.last) || !zeros(r.reserved, sizeof(r.reserved)))
            return fail(why, "responder resource of QP %u: bad fields", i);
    }
    for (const rk_rnic_qp_state &q : s.qp) {
        if (q.cursor > n_sqe[q.index]) return fail(why, "QP %u: send cursor beyond its queue", q.index);
        if (q.bad_held && !n_bad[q.index]) return fail(why, "QP %u: held failed WQE missing", q.index);
    }
    return true;
}

// ---- load ----

bool Rnic::load(const RnicSnapshot &s, std::string *why)
{
    std::lock_guard lk(mu_);
    if (!check_state(s, why)) return false;
    const rk_rnic_state &st = s.st;

    // A new engine, no objects, then the state. The atomic unit restarts empty: its cache is
    // write-through and in the device every atomic is one host atomic on guest RAM (atomicity
    // Global), so RAM holds every value and an empty cache changes timing only (the first
    // atomics after the load miss).
    clear_objects();
    ctrl_ = st.ctrl;
    cmd_addr_lo_ = st.cmd_addr_lo;
    cmd_addr_hi_ = st.cmd_addr_hi;
    cmd_status_ = st.cmd_status;
    cmd_count_ = st.cmd_count;
    int_status_ = st.int_status;
    int_enable_ = st.int_enable;
    model_hi_latch_ = st.model_hi_latch;
    std::memcpy(cq_events_, st.cq_events, sizeof(cq_events_));
    std::memcpy(qp_errors_, st.qp_errors, sizeof(qp_errors_));
    std::memcpy(cq_errors_, st.cq_errors, sizeof(cq_errors_));
    for (uint32_t i = 0; i < RNIC_MAX_PD; i++)
        pds_[i].valid = st.pd_valid[i / 64] >> (i % 64) & 1;
    std::memcpy(mr_tag_.data(), st.mr_tag, RNIC_MAX_MR);
    RcCounters rcc;
    {
        uint64_t *rc_fields[] = {
#define RNIC_ST_RC_(N, n, d) &rcc.n,
            RNIC_RC_COUNTERS(RNIC_ST_RC_)
#undef RNIC_ST_RC_
        };
        uint64_t *dev_fields[] = {
#define RNIC_ST_DEV_(N, n, d) &ctr_.n,
            RNIC_DEV_COUNTERS(RNIC_ST_DEV_)
#undef RNIC_ST_DEV_
        };
        static_assert(sizeof(rc_fields) / sizeof(rc_fields[0]) == kRcCount);
        for (uint32_t i = 0; i < RNIC_CNT_COUNT; i++)
            *(i < kRcCount ? rc_fields[i] : dev_fields[i - kRcCount]) = st.counters[i];
    }
    rc_->ctr_ = rcc;
    amu_base_ = ctr_; // the unit's own counters restart at zero (amu_sync adds them)
    std::memcpy(cnt_base_, st.cnt_base, sizeof(cnt_base_));
    next_seq_ = st.next_seq;
    eq_.base = st.eq_base;
    eq_.ctrl = st.eq_ctrl;
    eq_.pi = st.eq_pi;
    eq_.ci = st.eq_ci;
    eq_.seq = st.eq_seq;
    eq_.status = st.eq_status;
    eq_.armed = st.eq_armed;
    eq_.link_up = st.link_up;

    size_t page_at = 0;
    for (const rk_rnic_mr_state &r : s.mr) {
        auto m = std::make_unique<Mr>();
        m->pdn = r.pdn;
        m->iova = r.iova;
        m->length = r.length;
        m->access = r.access;
        m->phys = r.phys;
        m->page_shift = r.phys ? 12 : r.page_shift;
        m->pages.assign(s.pages.begin() + long(page_at), s.pages.begin() + long(page_at + r.npages));
        page_at += r.npages;
        pds_[r.pdn - 1].users++;
        mrs_[r.index] = std::move(m);
    }
    for (const rk_rnic_cq_state &r : s.cq) {
        auto c = std::make_unique<Cq>();
        c->ring = r.ring;
        c->depth_log2 = r.depth_log2;
        c->vector = r.vector;
        c->pi = r.pi;
        c->ci = r.ci;
        c->arm = r.arm;
        c->error = r.error;
        cqs_[r.index] = std::move(c);
    }
    const uint64_t now = host_.now_ns();
    for (const rk_rnic_qp_state &r : s.qp) {
        auto q = std::make_unique<Qp>();
        q->index = r.index;
        q->qpn = RNIC_QPN(r.index);
        q->pdn = r.pdn;
        q->send_cqn = r.send_cqn;
        q->recv_cqn = r.recv_cqn;
        q->sq_ring = r.sq_ring;
        q->rq_ring = r.rq_ring;
        q->sq_log2 = r.sq_log2;
        q->rq_log2 = r.rq_log2;
        q->sq_pi = r.sq_pi;
        q->sq_ci = r.sq_ci;
        q->rq_pi = r.rq_pi;
        q->rq_ci = r.rq_ci;
        q->state = r.dev_state;
        q->dest_node = r.dest_node;
        q->bad_held = r.bad_held;
        q->bad_lerr = r.bad_lerr;
        q->rwqe_valid = r.rwqe_valid;
        std::memcpy(&q->rwqe, r.rwqe, sizeof(q->rwqe));
        q->rlen = r.rlen;
        q->rfirst_ns = r.rfirst_ns;
        q->rlerr = r.rlerr;
        QpAttr a;
        std::memcpy(a.path.dst_mac, r.dst_mac, 6);
        std::memcpy(a.path.src_mac, r.src_mac, 6);
        a.path.src_ip = r.src_ip;
        a.path.dst_ip = r.dst_ip;
        a.path.udp_sport = r.udp_sport;
        a.path.tos = r.tos;
        a.path.ttl = r.ttl;
        a.dest_qpn = r.dest_qpn;
        a.path_mtu = r.path_mtu;
        a.rq_psn = r.rq_psn;
        a.max_dest_rd_atomic = r.max_dest_rd_atomic;
        a.min_rnr_timer = r.min_rnr_timer;
        a.sq_psn = r.sq_psn;
        a.timeout = r.timeout;
        a.retry_cnt = r.retry_cnt;
        a.rnr_retry = r.rnr_retry;
        a.max_rd_atomic = r.max_rd_atomic;
        a.access = r.access;
        a.pkey = r.pkey;
        q->attr = a;

        rc_->create_qp(q->qpn); // checked: a fresh engine, a QPN in range
        RcEngine::Qp &e = *rc_->find(q->qpn);
        qp_state_of(r.state, &e.state); // checked
        e.attr = a;
        e.ip_id = r.ip_id;
        e.next_psn = r.next_psn;
        e.una = r.una;
        e.rd_outstanding = r.rd_outstanding;
        e.since_ackreq = r.since_ackreq;
        e.retry_left = r.retry_left;
        e.rnr_left = r.rnr_left;
        e.recovering = r.recovering;
        e.recover_end = r.recover_end;
        e.epsn = r.epsn;
        e.msn = r.msn;
        e.nak_sent = r.nak_sent;
        e.in_msg = r.in_msg;
        e.msg_off = r.msg_off;
        e.wr_va = r.wr_va;
        e.wr_rkey = r.wr_rkey;
        e.wr_len = r.wr_len;
        e.wqe_held = r.wqe_held;
        e.ack_owed = r.ack_owed;
        e.comm_est = r.comm_est;
        e.ack_psn = r.ack_psn;
        e.ack_requests = r.ack_requests;
        e.res.assign(r.n_res, Resource{});
        e.res_next = r.res_next;
        e.cursor = r.cursor;
        // Frames in flight were not saved: every unacknowledged request is sent again when the
        // retransmission timer fires (at once with timeout 0, "infinite", which would never).
        if (e.state == QpState::Rts && e.outstanding()) {
            const uint64_t t = roce_timeout_ns(a.timeout);
            e.timer = now + t;
        }
        pds_[r.pdn - 1].users++;
        cqs_[r.send_cqn]->users++;
        cqs_[r.recv_cqn]->users++;
        qps_[r.index] = std::move(q);
    }
    for (const rk_rnic_wr_state &w : s.wr) {
        Qp &q = *qps_[w.qp_index];
        Qp::Wr x;
        std::memcpy(&x.wqe, w.wqe, sizeof(x.wqe));
        x.len = w.len;
        x.posted_ns = w.posted_ns;
        x.lerr = w.lerr;
        if (w.bad)
            q.bad = x;
        else
            q.wrs[w.seq] = x;
    }
    for (const rk_rnic_sqe_state &x : s.sqe) {
        SendEntry se;
        SendWr &w = se.wr;
        w.wr_id = x.wr_id;
        w.op = WrOp(x.op);
        w.length = x.length;
        w.local = x.local;
        w.remote_va = x.remote_va;
        w.rkey = x.rkey;
        w.imm = x.imm;
        w.swap_add = x.swap_add;
        w.compare = x.compare;
        w.mask = x.mask;
        w.xop = x.xop;
        w.xsize = x.xsize;
        w.flush_placement = x.flush_placement;
        w.flush_selectivity = x.flush_selectivity;
        w.signaled = x.signaled;
        w.solicited = x.solicited;
        w.fence = x.fence;
        se.assigned = x.assigned;
        se.first = x.first;
        se.last = x.last;
        se.npkts = x.npkts;
        se.resume = x.resume;
        se.read_next = x.read_next;
        rc_->find(RNIC_QPN(x.qp_index))->sq.push_back(se);
    }
    for (const rk_rnic_res_state &x : s.res) {
        Resource &r = rc_->find(RNIC_QPN(x.qp_index))->res[x.slot];
        r.valid = true;
        r.opcode = x.opcode;
        r.first = x.first;
        r.last = x.last;
        r.va = x.va;
        r.rkey = x.rkey;
        r.len = x.len;
        r.orig = x.orig;
    }

    // Work not sent yet (the link pushed back, or the initiator depth was full): resume_tx()
    // continues these QPs, below or in pause(false) while paused.
    for (const rk_rnic_qp_state &r : s.qp) {
        RcEngine::Qp &e = *rc_->find(RNIC_QPN(r.index));
        if (e.state == QpState::Rts && e.cursor < e.sq.size()) e.tx_stalled = true;
    }

    // what belonged to the old state: frames held for the link or while paused, looped frames
    ctr_.rx_paused_drops += rx_paused_.size();
    rx_paused_.clear();
    ctr_.link_tx_drops += held_.size();
    held_.clear();
    held_bytes_ = 0;
    tx_blocked_ = false;
    loop_.clear();
    update_irq();
    if (!paused_) { // else pause(false) does it
        rc_->resume_tx();
        after_engine(); // WQEs posted and not fetched yet are fetched now
    }
    arm_timer();
    publish(); // clear_objects() marked everything
    return true;
}

} // namespace rackemu::rnic
