// SPDX-License-Identifier: MIT
//
// The RNIC's direct path (docs/rnic.md "Direct path", issue 11 item 4): on one host every node's
// RAM is a shared file, so a READ to a live peer can be done by the requester itself, as a copy
// from the peer's RAM file, instead of a request and response frames through the switch.
//
// Owner side: the device publishes, in its area of the node's RAM-file tail (struct rnic_pub,
// rackemu/rnic_regs.h), everything its responder checks before it answers a READ: whether it
// serves (CTRL.ENABLE, the VM running), each QP's state, PD, access flags, accepted source and
// P_Key, each MR's key, PD, access, bounds and page list. It writes under a seqlock.
// Requester side: a READ WR whose QP has nothing else in flight, to a peer node reachable
// directly, while the bridge does not need to see either node's Ethernet frames (a capture or a
// fault rule: rkf_live_table.eth_watched), runs the responder's checks on that table and copies
// the data between two equal even reads of the seqlock; anything else takes the wire, where the
// responder gives the exact answer. Nothing in the RC transport changes: no PSN is used on
// either side, so the wire afterwards goes on as if the READ had not been sent.
#include <atomic>
#include <cstring>

#include "rackemu/fabric_proto.h"
#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

namespace {

enum : int { kDirectNo = 0, kDirectDone = 1 };

// The request as the direct function sees it (no resources owned: it runs under the remote
// memory's SIGBUS guard, which may jump out of it).
struct DirectRead {
    uint32_t self_node, peer_node;
    uint32_t self_ip; // the responder QP must take requests from this address
    uint16_t pkey;
    uint32_t dqpn, rkey;
    uint64_t va, len;
    uint8_t *buf; // len bytes: the data goes here, never straight into guest memory
};

template <typename T> T ld(const T *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

int direct_read_fn(void *opaque, const rk_rmem_view *v)
{
    auto &d = *static_cast<DirectRead *>(opaque);
    if (((v->eth_watched >> d.self_node) | (v->eth_watched >> d.peer_node)) & 1) return kDirectNo;
    auto *pub = reinterpret_cast<rnic_pub *>(v->tail + RK_RMEM_TAIL_RNIC_OFF);
    const auto *pages =
        reinterpret_cast<const uint64_t *>(v->tail + RK_RMEM_TAIL_RNIC_OFF + RNIC_PUB_PAGES_OFF);
    const uint64_t page_cap = (RK_RMEM_TAIL_RNIC_SIZE - RNIC_PUB_PAGES_OFF) / 8;
    if (__atomic_load_n(&pub->magic, __ATOMIC_ACQUIRE) != RNIC_PUB_MAGIC) return kDirectNo;
    if (d.dqpn < RNIC_QPN_BASE || RNIC_QP_INDEX(d.dqpn) >= RNIC_MAX_QP ||
        RNIC_KEY_INDEX(d.rkey) >= RNIC_MAX_MR)
        return kDirectNo;
    const rnic_pub_qp &qe = pub->qp[RNIC_QP_INDEX(d.dqpn)];
    const rnic_pub_mr &me = pub->mr[RNIC_KEY_INDEX(d.rkey)];
    for (int tries = 0; tries < 4; tries++) {
        const uint64_t seq = __atomic_load_n(&pub->seq, __ATOMIC_ACQUIRE);
        if (seq & 1) continue; // the owner is changing it: look again
        const uint32_t flags = ld(&pub->flags);
        const uint32_t q_pdn = ld(&qe.pdn), q_access = ld(&qe.access), q_src = ld(&qe.src_ip);
        const uint8_t q_state = ld(&qe.state);
        const uint16_t q_pkey = ld(&qe.pkey);
        const uint64_t iova = ld(&me.iova), length = ld(&me.length);
        const uint32_t key = ld(&me.key), m_pdn = ld(&me.pdn), m_access = ld(&me.access);
        const uint32_t first = ld(&me.first_page), npages = ld(&me.npages);
        const uint8_t phys = ld(&me.phys), shift = ld(&me.page_shift);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (__atomic_load_n(&pub->seq, __ATOMIC_RELAXED) != seq) continue;
        // the responder's checks (rc.cc: state, source, P_Key, the QP's access; rnic.cc
        // remote_mr: key, PD, access, bounds); a READ they refuse goes on the wire, which NAKs it
        if (!(flags & RNIC_PUB_F_SERVING) || q_pdn == 0 ||
            (q_state != RNIC_QPS_RTR && q_state != RNIC_QPS_RTS) || q_src != d.self_ip || q_pkey != d.pkey ||
            !(q_access & RNIC_ACCESS_REMOTE_READ) || key != d.rkey || m_pdn != q_pdn ||
            !(m_access & RNIC_ACCESS_REMOTE_READ) || d.va < iova || d.va + d.len < d.va ||
            d.va + d.len > iova + length)
            return kDirectNo;
        if (!phys && (npages == 0 || first > page_cap || npages > page_cap - first ||
                      shift < RNIC_MR_PAGE_SHIFT_MIN || shift > RNIC_MR_PAGE_SHIFT_MAX))
            return kDirectNo; // not published (did not fit) or not sane: the wire
        auto piece = [&](uint64_t pa, uint64_t n, uint8_t *to) {
            if (pa < v->ram_base || pa - v->ram_base > v->ram_size || n > v->ram_size - (pa - v->ram_base))
                return false;
            std::memcpy(to, v->ram + (pa - v->ram_base), size_t(n));
            return true;
        };
        bool ok = true;
        if (phys) {
            ok = piece(d.va, d.len, d.buf);
        } else {
            const uint64_t ps = 1ull << shift, base = iova & ~(ps - 1);
            uint64_t va = d.va, left = d.len;
            uint8_t *to = d.buf;
            while (ok && left) {
                const uint64_t rel = va - base, pg = rel >> shift, in = rel & (ps - 1);
                const uint64_t n = std::min(left, ps - in);
                ok = pg < npages && piece(ld(&pages[first + pg]) + in, n, to);
                va += n;
                left -= n;
                to += n;
            }
        }
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (__atomic_load_n(&pub->seq, __ATOMIC_RELAXED) != seq) continue; // changed during the copy
        if (!ok) return kDirectNo;
        __atomic_add_fetch(&pub->served_reads, uint64_t(1), __ATOMIC_RELAXED);
        __atomic_add_fetch(&pub->served_bytes, d.len, __ATOMIC_RELAXED);
        return kDirectDone;
    }
    return kDirectNo;
}

// The fabric's node of a peer MAC (rkf_eth_node_mac: 02:52:4b:00:00:<id>), or UINT32_MAX.
uint32_t node_of_mac(const uint8_t mac[6])
{
    static const uint8_t prefix[5] = {0x02, 0x52, 0x4b, 0x00, 0x00};
    if (std::memcmp(mac, prefix, 5) != 0 || mac[5] >= RKF_MAX_NODES) return UINT32_MAX;
    return mac[5];
}

} // namespace

// ---- requester ----

bool Rnic::direct_read(Qp &q, uint64_t seq, const SendWr &wr)
{
    if (!cfg_.direct.run || !wr.length || wr.length > kDirectReadMax || q.wrs.size() != 1 ||
        rc_->outstanding(q.qpn) != 0 || rc_->qp_state(q.qpn) != QpState::Rts || tx_blocked_ ||
        !q.attr.max_rd_atomic)
        return false;
    const uint32_t peer = node_of_mac(q.attr.path.dst_mac);
    if (peer == UINT32_MAX || peer == cfg_.direct.node || cfg_.direct.node >= RKF_MAX_NODES) return false;
    if (direct_buf_.size() < kDirectReadMax) direct_buf_.resize(kDirectReadMax);
    DirectRead d{cfg_.direct.node, peer,         q.attr.path.src_ip, q.attr.pkey,       q.attr.dest_qpn,
                 wr.rkey,          wr.remote_va, wr.length,          direct_buf_.data()};
    int done = kDirectNo;
    if (cfg_.direct.run(peer, direct_read_fn, &d, &done) != RK_RMEM_OK || done != kDirectDone) return false;
    auto it = q.wrs.find(seq);
    uint32_t lerr = RNIC_LERR_NONE;
    const WcStatus st =
        sge_rw(q, it->second.wqe.sge, it->second.wqe.num_sge, 0, direct_buf_.data(), wr.length, true, &lerr);
    ctr_.direct_reads++;
    if (st != WcStatus::Success) {
        // what the engine does when a READ response cannot be placed: the WR fails, the QP
        // goes to Error (rc.cc, the requester's write_local)
        it->second.lerr = lerr;
        Completion c;
        c.qpn = q.qpn;
        c.wr_id = seq;
        c.status = st;
        c.op = WrOp::Read;
        complete(c);
        qp_fail(q, "READ data could not be placed");
        return true;
    }
    ctr_.payload_rx_bytes += wr.length;
    ctr_.direct_read_bytes += wr.length;
    rc_->ctr_.wr_completed++;
    if (!wr.signaled) {
        q.wrs.erase(seq);
        return true;
    }
    Completion c;
    c.qpn = q.qpn;
    c.wr_id = seq;
    c.op = WrOp::Read;
    c.byte_len = wr.length;
    complete(c);
    return true;
}

// ---- owner ----

void Rnic::pub_init()
{
    pub_ = cfg_.direct.own;
    if (!pub_ || cfg_.direct.own_bytes < RNIC_PUB_PAGES_OFF) {
        pub_ = nullptr;
        return;
    }
    pub_pages_ = reinterpret_cast<uint64_t *>(reinterpret_cast<uint8_t *>(pub_) + RNIC_PUB_PAGES_OFF);
    pub_page_cap_ = (cfg_.direct.own_bytes - RNIC_PUB_PAGES_OFF) / 8;
    __atomic_store_n(&pub_->magic, 0u, __ATOMIC_RELAXED);
    __atomic_store_n(&pub_->seq, uint64_t(0), __ATOMIC_RELAXED);
    pub_->flags = 0;
    pub_served_seen_ = __atomic_load_n(&pub_->served_reads, __ATOMIC_RELAXED);
    std::memset(pub_->qp, 0, sizeof pub_->qp);
    std::memset(pub_->mr, 0, sizeof pub_->mr);
    __atomic_store_n(&pub_->magic, RNIC_PUB_MAGIC, __ATOMIC_RELEASE);
}

void Rnic::pub_all_dirty()
{
    pub_qp_dirty_.set();
    pub_mr_dirty_.set();
}

void Rnic::pub_qp_changed(uint32_t index)
{
    if (index < RNIC_MAX_QP) pub_qp_dirty_.set(index);
}

void Rnic::pub_mr_changed(uint32_t index)
{
    if (index < RNIC_MAX_MR) pub_mr_dirty_.set(index);
}

// Write what changed since the last call, under the seqlock. Called with mu_ held at the end
// of everything that can change what a responder checks.
void Rnic::publish()
{
    if (!pub_) return;
    const uint32_t flags = (ctrl_ & RNIC_CTRL_ENABLE) && !paused_ ? RNIC_PUB_F_SERVING : 0;
    if (flags == pub_flags_ && pub_qp_dirty_.none() && pub_mr_dirty_.none()) return;
    const uint64_t seq = __atomic_load_n(&pub_->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&pub_->seq, seq + 1, __ATOMIC_RELAXED); // odd: changing
    std::atomic_thread_fence(std::memory_order_seq_cst);
    __atomic_store_n(&pub_->flags, flags, __ATOMIC_RELAXED);
    pub_flags_ = flags;
    for (uint32_t i = 0; pub_qp_dirty_.any() && i < RNIC_MAX_QP; i++) {
        if (!pub_qp_dirty_.test(i)) continue;
        pub_qp_dirty_.reset(i);
        rnic_pub_qp e{};
        if (const Qp *q = qps_[i].get()) {
            e.pdn = q->pdn;
            e.state = engine_state(rc_->qp_state(q->qpn));
            e.access = q->attr.access;
            e.src_ip = q->attr.path.dst_ip;
            e.pkey = q->attr.pkey;
        }
        std::memcpy(&pub_->qp[i], &e, sizeof e);
    }
    if (pub_mr_dirty_.any()) {
        // pages for the changed MRs from the free end; when they do not fit, compact: every MR
        // again from the start (an MR that still does not fit is published without its pages)
        // (also when an MR still waits for room: a deregistration may have made some)
        uint64_t need = 0;
        for (uint32_t i = 0; i < RNIC_MAX_MR; i++)
            if (pub_mr_dirty_.test(i) && mrs_[i] && !mrs_[i]->phys) need += mrs_[i]->pages.size();
        if (need > pub_page_cap_ - pub_pages_used_ || pub_unplaced_) {
            pub_pages_used_ = 0;
            pub_unplaced_ = 0;
            for (uint32_t i = 0; i < RNIC_MAX_MR; i++)
                pub_mr_dirty_.set(i); // every entry again (a stale one of a gone MR is cleared)
        }
        for (uint32_t i = 0; i < RNIC_MAX_MR; i++) {
            if (!pub_mr_dirty_.test(i)) continue;
            rnic_pub_mr e{};
            if (const Mr *m = mrs_[i].get()) {
                e.iova = m->iova;
                e.length = m->length;
                e.key = i << 8 | mr_tag_[i];
                e.pdn = m->pdn;
                e.access = m->access;
                e.phys = m->phys;
                e.page_shift = m->page_shift;
                if (!m->phys && m->pages.size() <= pub_page_cap_ - pub_pages_used_) {
                    e.first_page = uint32_t(pub_pages_used_);
                    e.npages = uint32_t(m->pages.size());
                    std::memcpy(pub_pages_ + pub_pages_used_, m->pages.data(), m->pages.size() * 8);
                    pub_pages_used_ += m->pages.size();
                } else if (!m->phys) {
                    pub_unplaced_++; // published without its pages: its READs take the wire
                }
            }
            std::memcpy(&pub_->mr[i], &e, sizeof e);
        }
        pub_mr_dirty_.reset();
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    __atomic_store_n(&pub_->seq, seq + 2, __ATOMIC_RELEASE);
}

// READs of this node's memory that peers completed directly, since the last look.
void Rnic::sync_served()
{
    if (!pub_) return;
    const uint64_t now = __atomic_load_n(&pub_->served_reads, __ATOMIC_RELAXED);
    ctr_.served_direct_reads += now - pub_served_seen_;
    pub_served_seen_ = now;
}

} // namespace rackemu::rnic
