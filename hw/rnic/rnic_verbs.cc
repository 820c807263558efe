// SPDX-License-Identifier: MIT
//
// The RNIC's verbs objects and their commands (docs/rnic.md "Commands"): the command block
// (CREATE/DESTROY PD, REG/DEREG MR, CREATE/DESTROY CQ, CREATE/MODIFY/QUERY/DESTROY QP), the
// object tables (pds_, mrs_ with mr_tag_, the key bytes, cqs_, qps_) and their lookups, and the
// MR checks every data movement goes through: an SGE's lkey (check_local, sge_rw: the requester's
// buffers and the receive queue's) and an rkey (remote_mr: the target side, rnic_target.cc).
//   CMD_EXEC -> exec_command: the block DMA'd in -> checked completely, then applied -> status
//   and outputs DMA'd back, CMD_STATUS; on success the direct path's table is republished
//   (rnic_direct.cc) with what changed.
// An MR key is index << 8 | a random key byte (rxe's choice), never the index's previous byte.
//
// Specification: IBA Vol 1 10.6 (memory regions; 10.6.3.1 access rights), 11.2.4.2 (the
// attributes each QP state transition requires, as ibv_modify_qp checks them).
//
// Threading: with mu_ held: exec_command from ctrl_write (a vCPU), the lookups and checks from
// every entry point.
//
// Caveat: commands run synchronously in the MMIO write (a real NIC's firmware takes microseconds
// to milliseconds); no memory windows, no CQ resize.
#include <algorithm>
#include <cstring>
#include <random>

#include <sys/random.h>

#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

// ---- commands ----

void Rnic::exec_command()
{
    const uint64_t addr = uint64_t(cmd_addr_hi_) << 32 | cmd_addr_lo_;
    struct rnic_cmd c;
    cmd_count_++;
    ctr_.commands++;
    if (!dma(addr, &c, sizeof(c), false)) {
        guest_error("command block at 0x%llx is not in RAM", (unsigned long long)addr);
        cmd_status_ = RNIC_CMD_ST_BAD_ADDR;
        ctr_.command_errors++;
        return;
    }
    uint16_t st = RNIC_CMD_ST_OK;
    c.out0 = c.out1 = 0;
    switch (c.opcode) {
    case RNIC_CMD_NOP:
        break;
    case RNIC_CMD_CREATE_PD: {
        st = RNIC_CMD_ST_NO_RESOURCE;
        for (uint32_t i = 0; i < RNIC_MAX_PD; i++) {
            if (!pds_[i].valid) {
                pds_[i] = Pd{true, 0};
                c.handle = i + 1;
                st = RNIC_CMD_ST_OK;
                break;
            }
        }
        break;
    }
    case RNIC_CMD_DESTROY_PD: {
        const uint32_t i = c.handle - 1;
        if (c.handle == 0 || i >= RNIC_MAX_PD || !pds_[i].valid)
            st = RNIC_CMD_ST_BAD_PD;
        else if (pds_[i].users)
            st = RNIC_CMD_ST_BUSY;
        else
            pds_[i] = Pd{};
        break;
    }
    case RNIC_CMD_REG_MR:
        st = cmd_reg_mr(c);
        break;
    case RNIC_CMD_DEREG_MR: {
        Mr *m = mr_by_key(c.handle);
        if (!m) {
            st = RNIC_CMD_ST_BAD_MR;
        } else {
            pds_[m->pdn - 1].users--;
            if (m->dm) dms_[m->dm - 1].users--;
            mrs_[RNIC_KEY_INDEX(c.handle)].reset();
        }
        break;
    }
    case RNIC_CMD_CREATE_CQ:
        st = cmd_create_cq(c);
        break;
    case RNIC_CMD_DESTROY_CQ: {
        if (c.handle >= RNIC_MAX_CQ || !cqs_[c.handle])
            st = RNIC_CMD_ST_BAD_CQ;
        else if (cqs_[c.handle]->users)
            st = RNIC_CMD_ST_BUSY;
        else
            cqs_[c.handle].reset();
        break;
    }
    case RNIC_CMD_CREATE_QP:
        st = cmd_create_qp(c);
        break;
    case RNIC_CMD_MODIFY_QP:
        st = cmd_modify_qp(c);
        break;
    case RNIC_CMD_QUERY_QP:
        st = cmd_query_qp(c);
        break;
    case RNIC_CMD_DESTROY_QP:
        st = cmd_destroy_qp(c.handle);
        break;
    case RNIC_CMD_ALLOC_DM:
    case RNIC_CMD_FREE_DM:
    case RNIC_CMD_REG_DM_MR:
    case RNIC_CMD_DM_COPY:
        st = cmd_dm(c);
        break;
    default:
        st = RNIC_CMD_ST_BAD_OPCODE;
        break;
    }
    c.status = st;
    cmd_status_ = st;
    if (st == RNIC_CMD_ST_OK) { // what peers' direct READs check (rnic_direct.cc)
        if (c.opcode == RNIC_CMD_REG_MR || c.opcode == RNIC_CMD_REG_DM_MR)
            pub_mr_changed(RNIC_KEY_INDEX(c.out0));
        if (c.opcode == RNIC_CMD_DEREG_MR) pub_mr_changed(RNIC_KEY_INDEX(c.handle));
        if (c.opcode == RNIC_CMD_CREATE_QP || c.opcode == RNIC_CMD_MODIFY_QP ||
            c.opcode == RNIC_CMD_DESTROY_QP)
            pub_qp_dirty_.set();
        publish();
    }
    if (st != RNIC_CMD_ST_OK) {
        ctr_.command_errors++;
        guest_error("command %u (handle 0x%x) refused with status %u", c.opcode, c.handle, st);
    }
    if (!dma(addr, &c, sizeof(c), true)) cmd_status_ = RNIC_CMD_ST_BAD_ADDR;
}

// An MR key's low byte (rxe's choice): random, 1..255 (0 is never valid), never the index's
// previous one, so that another user cannot guess a key from the index alone.
uint8_t Rnic::next_key_tag(uint8_t prev)
{
    for (;;) {
        uint8_t t = 0;
        if (getrandom(&t, 1, 0) != 1) t = uint8_t(key_rng_() >> 24);
        if (t != 0 && t != prev) return t;
    }
}

uint16_t Rnic::cmd_reg_mr(struct rnic_cmd &c)
{
    const struct rnic_cmd_mr &a = c.params.mr;
    const uint32_t pdi = c.handle - 1;
    if (c.handle == 0 || pdi >= RNIC_MAX_PD || !pds_[pdi].valid) return RNIC_CMD_ST_BAD_PD;
    if ((a.access & ~RNIC_ACCESS_ALL) || (a.flags & ~RNIC_MR_F_PHYS) || a.reserved0 || a.reserved1)
        return (a.access & ~RNIC_ACCESS_ALL) ? RNIC_CMD_ST_BAD_ACCESS : RNIC_CMD_ST_BAD_PARAM;
    // IBA 10.6.3.1: remote write or remote atomic needs local write
    if ((a.access & (RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_ATOMIC)) &&
        !(a.access & RNIC_ACCESS_LOCAL_WRITE))
        return RNIC_CMD_ST_BAD_ACCESS;
    if (a.length == 0 || a.iova + a.length < a.iova) return RNIC_CMD_ST_BAD_PARAM;
    auto m = std::make_unique<Mr>();
    m->pdn = c.handle;
    m->iova = a.iova;
    m->length = a.length;
    m->access = a.access;
    if (a.flags & RNIC_MR_F_PHYS) {
        if (a.npages || a.page_list) return RNIC_CMD_ST_BAD_PARAM;
        if (!probe_ram(a.iova, a.length)) return RNIC_CMD_ST_BAD_ADDR;
        m->phys = true;
    } else {
        if (a.page_shift < RNIC_MR_PAGE_SHIFT_MIN || a.page_shift > RNIC_MR_PAGE_SHIFT_MAX)
            return RNIC_CMD_ST_BAD_PARAM;
        const uint64_t ps = 1ull << a.page_shift;
        const uint64_t base = a.iova & ~(ps - 1);
        const uint64_t need = (a.iova + a.length - base + ps - 1) >> a.page_shift;
        if (a.npages == 0 || a.npages > RNIC_MR_MAX_PAGES || a.npages != need || (a.page_list & 7))
            return RNIC_CMD_ST_BAD_PARAM;
        m->page_shift = a.page_shift;
        m->pages.resize(a.npages);
        if (!dma(a.page_list, m->pages.data(), uint64_t(a.npages) * 8, false)) return RNIC_CMD_ST_BAD_ADDR;
        for (uint64_t pa : m->pages) {
            if (pa & (ps - 1)) return RNIC_CMD_ST_BAD_PARAM;
            if (!probe_ram(pa, ps)) return RNIC_CMD_ST_BAD_ADDR;
        }
    }
    // The page lists of all MRs together stay within RNIC_MR_TOTAL_PAGES (QEMU's heap, and what
    // a restore accepts: docs/rnic.md "Migration").
    uint64_t listed = m->pages.size();
    for (const auto &o : mrs_)
        listed += o ? o->pages.size() : 0;
    if (listed > RNIC_MR_TOTAL_PAGES) {
        guest_error("REG_MR: %zu more page-list entries would exceed the device's %u: refused",
                    m->pages.size(), unsigned(RNIC_MR_TOTAL_PAGES));
        return RNIC_CMD_ST_NO_RESOURCE;
    }
    for (uint32_t i = 0; i < RNIC_MAX_MR; i++) {
        if (mrs_[i]) continue;
        mr_tag_[i] = next_key_tag(mr_tag_[i]);
        mrs_[i] = std::move(m);
        pds_[pdi].users++;
        c.out0 = c.out1 = i << 8 | mr_tag_[i];
        return RNIC_CMD_ST_OK;
    }
    return RNIC_CMD_ST_NO_RESOURCE;
}

uint16_t Rnic::cmd_create_cq(struct rnic_cmd &c)
{
    const struct rnic_cmd_cq &a = c.params.cq;
    if (!valid_depth(a.depth_log2) || a.vector >= RNIC_MSIX_VECTORS || (a.ring & 63) || a.reserved0 ||
        a.reserved1)
        return RNIC_CMD_ST_BAD_PARAM;
    if (!probe_ram(a.ring, uint64_t(sizeof(struct rnic_cqe)) << a.depth_log2)) return RNIC_CMD_ST_BAD_ADDR;
    for (uint32_t i = 0; i < RNIC_MAX_CQ; i++) {
        if (cqs_[i]) continue;
        auto q = std::make_unique<Cq>();
        q->ring = a.ring;
        q->depth_log2 = a.depth_log2;
        q->vector = a.vector;
        cqs_[i] = std::move(q);
        cq_events_[i / 64] &= ~(1ull << (i % 64));
        cq_errors_[i / 64] &= ~(1ull << (i % 64));
        c.handle = i;
        return RNIC_CMD_ST_OK;
    }
    return RNIC_CMD_ST_NO_RESOURCE;
}

uint16_t Rnic::cmd_create_qp(struct rnic_cmd &c)
{
    const struct rnic_cmd_qp &a = c.params.qp;
    const uint32_t pdi = c.handle - 1;
    if (c.handle == 0 || pdi >= RNIC_MAX_PD || !pds_[pdi].valid) return RNIC_CMD_ST_BAD_PD;
    if (a.send_cqn >= RNIC_MAX_CQ || !cqs_[a.send_cqn] || a.recv_cqn >= RNIC_MAX_CQ || !cqs_[a.recv_cqn])
        return RNIC_CMD_ST_BAD_CQ;
    if (!valid_depth(a.sq_depth_log2) || !valid_depth(a.rq_depth_log2) || (a.sq_ring & 63) ||
        (a.rq_ring & 63) || a.reserved0 || a.reserved1)
        return RNIC_CMD_ST_BAD_PARAM;
    if (!probe_ram(a.sq_ring, uint64_t(sizeof(struct rnic_send_wqe)) << a.sq_depth_log2) ||
        !probe_ram(a.rq_ring, uint64_t(sizeof(struct rnic_recv_wqe)) << a.rq_depth_log2))
        return RNIC_CMD_ST_BAD_ADDR;
    for (uint32_t i = 0; i < RNIC_MAX_QP; i++) {
        if (qps_[i]) continue;
        auto q = std::make_unique<Qp>();
        q->index = i;
        q->qpn = RNIC_QPN(i);
        q->pdn = c.handle;
        q->send_cqn = a.send_cqn;
        q->recv_cqn = a.recv_cqn;
        q->sq_ring = a.sq_ring;
        q->rq_ring = a.rq_ring;
        q->sq_log2 = a.sq_depth_log2;
        q->rq_log2 = a.rq_depth_log2;
        if (rc_->create_qp(q->qpn) != RcResult::Ok) return RNIC_CMD_ST_NO_RESOURCE;
        pds_[pdi].users++;
        cqs_[a.send_cqn]->users++;
        cqs_[a.recv_cqn]->users++;
        qp_errors_[i / 64] &= ~(1ull << (i % 64));
        c.handle = q->qpn;
        qps_[i] = std::move(q);
        return RNIC_CMD_ST_OK;
    }
    return RNIC_CMD_ST_NO_RESOURCE;
}

uint16_t Rnic::cmd_destroy_qp(uint32_t qpn)
{
    Qp *q = qp_by_qpn(qpn);
    if (!q) return RNIC_CMD_ST_BAD_QP;
    rc_->destroy_qp(qpn);
    pds_[q->pdn - 1].users--;
    cqs_[q->send_cqn]->users--;
    cqs_[q->recv_cqn]->users--;
    qps_[q->index].reset();
    return RNIC_CMD_ST_OK;
}

uint16_t Rnic::cmd_modify_qp(struct rnic_cmd &c)
{
    Qp *q = qp_by_qpn(c.handle);
    if (!q) return RNIC_CMD_ST_BAD_QP;
    const struct rnic_cmd_modify_qp &a = c.params.modify;
    const uint32_t m = a.attr_mask;
    if ((m & ~RNIC_QP_ATTR_ALL) || !(m & RNIC_QP_ATTR_STATE)) return RNIC_CMD_ST_BAD_ATTR;
    for (uint32_t r : a.reserved)
        if (r) return RNIC_CMD_ST_BAD_PARAM;
    const uint8_t from = engine_state(rc_->qp_state(q->qpn));
    QpState to;
    if (!qp_state_of(a.state, &to)) return RNIC_CMD_ST_BAD_STATE;
    // the attributes each transition requires (IBA 11.2.4.2 / ibv_modify_qp)
    uint32_t need = 0;
    if (from == RNIC_QPS_RESET && a.state == RNIC_QPS_INIT) need = RNIC_QP_ATTR_ACCESS_FLAGS;
    if (from == RNIC_QPS_INIT && a.state == RNIC_QPS_RTR)
        need = RNIC_QP_ATTR_PATH_MTU | RNIC_QP_ATTR_DEST_QPN | RNIC_QP_ATTR_RQ_PSN |
               RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC | RNIC_QP_ATTR_MIN_RNR_TIMER | RNIC_QP_ATTR_AV;
    if (from == RNIC_QPS_RTR && a.state == RNIC_QPS_RTS)
        need = RNIC_QP_ATTR_SQ_PSN | RNIC_QP_ATTR_TIMEOUT | RNIC_QP_ATTR_RETRY_CNT | RNIC_QP_ATTR_RNR_RETRY |
               RNIC_QP_ATTR_MAX_QP_RD_ATOMIC;
    if ((m & need) != need) return RNIC_CMD_ST_BAD_ATTR;
    QpAttr at = q->attr;
    uint32_t dest_node = q->dest_node;
    if (m & RNIC_QP_ATTR_ACCESS_FLAGS) {
        if (a.access & ~(RNIC_ACCESS_ALL & ~RNIC_ACCESS_LOCAL_WRITE)) return RNIC_CMD_ST_BAD_ACCESS;
        at.access = a.access;
    }
    if (m & RNIC_QP_ATTR_PKEY_INDEX) at.pkey = a.pkey;
    if (m & RNIC_QP_ATTR_PATH_MTU) {
        if (!valid_mtu(a.path_mtu) || a.path_mtu > cfg_.timing.max_mtu) return RNIC_CMD_ST_BAD_ATTR;
        at.path_mtu = a.path_mtu;
    }
    if (m & RNIC_QP_ATTR_TIMEOUT) at.timeout = a.timeout;
    if (m & RNIC_QP_ATTR_RETRY_CNT) at.retry_cnt = a.retry_cnt;
    if (m & RNIC_QP_ATTR_RNR_RETRY) at.rnr_retry = a.rnr_retry;
    if (m & RNIC_QP_ATTR_RQ_PSN) at.rq_psn = a.rq_psn;
    if (m & RNIC_QP_ATTR_SQ_PSN) at.sq_psn = a.sq_psn;
    if (m & RNIC_QP_ATTR_MAX_QP_RD_ATOMIC) at.max_rd_atomic = a.max_rd_atomic;
    if (m & RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC) at.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if (m & RNIC_QP_ATTR_MIN_RNR_TIMER) at.min_rnr_timer = a.min_rnr_timer;
    if (m & RNIC_QP_ATTR_DEST_QPN) at.dest_qpn = a.dest_qpn;
    if (m & RNIC_QP_ATTR_AV) {
        L3Addr p;
        std::memcpy(p.src_mac.data(), cfg_.mac, 6);
        p.src_ip = cfg_.ip;
        if (a.dest_node == RNIC_DEST_NODE_EXPLICIT) {
            std::memcpy(p.dst_mac.data(), a.dest_mac, 6);
            p.dst_ip = a.dest_ip;
        } else if (!cfg_.peer_addr(a.dest_node, p.dst_mac.data(), &p.dst_ip)) {
            return RNIC_CMD_ST_BAD_ATTR;
        }
        if (a.udp_sport && a.udp_sport < ROCE_UDP_SPORT_MIN) return RNIC_CMD_ST_BAD_ATTR;
        // rxe's choice: a hash of the two QPNs in 0xC000..0xFFFF
        p.udp_sport =
            a.udp_sport
                ? a.udp_sport
                : uint16_t(ROCE_UDP_SPORT_MIN | ((q->qpn ^ at.dest_qpn ^ (at.dest_qpn >> 14)) & 0x3fff));
        p.tos = a.tos;
        at.path = p;
        dest_node = a.dest_node;
    }
    const RcResult r = rc_->modify_qp(q->qpn, to, at);
    if (r == RcResult::BadState) return RNIC_CMD_ST_BAD_STATE;
    if (r != RcResult::Ok) return RNIC_CMD_ST_BAD_ATTR;
    q->attr = at;
    q->dest_node = dest_node;
    q->state = a.state;
    if (a.state == RNIC_QPS_RESET) {
        // the rings start over: the driver re-posts from index 0
        q->sq_pi = q->sq_ci = q->rq_pi = q->rq_ci = 0;
        q->wrs.clear();
        q->bad_held = false;
        q->rwqe_valid = false;
    }
    if (a.state == RNIC_QPS_RTS) pump_sq(*q);
    return RNIC_CMD_ST_OK;
}

uint16_t Rnic::cmd_query_qp(struct rnic_cmd &c)
{
    Qp *q = qp_by_qpn(c.handle);
    if (!q) return RNIC_CMD_ST_BAD_QP;
    struct rnic_cmd_modify_qp &a = c.params.modify;
    std::memset(&a, 0, sizeof(a));
    a.attr_mask = RNIC_QP_ATTR_ALL;
    a.state = engine_state(rc_->qp_state(q->qpn));
    a.timeout = q->attr.timeout;
    a.retry_cnt = q->attr.retry_cnt;
    a.rnr_retry = q->attr.rnr_retry;
    a.min_rnr_timer = q->attr.min_rnr_timer;
    a.max_rd_atomic = uint8_t(q->attr.max_rd_atomic);
    a.max_dest_rd_atomic = uint8_t(q->attr.max_dest_rd_atomic);
    a.tos = q->attr.path.tos;
    a.path_mtu = uint16_t(q->attr.path_mtu);
    a.pkey = q->attr.pkey;
    a.access = q->attr.access;
    a.dest_qpn = q->attr.dest_qpn;
    a.rq_psn = q->attr.rq_psn;
    a.sq_psn = q->attr.sq_psn;
    a.dest_node = q->dest_node;
    a.dest_ip = q->attr.path.dst_ip;
    std::memcpy(a.dest_mac, q->attr.path.dst_mac.data(), 6);
    a.udp_sport = q->attr.path.udp_sport;
    c.out0 = a.state;
    return RNIC_CMD_ST_OK;
}

// ---- the object tables, the MR checks ----

Rnic::Qp *Rnic::qp_by_qpn(uint32_t qpn)
{
    if (qpn < RNIC_QPN_BASE || RNIC_QP_INDEX(qpn) >= RNIC_MAX_QP) return nullptr;
    return qps_[RNIC_QP_INDEX(qpn)].get();
}

Rnic::Mr *Rnic::mr_by_key(uint32_t key)
{
    const uint32_t i = RNIC_KEY_INDEX(key);
    if (i >= RNIC_MAX_MR || !mrs_[i] || mr_tag_[i] != RNIC_KEY_TAG(key)) return nullptr;
    return mrs_[i].get();
}

bool Rnic::mr_rw(const Mr &m, uint64_t va, uint8_t *buf, uint64_t len, bool write)
{
    if (m.dm) return dm_rw(m, va, buf, len, write);
    return mr_walk(m, va, len, [&](uint64_t pa, uint64_t n) {
        if (!nvm_rw(pa, buf, n, write)) return false;
        buf += n;
        return true;
    });
}

uint32_t Rnic::check_local(const Qp &q, const struct rnic_sge &s, bool write)
{
    const Mr *m = mr_by_key(s.lkey);
    if (!m) return RNIC_LERR_LKEY;
    if (m->pdn != q.pdn) return RNIC_LERR_PD;
    if (s.addr < m->iova || s.addr + s.length < s.addr || s.addr + s.length > m->iova + m->length)
        return RNIC_LERR_BOUNDS;
    if (write && !(m->access & RNIC_ACCESS_LOCAL_WRITE)) return RNIC_LERR_ACCESS;
    return RNIC_LERR_NONE;
}

// Bytes [off, off + len) of the message a WR's SGE list describes: the SGEs were checked at fetch;
// the MR may have gone since (deregistered): then LOC_PROT_ERR.
// Bytes [off, off + len) of the message an SGE list describes, moved to or from `buf`. Each
// SGE's lkey is checked again (the MR may have been deregistered since the WQE was fetched):
// LocProtErr with *lerr set; LocLenErr when the list is shorter than off + len.
WcStatus Rnic::sge_rw(const Qp &q, const struct rnic_sge *sge, unsigned nsge, uint64_t off, uint8_t *buf,
                      uint32_t len, bool write, uint32_t *lerr)
{
    for (unsigned k = 0; k < nsge && len; k++) {
        const struct rnic_sge &s = sge[k];
        if (off >= s.length) {
            off -= s.length;
            continue;
        }
        const uint32_t n = uint32_t(std::min<uint64_t>(len, s.length - off));
        const uint32_t e = check_local(q, s, write);
        Mr *m = e ? nullptr : mr_by_key(s.lkey);
        if (!m || !mr_rw(*m, s.addr + off, buf, n, write)) {
            *lerr = e ? e : RNIC_LERR_DATA_DMA;
            ctr_.local_prot_errors++;
            return WcStatus::LocProtErr;
        }
        buf += n;
        len -= n;
        off = 0;
    }
    return len ? WcStatus::LocLenErr : WcStatus::Success;
}

// The target-side MR check, done by the NIC: the rkey's MR exists with this key byte, belongs to
// the QP's PD, allows `access`, and holds [va, va + len).
Remote Rnic::remote_mr(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t len, uint32_t access, Mr **out)
{
    Qp *q = qp_by_qpn(qpn);
    Mr *m = mr_by_key(rkey);
    const char *why = nullptr;
    if (!q)
        why = "no QP";
    else if (!m)
        why = "unknown rkey";
    else if (m->pdn != q->pdn)
        why = "MR of another PD";
    else if ((m->access & access) != access)
        why = "access flag missing";
    else if (va < m->iova || va + len < va || va + len > m->iova + m->length)
        why = "out of bounds";
    if (why) {
        ctr_.remote_violations++;
        return Remote::AccessError;
    }
    *out = m;
    return Remote::Ok;
}

} // namespace rackemu::rnic
