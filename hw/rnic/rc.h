// SPDX-License-Identifier: MIT
//
// The rackemu RNIC's Reliable Connection (RC) transport engine: InfiniBand RC semantics (IBA Vol 1
// ch. 9: 9.7 reliable service, 9.9 error handling) over RoCEv2 frames (wire.h), independent of
// memory, of the verbs objects and of QEMU. Reference for behaviour where the specification
// leaves a choice: Linux's rxe (drivers/infiniband/sw/rxe), whose choices are followed and named.
// docs/rnic.md has the design of the whole NIC and the engine's place in it.
//
// The engine reaches everything else through RcEnv: the time, the wire (send_frame), the
// requester's local buffers (read_local/write_local: the verbs layer resolves lkeys), the
// responder's remote memory (write/read/atomic/flush, which check the MR: rkey, bounds, access
// flag) and receive queue (recv_*), and completions. The device core implements it on guest RAM
// and the MR table; the unit tests implement it with vectors, a fake clock and a lossy wire.
//
// Requester (one send queue per QP), per work request:
//   POSTED --(window, initiator depth, fence allow)--> PSNs assigned: first..last (SEND/WRITE:
//   one per path-MTU packet, READ: one per response packet, atomics/FLUSH/ATOMIC WRITE: one)
//   --> packets sent (AckReq on the last packet and every ack_req_every packets)
//   --> ACK / read response / atomic ACK covering it --> COMPLETED (in order; a CQE if signaled)
//   Pacing: before each request packet the engine asks RcEnv::tx_ready(); when the link pushes
//   back the QP pauses at that PSN (nothing is built, dropped or counted as a retransmission) and
//   resume_tx() continues it; the retransmission timer restarts when it resumes. READ responses
//   are paced the same way (below).
//   Go-back-N: a NAK PSN sequence error, a retransmission timeout (4.096 us x 2^timeout, retry_cnt
//   times), an RNR NAK (after the responder's RNR timer, rnr_retry times, 7 = forever) or an
//   implied NAK (a response beyond a READ/atomic whose own responses have not all arrived)
//   resends everything from the oldest unacknowledged PSN; a READ is re-issued for its remaining
//   part. Any forward progress reloads both retry counters. A NAK invalid request / remote access
//   / remote operational error completes the WR with that status; retries exhausted complete it
//   with RETRY_EXC / RNR_RETRY_EXC; then the QP is in the Error state and every other WR of the
//   send queue, and the receive queue, complete with WR_FLUSH_ERR.
// Responder, per request packet, by its PSN against the expected PSN (ePSN):
//   PSN == ePSN: checked (opcode sequence, QP access flags, payload vs path MTU, RETH/AtomicETH
//   vs the MR through RcEnv, alignment) and executed once; ePSN advances (a READ by its response
//   count). ACKs are owed for AckReq packets and sent coalesced by flush_acks() (one ACK carrying
//   the latest PSN per QP); READ responses, atomic ACKs and FLUSH/ATOMIC WRITE responses go at
//   once. A SEND (or WRITE WITH IMMEDIATE) with no receive WQE gets an RNR NAK with min_rnr_timer.
//   PSN ahead of ePSN (by < 2^23): one NAK PSN sequence error carrying ePSN, then silence until
//   ePSN arrives. PSN behind: a duplicate, never re-executed: SEND/WRITE are re-ACKed with
//   ePSN - 1; READ, atomics, FLUSH and ATOMIC WRITE are answered from the responder resources
//   (max_dest_rd_atomic per QP, oldest replaced first): a READ re-reads memory for the requested
//   remainder, an atomic returns the saved original value. A duplicate whose resource is gone is
//   dropped (IBA class D). Class C errors (invalid request, remote access, remote operational):
//   NAK with the packet's PSN, the QP goes to Error (rxe does the same).
//   Pacing: READ responses are generated as the link takes them (RcEnv::tx_ready()); while a
//   READ's responses are paused, later requests to the QP wait in order in a backlog, and
//   resume_tx() sends the rest and then processes them (ACKs never overtake READ responses).
//
// Threading: not thread-safe; the owner serialises every call (the device core's lock). Calls
// into RcEnv happen from inside the engine's calls and must not call back into the engine.
//
// Caveat: end-to-end credits are not generated (ACKs carry credit code 0x1F, "invalid", as rxe)
// and received credit fields are ignored: flow control is by RNR NAK. SEND WITH INVALIDATE,
// memory windows and automatic path migration (MigReq) are not implemented. A CNP is counted and
// otherwise ignored (no congestion control). No timing model here: the device's timing model
// stamps completions (docs/rnic.md).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "rackemu/rnic_regs.h"
#include "rackemu/roce.h"
#include "wire.h"

namespace rackemu::rnic {

// The engine's counters: one table, in the device's register header (rackemu/rnic_regs.h).
#define RC_COUNTER_TABLE(X) RNIC_RC_COUNTERS(X)

struct RcCounters {
#define RC_CNT_X_FIELD_(N, n, d) uint64_t n = 0;
    RC_COUNTER_TABLE(RC_CNT_X_FIELD_)
#undef RC_CNT_X_FIELD_
};

enum class QpState : uint8_t { Reset, Init, Rtr, Rts, Error };

// Work completion status, as ibv_wc_status names them.
enum class WcStatus : uint8_t {
    Success,
    LocLenErr,      // receive: the message is longer than the receive WQE
    LocQpOpErr,     // the WR is not valid for the QP (bad opcode, length)
    LocProtErr,     // a local buffer failed its lkey/bounds/access check
    WrFlushErr,     // flushed: the QP is in the Error state
    BadRespErr,     // a malformed or unexpected response
    RemInvReqErr,   // NAK invalid request
    RemAccessErr,   // NAK remote access error
    RemOpErr,       // NAK remote operational error
    RetryExcErr,    // transport retries exhausted
    RnrRetryExcErr, // RNR retries exhausted
};
const char *wc_status_name(WcStatus s);

// XAtomic / XAtomicPost: the extended atomics of the atomic unit (roce.h "Extended atomics"):
// with and without the old value returned.
enum class WrOp : uint8_t {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
    Flush,
    AtomicWrite,
    XAtomic,
    XAtomicPost
};

// Memory region and QP access flags (ibv_access_flags order; FLUSH as in IBA 1.5 / rdma-core).
enum : uint32_t {
    RC_ACCESS_LOCAL_WRITE = 1u << 0,
    RC_ACCESS_REMOTE_WRITE = 1u << 1,
    RC_ACCESS_REMOTE_READ = 1u << 2,
    RC_ACCESS_REMOTE_ATOMIC = 1u << 3,
    RC_ACCESS_FLUSH_GLOBAL = 1u << 8,
    RC_ACCESS_FLUSH_PERSIST = 1u << 9,
};

// (the RC_SEND_WR_STATE list is the struct: saved as is, rnic_state.h)
#define RC_SEND_WR_STATE(X) \
    X(uint64_t, wr_id, 0) \
    X(WrOp, op, WrOp::Send) \
    X(uint32_t, length, 0) /* bytes (atomics 8; XAtomic xsize, XAtomicPost 0; FLUSH: the range) */ \
    X(uint64_t, local, 0)  /* the local buffer, opaque to the engine (RcEnv::read_local/write_local) */ \
    X(uint64_t, remote_va, 0) \
    X(uint32_t, rkey, 0) \
    X(uint32_t, imm, 0)      /* SendImm/WriteImm: ImmDt as on the wire */ \
    X(uint64_t, swap_add, 0) /* CmpSwap: swap; FetchAdd: add; AtomicWrite: the value; XAtomic*: operand */ \
    X(uint64_t, compare, 0)  /* CmpSwap, XAtomic* MCSWAP */ \
    X(uint64_t, mask, 0)     /* XAtomic* MCSWAP */ \
    X(uint8_t, xop, ROCE_XOP_ADD) /* XAtomic*: ROCE_XOP_*, 4 or 8 */ \
    X(uint8_t, xsize, ROCE_XATOMIC_SIZE64) \
    X(uint8_t, flush_placement, ROCE_FETH_PLT_GLOBAL) \
    X(uint8_t, flush_selectivity, ROCE_FETH_SEL_RANGE) \
    X(bool, signaled, true) \
    X(bool, solicited, false) \
    X(bool, fence, false)
struct SendWr {
    RK_STATE_FIELDS_INIT(RC_SEND_WR_STATE)
};

struct Completion {
    uint32_t qpn = 0;
    uint64_t wr_id = 0; // send side; receive side: 0 (the env knows its receive WQE)
    bool recv = false;
    WcStatus status = WcStatus::Success;
    WrOp op = WrOp::Send;  // send side: the WR's op; receive side: Send or WriteImm
    uint32_t byte_len = 0; // receive: bytes placed; READ: bytes read; atomics: 8
    bool with_imm = false;
    uint32_t imm = 0;
    bool solicited = false; // receive: the last packet had SE set
};

// Asynchronous events of a QP (ibv_event_type's; the device reports them through its event queue).
// QpFatal: the QP entered Error as requester (retries exhausted, a NAK, a bad response, a local
// buffer that failed) or for an operational error as responder; QpReqErr / QpAccessErr: as
// responder it NAKed an invalid request / a remote access error (class C) and entered Error;
// CommEst: the first packet arrived while the QP was in Rtr. Not reported: a consumer's own
// modify to Error.
enum class RcEvent : uint8_t { None, QpFatal, QpReqErr, QpAccessErr, CommEst };

// The responder's verdict on a remote access: Ok; AccessError (rkey, PD, bounds, access flag:
// NAK remote access error); OpError (memory failed: NAK remote operational error); InvalidRequest
// (a malformed extended atomic: unknown op or size, VA not aligned to the size: NAK invalid request).
enum class Remote : uint8_t { Ok, AccessError, OpError, InvalidRequest };

class RcEnv {
public:
    virtual ~RcEnv() = default;
    virtual uint64_t now_ns() = 0;
    virtual void send_frame(const uint8_t *frame, size_t len) = 0;
    // Can the link take a frame now? False: the link pushed back; the requester keeps its send
    // position (nothing is built or lost) until the owner calls RcEngine::resume_tx(). Responses
    // and ACKs are always handed to send_frame (the owner holds them in order).
    virtual bool tx_ready() { return true; }

    // Requester: bytes [off, off + len) of a WR's local buffer. Not Success: the WR fails with it.
    virtual WcStatus read_local(uint32_t qpn, const SendWr &wr, uint64_t off, uint8_t *dst, uint32_t len) = 0;
    virtual WcStatus write_local(uint32_t qpn, const SendWr &wr, uint64_t off, const uint8_t *src,
                                 uint32_t len) = 0;

    // Responder: remote memory through the MR of `rkey`, each call checked against it (PD of the
    // QP, bounds, access flags). check_remote validates a whole message range before its first
    // byte moves.
    virtual Remote check_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t len, uint32_t access) = 0;
    virtual Remote write_remote(uint32_t qpn, uint32_t rkey, uint64_t va, const uint8_t *src,
                                uint32_t len) = 0;
    virtual Remote read_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint8_t *dst, uint32_t len) = 0;
    // CMP_SWAP / FETCH_ADD on the 8 bytes at va (8-aligned, checked by the engine); *orig gets the
    // value before. Executed once per request: duplicates are answered from the saved value.
    virtual Remote atomic_remote(uint32_t qpn, uint8_t opcode, uint32_t rkey, uint64_t va, uint64_t swap_add,
                                 uint64_t compare, uint64_t *orig) = 0;
    // An extended atomic (ROCE_OP_XATOMIC / _POST) on the x.size bytes at va, everything checked
    // here (op and size: InvalidRequest; the MR: AccessError; va aligned to size: InvalidRequest);
    // *orig gets the value before (zero-extended). Executed once per request, like atomic_remote.
    virtual Remote xatomic_remote(uint32_t qpn, uint32_t rkey, uint64_t va, const XAtomicEth &x, bool fetch,
                                  uint64_t *orig) = 0;
    virtual Remote atomic_write_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t value) = 0;
    virtual Remote flush_remote(uint32_t qpn, uint32_t rkey, uint64_t va, uint64_t len, uint8_t placement,
                                uint8_t selectivity) = 0;

    // Responder receive queue: is a receive WQE posted; place bytes of the current message at
    // `off` in it (LocLenErr beyond its length, LocProtErr on a bad lkey); the message's end is
    // reported by complete() with recv = true, which consumes the WQE. flush_recv: the QP went to
    // Error, complete every posted receive WQE with WR_FLUSH_ERR.
    virtual bool recv_available(uint32_t qpn) = 0;
    virtual WcStatus recv_write(uint32_t qpn, uint64_t off, const uint8_t *src, uint32_t len) = 0;
    virtual void flush_recv(uint32_t qpn) = 0;

    virtual void complete(const Completion &c) = 0;
    // An asynchronous event of a QP (after the QP's flush completions, if it entered Error).
    // why: QpFatal's cause (the failed WR's status: RetryExcErr, RnrRetryExcErr, a NAK's status,
    // BadRespErr, a local error), or the receive status of a class C error; syndrome: the AETH
    // NAK syndrome the responder sent (QpReqErr, QpAccessErr, a responder's QpFatal), else 0.
    virtual void qp_event(uint32_t qpn, RcEvent ev, WcStatus why, uint8_t syndrome)
    {
        (void)qpn, (void)ev, (void)why, (void)syndrome;
    }
    // The responder executed a request message (the `executed` counter: its last packet, or a
    // READ, atomic, FLUSH, ATOMIC WRITE), after its response or owed ACK; for the owner's timing
    // model only (it cannot change what the engine does).
    virtual void request_executed(uint32_t qpn, uint8_t opcode) { (void)qpn, (void)opcode; }
};

#define RC_QP_ATTR_STATE(X) \
    X(L3Addr, path, {})                 /* addresses and UDP source port of the connection */ \
    X(uint32_t, dest_qpn, 0)            /* RTR */ \
    X(uint32_t, path_mtu, 1024)         /* RTR: 256, 512, 1024, 2048, 4096 */ \
    X(uint32_t, rq_psn, 0)              /* RTR: the first expected PSN */ \
    X(uint32_t, max_dest_rd_atomic, 16) /* RTR: responder resources (1..RC_MAX_RD_ATOMIC) */ \
    X(uint8_t, min_rnr_timer, 12)       /* RTR: RNR NAK timer code we send (0.64 ms) */ \
    X(uint32_t, sq_psn, 0)              /* RTS: the first PSN we send */ \
    X(uint8_t, timeout, 14)             /* RTS: 4.096 us x 2^timeout (0 = infinite, 14 = 67 ms) */ \
    X(uint8_t, retry_cnt, 7)            /* RTS: 0..7 */ \
    X(uint8_t, rnr_retry, 7)            /* RTS: 0..7, 7 = infinite */ \
    X(uint32_t, max_rd_atomic, 16)      /* RTS: initiator depth (1..RC_MAX_RD_ATOMIC) */ \
    X(uint32_t, access, 0)              /* RC_ACCESS_REMOTE_* the QP accepts */ \
    X(uint16_t, pkey, ROCE_PKEY_DEFAULT)
struct QpAttr {
    RK_STATE_FIELDS_INIT(RC_QP_ATTR_STATE)
};

constexpr uint32_t RC_MAX_RD_ATOMIC = 64;
// Request frames a responder QP keeps in order behind its paused READ responses (backpressure).
// A conforming requester has at most RcConfig::max_inflight_psn (4096) packets outstanding;
// beyond this a request is dropped and counted in rx_backlog_drops: the requester resends it.
constexpr size_t RC_MAX_BACKLOG = 8192;

struct RcConfig {
    uint32_t sq_depth = 4096;                 // send WRs posted and not completed, per QP
    uint32_t max_inflight_psn = 4096;         // PSNs assigned and not acknowledged, per QP (< 2^23)
    uint32_t ack_req_every = 16;              // AckReq on at least every Nth request packet
    uint64_t max_backlog_bytes = 64ull << 20; // request frames waiting in all QPs' backlogs together
                                              // (beyond: dropped, rx_backlog_drops; resent by the peer)
    // ACK coalescing (docs/rnic.md "ACK coalescing"): ack_delay_ns 0 sends every owed ACK at the
    // end of the receive burst that made it owed; otherwise an owed ACK waits until ack_every
    // AckReq packets are owed or ack_delay_ns passed since the first, whichever comes first.
    uint32_t ack_every = 1;
    uint64_t ack_delay_ns = 0;
    bool xatomic = false; // the extended atomics (ROCE_OP_XATOMIC*): sent, executed
                          // through RcEnv::xatomic_remote, answered; false: NAKed
                          // as unsupported (an RNIC without the atomic unit)
};

enum class RcResult : uint8_t { Ok, NoQp, Exists, BadState, BadAttr, QueueFull, BadWr };
const char *rc_result_name(RcResult r);

class RcEngine {
public:
    RcEngine(RcEnv &env, RcConfig cfg = {});
    ~RcEngine();

    RcResult create_qp(uint32_t qpn);
    RcResult destroy_qp(uint32_t qpn); // its work is dropped without completions
    // Reset->Init, Init->Init, Init->Rtr (dest_qpn, path, path_mtu, rq_psn, max_dest_rd_atomic,
    // min_rnr_timer, access), Rtr->Rts (sq_psn, timeout, retry_cnt, rnr_retry, max_rd_atomic),
    // Rts->Rts (timeout, retry counts, min_rnr_timer, access); any -> Error (flushes), any -> Reset.
    RcResult modify_qp(uint32_t qpn, QpState to, const QpAttr &attr);
    QpState qp_state(uint32_t qpn) const;
    const QpAttr *qp_attr(uint32_t qpn) const;
    // Queue a send WR (Init, Rtr: queued until Rts; Error: completes at once with WR_FLUSH_ERR).
    RcResult post_send(uint32_t qpn, const SendWr &wr);

    // One frame from the wire (any content: bad frames are counted and dropped).
    void receive(const uint8_t *frame, size_t len);
    // Send the coalesced ACKs owed (after a batch of receive() calls; poll() does it too).
    void flush_acks();
    // Timers: retransmission and RNR waits due by env.now_ns(); then flush_acks().
    void poll();
    // The earliest time poll() has work (UINT64_MAX: none).
    uint64_t next_deadline_ns() const;
    // The link has room again (RcEnv::tx_ready()): continue the send queues that paused, round
    // robin from the QP after the last one resumed, until the link pushes back again.
    void resume_tx();

    const RcCounters &counters() const { return ctr_; }
    uint64_t backlog_bytes() const { return backlog_bytes_; }
    // Send WRs not yet completed (test and debug aid).
    size_t outstanding(uint32_t qpn) const;

private:
    friend class Rnic; // its save()/load() take and restore the engine's QPs (rnic_state.cc)
    struct Qp;
    Qp *find(uint32_t qpn) const;
    void to_error(Qp &q, WcStatus front_status, RcEvent ev, WcStatus why = WcStatus::WrFlushErr,
                  uint8_t syndrome = 0);
    void progress(Qp &q);
    bool send_request(Qp &q, size_t idx);
    void go_back(Qp &q, uint32_t from_psn);
    bool ack_through(Qp &q, uint32_t psn);
    void complete_front(Qp &q, WcStatus st, uint32_t byte_len);
    void retry(Qp &q, uint32_t from_psn, bool rnr, unsigned rnr_code);
    void restart_timer(Qp &q);
    bool stale(Qp &q, uint32_t psn);
    bool msn_ok(Qp &q, const Packet &p);
    void on_response(Qp &q, const Packet &p);
    void on_request(Qp &q, const Packet &p);
    void on_duplicate(Qp &q, const Packet &p);
    void execute(Qp &q, const Packet &p);
    void class_c(Qp &q, const Packet &p, uint8_t nak, WcStatus recv_status);
    void send_ack(Qp &q, uint32_t psn, uint8_t syndrome);
    void send_read_responses(Qp &q, uint32_t rkey, uint64_t va, uint32_t len, uint32_t first_psn, uint32_t k0,
                             uint32_t n);
    void send_packet(Qp &q, Packet &p);
    void receive_frame(const uint8_t *frame, size_t len, bool from_backlog = false);
    void answer_unsupported(const uint8_t *frame, size_t len, const Packet &p);
    void backlog_clear(Qp &q);

    RcEnv &env_;
    const RcConfig cfg_;
    std::map<uint32_t, std::unique_ptr<Qp>> qps_;
    RcCounters ctr_;
    uint64_t backlog_bytes_ = 0; // of frames in every QP's backlog (cfg_.max_backlog_bytes)
    std::vector<uint8_t> frame_, data_;
    uint32_t resume_after_ = 0; // resume_tx() round robin
};

} // namespace rackemu::rnic
