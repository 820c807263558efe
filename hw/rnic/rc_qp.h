// SPDX-License-Identifier: MIT
// The RC engine's per-QP state (rc.h), shared by the engine (rc.cc) and the RNIC's migration
// code (rnic_state.cc): the X-macro lists below are the saved state (hw/core/state.h). Internal to hw/rnic.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "rc.h"

namespace rackemu::rnic {

// The responder's message in progress (Qp::in_msg).
constexpr uint8_t kMsgSend = 1, kMsgWrite = 2;

// A send WR on the send queue (saved as is: rnic_state.h).
#define RC_SEND_ENTRY_STATE(X) \
    X(SendWr, wr, {}) \
    X(bool, assigned, false) /* PSNs given */ \
    X(uint32_t, first, 0) \
    X(uint32_t, last, 0) \
    X(uint32_t, npkts, 1) \
    X(uint32_t, resume, 0)    /* next PSN of this WR to (re)send; past `last`: all sent */ \
    X(uint32_t, read_next, 0) /* READ: the next response PSN expected */
struct SendEntry {
    RK_STATE_FIELDS_INIT(RC_SEND_ENTRY_STATE)
};

// A responder resource (READ, atomic, FLUSH, ATOMIC WRITE), kept to answer duplicates.
#define RC_RESOURCE_STATE(X) \
    X(bool, valid, false) \
    X(uint8_t, opcode, 0) \
    X(uint32_t, first, 0) \
    X(uint32_t, last, 0) \
    X(uint64_t, va, 0) \
    X(uint32_t, rkey, 0) \
    X(uint32_t, len, 0) \
    X(uint64_t, orig, 0) /* atomics: the original value */
struct Resource {
    RK_STATE_FIELDS_INIT(RC_RESOURCE_STATE)
};

// The architectural state of an engine QP (saved with the device's half: rnic_state.h). Its
// send queue and responder resources are saved as records of their own.
#define RC_QP_STATE(X) \
    X(QpState, state, QpState::Reset) \
    X(QpAttr, attr, {}) \
    X(uint16_t, ip_id, 0) \
    X(bool, comm_est, false) /* RcEvent::CommEst reported since entering Rtr */ \
    /* requester */ \
    X(size_t, cursor, 0)           /* first entry of sq not fully sent */ \
    X(uint32_t, next_psn, 0)       /* the next PSN to assign */ \
    X(uint32_t, una, 0)            /* the oldest unacknowledged PSN (== next_psn: nothing outstanding) */ \
    X(uint32_t, rd_outstanding, 0) /* READ/atomic/FLUSH/ATOMIC WRITE assigned and not completed */ \
    X(uint32_t, since_ackreq, 0) \
    X(unsigned, retry_left, 7) \
    X(unsigned, rnr_left, 7) \
    X(bool, recovering, false)  /* went back; until recover_end is acknowledged, responses */ \
    X(uint32_t, recover_end, 0) /* to what was sent before do not start another retry */ \
    /* responder */ \
    X(uint32_t, epsn, 0) \
    X(uint32_t, msn, 0) \
    X(bool, nak_sent, false) /* a NAK PSN sequence error went out for this ePSN */ \
    X(uint8_t, in_msg, 0)    /* 0, or kMsgSend / kMsgWrite: a message in progress */ \
    X(uint64_t, msg_off, 0)  /* bytes of the message so far */ \
    X(uint64_t, wr_va, 0)    /* WRITE: RETH of the message */ \
    X(uint32_t, wr_rkey, 0) \
    X(uint32_t, wr_len, 0) \
    X(bool, wqe_held, false) /* the current message holds the head receive WQE */ \
    X(bool, ack_owed, false) \
    X(uint32_t, ack_psn, 0) \
    X(unsigned, ack_requests, 0) /* AckReq packets the owed ACK answers */ \
    X(uint64_t, ack_since, 0)    /* when the owed ACK became owed (RcConfig::ack_delay_ns) */ \
    /* requester: the MSN check (docs/rnic.md "MSN check") */ \
    X(uint32_t, msgs_done, 0) /* messages completed by the responder's answers, mod 2^24 */ \
    X(size_t, res_next, 0)
struct RcQpArch {
    RK_STATE_FIELDS_INIT(RC_QP_STATE)
};

struct RcEngine::Qp : RcQpArch {
    uint32_t qpn = 0;
    std::deque<SendEntry> sq;
    std::vector<Resource> res;
    uint64_t timer = UINT64_MAX; // retransmission deadline
    uint64_t rnr_until = 0;      // no sending before this (RNR wait)
    bool tx_stalled = false;     // the link pushed back before a request packet (resume_tx)
    // READ responses paused by backpressure: the rest of one READ (packets k..n-1 at va/len),
    // and the requests that arrived meanwhile, processed in order once it is out.
    struct ReadOut {
        bool active = false;
        uint32_t rkey = 0, len = 0, first_psn = 0, k = 0, n = 0;
        uint64_t va = 0;
    } rd_out;
    std::deque<std::vector<uint8_t>> backlog;

    bool outstanding() const { return una != next_psn; }
};

} // namespace rackemu::rnic
