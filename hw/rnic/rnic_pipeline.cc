// SPDX-License-Identifier: MIT
//
// The RNIC's send and receive queues (docs/rnic.md "Doorbells", "Queue entries"; the pipeline of
// a send work request is in rnic.h): the SQ and RQ doorbells, the send WQE pump, the receive WQE
// fetched on demand, the engine's completions and the CQEs.
//   SQ_PI -> sq_doorbell -> pump_sq, while the engine has room: FETCH the 128-byte WQE (DMA) ->
//   CHECK it (opcode, operands, SGE count and sizes, every SGE's lkey/PD/bounds/access, length)
//   -> POST it to the engine (or the direct path, rnic_direct.cc) -> ... -> complete() ->
//   write_cqe: the entry, then its owner byte last; an armed CQ raises its vector.
//   A WQE that fails its checks is HELD until every earlier WR of the QP completed, then
//   completes with LOC_QP_OP_ERR / LOC_PROT_ERR (vendor_err RNIC_LERR_*) and the QP goes to
//   Error (qp_fail), which flushes the rest.
//   RQ_PI -> rq_doorbell; the engine asks recv_available() (fetch_rwqe: the next WQE, checked),
//   places bytes with recv_write() (lkeys checked per SGE) and completes the receive.
// The engine's RcEnv calls here: read_local / write_local (the requester's SGEs), recv_available,
// recv_write, flush_recv, complete.
//
// Specification: IBA Vol 1 9.7 (RC: a QP's WRs complete in order) and the verbs' work requests
// and completions (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq's solicited
// arming); IBA 1.5 Memory Placement Extensions for FLUSH and ATOMIC WRITE.
//
// Threading: with mu_ held: the doorbells from db_write (a vCPU), the engine's calls from inside
// on_frame / poll / a doorbell, pump_sq also from after_engine and modify QP.
//
// Caveat: a CQE that finds its CQ full puts the CQ in error (its CQEs dropped and counted, a
// CQ_ERR event); the QPs using it are not moved to Error.
#include <cstddef>
#include <cstring>

#include "rnic.h"
#include "rnic_objects.h"

namespace rackemu::rnic {

namespace {

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

// ---- the send queue ----

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

} // namespace rackemu::rnic
