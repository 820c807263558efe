// SPDX-License-Identifier: MIT
// The RC transport engine; see rc.h (state machines) and docs/rnic.md.
#include "rc.h"
#include "rc_qp.h"

#include <algorithm>
#include <cstring>

namespace rackemu::rnic {

namespace {

bool is_rd_atomic(WrOp op)
{
    return op == WrOp::Read || op == WrOp::CmpSwap || op == WrOp::FetchAdd || op == WrOp::Flush ||
           op == WrOp::AtomicWrite || op == WrOp::XAtomic;
}

uint32_t div_up(uint32_t a, uint32_t b)
{
    return a == 0 ? 1 : (a + b - 1) / b;
}

bool valid_mtu(uint32_t m)
{
    return m >= ROCE_MTU_MIN && m <= ROCE_MTU_MAX && (m & (m - 1)) == 0;
}

WcStatus nak_status(unsigned code)
{
    switch (code) {
    case ROCE_NAK_INVALID_REQ:
        return WcStatus::RemInvReqErr;
    case ROCE_NAK_REMOTE_ACCESS:
        return WcStatus::RemAccessErr;
    case ROCE_NAK_REMOTE_OP:
        return WcStatus::RemOpErr;
    default:
        return WcStatus::BadRespErr; // reserved codes, invalid RD request on RC
    }
}

} // namespace

const char *wc_status_name(WcStatus s)
{
    static const char *const n[] = {"SUCCESS",      "LOC_LEN_ERR",   "LOC_QP_OP_ERR",    "LOC_PROT_ERR",
                                    "WR_FLUSH_ERR", "BAD_RESP_ERR",  "REM_INV_REQ_ERR",  "REM_ACCESS_ERR",
                                    "REM_OP_ERR",   "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR"};
    return unsigned(s) < sizeof(n) / sizeof(n[0]) ? n[unsigned(s)] : "?";
}

const char *rc_result_name(RcResult r)
{
    static const char *const n[] = {"ok", "no-qp", "exists", "bad-state", "bad-attr", "queue-full", "bad-wr"};
    return unsigned(r) < sizeof(n) / sizeof(n[0]) ? n[unsigned(r)] : "?";
}

RcEngine::RcEngine(RcEnv &env, RcConfig cfg) : env_(env), cfg_(cfg)
{
    frame_.resize(ROCE_FRAME_MAX);
    data_.resize(ROCE_MTU_MAX);
}

RcEngine::~RcEngine() = default;

RcEngine::Qp *RcEngine::find(uint32_t qpn) const
{
    auto it = qps_.find(qpn);
    return it == qps_.end() ? nullptr : it->second.get();
}

RcResult RcEngine::create_qp(uint32_t qpn)
{
    if (qpn > ROCE_QPN_MASK || qpn < 2) return RcResult::BadAttr; // QP0/QP1 are special in IBA
    if (find(qpn)) return RcResult::Exists;
    auto q = std::make_unique<Qp>();
    q->qpn = qpn;
    qps_[qpn] = std::move(q);
    return RcResult::Ok;
}

RcResult RcEngine::destroy_qp(uint32_t qpn)
{
    Qp *q = find(qpn);
    if (!q) return RcResult::NoQp;
    backlog_clear(*q);
    qps_.erase(qpn);
    return RcResult::Ok;
}

void RcEngine::backlog_clear(Qp &q)
{
    for (const auto &f : q.backlog)
        backlog_bytes_ -= f.size();
    q.backlog.clear();
}

QpState RcEngine::qp_state(uint32_t qpn) const
{
    const Qp *q = find(qpn);
    return q ? q->state : QpState::Reset;
}

const QpAttr *RcEngine::qp_attr(uint32_t qpn) const
{
    const Qp *q = find(qpn);
    return q ? &q->attr : nullptr;
}

size_t RcEngine::outstanding(uint32_t qpn) const
{
    const Qp *q = find(qpn);
    return q ? q->sq.size() : 0;
}

RcResult RcEngine::modify_qp(uint32_t qpn, QpState to, const QpAttr &a)
{
    Qp *q = find(qpn);
    if (!q) return RcResult::NoQp;
    const QpState from = q->state;
    if (to == QpState::Reset) {
        const uint32_t n = q->qpn;
        backlog_clear(*q);
        *q = Qp{};
        q->qpn = n;
        return RcResult::Ok;
    }
    if (to == QpState::Error) {
        if (from != QpState::Error) to_error(*q, WcStatus::WrFlushErr, RcEvent::None); // the consumer's own
        return RcResult::Ok;
    }
    const uint32_t remote_mask = RC_ACCESS_REMOTE_WRITE | RC_ACCESS_REMOTE_READ | RC_ACCESS_REMOTE_ATOMIC |
                                 RC_ACCESS_FLUSH_GLOBAL | RC_ACCESS_FLUSH_PERSIST;
    if (a.access & ~remote_mask) return RcResult::BadAttr;
    switch (to) {
    case QpState::Init:
        if (from != QpState::Reset && from != QpState::Init) return RcResult::BadState;
        q->attr.access = a.access;
        q->attr.pkey = a.pkey;
        break;
    case QpState::Rtr:
        if (from != QpState::Init) return RcResult::BadState;
        if (!valid_mtu(a.path_mtu) || a.dest_qpn > ROCE_QPN_MASK || a.rq_psn > ROCE_PSN_MASK ||
            a.max_dest_rd_atomic == 0 || a.max_dest_rd_atomic > RC_MAX_RD_ATOMIC || a.min_rnr_timer > 31)
            return RcResult::BadAttr;
        q->attr.path = a.path;
        q->attr.dest_qpn = a.dest_qpn;
        q->attr.path_mtu = a.path_mtu;
        q->attr.rq_psn = a.rq_psn;
        q->attr.max_dest_rd_atomic = a.max_dest_rd_atomic;
        q->attr.min_rnr_timer = a.min_rnr_timer;
        q->attr.access = a.access;
        q->epsn = a.rq_psn;
        q->res.assign(a.max_dest_rd_atomic, Resource{});
        q->res_next = 0;
        q->comm_est = false;
        break;
    case QpState::Rts:
        if (from != QpState::Rtr && from != QpState::Rts) return RcResult::BadState;
        if (a.timeout > 31 || a.retry_cnt > 7 || a.rnr_retry > 7 || a.min_rnr_timer > 31 ||
            (from == QpState::Rtr &&
             (a.sq_psn > ROCE_PSN_MASK || a.max_rd_atomic == 0 || a.max_rd_atomic > RC_MAX_RD_ATOMIC)))
            return RcResult::BadAttr;
        q->attr.timeout = a.timeout;
        q->attr.retry_cnt = a.retry_cnt;
        q->attr.rnr_retry = a.rnr_retry;
        q->attr.min_rnr_timer = a.min_rnr_timer;
        q->attr.access = a.access;
        q->retry_left = a.retry_cnt;
        q->rnr_left = a.rnr_retry;
        if (from == QpState::Rtr) {
            q->attr.sq_psn = a.sq_psn;
            q->attr.max_rd_atomic = a.max_rd_atomic;
            q->next_psn = q->una = a.sq_psn;
        }
        break;
    default:
        return RcResult::BadState;
    }
    q->state = to;
    if (to == QpState::Rts) progress(*q);
    return RcResult::Ok;
}

RcResult RcEngine::post_send(uint32_t qpn, const SendWr &wr)
{
    Qp *q = find(qpn);
    if (!q) return RcResult::NoQp;
    if (q->state == QpState::Reset) return RcResult::BadState;
    if (q->sq.size() >= cfg_.sq_depth) return RcResult::QueueFull;
    if (unsigned(wr.op) > unsigned(WrOp::XAtomicPost) || wr.length > 0x80000000u) return RcResult::BadWr;
    if ((wr.op == WrOp::CmpSwap || wr.op == WrOp::FetchAdd || wr.op == WrOp::AtomicWrite) && wr.length != 8)
        return RcResult::BadWr;
    if (wr.op == WrOp::XAtomic || wr.op == WrOp::XAtomicPost) {
        if (!cfg_.xatomic || wr.xop >= ROCE_XOP_COUNT ||
            (wr.xsize != ROCE_XATOMIC_SIZE32 && wr.xsize != ROCE_XATOMIC_SIZE64) ||
            wr.length != (wr.op == WrOp::XAtomic ? wr.xsize : 0u))
            return RcResult::BadWr;
    }
    if (q->state == QpState::Error) {
        ctr_.wr_errors++;
        env_.complete(Completion{q->qpn, wr.wr_id, false, WcStatus::WrFlushErr, wr.op, 0, false, 0, false});
        return RcResult::Ok;
    }
    SendEntry e;
    e.wr = wr;
    const uint32_t mtu = q->attr.path_mtu;
    e.npkts = (wr.op == WrOp::Send || wr.op == WrOp::SendImm || wr.op == WrOp::Write ||
               wr.op == WrOp::WriteImm || wr.op == WrOp::Read)
                  ? div_up(wr.length, valid_mtu(mtu) ? mtu : ROCE_MTU_MIN)
                  : 1;
    q->sq.push_back(e);
    if (q->state == QpState::Rts) progress(*q);
    return RcResult::Ok;
}

// ---- Requester ----

void RcEngine::restart_timer(Qp &q)
{
    const uint64_t t = roce_timeout_ns(q.attr.timeout);
    q.timer = q.outstanding() && t ? env_.now_ns() + t : UINT64_MAX;
}

void RcEngine::send_packet(Qp &q, Packet &p)
{
    p.l3 = q.attr.path;
    p.l3.ip_id = q.ip_id++;
    p.bth.dqpn = q.attr.dest_qpn;
    p.bth.pkey = q.attr.pkey;
    size_t n = 0;
    if (build_frame(p, frame_.data(), frame_.size(), &n) != WireError::Ok)
        return; // every caller builds valid packets
    ctr_.tx_frames++;
    ctr_.tx_bytes += n;
    env_.send_frame(frame_.data(), n);
}

// Send the packets of sq[idx] from its resume PSN. False: stopped (the WR failed locally, or the
// link pushed back: q.tx_stalled, resume_tx() continues from e.resume).
bool RcEngine::send_request(Qp &q, size_t idx)
{
    SendEntry &e = q.sq[idx];
    const SendWr &wr = e.wr;
    const uint32_t mtu = q.attr.path_mtu;
    while (roce_psn_diff(e.resume, e.last) <= 0) {
        if (!env_.tx_ready()) {
            q.tx_stalled = true;
            return false;
        }
        const uint32_t k = uint32_t(roce_psn_diff(e.resume, e.first));
        Packet p;
        p.bth.psn = e.resume;
        const bool first = k == 0, last = k + 1 == e.npkts;
        switch (wr.op) {
        case WrOp::Send:
        case WrOp::SendImm:
        case WrOp::Write:
        case WrOp::WriteImm: {
            const bool send = wr.op == WrOp::Send || wr.op == WrOp::SendImm;
            const bool imm = wr.op == WrOp::SendImm || wr.op == WrOp::WriteImm;
            const uint32_t off = k * mtu, len = std::min(mtu, wr.length - std::min(wr.length, off));
            if (e.npkts == 1)
                p.bth.opcode = send ? (imm ? ROCE_OP_SEND_ONLY_IMM : ROCE_OP_SEND_ONLY)
                                    : (imm ? ROCE_OP_WRITE_ONLY_IMM : ROCE_OP_WRITE_ONLY);
            else if (first)
                p.bth.opcode = send ? ROCE_OP_SEND_FIRST : ROCE_OP_WRITE_FIRST;
            else if (last)
                p.bth.opcode = send ? (imm ? ROCE_OP_SEND_LAST_IMM : ROCE_OP_SEND_LAST)
                                    : (imm ? ROCE_OP_WRITE_LAST_IMM : ROCE_OP_WRITE_LAST);
            else
                p.bth.opcode = send ? ROCE_OP_SEND_MIDDLE : ROCE_OP_WRITE_MIDDLE;
            if (!send && first) p.reth = Reth{wr.remote_va, wr.rkey, wr.length};
            p.imm = wr.imm;
            p.bth.se = wr.solicited && last;
            if (len) {
                const WcStatus st = env_.read_local(q.qpn, wr, off, data_.data(), len);
                if (st != WcStatus::Success) {
                    // Only the front WR can be failed in order; a later one waits until it is.
                    if (idx == 0)
                        complete_front(q, st, 0), to_error(q, WcStatus::WrFlushErr, RcEvent::QpFatal, st);
                    return false;
                }
            }
            p.payload = data_.data();
            p.payload_len = len;
            p.bth.ackreq = last || ++q.since_ackreq >= cfg_.ack_req_every;
            break;
        }
        case WrOp::Read:
            p.bth.opcode = ROCE_OP_READ_REQUEST;
            p.reth =
                Reth{wr.remote_va + uint64_t(k) * mtu, wr.rkey, wr.length - std::min(wr.length, k * mtu)};
            p.bth.ackreq = true;
            e.resume = e.last; // one request covers the remaining response PSNs
            break;
        case WrOp::CmpSwap:
        case WrOp::FetchAdd:
            p.bth.opcode = wr.op == WrOp::CmpSwap ? ROCE_OP_CMP_SWAP : ROCE_OP_FETCH_ADD;
            p.atomic = AtomicEth{wr.remote_va, wr.rkey, wr.swap_add, wr.compare};
            p.bth.ackreq = true;
            break;
        case WrOp::XAtomic:
        case WrOp::XAtomicPost:
            p.bth.opcode = wr.op == WrOp::XAtomic ? ROCE_OP_XATOMIC : ROCE_OP_XATOMIC_POST;
            p.xatomic = XAtomicEth{wr.remote_va, wr.rkey, wr.xop, wr.xsize, wr.swap_add, wr.compare, wr.mask};
            p.bth.ackreq = true;
            break;
        case WrOp::Flush:
            p.bth.opcode = ROCE_OP_FLUSH;
            p.feth = Feth{wr.flush_placement, wr.flush_selectivity};
            p.reth = Reth{wr.remote_va, wr.rkey, wr.length};
            p.bth.ackreq = true;
            break;
        case WrOp::AtomicWrite: {
            p.bth.opcode = ROCE_OP_ATOMIC_WRITE;
            p.reth = Reth{wr.remote_va, wr.rkey, 8};
            roce_put64(data_.data(), wr.swap_add);
            p.payload = data_.data();
            p.payload_len = 8;
            p.bth.ackreq = true;
            break;
        }
        }
        if (p.bth.ackreq) q.since_ackreq = 0;
        e.resume = roce_psn_add(e.resume, 1);
        send_packet(q, p);
    }
    return true;
}

void RcEngine::progress(Qp &q)
{
    if (q.state != QpState::Rts) return;
    if (q.rnr_until > env_.now_ns()) return;
    q.rnr_until = 0;
    const bool was_idle = !q.outstanding();
    while (q.cursor < q.sq.size()) {
        SendEntry &e = q.sq[q.cursor];
        if (!e.assigned) {
            if (e.wr.fence && q.rd_outstanding > 0) break;
            if (is_rd_atomic(e.wr.op) && q.rd_outstanding >= q.attr.max_rd_atomic) break;
            const uint32_t inflight = uint32_t(roce_psn_diff(q.next_psn, q.una));
            if (inflight > 0 && inflight + e.npkts > cfg_.max_inflight_psn) break;
            e.assigned = true;
            e.first = e.resume = e.read_next = q.next_psn;
            e.last = roce_psn_add(q.next_psn, e.npkts - 1);
            q.next_psn = roce_psn_add(e.last, 1);
            if (is_rd_atomic(e.wr.op)) q.rd_outstanding++;
            ctr_.req_packets += e.wr.op == WrOp::Read ? 1 : e.npkts;
        }
        if (!send_request(q, q.cursor)) {
            if (q.tx_stalled && was_idle && q.outstanding()) restart_timer(q);
            return;
        }
        q.cursor++;
    }
    if (was_idle && q.outstanding()) restart_timer(q);
}

void RcEngine::resume_tx()
{
    if (qps_.empty()) return;
    auto it = qps_.upper_bound(resume_after_);
    for (size_t i = 0; i < qps_.size(); i++, ++it) {
        if (it == qps_.end()) it = qps_.begin();
        Qp &q = *it->second;
        if (!q.tx_stalled) continue;
        if (!env_.tx_ready()) break;
        q.tx_stalled = false;
        resume_after_ = q.qpn;
        // Responder first: the rest of a paused READ, then the requests that waited for it.
        if (q.rd_out.active) {
            const Qp::ReadOut r = q.rd_out;
            q.rd_out.active = false;
            send_read_responses(q, r.rkey, r.va, r.len, r.first_psn, r.k, r.n);
        }
        while (!q.rd_out.active && !q.backlog.empty() && env_.tx_ready()) {
            const std::vector<uint8_t> f = std::move(q.backlog.front());
            q.backlog.pop_front();
            backlog_bytes_ -= f.size();
            receive_frame(f.data(), f.size(), true);
        }
        if (q.rd_out.active || !q.backlog.empty()) q.tx_stalled = true;
        progress(q);
        // The packets of the paused PSNs leave only now: time them from here.
        if (q.state == QpState::Rts && q.outstanding()) restart_timer(q);
    }
    flush_acks();
}

// Resend everything from `from` (go-back-N).
void RcEngine::go_back(Qp &q, uint32_t from)
{
    q.recovering = true;
    q.recover_end = q.next_psn;
    (void)from;
    for (size_t i = 0; i < q.sq.size(); i++) {
        SendEntry &e = q.sq[i];
        if (!e.assigned) break;
        if (roce_psn_diff(from, e.last) > 0) continue;
        const uint32_t start = roce_psn_diff(from, e.first) > 0 ? from : e.first;
        if (i < q.cursor) q.cursor = i;
        // A QP paused by backpressure after an earlier go-back may not have resent up to `from`
        // yet (e.resume behind start): nothing of it is resent again; never a negative count.
        const int32_t ahead = roce_psn_diff(e.resume, start);
        const uint32_t resent = e.wr.op == WrOp::Read ? 1 : uint32_t(std::max(ahead, 0));
        ctr_.retransmits += resent;
        e.resume = start;
        for (size_t j = i + 1; j < q.sq.size() && q.sq[j].assigned; j++) {
            ctr_.retransmits +=
                q.sq[j].wr.op == WrOp::Read ? 1 : uint32_t(roce_psn_diff(q.sq[j].resume, q.sq[j].first));
            q.sq[j].resume = q.sq[j].first;
        }
        break;
    }
    progress(q);
    restart_timer(q);
}

void RcEngine::complete_front(Qp &q, WcStatus st, uint32_t byte_len)
{
    SendEntry e = q.sq.front();
    q.sq.pop_front();
    if (q.cursor > 0) q.cursor--;
    if (e.assigned && is_rd_atomic(e.wr.op) && q.rd_outstanding) q.rd_outstanding--;
    if (e.assigned) q.una = roce_psn_diff(e.last, q.una) >= 0 ? roce_psn_add(e.last, 1) : q.una;
    if (!q.sq.empty() && q.sq.front().assigned && roce_psn_diff(q.una, q.sq.front().first) < 0)
        q.una = q.sq.front().first;
    if (st == WcStatus::Success) {
        ctr_.wr_completed++;
        q.msgs_done = roce_psn_add(q.msgs_done, 1); // the responder counted it (its MSN)
        if (!e.wr.signaled) return;
    } else {
        ctr_.wr_errors++;
    }
    env_.complete(Completion{q.qpn, e.wr.wr_id, false, st, e.wr.op, byte_len, false, 0, false});
}

// Everything up to and including `psn` is acknowledged. False: an incomplete READ/atomic lies at
// or before psn (its responses were lost: an implied NAK); q.una is where to resume.
bool RcEngine::ack_through(Qp &q, uint32_t psn)
{
    bool advanced = false, ok = true;
    while (!q.sq.empty() && q.sq.front().assigned) {
        SendEntry &e = q.sq.front();
        if (roce_psn_diff(psn, e.first) < 0) break;
        if (is_rd_atomic(e.wr.op)) {
            ok = false; // an ACK beyond it, and its own response has not arrived
            break;
        }
        if (roce_psn_diff(psn, e.last) >= 0) {
            complete_front(q, WcStatus::Success, e.wr.length);
            advanced = true;
            continue;
        }
        if (roce_psn_diff(roce_psn_add(psn, 1), q.una) > 0) {
            q.una = roce_psn_add(psn, 1);
            advanced = true;
        }
        break;
    }
    if (advanced) {
        q.retry_left = q.attr.retry_cnt;
        q.rnr_left = q.attr.rnr_retry;
        restart_timer(q);
    }
    return ok;
}

// A retry from `from`: counted against retry_cnt (or rnr_retry); exhausted -> Error.
void RcEngine::retry(Qp &q, uint32_t from, bool rnr, unsigned rnr_code)
{
    if (rnr) {
        if (q.attr.rnr_retry != 7) {
            if (q.rnr_left == 0) {
                ctr_.rnr_exhausted++;
                to_error(q, WcStatus::RnrRetryExcErr, RcEvent::QpFatal, WcStatus::RnrRetryExcErr);
                return;
            }
            q.rnr_left--;
        }
        q.rnr_until = env_.now_ns() + uint64_t(roce_rnr_timer_us(rnr_code)) * 1000;
        q.timer = UINT64_MAX;
        // Rewind now; progress() sends when the RNR wait is over (poll()).
        for (size_t i = 0; i < q.sq.size() && q.sq[i].assigned; i++) {
            SendEntry &e = q.sq[i];
            if (roce_psn_diff(from, e.last) > 0) continue;
            const uint32_t start = roce_psn_diff(from, e.first) > 0 ? from : e.first;
            if (i < q.cursor) q.cursor = i;
            e.resume = start;
            for (size_t j = i + 1; j < q.sq.size() && q.sq[j].assigned; j++)
                q.sq[j].resume = q.sq[j].first;
            break;
        }
        return;
    }
    if (q.retry_left == 0) {
        ctr_.retry_exhausted++;
        to_error(q, WcStatus::RetryExcErr, RcEvent::QpFatal, WcStatus::RetryExcErr);
        return;
    }
    q.retry_left--;
    go_back(q, from);
}

// After a go-back, responses to what was sent before it (and duplicate ACKs the resent requests
// provoke) keep arriving: they must not start another retry each, or the retries multiply and
// exhaust the retry count with no loss at all. Until everything outstanding at the go-back is
// acknowledged, an implied NAK is ignored (a lost replay is recovered by the timer or a NAK).
bool RcEngine::stale(Qp &q, uint32_t psn)
{
    (void)psn;
    if (q.recovering && roce_psn_diff(q.una, q.recover_end) >= 0) q.recovering = false;
    if (!q.recovering) return false;
    ctr_.resp_dropped++;
    return true;
}

// The MSN check (docs/rnic.md "MSN check"): a response's AETH MSN, the responder's count of
// messages it completed, must count at least every message already completed plus those this
// response completes (ending at or before its PSN; a NAK's: before it), so it never goes below
// what was acknowledged, and at most every message sent. Not more: a replayed duplicate carries
// the responder's current MSN (IBA 9.7.5.1.5), so MSNs are not monotonic in PSN order. A response
// that fails is dropped and counted (msn_errors): RC retransmission recovers.
bool RcEngine::msn_ok(Qp &q, const Packet &p)
{
    if (!(p.info & ROCE_HDR_AETH)) return true;
    const uint32_t msn = p.aeth.msn & ROCE_MSN_MASK, psn = p.bth.psn;
    const bool nak = (p.aeth.syndrome & ROCE_AETH_TYPE_MASK) != ROCE_AETH_TYPE_ACK;
    uint32_t low = q.msgs_done, high = q.msgs_done;
    for (const SendEntry &e : q.sq) {
        if (!e.assigned) break;
        high = roce_psn_add(high, 1);
        const int d = roce_psn_diff(psn, e.last);
        if (nak ? d > 0 : d >= 0) low = roce_psn_add(low, 1);
    }
    if (roce_psn_diff(msn, low) < 0 || roce_psn_diff(msn, high) > 0) {
        ctr_.msn_errors++;
        return false;
    }
    return true;
}

void RcEngine::on_response(Qp &q, const Packet &p)
{
    const uint32_t psn = p.bth.psn;
    if (q.state != QpState::Rts || !q.outstanding() || roce_psn_diff(psn, q.una) < 0 ||
        roce_psn_diff(psn, q.next_psn) >= 0) {
        ctr_.resp_dropped++;
        return;
    }
    if (!msn_ok(q, p)) return;
    const uint8_t op = p.bth.opcode;
    if (op == ROCE_OP_ACK) {
        const uint8_t type = p.aeth.syndrome & ROCE_AETH_TYPE_MASK,
                      val = p.aeth.syndrome & ROCE_AETH_VALUE_MASK;
        if (type == ROCE_AETH_TYPE_ACK) {
            if (!ack_through(q, psn)) {
                if (stale(q, psn)) return;
                ctr_.implied_naks++;
                retry(q, q.una, false, 0);
            }
        } else if (type == ROCE_AETH_TYPE_RNR) {
            ctr_.rnr_naks_rx++;
            const bool ok = psn == q.una || ack_through(q, roce_psn_add(psn, uint32_t(-1)));
            retry(q, ok ? psn : q.una, ok, val);
        } else if (type == ROCE_AETH_TYPE_NAK && val == ROCE_NAK_PSN_SEQ) {
            ctr_.seq_naks_rx++;
            const bool ok = psn == q.una || ack_through(q, roce_psn_add(psn, uint32_t(-1)));
            retry(q, ok ? psn : q.una, false, 0);
        } else if (type == ROCE_AETH_TYPE_NAK) {
            ctr_.err_naks_rx++;
            if (psn != q.una && !ack_through(q, roce_psn_add(psn, uint32_t(-1)))) {
                ctr_.implied_naks++;
                retry(q, q.una, false, 0);
                return;
            }
            if (!q.sq.empty()) complete_front(q, nak_status(val), 0);
            to_error(q, WcStatus::WrFlushErr, RcEvent::QpFatal, nak_status(val));
        } else {
            ctr_.resp_dropped++; // reserved syndrome type
        }
        return;
    }
    // READ response, atomic ACK, or the zero-length READ RESPONSE ONLY of FLUSH / ATOMIC WRITE:
    // every request before the one it answers is done.
    SendEntry *e = nullptr;
    while (!q.sq.empty() && q.sq.front().assigned) {
        SendEntry &f = q.sq.front();
        if (roce_psn_diff(psn, f.first) >= 0 && roce_psn_diff(psn, f.last) <= 0) {
            e = &f;
            break;
        }
        if (roce_psn_diff(psn, f.first) < 0) break;
        if (is_rd_atomic(f.wr.op)) { // a response beyond an unanswered READ/atomic
            if (stale(q, psn)) return;
            ctr_.implied_naks++;
            retry(q, q.una, false, 0);
            return;
        }
        complete_front(q, WcStatus::Success, f.wr.length); // implicitly acknowledged
    }
    if (!e) {
        ctr_.resp_dropped++;
        return;
    }
    const SendWr &wr = e->wr;
    const uint32_t k = uint32_t(roce_psn_diff(psn, e->first));
    if (wr.op == WrOp::Read) {
        if (op != ROCE_OP_READ_RESP_FIRST && op != ROCE_OP_READ_RESP_MIDDLE && op != ROCE_OP_READ_RESP_LAST &&
            op != ROCE_OP_READ_RESP_ONLY) {
            ctr_.resp_dropped++;
            return;
        }
        if (psn != e->read_next) { // responses before it were lost
            if (roce_psn_diff(psn, e->read_next) < 0 || stale(q, psn)) {
                ctr_.resp_dropped += roce_psn_diff(psn, e->read_next) < 0;
                return;
            }
            ctr_.implied_naks++;
            retry(q, e->read_next, false, 0);
            return;
        }
        const uint32_t mtu = q.attr.path_mtu, off = k * mtu, want = std::min(mtu, wr.length - off);
        const bool first = k == 0, last = k + 1 == e->npkts;
        const uint8_t want_op = e->npkts == 1 ? ROCE_OP_READ_RESP_ONLY
                                : first       ? ROCE_OP_READ_RESP_FIRST
                                : last        ? ROCE_OP_READ_RESP_LAST
                                              : ROCE_OP_READ_RESP_MIDDLE;
        if (op != want_op || p.payload_len != want) {
            ctr_.resp_dropped++;
            complete_front(q, WcStatus::BadRespErr, 0);
            to_error(q, WcStatus::WrFlushErr, RcEvent::QpFatal, WcStatus::BadRespErr);
            return;
        }
        if (want) {
            const WcStatus st = env_.write_local(q.qpn, wr, off, p.payload, want);
            if (st != WcStatus::Success) {
                complete_front(q, st, 0);
                to_error(q, WcStatus::WrFlushErr, RcEvent::QpFatal, st);
                return;
            }
        }
        e->read_next = roce_psn_add(psn, 1);
        q.una = e->read_next;
        q.retry_left = q.attr.retry_cnt;
        q.rnr_left = q.attr.rnr_retry;
        if (last) complete_front(q, WcStatus::Success, wr.length);
        restart_timer(q);
    } else if (wr.op == WrOp::CmpSwap || wr.op == WrOp::FetchAdd) {
        if (op != ROCE_OP_ATOMIC_ACK) {
            ctr_.resp_dropped++;
            return;
        }
        uint8_t v[8];
        std::memcpy(v, &p.atomic_orig, 8); // host order, as the CPU reads the 64-bit result
        const WcStatus st = env_.write_local(q.qpn, wr, 0, v, 8);
        complete_front(q, st, 8);
        if (st != WcStatus::Success)
            to_error(q, WcStatus::WrFlushErr, RcEvent::QpFatal, st);
        else
            restart_timer(q);
    } else if (wr.op == WrOp::XAtomic) {
        if (op != ROCE_OP_XATOMIC_ACK) {
            ctr_.resp_dropped++;
            return;
        }
        // the old value in the target's byte order (little-endian), xsize bytes of it
        uint8_t v[8];
        for (unsigned i = 0; i < 8; i++)
            v[i] = uint8_t(p.atomic_orig >> (8 * i));
        const WcStatus st = env_.write_local(q.qpn, wr, 0, v, wr.xsize);
        complete_front(q, st, wr.xsize);
        if (st != WcStatus::Success)
            to_error(q, WcStatus::WrFlushErr, RcEvent::QpFatal, st);
        else
            restart_timer(q);
    } else if (wr.op == WrOp::Flush || wr.op == WrOp::AtomicWrite) {
        if (op != ROCE_OP_READ_RESP_ONLY || p.payload_len != 0) {
            ctr_.resp_dropped++;
            return;
        }
        complete_front(q, WcStatus::Success, wr.length);
        restart_timer(q);
    } else {
        ctr_.resp_dropped++; // a READ response for a SEND/WRITE PSN
        return;
    }
    q.retry_left = q.attr.retry_cnt;
    q.rnr_left = q.attr.rnr_retry;
    progress(q);
}

void RcEngine::to_error(Qp &q, WcStatus front_status, RcEvent ev, WcStatus why, uint8_t syndrome)
{
    const bool entered = q.state != QpState::Error;
    if (entered) ctr_.qp_errors++;
    q.state = QpState::Error;
    bool first = true;
    while (!q.sq.empty()) {
        complete_front(q, first ? front_status : WcStatus::WrFlushErr, 0);
        first = false;
    }
    q.cursor = 0;
    q.timer = UINT64_MAX;
    q.rnr_until = 0;
    q.ack_owed = false;
    q.in_msg = 0;
    q.wqe_held = false;
    q.rd_out.active = false;
    backlog_clear(q);
    env_.flush_recv(q.qpn);
    if (entered && ev != RcEvent::None) env_.qp_event(q.qpn, ev, why, syndrome);
}

// ---- Responder ----

void RcEngine::send_ack(Qp &q, uint32_t psn, uint8_t syndrome)
{
    Packet p;
    p.bth.opcode = ROCE_OP_ACK;
    p.bth.psn = psn;
    p.aeth = Aeth{syndrome, q.msn & ROCE_MSN_MASK};
    const uint8_t type = syndrome & ROCE_AETH_TYPE_MASK;
    if (type == ROCE_AETH_TYPE_ACK)
        ctr_.acks_tx++;
    else if (type == ROCE_AETH_TYPE_RNR)
        ctr_.rnr_naks_tx++;
    else if ((syndrome & ROCE_AETH_VALUE_MASK) == ROCE_NAK_PSN_SEQ)
        ctr_.seq_naks_tx++;
    else
        ctr_.err_naks_tx++;
    if (type != ROCE_AETH_TYPE_ACK || roce_psn_diff(psn, q.ack_psn) >= 0) {
        if (q.ack_owed && q.ack_requests > 1) ctr_.acks_coalesced += q.ack_requests - 1;
        q.ack_owed = false;
        q.ack_requests = 0;
    }
    send_packet(q, p);
}

void RcEngine::flush_acks()
{
    const uint64_t now = cfg_.ack_delay_ns ? env_.now_ns() : 0;
    for (auto &[n, q] : qps_) {
        const bool live = q->state == QpState::Rtr || q->state == QpState::Rts;
        // coalescing: an owed ACK waits for ack_every requests or ack_delay_ns (RcConfig)
        if (q->ack_owed && live && cfg_.ack_delay_ns && q->ack_requests < cfg_.ack_every &&
            now < q->ack_since + cfg_.ack_delay_ns)
            continue;
        if (q->ack_owed && live) send_ack(*q, q->ack_psn, ROCE_AETH_ACK(ROCE_AETH_CREDITS_INVALID));
        q->ack_owed = false;
    }
}

// A response at `psn` also acknowledges the requests before it: an owed ACK for them is moot.
static void covered_by_response(RcCounters &ctr, bool &owed, unsigned &requests, uint32_t ack_psn,
                                uint32_t psn)
{
    if (owed && roce_psn_diff(ack_psn, psn) < 0) {
        ctr.acks_coalesced += requests;
        owed = false;
        requests = 0;
    }
}

void RcEngine::send_read_responses(Qp &q, uint32_t rkey, uint64_t va, uint32_t len, uint32_t first_psn,
                                   uint32_t k0, uint32_t n)
{
    const uint32_t mtu = q.attr.path_mtu;
    covered_by_response(ctr_, q.ack_owed, q.ack_requests, q.ack_psn, roce_psn_add(first_psn, k0));
    uint64_t a = va;
    uint32_t left = len;
    for (uint32_t k = k0; k < n; k++) {
        if (!env_.tx_ready()) { // backpressure: the rest goes out from resume_tx()
            q.rd_out = Qp::ReadOut{true, rkey, left, first_psn, k, n, a};
            q.tx_stalled = true;
            return;
        }
        Packet p;
        p.bth.psn = roce_psn_add(first_psn, k);
        p.bth.opcode = n == 1       ? ROCE_OP_READ_RESP_ONLY
                       : k == 0     ? ROCE_OP_READ_RESP_FIRST
                       : k + 1 == n ? ROCE_OP_READ_RESP_LAST
                                    : ROCE_OP_READ_RESP_MIDDLE;
        const uint32_t chunk = std::min(mtu, left);
        if (chunk && env_.read_remote(q.qpn, rkey, a, data_.data(), chunk) != Remote::Ok) {
            // The MR changed under a READ (deregistered): a remote access NAK at this PSN.
            send_ack(q, p.bth.psn, ROCE_AETH_NAK(ROCE_NAK_REMOTE_ACCESS));
            to_error(q, WcStatus::WrFlushErr, RcEvent::QpAccessErr, WcStatus::RemAccessErr,
                     ROCE_AETH_NAK(ROCE_NAK_REMOTE_ACCESS));
            return;
        }
        p.payload = data_.data();
        p.payload_len = chunk;
        p.aeth = Aeth{ROCE_AETH_ACK(ROCE_AETH_CREDITS_INVALID), q.msn & ROCE_MSN_MASK};
        send_packet(q, p);
        a += chunk;
        left -= chunk;
    }
}

// Class C error (IBA 9.9.3): NAK with the packet's PSN, the QP to Error; a receive in progress
// completes with `recv_status`.
void RcEngine::class_c(Qp &q, const Packet &p, uint8_t nak, WcStatus recv_status)
{
    (void)p;
    if (q.wqe_held) {
        q.wqe_held = false;
        ctr_.wr_errors++;
        env_.complete(
            Completion{q.qpn, 0, true, recv_status, WrOp::Send, uint32_t(q.msg_off), false, 0, false});
    }
    send_ack(q, p.bth.psn, ROCE_AETH_NAK(nak));
    const RcEvent ev = nak == ROCE_NAK_INVALID_REQ     ? RcEvent::QpReqErr
                       : nak == ROCE_NAK_REMOTE_ACCESS ? RcEvent::QpAccessErr
                                                       : RcEvent::QpFatal;
    to_error(q, WcStatus::WrFlushErr, ev, recv_status, ROCE_AETH_NAK(nak));
}

void RcEngine::on_duplicate(Qp &q, const Packet &p)
{
    ctr_.duplicates++;
    const uint8_t op = p.bth.opcode;
    const uint32_t psn = p.bth.psn;
    if (op <= ROCE_OP_WRITE_ONLY_IMM || op == ROCE_OP_XATOMIC_POST) {
        // SEND/WRITE and the posted extended atomic: ACK again (C9-105), never re-executed
        send_ack(q, roce_psn_add(q.epsn, uint32_t(-1)), ROCE_AETH_ACK(ROCE_AETH_CREDITS_INVALID));
        return;
    }
    for (Resource &r : q.res) {
        if (!r.valid || r.opcode != op || roce_psn_diff(psn, r.first) < 0 || roce_psn_diff(psn, r.last) > 0)
            continue;
        if (op == ROCE_OP_READ_REQUEST) {
            const uint32_t k = uint32_t(roce_psn_diff(psn, r.first));
            const uint64_t off = uint64_t(k) * q.attr.path_mtu;
            // The re-issued request must ask for exactly the remainder from its PSN on.
            if (p.reth.rkey != r.rkey || p.reth.va != r.va + off || uint64_t(p.reth.dma_len) + off != r.len)
                break;
            ctr_.dup_replays++;
            send_read_responses(q, r.rkey, p.reth.va, p.reth.dma_len, r.first, k,
                                uint32_t(roce_psn_diff(r.last, r.first)) + 1);
            return;
        }
        ctr_.dup_replays++;
        Packet a;
        a.bth.psn = r.first;
        a.aeth = Aeth{ROCE_AETH_ACK(ROCE_AETH_CREDITS_INVALID), q.msn & ROCE_MSN_MASK};
        if (op == ROCE_OP_CMP_SWAP || op == ROCE_OP_FETCH_ADD || op == ROCE_OP_XATOMIC) {
            // the saved original: the atomic is not executed again
            a.bth.opcode = op == ROCE_OP_XATOMIC ? ROCE_OP_XATOMIC_ACK : ROCE_OP_ATOMIC_ACK;
            a.atomic_orig = r.orig;
        } else {
            a.bth.opcode = ROCE_OP_READ_RESP_ONLY;
        }
        send_packet(q, a);
        return;
    }
    ctr_.dup_unanswered++; // class D: silently dropped
}

void RcEngine::on_request(Qp &q, const Packet &p)
{
    const int d = roce_psn_diff(p.bth.psn, q.epsn);
    if (d > 0) {
        ctr_.out_of_seq++;
        if (!q.nak_sent) {
            q.nak_sent = true;
            send_ack(q, q.epsn, ROCE_AETH_NAK(ROCE_NAK_PSN_SEQ));
        }
        return;
    }
    if (d < 0) {
        on_duplicate(q, p);
        return;
    }
    q.nak_sent = false;
    const uint64_t before = ctr_.executed;
    execute(q, p);
    if (ctr_.executed != before) env_.request_executed(q.qpn, p.bth.opcode);
}

void RcEngine::execute(Qp &q, const Packet &p)
{
    const uint8_t op = p.bth.opcode;
    const uint32_t info = p.info, psn = p.bth.psn, mtu = q.attr.path_mtu;
    const bool is_send = op <= ROCE_OP_SEND_ONLY_IMM,
               is_write = op >= ROCE_OP_WRITE_FIRST && op <= ROCE_OP_WRITE_ONLY_IMM;

    // Opcode sequence (IBA 9.7.5.1.2): a message in progress takes only its MIDDLE/LAST.
    const bool cont = !(info & ROCE_HDR_FIRST);
    if (cont ? (q.in_msg == 0 || (is_send ? q.in_msg != kMsgSend : q.in_msg != kMsgWrite)) : q.in_msg != 0)
        return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
    // Payload against the path MTU: FIRST/MIDDLE exactly one MTU, LAST/ONLY at most one.
    if (((info & ROCE_HDR_FULL) && p.payload_len != mtu) || p.payload_len > mtu)
        return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
    // The QP's access flags (IBA: an operation the QP does not enable is an invalid request).
    const bool is_xatomic = op == ROCE_OP_XATOMIC || op == ROCE_OP_XATOMIC_POST;
    const uint32_t need = is_write || op == ROCE_OP_ATOMIC_WRITE ? RC_ACCESS_REMOTE_WRITE
                          : op == ROCE_OP_READ_REQUEST           ? RC_ACCESS_REMOTE_READ
                          : op == ROCE_OP_CMP_SWAP || op == ROCE_OP_FETCH_ADD || is_xatomic
                              ? RC_ACCESS_REMOTE_ATOMIC
                          : op == ROCE_OP_FLUSH ? (RC_ACCESS_FLUSH_GLOBAL | RC_ACCESS_FLUSH_PERSIST)
                                                : 0;
    if (need && !(q.attr.access & need)) return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);

    auto owe_ack = [&] {
        q.epsn = roce_psn_add(psn, 1);
        if (p.bth.ackreq) {
            if (q.ack_owed) {
                q.ack_requests++;
            } else {
                q.ack_requests = 1;
                q.ack_since = env_.now_ns();
            }
            q.ack_owed = true;
            q.ack_psn = psn;
        }
    };
    // An executed atomic's answer (ATOMIC ACK / XATOMIC ACK: the value before), at once.
    auto atomic_ack = [&](uint8_t resp_opcode, uint64_t orig) {
        q.epsn = roce_psn_add(psn, 1);
        covered_by_response(ctr_, q.ack_owed, q.ack_requests, q.ack_psn, psn);
        Packet a;
        a.bth.opcode = resp_opcode;
        a.bth.psn = psn;
        a.aeth = Aeth{ROCE_AETH_ACK(ROCE_AETH_CREDITS_INVALID), q.msn & ROCE_MSN_MASK};
        a.atomic_orig = orig;
        send_packet(q, a);
    };
    auto save = [&](uint32_t last, uint64_t va, uint32_t rkey, uint32_t len, uint64_t orig) {
        Resource &r = q.res[q.res_next];
        q.res_next = (q.res_next + 1) % q.res.size();
        r = Resource{true, op, psn, last, va, rkey, len, orig};
    };

    // A receive WQE is needed before anything of a SEND moves, and before the last packet of a
    // WRITE WITH IMMEDIATE (RNR NAK otherwise: nothing changes, the requester retries).
    const bool needs_wqe = (is_send && !cont) || (is_write && (info & ROCE_HDR_IMMDT));
    if (needs_wqe) {
        if (!env_.recv_available(q.qpn)) {
            send_ack(q, psn, ROCE_AETH_RNR(q.attr.min_rnr_timer));
            return;
        }
        q.wqe_held = true;
    }
    if (is_send) {
        if (!cont) q.msg_off = 0;
        if (p.payload_len) {
            const WcStatus st = env_.recv_write(q.qpn, q.msg_off, p.payload, p.payload_len);
            if (st != WcStatus::Success) return class_c(q, p, ROCE_NAK_INVALID_REQ, st);
        }
        q.msg_off += p.payload_len;
        q.in_msg = (info & ROCE_HDR_LAST) ? 0 : kMsgSend;
        if (info & ROCE_HDR_LAST) {
            q.msn = roce_psn_add(q.msn, 1);
            ctr_.executed++;
            q.wqe_held = false;
            env_.complete(Completion{q.qpn, 0, true, WcStatus::Success, WrOp::Send, uint32_t(q.msg_off),
                                     (info & ROCE_HDR_IMMDT) != 0, p.imm, p.bth.se});
        }
        owe_ack();
        return;
    }
    if (is_write) {
        if (!cont) {
            q.wr_va = p.reth.va;
            q.wr_rkey = p.reth.rkey;
            q.wr_len = p.reth.dma_len;
            q.msg_off = 0;
            if ((info & ROCE_HDR_LAST) && p.payload_len != p.reth.dma_len)
                return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
            if (q.wr_len &&
                env_.check_remote(q.qpn, q.wr_rkey, q.wr_va, q.wr_len, RC_ACCESS_REMOTE_WRITE) != Remote::Ok)
                return class_c(q, p, ROCE_NAK_REMOTE_ACCESS, WcStatus::RemAccessErr);
        }
        const uint64_t end = q.msg_off + p.payload_len;
        if (end > q.wr_len || ((info & ROCE_HDR_LAST) && end != q.wr_len))
            return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
        if (p.payload_len) {
            const Remote r =
                env_.write_remote(q.qpn, q.wr_rkey, q.wr_va + q.msg_off, p.payload, p.payload_len);
            if (r != Remote::Ok)
                return class_c(q, p, r == Remote::AccessError ? ROCE_NAK_REMOTE_ACCESS : ROCE_NAK_REMOTE_OP,
                               r == Remote::AccessError ? WcStatus::RemAccessErr : WcStatus::RemOpErr);
        }
        q.msg_off = end;
        q.in_msg = (info & ROCE_HDR_LAST) ? 0 : kMsgWrite;
        if (info & ROCE_HDR_LAST) {
            q.msn = roce_psn_add(q.msn, 1);
            ctr_.executed++;
            q.wqe_held = false;
            if (info & ROCE_HDR_IMMDT)
                env_.complete(Completion{q.qpn, 0, true, WcStatus::Success, WrOp::WriteImm, q.wr_len, true,
                                         p.imm, p.bth.se});
        }
        owe_ack();
        return;
    }
    switch (op) {
    case ROCE_OP_READ_REQUEST: {
        const uint32_t len = p.reth.dma_len;
        // A zero-length READ checks neither R_Key nor VA (IBA 9.4.3).
        if (len && env_.check_remote(q.qpn, p.reth.rkey, p.reth.va, len, RC_ACCESS_REMOTE_READ) != Remote::Ok)
            return class_c(q, p, ROCE_NAK_REMOTE_ACCESS, WcStatus::RemAccessErr);
        if (len > 0x80000000u) return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
        const uint32_t n = div_up(len, mtu);
        const uint32_t last = roce_psn_add(psn, n - 1);
        save(last, p.reth.va, p.reth.rkey, len, 0);
        q.msn = roce_psn_add(q.msn, 1);
        q.epsn = roce_psn_add(last, 1);
        ctr_.executed++;
        send_read_responses(q, p.reth.rkey, p.reth.va, len, psn, 0, n);
        return;
    }
    case ROCE_OP_CMP_SWAP:
    case ROCE_OP_FETCH_ADD: {
        if (p.atomic.va & 7) return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
        uint64_t orig = 0;
        const Remote r = env_.atomic_remote(q.qpn, op, p.atomic.rkey, p.atomic.va, p.atomic.swap_add,
                                            p.atomic.compare, &orig);
        if (r != Remote::Ok)
            return class_c(q, p, r == Remote::AccessError ? ROCE_NAK_REMOTE_ACCESS : ROCE_NAK_REMOTE_OP,
                           WcStatus::RemAccessErr);
        save(psn, p.atomic.va, p.atomic.rkey, 8, orig);
        q.msn = roce_psn_add(q.msn, 1);
        ctr_.executed++;
        atomic_ack(ROCE_OP_ATOMIC_ACK, orig);
        return;
    }
    case ROCE_OP_XATOMIC:
    case ROCE_OP_XATOMIC_POST: {
        const XAtomicEth &x = p.xatomic;
        const bool fetch = op == ROCE_OP_XATOMIC;
        uint64_t orig = 0;
        // the env checks op, size, MR and alignment (an unknown op or size, or a VA not aligned to
        // the size: invalid request, as a misaligned IB atomic in rxe)
        const Remote r = env_.xatomic_remote(q.qpn, x.rkey, x.va, x, fetch, &orig);
        if (r == Remote::InvalidRequest) return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
        if (r != Remote::Ok)
            return class_c(q, p, r == Remote::AccessError ? ROCE_NAK_REMOTE_ACCESS : ROCE_NAK_REMOTE_OP,
                           r == Remote::AccessError ? WcStatus::RemAccessErr : WcStatus::RemOpErr);
        q.msn = roce_psn_add(q.msn, 1);
        ctr_.executed++;
        if (!fetch) { // acknowledged like a WRITE (coalesced ACKs)
            owe_ack();
            return;
        }
        save(psn, x.va, x.rkey, x.size, orig);
        atomic_ack(ROCE_OP_XATOMIC_ACK, orig);
        return;
    }
    case ROCE_OP_FLUSH:
    case ROCE_OP_ATOMIC_WRITE: {
        Remote r;
        if (op == ROCE_OP_FLUSH) {
            const uint32_t acc =
                (p.feth.placement & ROCE_FETH_PLT_PERSIST) ? RC_ACCESS_FLUSH_PERSIST : RC_ACCESS_FLUSH_GLOBAL;
            if (!(q.attr.access & acc) || p.feth.selectivity > ROCE_FETH_SEL_MR ||
                (p.feth.placement & ~(ROCE_FETH_PLT_GLOBAL | ROCE_FETH_PLT_PERSIST)) || !p.feth.placement)
                return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
            r = env_.flush_remote(q.qpn, p.reth.rkey, p.reth.va, p.reth.dma_len, p.feth.placement,
                                  p.feth.selectivity);
        } else {
            if ((p.reth.va & 7) || p.reth.dma_len != 8)
                return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
            r = env_.atomic_write_remote(q.qpn, p.reth.rkey, p.reth.va, roce_get64(p.payload));
        }
        if (r != Remote::Ok)
            return class_c(q, p, r == Remote::AccessError ? ROCE_NAK_REMOTE_ACCESS : ROCE_NAK_REMOTE_OP,
                           WcStatus::RemAccessErr);
        save(psn, p.reth.va, p.reth.rkey, p.reth.dma_len, 0);
        q.msn = roce_psn_add(q.msn, 1);
        q.epsn = roce_psn_add(psn, 1);
        ctr_.executed++;
        covered_by_response(ctr_, q.ack_owed, q.ack_requests, q.ack_psn, psn);
        Packet a;
        a.bth.opcode = ROCE_OP_READ_RESP_ONLY;
        a.bth.psn = psn;
        a.aeth = Aeth{ROCE_AETH_ACK(ROCE_AETH_CREDITS_INVALID), q.msn & ROCE_MSN_MASK};
        send_packet(q, a);
        return;
    }
    default:
        return class_c(q, p, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
    }
}

// An opcode this RNIC does not implement, in an otherwise intact frame for one of our QPs at the
// expected PSN: NAK invalid request (class C), as IBA requires of an unsupported opcode. The frame
// is counted once: rx_unknown_qp, rx_bad_state, rx_icrc_errors, or else rx_malformed.
void RcEngine::answer_unsupported(const uint8_t *frame, size_t len, const Packet &p)
{
    Qp *q = find(p.bth.dqpn);
    if (!q || (q->state != QpState::Rtr && q->state != QpState::Rts)) {
        ctr_.rx_unknown_qp += q ? 0 : 1;
        ctr_.rx_bad_state += q ? 1 : 0;
        return;
    }
    const size_t ip_len = roce_get16(frame + ROCE_ETH_LEN + 2);
    if (ROCE_ETH_LEN + ip_len > len || ip_len < ROCE_IPV4_LEN + ROCE_UDP_LEN + ROCE_BTH_LEN + ROCE_ICRC_LEN) {
        ctr_.rx_malformed++;
        return;
    }
    const uint8_t *ic = frame + ROCE_ETH_LEN + ip_len - ROCE_ICRC_LEN;
    const uint32_t want =
        uint32_t(ic[0]) | uint32_t(ic[1]) << 8 | uint32_t(ic[2]) << 16 | uint32_t(ic[3]) << 24;
    if (icrc(frame + ROCE_ETH_LEN, ip_len - ROCE_ICRC_LEN) != want) {
        ctr_.rx_icrc_errors++;
        return;
    }
    ctr_.rx_malformed++;
    if (p.l3.src_ip != q->attr.path.dst_ip || p.bth.psn != q->epsn) return;
    Packet b = p;
    b.info = 0;
    class_c(*q, b, ROCE_NAK_INVALID_REQ, WcStatus::RemInvReqErr);
}

void RcEngine::receive(const uint8_t *frame, size_t len)
{
    ctr_.rx_frames++;
    receive_frame(frame, len);
}

// Requests wait while this QP's READ responses are paused (and behind those already waiting):
// the responder answers in PSN order. A conforming requester has at most max_inflight_psn
// packets outstanding; beyond RC_MAX_BACKLOG, or beyond RcConfig::max_backlog_bytes in all QPs'
// backlogs together, the request is dropped (rx_backlog_drops) and resent by the requester's
// go-back-N.

void RcEngine::receive_frame(const uint8_t *frame, size_t len, bool from_backlog)
{
    Packet p;
    const WireError e = parse_frame(frame, len, p, true, cfg_.xatomic);
    if (e == WireError::OpcodeUnknown || e == WireError::OpcodeReserved) {
        answer_unsupported(frame, len, p); // counts the frame once, in the counter of its fate
        return;
    }
    if (e == WireError::Icrc) {
        ctr_.rx_icrc_errors++;
        return;
    }
    if (e != WireError::Ok) {
        ctr_.rx_malformed++;
        return;
    }
    if (p.bth.opcode == ROCE_OP_CNP) {
        ctr_.rx_cnp++;
        return;
    }
    Qp *q = find(p.bth.dqpn);
    if (!q) {
        ctr_.rx_unknown_qp++;
        return;
    }
    if ((q->state != QpState::Rtr && q->state != QpState::Rts) || p.l3.src_ip != q->attr.path.dst_ip ||
        p.bth.pkey != q->attr.pkey) {
        ctr_.rx_bad_state++;
        return;
    }
    if (q->state == QpState::Rtr && !q->comm_est) { // IBA 11.6.3: Communication Established
        q->comm_est = true;
        env_.qp_event(q->qpn, RcEvent::CommEst, WcStatus::Success, 0);
    }
    if (p.info & ROCE_HDR_RESPONSE) {
        on_response(*q, p);
        return;
    }
    if (q->rd_out.active || (!from_backlog && !q->backlog.empty())) {
        if (q->backlog.size() >= RC_MAX_BACKLOG || len > cfg_.max_backlog_bytes - backlog_bytes_) {
            ctr_.rx_backlog_drops++;
            return;
        }
        q->backlog.emplace_back(frame, frame + len);
        backlog_bytes_ += len;
        q->tx_stalled = true;
        return;
    }
    on_request(*q, p);
}

void RcEngine::poll()
{
    const uint64_t now = env_.now_ns();
    for (auto &[n, qp] : qps_) {
        Qp &q = *qp;
        if (q.state != QpState::Rts) continue;
        if (q.rnr_until && now >= q.rnr_until) {
            progress(q);
            restart_timer(q);
        }
        if (q.timer != UINT64_MAX && now >= q.timer) {
            ctr_.timeouts++;
            if (q.outstanding())
                retry(q, q.una, false, 0);
            else
                q.timer = UINT64_MAX;
        }
    }
    flush_acks();
}

uint64_t RcEngine::next_deadline_ns() const
{
    uint64_t t = UINT64_MAX;
    for (const auto &[n, q] : qps_) {
        if (cfg_.ack_delay_ns && q->ack_owed && (q->state == QpState::Rtr || q->state == QpState::Rts))
            t = std::min(t, q->ack_since + cfg_.ack_delay_ns); // a coalesced ACK's deadline
        if (q->state != QpState::Rts) continue;
        t = std::min(t, q->timer);
        if (q->rnr_until) t = std::min(t, q->rnr_until);
    }
    return t;
}

} // namespace rackemu::rnic
