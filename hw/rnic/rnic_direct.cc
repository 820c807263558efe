// SPDX-License-Identifier: MIT
//
// The RNIC's direct path (docs/rnic.md "Direct path"): on one host every node's
// RAM is a shared file, so a READ or WRITE to a live peer can be done by the requester itself,
// as a copy from or into the peer's RAM file, instead of frames through the switch.
//
// Owner side: the device publishes, in its area of the node's RAM-file tail (struct rnic_pub,
// rnic_pub.h: host-only), everything its responder checks before it executes a READ or WRITE:
// whether it serves (CTRL.ENABLE, the VM running), each QP's state, PD, access flags, accepted
// source and P_Key, each MR's key, PD, access, bounds and page list. It writes under the table's
// seqlock (hw/fabric/seqlock.h), and before it changes anything it waits until no peer's direct
// WRITE is in progress (the busy words, the seqlock's holders), so a WRITE never lands in memory
// the table no longer grants.
// Requester side: a READ or WRITE (without immediate) WR whose QP has nothing else in flight, to
// a peer node reachable directly, while the bridge does not need to see either node's Ethernet
// frames (a capture or a fault rule: rkf_live_table.eth_watched), runs the responder's checks on
// that table and copies; anything else takes the wire, where the responder gives the exact
// answer. Nothing in the RC transport changes: no PSN is used on either side, so the wire
// afterwards goes on as if the request had not been sent.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "rackemu/fabric_proto.h"
#include "rnic.h"
#include "rnic_objects.h"
#include "seqlock.h"
#include "shm_ring.h"

namespace rackemu::rnic {

static_assert(RNIC_PUB_NODES == RKF_MAX_NODES, "a busy word per fabric node");

namespace {

enum : int { kDirectNo = 0, kDirectDone = 1 };

// The request as the direct function sees it (no resources owned: it runs under the remote
// memory's SIGBUS guard, which may jump out of it; the busy word is cleared by the caller then).
struct DirectOp {
    uint32_t self_node, peer_node;
    uint32_t self_ip;  // this node's fabric address: the responder QP's peer must be it
    uint32_t self_qpn; // the requester QP: the responder QP's connected peer must be it
    uint16_t pkey;
    uint32_t dqpn, rkey;
    uint64_t va, len;
    uint8_t *buf;    // len bytes: READ data goes here (never straight into guest memory), WRITE
    bool write;      // data comes from here
    uint64_t holder; // WRITE: busy[self_node] while it copies (this node's liveness word, UP set)
};

int direct_fn_held(DirectOp &d, const rk_rmem_view *v, rnic_pub *pub);

// The responder's work on the peer's mapped RAM file: its checks on the published table, then the
// copy (a WRITE checks every piece to be RAM before the first byte moves). A WRITE cannot be
// discarded after the copy, so it holds busy[its node] from before its first look at seq to the
// end of its copy (Seqlock::hold: the owner, after write_begin, waits until no word is held; one
// of the two sees the other); the word is cleared here, under the SIGBUS guard (after a fault it
// stays: the file is gone, and with it the word).
int direct_fn(void *opaque, const rk_rmem_view *v)
{
    auto &d = *static_cast<DirectOp *>(opaque);
    if (((v->eth_watched >> d.self_node) | (v->eth_watched >> d.peer_node)) & 1) return kDirectNo;
    auto *pub = reinterpret_cast<rnic_pub *>(v->tail + RK_RMEM_TAIL_RNIC_OFF);
    if (!fabric::table_published(pub->magic, RNIC_PUB_MAGIC)) return kDirectNo;
    if (!d.write) return direct_fn_held(d, v, pub);
    fabric::Seqlock::hold(pub->busy[d.self_node], d.holder);
    const int r = direct_fn_held(d, v, pub);
    fabric::Seqlock::unhold(pub->busy[d.self_node]);
    return r;
}

int direct_fn_held(DirectOp &d, const rk_rmem_view *v, rnic_pub *pub)
{
    const auto *pages =
        reinterpret_cast<const uint64_t *>(v->tail + RK_RMEM_TAIL_RNIC_OFF + RNIC_PUB_PAGES_OFF);
    const uint64_t page_cap = (RK_RMEM_TAIL_RNIC_SIZE - RNIC_PUB_PAGES_OFF) / 8;
    if (d.dqpn < RNIC_QPN_BASE || RNIC_QP_INDEX(d.dqpn) >= RNIC_MAX_QP ||
        RNIC_KEY_INDEX(d.rkey) >= RNIC_MAX_MR)
        return kDirectNo;
    const uint32_t need = d.write ? RNIC_ACCESS_REMOTE_WRITE : RNIC_ACCESS_REMOTE_READ;
    const fabric::Seqlock lock(pub->seq);
    for (int tries = 0; tries < 4; tries++) {
        uint64_t seq;
        if (!lock.read_begin(seq)) continue; // the owner is changing it: look again
        const uint32_t flags = fabric::shared_load(pub->flags);
        const rnic_pub_qp qe = fabric::shared_load(pub->qp[RNIC_QP_INDEX(d.dqpn)]);
        const rnic_pub_mr me = fabric::shared_load(pub->mr[RNIC_KEY_INDEX(d.rkey)]);
        if (!lock.read_valid(seq)) continue;
        const uint64_t iova = me.iova, length = me.length;
        const uint32_t first = me.first_page, npages = me.npages;
        const uint8_t phys = me.phys, shift = me.page_shift;
        // the responder's checks (rc.cc: state, source, P_Key, the QP's access; rnic_verbs.cc
        // remote_mr: key, PD, access, bounds); a request they refuse goes on the wire, which NAKs
        // it. Only the responder QP's connected peer (this node, the requester QP) may use it: on
        // the wire another QP's request lacks the connection's PSN and gets nothing (a READ's
        // response goes to the peer QP). A responder still in RTR takes the wire too: its first
        // packet raises COMM_EST.
        if (!(flags & RNIC_PUB_F_SERVING) || qe.pdn == 0 || qe.state != RNIC_QPS_RTS ||
            qe.src_ip != d.self_ip || qe.dest_qpn != d.self_qpn || qe.pkey != d.pkey || !(qe.access & need) ||
            me.key != d.rkey || me.pdn != qe.pdn || !(me.access & need) || d.va < iova ||
            d.va + d.len < d.va || d.va + d.len > iova + length)
            return kDirectNo;
        if (!phys && (npages == 0 || first > page_cap || npages > page_cap - first ||
                      shift < RNIC_MR_PAGE_SHIFT_MIN || shift > RNIC_MR_PAGE_SHIFT_MAX))
            return kDirectNo; // not published (did not fit) or not sane: the wire
        // The range in physically contiguous pieces: fn(peer RAM, bytes, offset in the message).
        auto walk = [&](auto &&fn) {
            auto piece = [&](uint64_t pa, uint64_t n, uint64_t at) {
                if (pa < v->ram_base || pa - v->ram_base > v->ram_size ||
                    n > v->ram_size - (pa - v->ram_base))
                    return false;
                fn(v->ram + (pa - v->ram_base), n, at);
                return true;
            };
            if (phys) return piece(d.va, d.len, 0);
            const uint64_t ps = 1ull << shift, base = iova & ~(ps - 1);
            for (uint64_t at = 0; at < d.len;) {
                const uint64_t rel = d.va + at - base, pg = rel >> shift, in = rel & (ps - 1);
                const uint64_t n = std::min(d.len - at, ps - in);
                if (pg >= npages || !piece(fabric::shared_load(pages[first + pg]) + in, n, at)) return false;
                at += n;
            }
            return true;
        };
        if (d.write) {
            // under busy[]: the owner changes nothing until it is cleared
            if (!walk([](const unsigned char *, uint64_t, uint64_t) {})) return kDirectNo;
            walk([&](const unsigned char *ram, uint64_t n, uint64_t at) {
                std::memcpy(const_cast<unsigned char *>(ram), d.buf + at, size_t(n));
            });
            // (the caller's unhold orders the copy before the owner's next change)
            __atomic_add_fetch(&pub->served_writes, uint64_t(1), __ATOMIC_RELAXED);
            __atomic_add_fetch(&pub->served_write_bytes, d.len, __ATOMIC_RELAXED);
            return kDirectDone;
        }
        const bool ok = walk([&](const unsigned char *ram, uint64_t n, uint64_t at) {
            std::memcpy(d.buf + at, ram, size_t(n));
        });
        if (!lock.copy_valid(seq)) continue; // changed during the copy
        if (!ok) return kDirectNo;
        __atomic_add_fetch(&pub->served_reads, uint64_t(1), __ATOMIC_RELAXED);
        __atomic_add_fetch(&pub->served_read_bytes, d.len, __ATOMIC_RELAXED);
        return kDirectDone;
    }
    return kDirectNo;
}

} // namespace

// ---- requester ----

bool Rnic::direct_op(Qp &q, uint64_t seq, const SendWr &wr)
{
    const bool write = wr.op == WrOp::Write;
    // the transport's own copy of the attributes (what the wire uses: modify QP takes some only
    // at their transition)
    const QpAttr *at = rc_->qp_attr(q.qpn);
    if ((!write && wr.op != WrOp::Read) || !at || !cfg_.direct.run || !wr.length || wr.length > kDirectMax ||
        q.wrs.size() != 1 || rc_->outstanding(q.qpn) != 0 || rc_->qp_state(q.qpn) != QpState::Rts ||
        tx_blocked_ || (!write && !at->max_rd_atomic))
        return false;
    const uint32_t self = cfg_.direct.node;
    const int peer_or_none = rkf_eth_mac_node(at->path.dst_mac.data());
    const uint32_t peer = uint32_t(peer_or_none);
    if (peer_or_none < 0 || peer == self || self >= RKF_MAX_NODES) return false;
    // A WRITE's busy word is this node's liveness word (generation, UP): the owner clears a word
    // that is no longer its holder's live word. No liveness (link down): no direct WRITE.
    uint64_t holder = 1;
    if (const rkf_live_table *t = cfg_.direct.live)
        holder = __atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) == RKF_LIVE_MAGIC
                     ? __atomic_load_n(&t->node[self], __ATOMIC_ACQUIRE)
                     : 0;
    if (write && !(holder & RKF_LIVE_UP)) return false;
    if (direct_buf_.size() < kDirectMax) direct_buf_.resize(kDirectMax);
    const auto it = q.wrs.find(seq);
    // A local buffer that fails is left to the wire, which fails it exactly as always (the
    // engine's read_local / write_local: the WR's error, the QP to Error, its counters and
    // event); this attempt's own count of the refusal is taken back.
    const uint64_t prot_errors = ctr_.local_prot_errors;
    uint32_t lerr = RNIC_LERR_NONE;
    if (write && sge_rw(q, it->second.wqe.sge, it->second.wqe.num_sge, 0, direct_buf_.data(), wr.length,
                        false, &lerr) != WcStatus::Success) {
        ctr_.local_prot_errors = prot_errors;
        return false;
    }
    DirectOp d{self,         peer,      rkf_eth_node_ipv4(self), q.qpn, at->pkey, at->dest_qpn, wr.rkey,
               wr.remote_va, wr.length, direct_buf_.data(),      write, holder};
    int done = kDirectNo;
    const int st = cfg_.direct.run(peer, direct_fn, &d, &done);
    if (st != RK_RMEM_OK || done != kDirectDone) return false; // the wire: the same WR, untouched
    if (!write) {
        if (sge_rw(q, it->second.wqe.sge, it->second.wqe.num_sge, 0, direct_buf_.data(), wr.length, true,
                   &lerr) != WcStatus::Success) {
            ctr_.local_prot_errors = prot_errors; // (the peer counted a READ it served)
            return false;
        }
        ctr_.direct_reads++;
        ctr_.payload_rx_bytes += wr.length;
        ctr_.direct_read_bytes += wr.length;
    } else {
        ctr_.direct_writes++;
        ctr_.direct_write_bytes += wr.length;
    }
    rc_->ctr_.wr_completed++;
    if (!wr.signaled) {
        q.wrs.erase(seq);
        return true;
    }
    Completion c;
    c.qpn = q.qpn;
    c.wr_id = seq;
    c.op = wr.op;
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
    fabric::shared_store(pub_->magic, 0u);
    fabric::Seqlock lock(pub_->seq);
    lock.write_begin();
    fabric::shared_store(pub_->flags, 0u);
    pub_reads_seen_ = __atomic_load_n(&pub_->served_reads, __ATOMIC_RELAXED);
    pub_writes_seen_ = __atomic_load_n(&pub_->served_writes, __ATOMIC_RELAXED);
    for (auto &e : pub_->qp)
        fabric::shared_store(e, rnic_pub_qp{});
    for (auto &e : pub_->mr)
        fabric::shared_store(e, rnic_pub_mr{});
    lock.write_end();
    fabric::publish_table(pub_->magic, RNIC_PUB_MAGIC);
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

// Write what changed since the last call, under the table's seqlock (this thread its only
// writer). Called with mu_ held at the end of everything that can change what a responder checks.
void Rnic::publish()
{
    if (!pub_) return;
    const uint32_t flags = (ctrl_ & RNIC_CTRL_ENABLE) && !paused_ ? RNIC_PUB_F_SERVING : 0;
    if (flags == pub_flags_ && pub_qp_dirty_.none() && pub_mr_dirty_.none()) return;
    fabric::Seqlock lock(pub_->seq);
    lock.write_begin();
    pub_wait_writers();
    fabric::shared_store(pub_->flags, flags);
    pub_flags_ = flags;
    for (uint32_t i = 0; pub_qp_dirty_.any() && i < RNIC_MAX_QP; i++) {
        if (!pub_qp_dirty_.test(i)) continue;
        pub_qp_dirty_.reset(i);
        rnic_pub_qp e{};
        const Qp *q = qps_[i].get();
        if (const QpAttr *at = q ? rc_->qp_attr(q->qpn) : nullptr) { // the transport's (rc.cc checks those)
            e.pdn = q->pdn;
            e.state = engine_state(rc_->qp_state(q->qpn));
            e.access = at->access;
            e.src_ip = at->path.dst_ip;
            e.pkey = at->pkey;
            e.dest_qpn = at->dest_qpn;
        }
        fabric::shared_store(pub_->qp[i], e);
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
            // an MR over device memory is not published: peers' requests to it take the wire
            if (const Mr *m = mrs_[i].get(); m && !m->dm) {
                e.iova = m->iova;
                e.length = m->length;
                e.key = i << 8 | mr_tag_[i];
                e.pdn = m->pdn;
                e.access = m->access;
                e.phys = m->phys;
                e.page_shift = m->page_shift;
                if (m->nvm < 0) m->nvm = nvm_mr(*m) ? 1 : 0;
                if (m->nvm) {
                    // persistent memory: its writes go through this node's NIC buffer, so its
                    // READs and WRITEs take the wire (published as a list that did not fit)
                    e.phys = 0;
                    e.first_page = e.npages = 0;
                } else if (!m->phys && m->pages.size() <= pub_page_cap_ - pub_pages_used_) {
                    e.first_page = uint32_t(pub_pages_used_);
                    e.npages = uint32_t(m->pages.size());
                    for (size_t k = 0; k < m->pages.size(); k++)
                        fabric::shared_store(pub_pages_[pub_pages_used_ + k], m->pages[k]);
                    pub_pages_used_ += m->pages.size();
                } else if (!m->phys) {
                    pub_unplaced_++; // published without its pages: its READs take the wire
                }
            }
            fabric::shared_store(pub_->mr[i], e);
        }
        pub_mr_dirty_.reset();
    }
    lock.write_end();
}

// After write_begin: wait until no peer's direct WRITE holds its busy word (Seqlock::hold), from
// its look at the table to the end of its copy (at most kDirectMax bytes once it runs). A word
// whose holder is not the live incarnation of that peer any more (it died or reconnected
// mid-copy: its liveness word changed, the bridge clears UP first) is taken back, as long as this
// node's view of the table is valid. A live holder is waited for however long it takes (a
// descheduled or stopped QEMU: what hardware does for a DMA in flight), logged once a second and
// counted in direct_wait_stalls, so the change never goes ahead under a WRITE.
void Rnic::pub_wait_writers()
{
    using clock = std::chrono::steady_clock;
    for (uint32_t n = 0; n < RNIC_PUB_NODES; n++) {
        clock::time_point next_log{};
        for (unsigned spins = 0;; spins++) {
            const uint64_t h = fabric::Seqlock::holder(pub_->busy[n]);
            if (!h) break;
            const rkf_live_table *t = cfg_.direct.live;
            if (t && __atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) == RKF_LIVE_MAGIC &&
                __atomic_load_n(&t->node[n], __ATOMIC_ACQUIRE) != h) {
                fabric::Seqlock::take_back(pub_->busy[n], h);
                continue;
            }
            if (spins < 1000) {
                fabric::cpu_relax();
                continue;
            }
            const clock::time_point now = clock::now();
            if (next_log == clock::time_point{}) {
                next_log = now + std::chrono::seconds(1);
            } else if (now >= next_log) {
                ctr_.direct_wait_stalls++;
                guest_error(
                    "waiting for node %u's direct WRITE in progress (over %llu s): its QEMU is "
                    "stopped or descheduled",
                    n, (unsigned long long)ctr_.direct_wait_stalls);
                next_log = now + std::chrono::seconds(1);
            }
            std::this_thread::sleep_for(std::chrono::microseconds(20)); // a descheduled peer: sleep
        }
    }
}

// What peers completed directly on this node's memory, since the last look.
void Rnic::sync_served()
{
    if (!pub_) return;
    const uint64_t r = __atomic_load_n(&pub_->served_reads, __ATOMIC_RELAXED);
    const uint64_t w = __atomic_load_n(&pub_->served_writes, __ATOMIC_RELAXED);
    ctr_.served_direct_reads += r - pub_reads_seen_;
    ctr_.served_direct_writes += w - pub_writes_seen_;
    pub_reads_seen_ = r;
    pub_writes_seen_ = w;
}

} // namespace rackemu::rnic
