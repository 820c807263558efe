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
        if (tx_blocked_) host_.tx_wait(); // tx_resume() declined while paused
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
    RnicFixed &st = s.st;
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
    static_assert(sizeof(st.cq_events) == sizeof(cq_events_) && sizeof(st.qp_errors) == sizeof(qp_errors_) &&
                  sizeof(st.cq_errors) == sizeof(cq_errors_) && sizeof(st.cnt_base) == sizeof(cnt_base_));
    std::memcpy(st.cq_events.data(), cq_events_, sizeof(st.cq_events));
    std::memcpy(st.qp_errors.data(), qp_errors_, sizeof(st.qp_errors));
    std::memcpy(st.cq_errors.data(), cq_errors_, sizeof(st.cq_errors));
    for (uint32_t i = 0; i < RNIC_MAX_PD; i++)
        if (pds_[i].valid) st.pd_valid[i / 64] |= 1ull << (i % 64);
    std::memcpy(st.mr_tag.data(), mr_tag_.data(), RNIC_MAX_MR);
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
        std::memcpy(st.counters.data(), vals, sizeof(vals));
    }
    std::memcpy(st.cnt_base.data(), cnt_base_, sizeof(st.cnt_base));
    st.next_seq = next_seq_;
    st.eq_base = eq_.base;
    st.eq_ctrl = eq_.ctrl;
    st.eq_pi = eq_.pi;
    st.eq_ci = eq_.ci;
    st.eq_seq = eq_.seq;
    st.eq_status = eq_.status;
    st.eq_armed = eq_.armed;
    st.link_up = eq_.link_up;

    for (uint32_t i = 0; i < RNIC_MAX_MR; i++)
        if (const Mr *m = mrs_[i].get()) s.mr.push_back(MrRec{i, *m});
    // device memory: the allocations and the bytes (docs/rnic.md "Device memory")
    for (uint32_t i = 0; i < RNIC_MAX_DM; i++)
        if (dms_[i].len) s.dm.push_back(DmRec{i, dms_[i].off, dms_[i].len});
    s.dm_mem.resize(dm_.size() / 8);
    std::memcpy(s.dm_mem.data(), dm_.data(), s.dm_mem.size() * 8);
    for (uint32_t i = 0; i < RNIC_MAX_CQ; i++)
        if (const Cq *c = cqs_[i].get()) s.cq.push_back(CqRec{i, *c});
    for (const auto &qp : qps_) {
        if (!qp) continue;
        const Qp &q = *qp;
        const RcEngine::Qp *e = rc_->find(q.qpn);
        if (!e) continue; // cannot happen: the device creates both halves together
        s.qp.push_back(QpRec{q, *e, uint32_t(e->res.size())});
        for (const auto &[seq, w] : q.wrs)
            s.wr.push_back(WrRec{q.index, seq, false, w});
        if (q.bad_held) s.wr.push_back(WrRec{q.index, 0, true, q.bad});
        for (const SendEntry &se : e->sq)
            s.sqe.push_back(SqeRec{q.index, se});
        for (size_t k = 0; k < e->res.size(); k++)
            if (e->res[k].valid) s.res.push_back(ResRec{q.index, uint32_t(k), e->res[k]});
    }
    return s;
}

void Rnic::save(StateOut &out)
{
    out.put(save());
}

// ---- load: the checks ----

bool Rnic::check_state(const RnicSnapshot &s, std::string *why)
{
    const RnicFixed &st = s.st;
    if (st.ctrl & ~RNIC_CTRL_WRITABLE) return fail(why, "CTRL 0x%x has reserved bits", st.ctrl);
    if ((st.int_status | st.int_enable) & ~RNIC_INT_ALL)
        return fail(why, "INT_STATUS/INT_ENABLE 0x%x/0x%x beyond the %u vectors", st.int_status,
                    st.int_enable, RNIC_MSIX_VECTORS);
    if (st.irq_lines != (st.int_status & st.int_enable))
        return fail(why, "interrupt lines 0x%x do not match INT_STATUS & INT_ENABLE", st.irq_lines);
    if (st.cmd_status > 0xffff) return fail(why, "CMD_STATUS 0x%x out of range", st.cmd_status);
    if (s.mr.size() > RNIC_MAX_MR || s.cq.size() > RNIC_MAX_CQ || s.qp.size() > RNIC_MAX_QP)
        return fail(why, "object counts %zu MRs, %zu CQs, %zu QPs beyond the device's", s.mr.size(),
                    s.cq.size(), s.qp.size());
    if (s.wr.size() > kWrMax || s.sqe.size() > s.wr.size() ||
        s.res.size() > size_t(RNIC_MAX_QP) * RC_MAX_RD_ATOMIC)
        return fail(why, "record counts %zu WRs, %zu send queue entries, %zu resources beyond the device's",
                    s.wr.size(), s.sqe.size(), s.res.size());
    // device memory: the same size as this device's, allocations inside it and apart
    if (s.dm_mem.size() * 8 != dm_.size())
        return fail(why, "device memory of %zu bytes, this device has %zu (dm-size)", s.dm_mem.size() * 8,
                    dm_.size());
    if (s.dm.size() > RNIC_MAX_DM) return fail(why, "%zu device-memory allocations", s.dm.size());
    std::vector<DmRec> dm_by(RNIC_MAX_DM);
    for (const DmRec &d : s.dm) {
        if (d.index >= RNIC_MAX_DM || dm_by[d.index].len)
            return fail(why, "device-memory allocation %u out of range or twice", d.index);
        if (d.len == 0 || d.len % RNIC_DM_ALIGN || d.off % RNIC_DM_ALIGN || d.off > dm_.size() ||
            d.len > dm_.size() - d.off)
            return fail(why, "device-memory allocation %u: [%llu, +%llu) outside %zu bytes", d.index,
                        (unsigned long long)d.off, (unsigned long long)d.len, dm_.size());
        for (const DmRec &o : s.dm)
            if (&o != &d && d.off < o.off + o.len && o.off < d.off + d.len)
                return fail(why, "device-memory allocations %u and %u overlap", d.index, o.index);
        dm_by[d.index] = d;
    }
    for (const MrRec &r : s.mr) {
        const MrArch &m = r.mr;
        if (!m.dm) continue;
        if (m.dm > RNIC_MAX_DM || !dm_by[m.dm - 1].len)
            return fail(why, "MR %u: over device-memory allocation %u, which does not exist", r.index, m.dm);
        const DmRec &d = dm_by[m.dm - 1];
        if (m.phys || !m.pages.empty() || m.length == 0 || m.dm_off < d.off || m.dm_off - d.off > d.len ||
            m.length > d.len - (m.dm_off - d.off) || (m.access & RNIC_ACCESS_FLUSH_PERSIST))
            return fail(why, "MR %u: bad device-memory range or access", r.index);
    }
    uint64_t n_pages = 0;
    for (const MrRec &m : s.mr)
        n_pages += m.mr.pages.size();
    if (n_pages > RNIC_MR_TOTAL_PAGES)
        return fail(why, "%llu page-list entries beyond the device's %u", (unsigned long long)n_pages,
                    unsigned(RNIC_MR_TOTAL_PAGES));
    for (uint32_t i = 0; i < RNIC_CNT_COUNT; i++)
        if (st.cnt_base[i] > st.counters[i]) return fail(why, "counter %u below its clear base", i);
    if (st.next_seq == 0) return fail(why, "next WR sequence number 0");
    // the event queue: as its registers accept it (an enabled ring passed the ENABLE checks)
    if ((st.eq_ctrl & ~RNIC_EQ_CTRL_WRITABLE) || (st.eq_status & ~RNIC_EQ_ST_W1C) || (st.eq_base & 63))
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
    for (const MrRec &r : s.mr) {
        const MrArch &m = r.mr;
        const unsigned i = r.index;
        if (i >= RNIC_MAX_MR || seen[i]) return fail(why, "MR index %u out of range or twice", i);
        seen[i] = true;
        if (st.mr_tag[i] == 0) return fail(why, "MR %u: key byte 0", i);
        if (!pd_ok(m.pdn)) return fail(why, "MR %u: PD %u does not exist", i, m.pdn);
        if (m.access & ~RNIC_ACCESS_ALL) return fail(why, "MR %u: access 0x%x", i, m.access);
        if ((m.access & (RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_ATOMIC)) &&
            !(m.access & RNIC_ACCESS_LOCAL_WRITE))
            return fail(why, "MR %u: remote write/atomic without local write", i);
        if (m.length == 0 || m.iova + m.length < m.iova) return fail(why, "MR %u: bad range", i);
        if (m.dm) continue; // checked with the device memory above
        if (m.phys) {
            if (!m.pages.empty()) return fail(why, "MR %u: physical MR with a page list", i);
            if (!probe_ram(m.iova, m.length)) return fail(why, "MR %u: range outside RAM", i);
            continue;
        }
        if (m.page_shift < RNIC_MR_PAGE_SHIFT_MIN || m.page_shift > RNIC_MR_PAGE_SHIFT_MAX)
            return fail(why, "MR %u: page shift %u", i, m.page_shift);
        const uint64_t ps = 1ull << m.page_shift, base = m.iova & ~(ps - 1);
        const uint64_t need = (m.iova + m.length - base + ps - 1) >> m.page_shift;
        if (m.pages.empty() || m.pages.size() > RNIC_MR_MAX_PAGES || m.pages.size() != need)
            return fail(why, "MR %u: %zu pages for %llu needed", i, m.pages.size(), (unsigned long long)need);
        for (uint64_t pa : m.pages)
            if ((pa & (ps - 1)) || !probe_ram(pa, ps))
                return fail(why, "MR %u: page 0x%llx unaligned or outside RAM", i, (unsigned long long)pa);
    }

    // CQs
    std::vector<bool> cq_seen(RNIC_MAX_CQ);
    for (const CqRec &r : s.cq) {
        const CqArch &c = r.cq;
        const unsigned i = r.index;
        if (i >= RNIC_MAX_CQ || cq_seen[i]) return fail(why, "CQ index %u out of range or twice", i);
        cq_seen[i] = true;
        if (c.depth_log2 < RNIC_DEPTH_LOG2_MIN || c.depth_log2 > RNIC_DEPTH_LOG2_MAX ||
            c.vector >= RNIC_MSIX_VECTORS || (c.ring & 63))
            return fail(why, "CQ %u: depth, vector or ring alignment", i);
        if (!probe_ram(c.ring, uint64_t(sizeof(struct rnic_cqe)) << c.depth_log2))
            return fail(why, "CQ %u: ring outside RAM", i);
        if (c.pi - c.ci > (1u << c.depth_log2)) return fail(why, "CQ %u: indices %u/%u", i, c.pi, c.ci);
        if (c.arm != 0 && c.arm != RNIC_CQ_ARM_NEXT && c.arm != RNIC_CQ_ARM_SOLICITED)
            return fail(why, "CQ %u: arm %u", i, c.arm);
    }

    // QPs
    std::vector<const QpRec *> qp_of(RNIC_MAX_QP);
    for (const QpRec &r : s.qp) {
        const QpArch &q = r.dev;
        const RcQpArch &e = r.rc;
        const QpAttr &a = e.attr;
        const unsigned i = q.index;
        if (i >= RNIC_MAX_QP || qp_of[i]) return fail(why, "QP index %u out of range or twice", i);
        qp_of[i] = &r;
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
        if (uint8_t(e.state) > uint8_t(QpState::Error) || !qp_state_ok(q.state))
            return fail(why, "QP %u: state %u (device's %u)", i, unsigned(e.state), q.state);
        if (q.dest_node != RNIC_DEST_NODE_EXPLICIT) {
            uint8_t mac[6];
            uint32_t ip;
            if (!cfg_.peer_addr(q.dest_node, mac, &ip)) return fail(why, "QP %u: node %u", i, q.dest_node);
        }
        if (q.bad_lerr > RNIC_LERR_LENGTH || q.rlerr > RNIC_LERR_LENGTH)
            return fail(why, "QP %u: local error", i);
        if (q.rlen > RNIC_MAX_MSG) return fail(why, "QP %u: receive length", i);
        if (a.path_mtu < ROCE_MTU_MIN || a.path_mtu > cfg_.timing.max_mtu || (a.path_mtu & (a.path_mtu - 1)))
            return fail(why, "QP %u: path MTU %u (this device: up to %u)", i, a.path_mtu,
                        cfg_.timing.max_mtu);
        if (a.dest_qpn > ROCE_QPN_MASK) return fail(why, "QP %u: destination QPN", i);
        for (uint32_t p : {a.rq_psn, a.sq_psn, e.next_psn, e.una, e.recover_end, e.epsn, e.ack_psn})
            if (!psn_ok(p)) return fail(why, "QP %u: PSN 0x%x wider than 24 bits", i, p);
        if (e.msn > ROCE_PSN_MASK) return fail(why, "QP %u: MSN 0x%x wider than 24 bits", i, e.msn);
        if (a.max_dest_rd_atomic < 1 || a.max_dest_rd_atomic > RC_MAX_RD_ATOMIC || a.max_rd_atomic < 1 ||
            a.max_rd_atomic > RC_MAX_RD_ATOMIC)
            return fail(why, "QP %u: rd_atomic depths", i);
        if (r.n_res != 0 && r.n_res != a.max_dest_rd_atomic)
            return fail(why, "QP %u: responder resources", i);
        if (e.res_next >= std::max(r.n_res, 1u)) return fail(why, "QP %u: resource index", i);
        if (a.timeout > 31 || a.retry_cnt > 7 || a.rnr_retry > 7 || e.retry_left > 7 || e.rnr_left > 7 ||
            a.min_rnr_timer > 31)
            return fail(why, "QP %u: timeout or retry counts", i);
        if (a.access & ~(RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE)) return fail(why, "QP %u: access", i);
        if (e.in_msg > kMsgWrite || e.msg_off > RNIC_MAX_MSG)
            return fail(why, "QP %u: message in progress", i);
        if (((e.next_psn - e.una) & ROCE_PSN_MASK) > cfg_.rc.max_inflight_psn)
            return fail(why, "QP %u: %u PSNs outstanding", i, (e.next_psn - e.una) & ROCE_PSN_MASK);
        if (e.rd_outstanding > a.max_rd_atomic) return fail(why, "QP %u: reads outstanding", i);
        if (e.since_ackreq > cfg_.rc.ack_req_every) return fail(why, "QP %u: AckReq count", i);
    }

    // WRs of the device, the engine's send queues, the responder resources
    std::vector<uint32_t> n_wr(RNIC_MAX_QP), n_bad(RNIC_MAX_QP), n_sqe(RNIC_MAX_QP), n_assigned(RNIC_MAX_QP);
    std::set<std::pair<uint32_t, uint64_t>> seqs;
    for (const WrRec &w : s.wr) {
        const unsigned i = w.qp_index;
        if (i >= RNIC_MAX_QP || !qp_of[i]) return fail(why, "WR of QP %u: no such QP", i);
        if (w.wr.lerr > RNIC_LERR_LENGTH || w.wr.len > RNIC_MAX_MSG)
            return fail(why, "WR of QP %u: bad fields", i);
        if (w.bad) {
            if (!qp_of[i]->dev.bad_held || ++n_bad[i] > 1)
                return fail(why, "QP %u: held failed WQE without the flag, or twice", i);
            continue;
        }
        if (w.seq == 0 || w.seq >= st.next_seq || !seqs.insert({i, w.seq}).second)
            return fail(why, "WR of QP %u: sequence number %llu", i, (unsigned long long)w.seq);
        if (++n_wr[i] > (1u << qp_of[i]->dev.sq_log2)) return fail(why, "QP %u: more WRs than SQ slots", i);
    }
    for (const SqeRec &x : s.sqe) {
        const unsigned i = x.qp_index;
        const SendEntry &e = x.e;
        if (i >= RNIC_MAX_QP || !qp_of[i]) return fail(why, "send queue entry of QP %u: no such QP", i);
        if (uint8_t(e.wr.op) > uint8_t(WrOp::XAtomicPost) || e.wr.length > RNIC_MAX_MSG)
            return fail(why, "send queue entry of QP %u: bad fields", i);
        if (!seqs.count({i, e.wr.local}) || e.wr.wr_id != e.wr.local)
            return fail(why, "send queue entry of QP %u: no device WR %llu", i,
                        (unsigned long long)e.wr.local);
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
    for (const ResRec &r : s.res) {
        const unsigned i = r.qp_index;
        if (i >= RNIC_MAX_QP || !qp_of[i] || r.slot >= qp_of[i]->n_res || !slots.insert({i, r.slot}).second)
            return fail(why, "responder resource of QP %u slot %u", i, r.slot);
        if (!r.r.valid || !psn_ok(r.r.first) || !psn_ok(r.r.last))
            return fail(why, "responder resource of QP %u: bad fields", i);
    }
    for (const QpRec &r : s.qp) {
        const unsigned i = r.dev.index;
        if (r.rc.cursor > n_sqe[i]) return fail(why, "QP %u: send cursor beyond its queue", i);
        if (r.dev.bad_held && !n_bad[i]) return fail(why, "QP %u: held failed WQE missing", i);
    }
    return true;
}

// ---- load ----

bool Rnic::load(StateIn &in, std::string *why)
{
    RnicSnapshot s;
    in.get(s);
    if (!in.finish()) {
        if (why) *why = in.why();
        return false;
    }
    return load(s, why);
}

bool Rnic::load(const RnicSnapshot &s, std::string *why)
{
    std::lock_guard lk(mu_);
    if (!check_state(s, why)) return false;
    const RnicFixed &st = s.st;

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
    std::memcpy(cq_events_, st.cq_events.data(), sizeof(cq_events_));
    std::memcpy(qp_errors_, st.qp_errors.data(), sizeof(qp_errors_));
    std::memcpy(cq_errors_, st.cq_errors.data(), sizeof(cq_errors_));
    for (uint32_t i = 0; i < RNIC_MAX_PD; i++)
        pds_[i].valid = st.pd_valid[i / 64] >> (i % 64) & 1;
    std::memcpy(mr_tag_.data(), st.mr_tag.data(), RNIC_MAX_MR);
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
    std::memcpy(cnt_base_, st.cnt_base.data(), sizeof(cnt_base_));
    next_seq_ = st.next_seq;
    eq_.base = st.eq_base;
    eq_.ctrl = st.eq_ctrl;
    eq_.pi = st.eq_pi;
    eq_.ci = st.eq_ci;
    eq_.seq = st.eq_seq;
    eq_.status = st.eq_status;
    eq_.armed = st.eq_armed;
    eq_.link_up = st.link_up;

    for (const MrRec &r : s.mr) {
        auto m = std::make_unique<Mr>();
        static_cast<MrArch &>(*m) = r.mr;
        if (m->phys) m->page_shift = 12;
        pds_[m->pdn - 1].users++;
        mrs_[r.index] = std::move(m);
    }
    for (const DmRec &d : s.dm)
        dms_[d.index] = DmAlloc{d.off, d.len, 0};
    for (const auto &m : mrs_)
        if (m && m->dm) dms_[m->dm - 1].users++;
    std::memcpy(dm_.data(), s.dm_mem.data(), dm_.size());
    for (const CqRec &r : s.cq) {
        auto c = std::make_unique<Cq>();
        static_cast<CqArch &>(*c) = r.cq;
        cqs_[r.index] = std::move(c);
    }
    const uint64_t now = host_.now_ns();
    for (const QpRec &r : s.qp) {
        auto q = std::make_unique<Qp>();
        static_cast<QpArch &>(*q) = r.dev;
        q->qpn = RNIC_QPN(q->index);
        q->attr = r.rc.attr;
        rc_->create_qp(q->qpn); // checked: a fresh engine, a QPN in range
        RcEngine::Qp &e = *rc_->find(q->qpn);
        static_cast<RcQpArch &>(e) = r.rc;
        e.res.assign(r.n_res, Resource{});
        // Frames in flight were not saved: every unacknowledged request is sent again when the
        // retransmission timer fires (at once with timeout 0, "infinite", which would never).
        if (e.state == QpState::Rts && e.outstanding()) e.timer = now + roce_timeout_ns(e.attr.timeout);
        pds_[q->pdn - 1].users++;
        cqs_[q->send_cqn]->users++;
        cqs_[q->recv_cqn]->users++;
        qps_[q->index] = std::move(q);
    }
    for (const WrRec &w : s.wr) {
        Qp &q = *qps_[w.qp_index];
        Qp::Wr x;
        static_cast<WrArch &>(x) = w.wr;
        if (w.bad)
            q.bad = x;
        else
            q.wrs[w.seq] = x;
    }
    for (const SqeRec &x : s.sqe)
        rc_->find(RNIC_QPN(x.qp_index))->sq.push_back(x.e);
    for (const ResRec &x : s.res)
        rc_->find(RNIC_QPN(x.qp_index))->res[x.slot] = x.r;

    // Work not sent yet (the link pushed back, or the initiator depth was full): resume_tx()
    // continues these QPs, below or in pause(false) while paused.
    for (const QpRec &r : s.qp) {
        RcEngine::Qp &e = *rc_->find(RNIC_QPN(r.dev.index));
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
