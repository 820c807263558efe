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

// ---- the send WQE opcodes ----

// A WQE's SGEs, by its opcode.
enum class Sges : uint8_t {
    List,   // 0..RNIC_MAX_SEND_SGE: the message (SEND, WRITE: gathered; READ: scattered)
    Result, // exactly one, the result's size: 8 bytes (CMP_SWAP, FETCH_ADD) or xsize (XATOMIC)
    None,   // none: the operands are in the WQE (FLUSH, ATOMIC WRITE, XATOMIC_POST)
};

// The engine's length of the WR (SendWr::length), by its opcode.
enum class Len : uint8_t {
    Sum,   // the SGEs' lengths added (at most RNIC_MAX_MSG)
    Flush, // the WQE's flush_len: the range to flush
    Eight, // the 8-byte value in the WQE (ATOMIC WRITE)
};

enum : uint8_t {
    kReturns = 1u << 0, // data comes back into the SGE(s): they need LOCAL_WRITE, and a successful
                        // CQE's byte_len is what came back (the engine's), not the WR's length
    kXatomic = 1u << 1, // xop and xsize are checked (unknown: RNIC_LERR_OPCODE); the result is xsize
    kPayload = 1u << 2, // its length is payload sent (the payload_tx_bytes counter)
    kDirect = 1u << 3,  // it may be done on the direct path (rnic_direct.cc)
};

// One row per send WQE opcode (RNIC_WR_*, rackemu/rnic_regs.h; docs/rnic.md "Queue entries"):
// the pump checks a WQE and builds the engine's WR by its row, a completion is reported by the
// row of its engine operation. An opcode without a row is refused with RNIC_LERR_OPCODE (its CQE
// says SEND). Besides the SGEs and the flags (SIGNALED, SOLICITED, FENCE), an operation uses
// these fields of its WQE: every one but SEND/SEND_IMM remote_addr and rkey; SEND_IMM and
// WRITE_IMM imm; CMP_SWAP compare and swap_add; FETCH_ADD swap_add (the addend); FLUSH flush_type
// and flush_len; ATOMIC_WRITE swap_add (the value); XATOMIC/_POST xop, xsize, swap_add (the
// operand), compare and mask. The engine's WR carries them all (engine_wr).
struct WqeOp {
    uint8_t wqe; // RNIC_WR_*
    uint8_t cqe; // RNIC_CQE_OP_* of its completion
    WrOp op;     // the engine's operation
    Sges sges;
    Len len;
    uint8_t flags; // k*
};

// clang-format off
constexpr WqeOp kWqeOps[] = {
    // wqe                 cqe                       op                 sges          len         flags
    {RNIC_WR_WRITE,        RNIC_CQE_OP_WRITE,        WrOp::Write,       Sges::List,   Len::Sum,   kPayload | kDirect},
    {RNIC_WR_WRITE_IMM,    RNIC_CQE_OP_WRITE,        WrOp::WriteImm,    Sges::List,   Len::Sum,   kPayload},
    {RNIC_WR_SEND,         RNIC_CQE_OP_SEND,         WrOp::Send,        Sges::List,   Len::Sum,   kPayload},
    {RNIC_WR_SEND_IMM,     RNIC_CQE_OP_SEND,         WrOp::SendImm,     Sges::List,   Len::Sum,   kPayload},
    {RNIC_WR_READ,         RNIC_CQE_OP_READ,         WrOp::Read,        Sges::List,   Len::Sum,   kReturns | kDirect},
    {RNIC_WR_CMP_SWAP,     RNIC_CQE_OP_CMP_SWAP,     WrOp::CmpSwap,     Sges::Result, Len::Sum,   kReturns},
    {RNIC_WR_FETCH_ADD,    RNIC_CQE_OP_FETCH_ADD,    WrOp::FetchAdd,    Sges::Result, Len::Sum,   kReturns},
    {RNIC_WR_FLUSH,        RNIC_CQE_OP_FLUSH,        WrOp::Flush,       Sges::None,   Len::Flush, 0},
    {RNIC_WR_ATOMIC_WRITE, RNIC_CQE_OP_ATOMIC_WRITE, WrOp::AtomicWrite, Sges::None,   Len::Eight, kPayload},
    {RNIC_WR_XATOMIC,      RNIC_CQE_OP_XATOMIC,      WrOp::XAtomic,     Sges::Result, Len::Sum,   kReturns | kXatomic},
    {RNIC_WR_XATOMIC_POST, RNIC_CQE_OP_XATOMIC_POST, WrOp::XAtomicPost, Sges::None,   Len::Sum,   kXatomic},
};
// clang-format on

// Every engine operation has one row: a completion is reported by it.
constexpr bool one_row_per_wr_op()
{
    for (unsigned v = 0; v <= unsigned(WrOp::XAtomicPost); v++) {
        unsigned n = 0;
        for (const WqeOp &o : kWqeOps)
            n += unsigned(o.op) == v;
        if (n != 1) return false;
    }
    return true;
}
static_assert(one_row_per_wr_op(), "kWqeOps: one row per WrOp");

// The row of a WQE opcode; null: no such opcode.
const WqeOp *wqe_op(uint8_t opcode)
{
    for (const WqeOp &o : kWqeOps)
        if (o.wqe == opcode) return &o;
    return nullptr;
}

// The row of an engine operation (every WrOp has one).
const WqeOp &wqe_op_of(WrOp op)
{
    for (const WqeOp &o : kWqeOps)
        if (o.op == op) return o;
    return kWqeOps[0]; // unreachable: one_row_per_wr_op()
}

// A reason that means the WQE itself is malformed (LOC_QP_OP_ERR), not one of its SGEs
// (LOC_PROT_ERR).
bool malformed(uint32_t lerr)
{
    return lerr == RNIC_LERR_OPCODE || lerr == RNIC_LERR_SGE_COUNT || lerr == RNIC_LERR_LENGTH;
}

// The checks of a send WQE that need only the WQE and its row, in the device's order (the first
// that fails is the CQE's vendor_err): the opcode, the extended atomic's operation and size, the
// SGE count, the result SGE's size. RNIC_LERR_NONE: the SGEs' own checks come next (check_local).
uint32_t wqe_malformed(const WqeOp *o, const struct rnic_send_wqe &x)
{
    if (!o) return RNIC_LERR_OPCODE;
    if ((o->flags & kXatomic) &&
        (x.xop >= ROCE_XOP_COUNT || (x.xsize != ROCE_XATOMIC_SIZE32 && x.xsize != ROCE_XATOMIC_SIZE64)))
        return RNIC_LERR_OPCODE;
    if (x.num_sge > RNIC_MAX_SEND_SGE) return RNIC_LERR_SGE_COUNT;
    if (o->sges == Sges::None && x.num_sge) return RNIC_LERR_SGE_COUNT;
    if (o->sges == Sges::Result) {
        if (x.num_sge != 1) return RNIC_LERR_SGE_COUNT;
        if (x.sge[0].length != ((o->flags & kXatomic) ? x.xsize : 8u)) return RNIC_LERR_LENGTH;
    }
    return RNIC_LERR_NONE;
}

// The engine's WR of a WQE that passed its checks: wr_id and local buffer are the core's
// sequence number `seq` (Qp::wrs holds the WQE under it); `len` is its SGEs' sum.
SendWr engine_wr(const WqeOp &o, const struct rnic_send_wqe &x, uint64_t seq, uint64_t len)
{
    SendWr wr;
    wr.op = o.op;
    wr.wr_id = seq;
    wr.local = seq;
    wr.length = o.len == Len::Flush ? x.flush_len : o.len == Len::Eight ? 8 : uint32_t(len);
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
    return wr;
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
            complete_bad_wqe(q);
            continue;
        }
        const QpState st = rc_->qp_state(q.qpn);
        if (q.sq_ci == q.sq_pi || st == QpState::Reset) return;
        if (outstanding >= depth) return; // our copies of the WQEs are bounded by the ring
        Qp::Wr w;
        auto hold = [&](uint32_t lerr) {
            q.bad_held = true;
            q.bad = w;
            q.bad_lerr = lerr;
        };
        const uint64_t at = q.sq_ring + uint64_t(q.sq_ci & (depth - 1)) * sizeof(struct rnic_send_wqe);
        ctr_.wqes_fetched++;
        if (!dma(at, &w.wqe, sizeof(w.wqe), false)) {
            guest_error("QP 0x%x: send WQE %u at 0x%llx is not in RAM", q.qpn, q.sq_ci,
                        (unsigned long long)at);
            std::memset(&w.wqe, 0, sizeof(w.wqe));
            q.sq_ci++;
            hold(RNIC_LERR_WQE_DMA);
            continue;
        }
        q.sq_ci++;
        const struct rnic_send_wqe &x = w.wqe;
        const WqeOp *o = wqe_op(x.opcode);
        uint32_t lerr = wqe_malformed(o, x);
        uint64_t len = 0;
        for (unsigned k = 0; !lerr && k < x.num_sge; k++) {
            len += x.sge[k].length;
            if (x.sge[k].length) lerr = check_local(q, x.sge[k], o->flags & kReturns);
        }
        if (!lerr && len > RNIC_MAX_MSG) lerr = RNIC_LERR_LENGTH;
        if (lerr) {
            if (!malformed(lerr)) ctr_.local_prot_errors++;
            guest_error("QP 0x%x: send WQE %u (wr_id 0x%llx, opcode %u) refused: reason %u", q.qpn,
                        q.sq_ci - 1, (unsigned long long)x.wr_id, x.opcode, lerr);
            hold(lerr);
            continue;
        }
        const uint64_t seq = next_seq_++;
        const SendWr wr = engine_wr(*o, x, seq, len);
        w.len = wr.length;
        w.posted_ns = host_.now_ns();
        q.wrs.emplace(seq, w);
        if (o->flags & kPayload) ctr_.payload_tx_bytes += wr.length;
        // a READ or WRITE alone on its QP, to a peer reachable directly: a copy, no frames
        // (rnic_direct.cc)
        if ((o->flags & kDirect) && direct_op(q, seq, wr)) continue;
        if (rc_->post_send(q.qpn, wr) != RcResult::Ok) {
            // the checks above make this unreachable; never lose the WR silently
            q.wrs.erase(seq);
            hold(RNIC_LERR_OPCODE);
        }
    }
}

// The WQE held for failing its checks, once every earlier WR completed: its CQE (LOC_QP_OP_ERR
// for a malformed WQE or one not in RAM, LOC_PROT_ERR for an SGE that failed its lkey check,
// vendor_err the reason), then the QP to Error.
void Rnic::complete_bad_wqe(Qp &q)
{
    q.bad_held = false;
    const WqeOp *o = wqe_op(q.bad.wqe.opcode);
    struct rnic_cqe e = {};
    e.wr_id = q.bad.wqe.wr_id;
    e.qpn = q.qpn;
    e.src_qpn = q.attr.dest_qpn;
    e.opcode = o ? o->cqe : RNIC_CQE_OP_SEND;
    e.status = q.bad_lerr == RNIC_LERR_WQE_DMA || malformed(q.bad_lerr) ? RNIC_WC_LOC_QP_OP_ERR
                                                                        : RNIC_WC_LOC_PROT_ERR;
    e.vendor_err = q.bad_lerr;
    ctr_.wqe_errors++;
    write_cqe(q.send_cqn, e, true);
    qp_fail(q, "send WQE failed its checks");
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
    const NvmAccept accept(*this); // a responder's payload: persistent memory buffers it
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
    const WqeOp &o = wqe_op_of(c.op);
    e.opcode = o.cqe;
    if (c.status == WcStatus::Success) {
        e.modeled_ns = model_wr_ns(w.wqe.opcode, w.len, q->attr.path_mtu);
        if (!(o.flags & kReturns)) e.byte_len = uint32_t(w.len);
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
